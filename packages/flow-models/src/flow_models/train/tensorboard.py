"""``flow-train --tensorboard DIR``: the run's metrics and model graph as TensorBoard event files.

:class:`TensorBoardLog` stands in for the run's :class:`~flow_models.train.runfiles.MetricsLog`:
every record appended to ``metrics.jsonl`` is also written as scalars at its step (``train/loss``,
``train/lr``, ``train/samples_per_s``, the loss scale under fp16, and ``eval/<metric>`` for each
evaluation), so TensorBoard shows the same numbers the run folder keeps. After the first step the
graph is added: the compiled training step in ``--graph`` mode, else the loss of the first batch
traced by flow's graph tracer. A resumed run purges the events after its checkpoint's step.
"""

from __future__ import annotations

import math
import numbers

from flow_models.train.config import TrainError

__all__ = ["TensorBoardLog"]

_NOT_SCALARS = {"kind", "epoch", "step"}


class TensorBoardLog:
    """A MetricsLog that also writes each record to TensorBoard (other attributes are the log's)."""

    def __init__(self, log_dir: str, metrics, resume_step: int | None = None, log=print) -> None:
        try:
            from flow.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir, purge_step=resume_step)
        except ImportError:
            raise TrainError(
                "--tensorboard needs the 'tensorboard' package: pip install 'flow-core[tensorboard]'"
            ) from None
        self.metrics, self.log = metrics, log
        self.has_graph = False

    def __getattr__(self, name: str):
        metrics = self.__dict__.get("metrics")  # looked up in __dict__: no recursion before __init__ set it
        if metrics is None:
            raise AttributeError(name)
        return getattr(metrics, name)

    def append(self, record: dict) -> None:
        self.metrics.append(record)
        prefix = "eval" if record.get("kind") == "eval" else "train"
        step = int(record.get("step", 0))
        for key, value in record.items():
            if key in _NOT_SCALARS or isinstance(value, bool) or not isinstance(value, numbers.Real):
                continue
            if math.isfinite(value):
                self.writer.add_scalar(f"{prefix}/{key}", float(value), step)
        self.writer.flush()  # records are seconds apart: on disk at once, also if the run is killed

    def add_graph(self, trainer, batch) -> None:
        """The graph of the training step (``--graph``) or of the loss of ``batch``; a graph that cannot
        be traced is a warning, never the end of a run."""
        self.has_graph = True
        from flow.errors import FlowError

        try:
            if trainer._graph_step is not None:
                self.writer.add_graph(trainer._graph_step)
            else:
                self.writer.add_graph(_loss_ir(trainer, batch))
            self.writer.flush()
        except (FlowError, TypeError, ValueError) as e:
            self.log(f"flow-train: warning: could not write the graph to TensorBoard: {e}")

    def close(self) -> None:
        self.writer.close()


def _loss_ir(trainer, batch):
    """The forward pass and loss of one batch as flow graph IR (tracing leaves the model as it was)."""
    import flow
    from flow.graph.tracer import trace

    task, model = trainer.task, trainer.model

    def loss(*b):
        return task.loss(model, list(b))[0]

    with flow.no_grad():
        return trace(loss, tuple(batch), {}, name=type(model).__name__, modules={"model": model})
