"""``flow-generate``: sample text from a language model checkpoint written by flow-train.

flow-train gpt2-char --dataset cpython-docs
flow-generate runs/gpt2-char-cpython-docs/checkpoint.safetensors --prompt "The with statement"
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

import flow
from flow_models.data.text import CharTokenizer, tokenizer_from_info
from flow_models.train.build import MODEL_ARG_SYNONYMS, model_config_dict
from flow_models.train.config import TrainError
from flow_models.train.exits import EXIT_FAILURE, EXIT_USAGE, OneLineErrorParser
from flow_models.train.options import SETTINGS, Setting, existing_file

__all__ = ["sample_text", "sample_from_trainer", "generate_from_checkpoint", "check_prompt", "build_parser", "main"]

PROG = "flow-generate"

# flow-generate's settings: flow-train's where they mean the same
GENERATE_SETTINGS: dict[str, Setting] = {
    "checkpoint": Setting(
        "checkpoint",
        str,
        "checkpoint.safetensors of a flow-train run",
        rule=existing_file,
        rule_doc="naming an existing checkpoint file",
    ),
    "prompt": SETTINGS["prompt"],
    "length": Setting("length", int, "tokens to sample", low=1),
    "temperature": SETTINGS["temperature"],
    "top_k": SETTINGS["top_k"],
    "seed": Setting("seed", int, "seed of the sampling", low=0, high=SETTINGS["seed"].high),
    "threads": SETTINGS["threads"],
}


def check_prompt(tokenizer_info: dict | None, prompt: str, where: str) -> None:
    """A prompt with characters outside a character vocabulary would be sampled from as if it were other
    text (they encode as the unknown token): refuse it, naming them."""
    if not tokenizer_info:
        return
    tok = tokenizer_from_info(tokenizer_info)
    if isinstance(tok, CharTokenizer):
        unknown = sorted(set(prompt) - set(tok.vocab))
        if unknown:
            raise TrainError(
                f"--prompt: the character(s) {''.join(unknown)!r} are not in the vocabulary of {where} "
                f"({tok.vocab_size} characters)"
            )


def _context_length(model, fallback: int | None) -> int | None:
    cfg = model_config_dict(model)
    for name in MODEL_ARG_SYNONYMS["block_size"]:
        if cfg.get(name):
            return int(cfg[name])
    return fallback


def sample_text(
    model,
    tokenizer,
    prompt: str = "\n",
    length: int = 300,
    *,
    temperature: float = 0.8,
    top_k: int | None = None,
    block_size: int | None = None,
    seed: int = 0,
) -> str:
    """Continue ``prompt`` by ``length`` tokens sampled one at a time from ``model`` (logits ``(1, T, V)``).

    ``temperature`` divides the logits (0 picks the most likely token); ``top_k`` keeps only the k
    most likely tokens; the context is cut to the model's ``block_size``.
    """
    if not (isinstance(length, int) and length >= 0):
        raise ValueError(f"sample_text: length must be an integer >= 0, got {length!r}")
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"sample_text: temperature must be a finite number >= 0, got {temperature!r}")
    if top_k is not None and not (isinstance(top_k, int) and top_k >= 1):
        raise ValueError(f"sample_text: top_k must be None or an integer >= 1, got {top_k!r}")
    rng = np.random.Generator(np.random.Philox(seed))
    ids = list(tokenizer.encode(prompt or "\n"))
    if not ids:
        ids = [0]
    block = _context_length(model, block_size)
    was_training = model.training
    model.eval()
    try:
        with flow.no_grad():
            for _ in range(length):
                ctx = ids[-block:] if block else ids
                out = model(flow.tensor(np.asarray([ctx], np.int64)))
                out = out[0] if isinstance(out, (tuple, list)) else out
                logits = out.numpy()[0, -1].astype(np.float64)
                if temperature <= 0:
                    ids.append(int(logits.argmax()))
                    continue
                logits = logits / temperature
                if top_k:
                    cut = np.sort(logits)[-min(top_k, len(logits))]
                    logits = np.where(logits < cut, -np.inf, logits)
                p = np.exp(logits - logits.max())
                ids.append(int(rng.choice(len(p), p=p / p.sum())))
    finally:
        model.train(was_training)
    return tokenizer.decode(ids)


def sample_from_trainer(trainer) -> str:
    cfg = trainer.cfg
    tok = tokenizer_from_info(trainer.splits.info["tokenizer"])
    return sample_text(
        trainer.model,
        tok,
        cfg.prompt,
        cfg.sample_length,
        temperature=cfg.temperature,
        top_k=cfg.top_k,
        block_size=trainer.splits.model_args.get("block_size"),
        seed=cfg.seed,
    )


def generate_from_checkpoint(
    path: str,
    prompt: str = "\n",
    length: int = 300,
    *,
    temperature: float = 0.8,
    top_k: int | None = None,
    seed: int = 0,
) -> str:
    """Rebuild the model of a flow-train checkpoint (no data needed) and sample from it."""
    from flow_models import registry as zoo
    from flow_models.train.checkpoint import load_checkpoint

    st = load_checkpoint(path)
    data = st.get("data") or {}
    if data.get("task") != "lm" or "tokenizer" not in (data.get("info") or {}):
        raise TrainError(
            f"checkpoint '{path}' is of a {data.get('task', 'non-language')} model "
            f"('{st['model_name']}'); flow-generate samples from language models"
        )
    check_prompt(data["info"]["tokenizer"], prompt, f"checkpoint '{path}'")
    model = zoo.create(st["model_name"], **st["model_config"])
    model.load_state_dict(st["model"])
    tok = tokenizer_from_info(data["info"]["tokenizer"])
    return sample_text(
        model,
        tok,
        prompt,
        length,
        temperature=temperature,
        top_k=top_k,
        block_size=(data.get("model_args") or {}).get("block_size"),
        seed=seed,
    )


def build_parser() -> argparse.ArgumentParser:
    """flow-generate's parser: each option is a declared :class:`Setting` (its range in --help)."""
    p = OneLineErrorParser(prog=PROG, description="Sample text from a language-model checkpoint written by flow-train.")
    s = GENERATE_SETTINGS
    p.add_argument("checkpoint", type=s["checkpoint"].parse_flag, help=s["checkpoint"].flag_help())
    defaults = {"prompt": "\n", "length": 300, "temperature": 0.8, "top_k": None, "seed": 0, "threads": 1}
    for name, default in defaults.items():
        p.add_argument(
            s[name].flag, type=s[name].parse_flag, default=default, metavar=name.upper(), help=s[name].flag_help()
        )
    return p


def main(argv: list[str] | None = None) -> int:
    """The console script: 0, 1 (a failure), 2 (a usage error: a bad option, a checkpoint that is not a
    language model's), 130 (interrupted)."""
    from flow_models.data.base import DataError
    from flow_models.registry import ZooError
    from flow_models.train.build import limit_threads

    try:
        args = build_parser().parse_args(argv)
        limit_threads(args.threads)
        print(
            generate_from_checkpoint(
                args.checkpoint,
                args.prompt,
                args.length,
                temperature=args.temperature,
                top_k=args.top_k,
                seed=args.seed,
            )
        )
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_FAILURE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except (TrainError, ZooError) as e:
        print(f"{PROG}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return EXIT_USAGE
    except (DataError, flow.errors.FlowError, OSError, ValueError, MemoryError) as e:
        print(f"{PROG}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as e:  # a bug: still one line
        print(f"{PROG}: internal error: {type(e).__name__}: {' '.join(str(e).split())}", file=sys.stderr)
        return EXIT_FAILURE
    return 0


if __name__ == "__main__":
    sys.exit(main())
