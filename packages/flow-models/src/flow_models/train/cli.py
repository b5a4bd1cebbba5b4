"""``flow-train``: train a zoo model on a dataset, from the command line.

    flow-train lenet --dataset digits                 # per-model defaults: just works
    flow-train gpt2-char --dataset cpython-docs --sample
    flow-train dlrm --dataset criteo --data-path day_0.tsv --data-arg table_sizes=100000
    flow-train --resume runs/lenet-digits/checkpoint.safetensors
    flow-train --list

Settings come from, lowest first: built-in defaults, the model's defaults, the checkpoint being
resumed, ``--config FILE`` (YAML or TOML, keys named like the flags), then the flags. Every user
error is one line on stderr: exit status 2 for a usage error (a flag or config value outside its
declared range, an unknown model or dataset, a model that cannot train on the dataset, a missing
plugin), all found before any data is read; 1 for a failure (unreadable data). Ctrl-C and SIGTERM
save a checkpoint and exit with 130 and 143.
"""

from __future__ import annotations

import argparse
import os
import sys

from flow.errors import FlowError
from flow_models.train.exits import EXIT_FAILURE, EXIT_USAGE, OneLineErrorParser
from flow_models.train.options import SETTINGS, parse_assignment

__all__ = ["main", "build_parser", "OneLineErrorParser", "EXIT_USAGE", "EXIT_FAILURE"]


PROG = "flow-train"


def _add(group, name: str, **kw) -> None:
    """A flag whose value is converted and range-checked by its declared :class:`Setting`."""
    s = SETTINGS[name]
    metavar = "{" + ",".join(s.choices) + "}" if s.choices else kw.pop("metavar", None) or name.upper()
    group.add_argument(s.flag, type=s.parse_flag, metavar=metavar, help=s.flag_help(), **kw)


def build_parser() -> argparse.ArgumentParser:
    """flow-train's parser: each flag is a setting of :mod:`flow_models.train.options` (its range in --help)."""
    p = OneLineErrorParser(
        prog=PROG,
        description="Train a flow model-zoo model on a dataset.",
        epilog="Settings: defaults < model defaults < resumed checkpoint < --config FILE < flags.",
    )
    p.add_argument("model", nargs="?", type=SETTINGS["model"].parse_flag, help="model name (see --list)")
    p.add_argument("--list", action="store_true", help="list the models and datasets, one line each, and exit")
    _add(p, "dataset", metavar="NAME")
    _add(p, "data_path", metavar="PATH")
    p.add_argument(
        "--data-arg", action="append", type=parse_assignment, metavar="KEY=VALUE", help="dataset option (repeatable)"
    )
    p.add_argument(
        "--model-arg",
        action="append",
        type=parse_assignment,
        metavar="KEY=VALUE",
        help="model config override (repeatable)",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        type=_config_file,
        help="settings from a .yaml/.yml or .toml file; flags override it",
    )
    g = p.add_argument_group("optimisation")
    for name in (
        "epochs",
        "batch_size",
        "eval_batch_size",
        "lr",
        "optimizer",
        "weight_decay",
        "momentum",
        "scheduler",
        "warmup_steps",
        "grad_clip",
        "max_steps",
        "eval_batches",
        "seed",
    ):
        _add(g, name)
    e = p.add_argument_group("execution")
    mode = e.add_mutually_exclusive_group()
    mode.add_argument("--graph", dest="graph", action="store_true", default=None, help=SETTINGS["graph"].help)
    mode.add_argument("--eager", dest="graph", action="store_false", help="run eagerly (the default)")
    _add(e, "dump_graph", metavar="DIR")
    for name in ("amp", "device", "num_workers", "threads", "nproc", "profile"):
        _add(e, name)
    o = p.add_argument_group("output")
    _add(o, "output", metavar="DIR")
    _add(o, "resume", metavar="CKPT")
    _add(o, "log_every", metavar="STEPS")
    _add(o, "tensorboard", metavar="DIR")
    o.add_argument("--no-progress", dest="progress", action="store_false", default=None, help="no progress bar")
    s = p.add_argument_group("sampling (language models)")
    s.add_argument("--sample", action="store_true", default=None, help=SETTINGS["sample"].help)
    for name in ("prompt", "sample_length", "temperature", "top_k"):
        _add(s, name)
    return p


def _config_file(path: str) -> str:
    if not os.path.isfile(path):
        raise argparse.ArgumentTypeError(
            f"file not found: {path}" if not os.path.isdir(path) else f"must be a file, not a folder: {path}"
        )
    if os.path.splitext(path)[1].lower() not in (".yaml", ".yml", ".toml"):
        raise argparse.ArgumentTypeError(f"must end in .yaml, .yml or .toml: {path}")
    return path


_NOT_SETTINGS = {"model", "list", "config", "data_arg", "model_arg"}


def list_zoo(out=sys.stdout) -> None:
    from flow_models import registry as zoo

    rows = zoo.describe()
    width = max([len(r["name"]) for r in rows] + [8])
    io = max([len(r["io"]) for r in rows] + [4])
    for kind in ("model", "dataset"):
        picked = [r for r in rows if r["kind"] == kind]
        print(f"{kind}s:", file=out)
        for r in picked:  # io: the task/input a model takes or a dataset gives; a pair must agree
            print(f"  {r['name']:<{width}}  {r['family']:<7} {r['io'] or '-':<{io}}  {r['doc']}", file=out)
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
        try:
            base = resume_config_values(args.resume)
        except TrainError as e:
            raise TrainError(f"--resume: {e}") from None
        for key in ("resume", "max_steps", "model", "profile", "dump_graph"):
            base.pop(key, None)
    file_values = load_config_file(args.config) if args.config else {}
    model = args.model or file_values.pop("model", None) or (_checkpoint_model(args.resume) if args.resume else None)
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
    print(
        f"== {summary['model']} on {summary['dataset']}: {summary['epochs']} epochs, {summary['steps']} steps "
        f"in {summary['seconds']:.1f} s"
    )
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
    from flow_models.train import parallel
    from flow_models.train.config import resolve_config
    from flow_models.train.loop import Trainer

    model, family, file_values, flags = _settings(args)
    cfg = resolve_config(model, family, file_values, flags)
    if cfg.nproc > 1 and parallel.world()[1] == 1:  # start the job: this command on every rank
        return parallel.relaunch(cfg.nproc, sys.argv[1:] if argv is None else list(argv))
    trainer = Trainer(cfg, log=print if parallel.on_main() else parallel.quiet)
    if not parallel.on_main():
        trainer.run()
        return 0
    if cfg.sample and trainer.splits.task != "lm":
        print(
            f"{PROG}: note: --sample applies to language models; '{cfg.model}' is a {trainer.splits.task} model",
            file=sys.stderr,
        )
    summary = trainer.run()
    _print_summary(summary, trainer.task.metric)
    if cfg.sample and trainer.splits.task == "lm":
        from flow_models.train.generate import sample_from_trainer

        print("-- sample --")
        print(sample_from_trainer(trainer))
    return 0


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def main(argv: list[str] | None = None) -> int:
    """The console script: returns the exit status (0, 1 failure, 2 usage, 130 / 143 stopped by SIGINT / SIGTERM)."""
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
        print(
            f"{PROG}: internal error: {type(e).__name__}: {_one_line(e)} (set FLOW_TRAIN_DEBUG=1 to see the traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
