"""``flow-train``: train a zoo model on a dataset, from the command line.

    flow-train lenet --dataset digits                 # per-model defaults: just works
    flow-train gpt2-char --dataset cpython-docs --sample
    flow-train dlrm --dataset criteo --data-path day_0.tsv --data-arg table_sizes=100000
    flow-train --resume runs/lenet-digits/checkpoint.safetensors
    flow-train --list

Settings come from, lowest first: built-in defaults, the model's defaults, the checkpoint being
resumed, ``--config FILE`` (YAML or TOML, keys named like the flags), then the flags. Every user
error (bad flag, unknown model or dataset, unreadable data, missing plugin) is one line on stderr
and a non-zero exit status; Ctrl-C saves a checkpoint and exits with 130.
"""

from __future__ import annotations

import argparse
import os
import sys

from flow.errors import FlowError

__all__ = ["main", "build_parser", "OneLineErrorParser", "EXIT_USAGE", "EXIT_FAILURE"]

EXIT_FAILURE = 1
EXIT_USAGE = 2
PROG = "flow-train"


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse whose errors are one line (``prog: error: ...``) instead of usage plus message."""

    def error(self, message: str):
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineErrorParser(prog=PROG, description="Train a flow model-zoo model on a dataset.",
                epilog="Settings: defaults < model defaults < resumed checkpoint < --config FILE < flags.")
    p.add_argument("model", nargs="?", help="model name (see --list)")
    p.add_argument("--list", action="store_true", help="list the models and datasets, one line each, and exit")
    p.add_argument("--dataset", help="dataset name (default: the model's usual dataset)")
    p.add_argument("--data-path", help="file or folder of a file-based dataset (mnist, cifar10, text-file, criteo...)")
    p.add_argument("--data-arg", action="append", metavar="KEY=VALUE", help="dataset option (repeatable)")
    p.add_argument("--model-arg", action="append", metavar="KEY=VALUE", help="model config override (repeatable)")
    p.add_argument("--config", metavar="FILE", help="settings from a .yaml/.yml or .toml file; flags override it")
    g = p.add_argument_group("optimisation")
    g.add_argument("--epochs", type=int)
    g.add_argument("--batch-size", type=int)
    g.add_argument("--eval-batch-size", type=int)
    g.add_argument("--lr", type=float, help="learning rate")
    g.add_argument("--optimizer", choices=("sgd", "adam", "adamw"))
    g.add_argument("--weight-decay", type=float)
    g.add_argument("--momentum", type=float, help="SGD momentum")
    g.add_argument("--scheduler", choices=("constant", "cosine"))
    g.add_argument("--warmup-steps", type=int)
    g.add_argument("--grad-clip", type=float, help="clip the gradients' global norm to this")
    g.add_argument("--max-steps", type=int, help="stop (with a checkpoint) after this many steps in total")
    g.add_argument("--eval-batches", type=int, help="evaluate on at most this many test batches")
    g.add_argument("--seed", type=int)
    e = p.add_argument_group("execution")
    mode = e.add_mutually_exclusive_group()
    mode.add_argument("--graph", dest="graph", action="store_true", default=None,
                      help="compile the training step with flow.nn.Graph")
    mode.add_argument("--eager", dest="graph", action="store_false", help="run eagerly (the default)")
    e.add_argument("--amp", choices=("bf16", "fp16"), help="mixed precision (needs the flow-amp plugin)")
    e.add_argument("--device", help="cpu (default), cuda, cuda:1... (cuda needs the flow-cuda plugin)")
    e.add_argument("--num-workers", type=int, help="DataLoader worker processes")
    e.add_argument("--threads", type=int, help="BLAS/OpenMP threads (default 1; 0 leaves the libraries' default)")
    o = p.add_argument_group("output")
    o.add_argument("--output", metavar="DIR", help="run folder (default runs/{model}-{dataset})")
    o.add_argument("--resume", metavar="CKPT", help="continue from a checkpoint written by flow-train")
    o.add_argument("--log-every", type=int, help="steps between training-loss records in metrics.jsonl")
    o.add_argument("--no-progress", dest="progress", action="store_false", default=None,
                   help="no progress bar")
    s = p.add_argument_group("sampling (language models)")
    s.add_argument("--sample", action="store_true", default=None, help="print text sampled from the model at the end")
    s.add_argument("--prompt", help="text the sample starts from")
    s.add_argument("--sample-length", type=int, help="tokens to sample")
    s.add_argument("--temperature", type=float)
    s.add_argument("--top-k", type=int)
    return p


_NOT_SETTINGS = {"model", "list", "config", "data_arg", "model_arg"}


def list_zoo(out=sys.stdout) -> None:
    from flow_models import registry as zoo

    rows = zoo.describe()
    width = max([len(r["name"]) for r in rows] + [8])
    for kind in ("model", "dataset"):
        picked = [r for r in rows if r["kind"] == kind]
        print(f"{kind}s:", file=out)
        for r in picked:
            print(f"  {r['name']:<{width}}  {r['family']:<7} {r['doc']}", file=out)
        if not picked:
            print("  (none registered)", file=out)


def _settings(args: argparse.Namespace):
    """(model name, family, file-layer values, flag-layer values)."""
    from flow_models import registry as zoo
    from flow_models.train.config import TrainError, load_config_file, parse_assignments
    from flow_models.train.loop import resume_config_values

    flags = {k: v for k, v in vars(args).items() if k not in _NOT_SETTINGS and v is not None}
    flags["data_args"] = parse_assignments(args.data_arg, "--data-arg")
    flags["model_args"] = parse_assignments(args.model_arg, "--model-arg")
    base: dict = {}
    if args.resume:
        base = resume_config_values(args.resume)
        for key in ("resume", "max_steps", "model"):
            base.pop(key, None)
    file_values = load_config_file(args.config) if args.config else {}
    model = args.model or file_values.pop("model", None) or (
        _checkpoint_model(args.resume) if args.resume else None)
    file_values.pop("model", None)
    if not model:
        raise TrainError("no model given; usage: flow-train MODEL [--dataset NAME] ... (see flow-train --list)")
    family = zoo.model_info(model).family
    for key in ("model_args", "data_args"):
        if key in base and key in file_values:
            file_values[key] = {**base[key], **file_values[key]}
    return model, family, {**base, **file_values}, flags


def _checkpoint_model(path: str) -> str:
    from flow_models.train.checkpoint import load_checkpoint

    return load_checkpoint(path)["model_name"]


def _print_summary(summary: dict, task_metric: str) -> None:
    test = summary["test"]
    print(f"== {summary['model']} on {summary['dataset']}: {summary['epochs']} epochs, {summary['steps']} steps "
          f"in {summary['seconds']:.1f} s")
    parts = []
    for key, value in test.items():
        if key == "accuracy":
            parts.append(f"test accuracy: {100 * value:.2f}%")
        else:
            parts.append(f"test {key.replace('_', ' ')}: {value:.4f}")
    if task_metric != "accuracy" and task_metric in test:  # the headline metric first
        parts.sort(key=lambda s: not s.startswith(f"test {task_metric.replace('_', ' ')}:"))
    print("  ".join(parts))
    print(f"checkpoint: {summary['checkpoint']}")
    print(f"metrics: {summary['metrics']}  plot: {summary['plot']}")


def _run(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        list_zoo()
        return 0
    from flow_models.train.config import resolve_config
    from flow_models.train.loop import Trainer

    model, family, file_values, flags = _settings(args)
    cfg = resolve_config(model, family, file_values, flags)
    trainer = Trainer(cfg)
    summary = trainer.run()
    _print_summary(summary, trainer.task.metric)
    if cfg.sample:
        if trainer.splits.task != "lm":
            print(f"{PROG}: note: --sample applies to language models; '{cfg.model}' is a {trainer.splits.task} model",
                  file=sys.stderr)
        else:
            from flow_models.train.generate import sample_from_trainer

            print("-- sample --")
            print(sample_from_trainer(trainer))
    return 0


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def main(argv: list[str] | None = None) -> int:
    """The console script: returns the exit status (0, 1 failure, 2 usage, 130 interrupted)."""
    from flow_models.data.base import DataError
    from flow_models.registry import ZooError
    from flow_models.train.config import TrainError

    try:
        return _run(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_FAILURE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except (TrainError, ZooError) as e:
        print(f"{PROG}: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_USAGE
    except (DataError, FlowError, OSError, MemoryError) as e:
        print(f"{PROG}: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as e:  # a bug: still one line, the traceback on request
        if os.environ.get("FLOW_TRAIN_DEBUG"):
            raise
        print(f"{PROG}: internal error: {type(e).__name__}: {_one_line(e)} "
              "(set FLOW_TRAIN_DEBUG=1 to see the traceback)", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
