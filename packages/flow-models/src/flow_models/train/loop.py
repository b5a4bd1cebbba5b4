"""The training loop of flow-train: epochs of optimizer steps, evaluation, checkpoints, metrics, plot.

Runs are reproducible and resumable exactly: each epoch's sample order is a permutation drawn
from ``(seed, epoch)`` alone, and a checkpoint records the epoch, the step within it and flow's
random state, so a run resumed from a checkpoint (written at the end of an epoch, at
``max_steps``, on Ctrl-C or on SIGTERM) takes the same steps as one that never stopped.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

import numpy as np

import flow
from flow.utils.data import DataLoader, DataLoaderWorkerError, Sampler
from flow_models.train import build, parallel
from flow_models.train.amp import MixedPrecision
from flow_models.train.checkpoint import CHECKPOINT_NAME, load_checkpoint, save_checkpoint
from flow_models.train.config import TrainConfig, TrainError
from flow_models.train.graph_dump import GraphDumper
from flow_models.train.interrupt import Interrupt
from flow_models.train.options import MAX_SEED
from flow_models.train.preflight import check_loaded, preflight
from flow_models.train.profiling import StepProfiler
from flow_models.train.runfiles import MetricsLog, atomic_write, remove_stale_temps
from flow_models.train.tasks import make_task

__all__ = ["Trainer", "EpochSampler", "MetricsLog", "INTERRUPTED_EXIT"]

INTERRUPTED_EXIT = 130  # what a shell reports for a process ended by SIGINT (SIGTERM: 143)
PLOT_EVERY_S = 60.0  # the plot is redrawn after an epoch at most this often (and always at the end)


class EpochSampler(Sampler):
    """Indices in an order fixed by ``(seed, epoch)``, starting at position ``start`` of that order."""

    def __init__(self, n: int, seed: int, shuffle: bool = True) -> None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= MAX_SEED:
            raise ValueError(f"EpochSampler: seed must be an integer in [0, 2**64 - 1], got {seed!r}")
        self.n, self.seed, self.shuffle = n, int(seed), shuffle
        self.epoch, self.start = 0, 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch, self.start = epoch, start

    def order(self) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.n)
        rng = np.random.Generator(np.random.Philox(key=np.array([self.seed, self.epoch], dtype=np.uint64)))
        return rng.permutation(self.n)

    def __iter__(self):
        return iter(self.order()[self.start :].tolist())

    def __len__(self) -> int:
        return max(0, self.n - self.start)


def _to_device(batch, device):
    if device.type == "cpu":
        return batch
    return [t.to(device) if isinstance(t, flow.Tensor) else t for t in batch]


class Trainer:
    """One run of ``flow-train``: built from a :class:`TrainConfig`, started with :meth:`run`."""

    def __init__(self, cfg: TrainConfig, log=print) -> None:
        self.cfg, self.log = cfg, log
        cfg.validate()
        self.resumed = load_checkpoint(cfg.resume) if cfg.resume else None
        if self.resumed and self.resumed["model_name"] != cfg.model:
            raise TrainError(
                f"--resume: checkpoint '{cfg.resume}' is of model '{self.resumed['model_name']}', not '{cfg.model}'"
            )
        # every setting, the dataset's options and the model/dataset pair, before any data is read
        self.plan = preflight(cfg, self.resumed["model_config"] if self.resumed else None)
        self._thread_limit = build.limit_threads(cfg.threads)
        self.device = flow.device(cfg.device)
        flow.manual_seed(cfg.seed)
        self.splits = build.load_data(cfg, self.plan.dataset_kwargs)
        check_loaded(self.plan, cfg, self.splits)
        if cfg.sample and self.splits.task == "lm":
            from flow_models.train.generate import check_prompt

            check_prompt(self.splits.info.get("tokenizer"), cfg.prompt, f"dataset '{self.splits.name}'")
        self.task = make_task(self.splits.task)
        self.model = build.build_model(cfg, self.splits, self.resumed["model_config"] if self.resumed else None)
        if self.device.type != "cpu":
            self.model.to(self.device)
        self.rank, self.world = parallel.world()
        self.main = self.rank == 0  # the rank that logs and writes the run folder
        if self.world > 1:
            parallel.check(cfg, self.world)
        # the module the steps run (DDP averages its gradients over the ranks); self.model is the model
        self.train_model = parallel.wrap(self.model) if self.world > 1 else self.model
        self.optimizer = build.build_optimizer(cfg, self.model)
        if self.world > 1:  # full batches only, so that every rank runs every step
            self.steps_per_epoch = len(self.splits.train) // cfg.batch_size
        else:
            self.steps_per_epoch = math.ceil(len(self.splits.train) / cfg.batch_size)
        total = cfg.epochs * self.steps_per_epoch
        self.total_steps = min(total, cfg.max_steps) if cfg.max_steps else total
        self.scheduler = build.build_scheduler(cfg, self.optimizer, total)
        self.sampler = EpochSampler(len(self.splits.train), cfg.seed)
        if self.world > 1:
            self.sampler = parallel.ShardSampler(self.sampler, cfg.batch_size, self.rank, self.world)
        self.train_loader = DataLoader(
            self.splits.train,
            batch_size=cfg.batch_size // self.world,
            sampler=self.sampler,
            num_workers=cfg.num_workers,
        )
        self.test_loader = DataLoader(
            self.splits.test, batch_size=cfg.eval_batch_size or 2 * cfg.batch_size, num_workers=cfg.num_workers
        )
        self.epoch, self.step_in_epoch, self.global_step = 0, 0, 0
        self._last_plot = time.perf_counter()
        self.best: dict = {}
        self.last_eval: dict = {}
        self.out_dir = cfg.output_dir()
        if self.main:
            os.makedirs(self.out_dir, exist_ok=True)
            remove_stale_temps(self.out_dir)
        self.checkpoint_path = os.path.join(self.out_dir, CHECKPOINT_NAME)
        self.step_profiler = StepProfiler(cfg.profile, self.out_dir, log, self.main)
        self.amp = MixedPrecision(cfg.amp, cfg.device)
        if self.resumed:
            self._restore(self.resumed)
        self.metrics = MetricsLog(
            os.path.join(self.out_dir, "metrics.jsonl"), self.global_step if self.resumed else None, write=self.main
        )
        self.tensorboard = None
        if cfg.tensorboard and self.main:  # every metrics record also goes to TensorBoard, and the graph
            from flow_models.train.tensorboard import TensorBoardLog

            tb_dir = cfg.tensorboard.format(model=cfg.model, dataset=cfg.dataset or "data")
            self.tensorboard = TensorBoardLog(tb_dir, self.metrics, self.global_step if self.resumed else None, log)
            self.metrics = self.tensorboard
        self._graph_step = self._make_graph_step() if cfg.graph else None
        self.graph_dumper = GraphDumper(cfg.dump_graph if cfg.graph else None, log, self.main)

    # -- state ----------------------------------------------------------------------------------------
    def _restore(self, st: dict) -> None:
        try:
            self.model.load_state_dict(st["model"])
            self.optimizer.load_state_dict(st["optimizer"])
        except (KeyError, ValueError, RuntimeError) as e:
            raise TrainError(f"checkpoint '{self.cfg.resume}' does not fit this model/optimizer: {e}") from None
        if st.get("scheduler"):
            self.scheduler.load_state_dict(st["scheduler"])
        self.amp.load_state_dict(st.get("grad_scaler"))
        flow.set_rng_state(st["rng"])
        self.epoch, self.step_in_epoch = st["epoch"], st["step_in_epoch"]
        self.global_step = st["global_step"]
        self.best = dict(st.get("best") or {})
        self.log(f"resumed from {self.cfg.resume}: epoch {self.epoch + 1}, step {self.global_step}")

    def save(self) -> str:
        if not self.main:
            return self.checkpoint_path
        data = {
            "name": self.splits.name,
            "task": self.splits.task,
            "info": self.splits.info,
            "model_args": self.splits.model_args,
        }
        save_checkpoint(
            self.checkpoint_path,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            epoch=self.epoch,
            step_in_epoch=self.step_in_epoch,
            global_step=self.global_step,
            config=self.cfg.to_dict(),
            model_name=self.cfg.model,
            model_config=build.model_config_dict(self.model),
            data=data,
            best=self.best,
            grad_scaler=self.amp.state_dict(),
        )
        return self.checkpoint_path

    # -- steps ----------------------------------------------------------------------------------------
    def _make_graph_step(self):
        """The training step compiled with flow.nn.Graph (the scheduler stays on the host: the graph reads the lr)."""
        task, model, optimizer, amp = self.task, self.model, self.optimizer, self.amp
        if self.cfg.grad_clip:
            self.log(
                f"flow-train: note: --grad-clip {self.cfg.grad_clip:g} is not applied in graph mode "
                "(gradients stay inside the compiled step)"
            )

        class TrainStep(flow.nn.Graph):
            def __init__(self) -> None:
                super().__init__()
                self.model = model
                self.add_optimizer(optimizer)
                amp.configure_graph(self)  # the AMP graph pass of flow-amp (and the loss scaler for fp16)

            def build(self, *batch):
                loss, _ = task.loss(self.model, list(batch))
                loss.backward()
                return loss

        return TrainStep()

    def train_step(self, batch) -> tuple[float, int]:
        n = int(batch[0].shape[0])
        if self._graph_step is not None:
            loss = self._graph_step(*batch)
            self.graph_dumper.after(self._graph_step)
        else:
            with self.amp.autocast():
                loss, n = self.task.loss(self.train_model, batch)
            self.optimizer.zero_grad()
            self.amp.backward(loss)
            if self.cfg.grad_clip:
                self.amp.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
                flow.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
            self.amp.step(self.optimizer)
        self.scheduler.step()
        value = float(loss.item())
        if self.world > 1:  # each rank's loss is its share's mean: the step's is their mean
            value = parallel.mean_over_ranks(value)
            n *= self.world
        if not math.isfinite(value):
            # loss scaling guards the gradients, not the forward pass: float16 activations can overflow
            hint = ", or --amp bf16 (float32's range)" if self.cfg.amp == "fp16" else ""
            raise TrainError(
                f"the loss became {value} at step {self.global_step + 1}; try a lower --lr "
                f"(now {self.cfg.lr}) or --grad-clip{hint}"
            )
        if self.tensorboard is not None and not self.tensorboard.has_graph:
            self.tensorboard.add_graph(self, batch)  # after the step: in graph mode it is compiled now
        return value, n

    def evaluate(self) -> dict:
        self.model.eval()
        state = self.task.new_state()
        seen = 0
        with flow.no_grad(), self.amp.autocast():  # the metrics of the model as it trains: in mixed precision
            for k, batch in enumerate(self.test_loader):
                if self.cfg.eval_batches is not None and k >= self.cfg.eval_batches:
                    break
                self.task.update(self.model, _to_device(batch, self.device), state)
                seen += 1
        self.model.train()
        if not seen:  # never report the metrics of nothing
            raise TrainError(
                f"evaluation saw no test batches (dataset '{self.splits.name}': {len(self.splits.test)} test samples)"
            )
        return self.task.result(state)

    # -- the run ----------------------------------------------------------------------------------------
    def run(self) -> dict:
        """Train to the configured end; returns the summary (also written to ``summary.json``).

        Raises ``SystemExit(130)`` (Ctrl-C) or ``SystemExit(143)`` (SIGTERM) after checkpointing when
        a signal asks it to stop.
        """
        cfg = self.cfg
        start = time.perf_counter()
        self.log(
            f"training {cfg.model} ({_count(self.model)} parameters) on {self.splits.describe()}; "
            f"{cfg.epochs} epochs of {self.steps_per_epoch} steps, batch {cfg.batch_size}, "
            f"{cfg.optimizer} lr {cfg.lr:g}, device {cfg.device}, {'graph' if cfg.graph else 'eager'} mode"
            + (f", amp {cfg.amp}" if self.amp.enabled else "")
        )
        self.model.train()
        stopped = None
        with Interrupt() as interrupt:
            try:
                while self.epoch < cfg.epochs and stopped is None and not interrupt.requested:
                    stopped = self._run_epoch(interrupt)
                    if stopped is None:
                        self.epoch, self.step_in_epoch = self.epoch + 1, 0
                        self._end_of_epoch()
            except DataLoaderWorkerError:
                # a signal sent to the whole process group (a scheduler's SIGTERM) ends the workers too
                if not interrupt.requested:
                    raise
            if interrupt.requested:
                path = self.save()
                self._plot()
                self.log(
                    f"interrupted at epoch {self.epoch + 1}, step {self.global_step}; checkpoint saved to "
                    f"{path}; continue with --resume {path}"
                )
                raise SystemExit(interrupt.exit_code)
            self.step_profiler.close()
            if stopped == "max_steps" or not self.last_eval:  # stopped early, or resumed a finished run
                self._record_eval(self.evaluate())
                self.save()
        self._plot()
        if self.tensorboard is not None:
            self.tensorboard.close()
        return self._summary(time.perf_counter() - start)

    def _run_epoch(self, interrupt: Interrupt) -> str | None:
        """Train the rest of the current epoch; returns why it stopped early ("interrupt", "max_steps") or None."""
        from tqdm import tqdm

        cfg = self.cfg
        self.sampler.set_epoch(self.epoch, self.step_in_epoch * cfg.batch_size)
        total = self.steps_per_epoch
        if cfg.max_steps:  # a run that stops early shows a bar that ends where it stops
            total = min(total, self.step_in_epoch + max(0, cfg.max_steps - self.global_step))
        bar = tqdm(
            total=total,
            initial=self.step_in_epoch,
            desc=f"epoch {self.epoch + 1}/{cfg.epochs}",
            disable=not cfg.progress or not self.main,
            leave=False,
            dynamic_ncols=True,
            file=sys.stderr,
            unit="step",
        )
        t0, seen, ema, logged = time.perf_counter(), 0, None, []
        try:
            for batch in self.train_loader:
                if interrupt.requested:
                    return "interrupt"
                if cfg.max_steps and self.global_step >= cfg.max_steps:
                    return "max_steps"
                with self.step_profiler.step():
                    loss, n = self.train_step(_to_device(batch, self.device))
                self.step_in_epoch += 1
                self.global_step += 1
                seen += n
                ema = loss if ema is None else 0.9 * ema + 0.1 * loss
                logged.append(loss)
                rate = seen / max(time.perf_counter() - t0, 1e-9)
                bar.set_postfix(
                    loss=f"{ema:.4f}",
                    lr=f"{self.scheduler.get_last_lr()[0]:.2e}",
                    samples_s=f"{rate:.0f}",
                    refresh=False,
                )
                bar.update(1)
                if self.global_step % cfg.log_every == 0:
                    self.metrics.append(
                        {
                            "kind": "train",
                            "epoch": self.epoch + 1,
                            "step": self.global_step,
                            "loss": float(np.mean(logged)),
                            "lr": self.scheduler.get_last_lr()[0],
                            "samples_per_s": rate,
                            **self.amp.record(),
                        }
                    )
                    logged = []
            if interrupt.requested:
                return "interrupt"
        finally:
            bar.close()
        self._epoch_rate = seen / max(time.perf_counter() - t0, 1e-9)
        return None

    def _end_of_epoch(self) -> None:
        result = self._record_eval(self.evaluate())
        shown = ", ".join(f"{k} {_fmt(k, v)}" for k, v in result.items())
        self.log(
            f"epoch {self.epoch}/{self.cfg.epochs}: step {self.global_step}, test {shown}, "
            f"{getattr(self, '_epoch_rate', 0):.0f} samples/s"
        )
        self.save()
        if time.perf_counter() - self._last_plot > PLOT_EVERY_S:
            self._plot()

    def _record_eval(self, result: dict) -> dict:
        self.last_eval = result
        key, better = self.task.metric, self.task.higher_is_better
        value = result.get(key)
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            old = self.best.get(key)
            if old is None or (value > old if better else value < old):
                self.best = {key: value, "step": self.global_step}
        self.metrics.append({"kind": "eval", "epoch": self.epoch, "step": self.global_step, **result})
        return result

    def _plot(self) -> None:
        from flow_models.train.plot import plot_metrics

        if not self.main:
            return
        self._last_plot = time.perf_counter()
        try:
            plot_metrics(
                self.metrics.records,
                os.path.join(self.out_dir, "plot.png"),
                title=f"{self.cfg.model} on {self.splits.name}",
            )
        except Exception as e:  # a plot is a convenience: never lose a run over it
            self.log(f"flow-train: warning: could not write the plot: {e}")

    def _summary(self, seconds: float) -> dict:
        summary = {
            "model": self.cfg.model,
            "dataset": self.splits.name,
            "task": self.splits.task,
            "amp": self.cfg.amp,
            "epochs": self.epoch,
            "steps": self.global_step,
            "seconds": round(seconds, 2),
            "test": self.last_eval,
            "best": self.best,
            "checkpoint": self.checkpoint_path,
            "metrics": self.metrics.path,
            "plot": os.path.join(self.out_dir, "plot.png"),
        }
        if self.main:
            atomic_write(os.path.join(self.out_dir, "summary.json"), json.dumps(summary, indent=2))
        return summary


def _count(model) -> str:
    n = sum(p.numel() for p in model.parameters())
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n:,}"


def _fmt(key: str, value) -> str:
    if not isinstance(value, float):
        return str(value)
    if key in ("accuracy",):
        return f"{100 * value:.2f}%"
    return f"{value:.4f}"


def resume_config_values(path: str) -> dict:
    """The settings stored in a checkpoint (``--resume`` without repeating the original flags)."""
    return dict(load_checkpoint(path)["config"])
