"""``flow-generate``: sample text from a language model checkpoint written by flow-train.

    flow-train gpt2-char --dataset cpython-docs
    flow-generate runs/gpt2-char-cpython-docs/checkpoint.safetensors --prompt "The with statement"
"""

from __future__ import annotations

import sys

import numpy as np

import flow
from flow_models.data.text import tokenizer_from_info
from flow_models.train.build import MODEL_ARG_SYNONYMS, model_config_dict
from flow_models.train.cli import OneLineErrorParser

__all__ = ["sample_text", "sample_from_trainer", "main"]

PROG = "flow-generate"


def _context_length(model, fallback: int | None) -> int | None:
    cfg = model_config_dict(model)
    for name in MODEL_ARG_SYNONYMS["block_size"]:
        if cfg.get(name):
            return int(cfg[name])
    return fallback


def sample_text(model, tokenizer, prompt: str = "\n", length: int = 300, *, temperature: float = 0.8,
                top_k: int | None = None, block_size: int | None = None, seed: int = 0) -> str:
    """Continue ``prompt`` by ``length`` tokens sampled one at a time from ``model`` (logits ``(1, T, V)``).

    ``temperature`` divides the logits (0 picks the most likely token); ``top_k`` keeps only the k
    most likely tokens; the context is cut to the model's ``block_size``.
    """
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
    return sample_text(trainer.model, tok, cfg.prompt, cfg.sample_length, temperature=cfg.temperature,
                       top_k=cfg.top_k, block_size=trainer.splits.model_args.get("block_size"), seed=cfg.seed)


def generate_from_checkpoint(path: str, prompt: str = "\n", length: int = 300, *, temperature: float = 0.8,
                             top_k: int | None = None, seed: int = 0) -> str:
    """Rebuild the model of a flow-train checkpoint (no data needed) and sample from it."""
    from flow_models import registry as zoo
    from flow_models.train.checkpoint import load_checkpoint
    from flow_models.train.config import TrainError

    st = load_checkpoint(path)
    data = st.get("data") or {}
    if data.get("task") != "lm" or "tokenizer" not in (data.get("info") or {}):
        raise TrainError(f"checkpoint '{path}' is of a {data.get('task', 'non-language')} model "
                         f"('{st['model_name']}'); flow-generate samples from language models")
    model = zoo.create(st["model_name"], **st["model_config"])
    model.load_state_dict(st["model"])
    tok = tokenizer_from_info(data["info"]["tokenizer"])
    return sample_text(model, tok, prompt, length, temperature=temperature, top_k=top_k,
                       block_size=(data.get("model_args") or {}).get("block_size"), seed=seed)


def main(argv: list[str] | None = None) -> int:
    p = OneLineErrorParser(prog=PROG, description="Sample text from a language-model checkpoint written by flow-train.")
    p.add_argument("checkpoint", help="checkpoint.safetensors of a flow-train run")
    p.add_argument("--prompt", default="\n", help="text to continue")
    p.add_argument("--length", type=int, default=300, help="tokens to sample")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads (0 leaves the libraries' default)")
    try:
        args = p.parse_args(argv)
        from flow_models.train.build import limit_threads

        limit_threads(args.threads)
        print(generate_from_checkpoint(args.checkpoint, args.prompt, args.length, temperature=args.temperature,
                                       top_k=args.top_k, seed=args.seed))
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        kind = "error" if isinstance(e, (flow.errors.FlowError, OSError, ValueError)) else "internal error"
        print(f"{PROG}: {kind}: {' '.join(str(e).split())}", file=sys.stderr)
        return 2 if kind == "error" else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
