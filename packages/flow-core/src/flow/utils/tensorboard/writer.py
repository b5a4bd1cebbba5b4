"""``SummaryWriter``: torch.utils.tensorboard's writer for flow, on TensorBoard's own event file writer."""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime
from typing import Any

from flow.utils.tensorboard import _summary
from flow.utils.tensorboard._summary import require_tensorboard


def _check_tag(tag: Any, what: str = "tag") -> str:
    if not isinstance(tag, str) or not tag:
        raise TypeError(f"{what} must be a non-empty str, got {tag!r}")
    return tag


def _check_step(step: Any) -> int | None:
    if step is None:
        return None
    try:
        import numpy as np

        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            step = _summary.scalar_value(step, "global_step")
            if step != int(step):
                raise ValueError
        return int(step)
    except (TypeError, ValueError):
        raise TypeError(f"global_step must be an integer, got {step!r}") from None


class _FileWriter:
    """One event file in ``log_dir`` (TensorBoard's EventFileWriter writes it on a background thread)."""

    def __init__(self, log_dir: str, max_queue: int, flush_secs: float, filename_suffix: str) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.log_dir = str(log_dir)
        self.events = EventFileWriter(self.log_dir, max_queue, flush_secs, filename_suffix)

    def add_event(self, event, step: int | None = None, walltime: float | None = None) -> None:
        event.wall_time = time.time() if walltime is None else walltime
        if step is not None:
            event.step = int(step)
        self.events.add_event(event)

    def add_summary(self, summary, step: int | None = None, walltime: float | None = None) -> None:
        from tensorboard.compat.proto.event_pb2 import Event

        self.add_event(Event(summary=summary), step, walltime)

    def flush(self) -> None:
        self.events.flush()

    def close(self) -> None:
        self.events.close()


class SummaryWriter:
    """Writes TensorBoard event files into ``log_dir`` (``runs/<date>_<host><comment>`` by default).

    The API and the files are torch.utils.tensorboard's: ``add_scalar``, ``add_scalars``,
    ``add_histogram``, ``add_image``, ``add_images``, ``add_text``, ``add_graph``, ``add_hparams``,
    ``flush``, ``close``, and ``with SummaryWriter(...) as w:``. Values may be flow Tensors, NumPy
    arrays or Python numbers. ``purge_step``: TensorBoard hides the events at or after this step
    that an earlier (crashed) run wrote into the same ``log_dir``. Needs the ``tensorboard`` package
    (``pip install 'flow-core[tensorboard]'``); images also need Pillow.
    """

    def __init__(
        self,
        log_dir: str | os.PathLike | None = None,
        comment: str = "",
        purge_step: int | None = None,
        max_queue: int = 10,
        flush_secs: float = 120,
        filename_suffix: str = "",
    ) -> None:
        require_tensorboard()
        if not log_dir:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")
        if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 1:
            raise ValueError(f"SummaryWriter: max_queue must be an integer >= 1, got {max_queue!r}")
        if isinstance(flush_secs, bool) or not isinstance(flush_secs, (int, float)) or flush_secs <= 0:
            raise ValueError(f"SummaryWriter: flush_secs must be a number > 0, got {flush_secs!r}")
        self.log_dir = os.fspath(log_dir)
        self.purge_step = _check_step(purge_step)
        self.max_queue = max_queue
        self.flush_secs = flush_secs
        self.filename_suffix = filename_suffix
        self.file_writer: _FileWriter | None = None
        self.all_writers: dict[str, _FileWriter] | None = None
        self._get_file_writer()

    def _get_file_writer(self) -> _FileWriter:
        """The main event file; made again after ``close`` (as torch's writer does)."""
        if self.file_writer is None or self.all_writers is None:
            from tensorboard.compat.proto.event_pb2 import Event, SessionLog

            self.file_writer = _FileWriter(self.log_dir, self.max_queue, self.flush_secs, self.filename_suffix)
            self.all_writers = {self.file_writer.log_dir: self.file_writer}
            if self.purge_step is not None:
                # a START session log at purge_step tells TensorBoard to drop the older events after it
                step, self.purge_step = self.purge_step, None
                self.file_writer.add_event(Event(step=step, file_version="brain.Event:2"))
                self.file_writer.add_event(Event(step=step, session_log=SessionLog(status=SessionLog.START)))
        return self.file_writer

    def get_logdir(self) -> str:
        return self.log_dir

    # -- values ----------------------------------------------------------------------------------
    def add_scalar(self, tag: str, scalar_value: Any, global_step: int | None = None, walltime: float | None = None):
        """One number under ``tag`` at ``global_step``."""
        summary = _summary.scalar(_check_tag(tag), scalar_value)
        self._get_file_writer().add_summary(summary, _check_step(global_step), walltime)

    def add_scalars(
        self, main_tag: str, tag_scalar_dict: dict, global_step: int | None = None, walltime: float | None = None
    ) -> None:
        """Several numbers in one chart: each goes to the run ``<log_dir>/<main_tag>_<key>`` under ``main_tag``."""
        _check_tag(main_tag, "main_tag")
        if not isinstance(tag_scalar_dict, dict) or not tag_scalar_dict:
            raise TypeError(f"add_scalars: tag_scalar_dict must be a non-empty dict, got {tag_scalar_dict!r}")
        step = _check_step(global_step)
        summaries = [(tag, _summary.scalar(main_tag, v)) for tag, v in tag_scalar_dict.items()]
        base = self._get_file_writer().log_dir
        for tag, summary in summaries:
            key = base + "/" + main_tag.replace("/", "_") + "_" + str(tag)
            fw = self.all_writers.get(key)
            if fw is None:
                fw = self.all_writers[key] = _FileWriter(key, self.max_queue, self.flush_secs, self.filename_suffix)
            fw.add_summary(summary, step, walltime)

    def add_histogram(
        self,
        tag: str,
        values: Any,
        global_step: int | None = None,
        bins: Any = "tensorflow",
        walltime: float | None = None,
        max_bins: int | None = None,
    ) -> None:
        """The distribution of ``values``: ``bins`` is "tensorflow" (TensorFlow's exponential edges),
        a NumPy rule ("auto", "fd", ...), a number of bins or the edges."""
        summary = _summary.histogram(_check_tag(tag), values, bins, max_bins)
        self._get_file_writer().add_summary(summary, _check_step(global_step), walltime)

    def add_image(
        self,
        tag: str,
        img_tensor: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        dataformats: str = "CHW",
    ) -> None:
        """An image: ``dataformats`` is CHW (default), HWC, HW, ...; floats in [0, 1], uint8 in [0, 255]."""
        if not isinstance(dataformats, str):
            raise TypeError(f"add_image: dataformats must be a str such as 'CHW', got {dataformats!r}")
        summary = _summary.image(_check_tag(tag), img_tensor, dataformats)
        self._get_file_writer().add_summary(summary, _check_step(global_step), walltime)

    def add_images(
        self,
        tag: str,
        img_tensor: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        dataformats: str = "NCHW",
    ) -> None:
        """A batch of images tiled into one grid (8 per row)."""
        if not isinstance(dataformats, str) or "N" not in dataformats.upper():
            raise ValueError(f"add_images: dataformats must include N (a batch), got {dataformats!r}")
        self.add_image(tag, img_tensor, global_step, walltime, dataformats)

    def add_text(self, tag: str, text_string: str, global_step: int | None = None, walltime: float | None = None):
        """Text (Markdown) under ``<tag>/text_summary``."""
        summary = _summary.text(_check_tag(tag), text_string)
        self._get_file_writer().add_summary(summary, _check_step(global_step), walltime)

    def add_graph(
        self, model: Any, input_to_model: Any = None, verbose: bool = False, use_strict_trace: bool = True
    ) -> None:
        """The graph of ``model`` for TensorBoard's Graphs tab.

        ``model`` is a module (traced forward on ``input_to_model``, a tensor or tuple of tensors),
        an ``nn.Graph`` or ``flow.compile``d function (its compiled step for ``input_to_model``,
        or the last one it ran) or a ``flow.graph.GraphIR``. ``verbose`` prints the IR;
        ``use_strict_trace`` is accepted for torch's signature (flow's tracer is always strict).
        """
        from tensorboard.compat.proto.event_pb2 import Event

        from flow.utils.tensorboard._graph import graph_ir_of, ir_to_graph_def

        ir = graph_ir_of(model, input_to_model)
        if verbose:
            print(ir)
        graph = ir_to_graph_def(ir)
        self._get_file_writer().add_event(Event(graph_def=graph.SerializeToString()))

    def add_hparams(
        self,
        hparam_dict: dict,
        metric_dict: dict,
        hparam_domain_discrete: dict | None = None,
        run_name: str | None = None,
        global_step: int | None = None,
    ) -> None:
        """One trial for the HParams tab: its hyper-parameters and final metrics, written (as torch
        does) into the sub-run ``<log_dir>/<run_name>`` (default: the time), with each metric as a scalar."""
        exp, start, end = _summary.hparams(hparam_dict, metric_dict, hparam_domain_discrete)
        metrics = {_check_tag(k, "metric name"): _summary.scalar(k, v) for k, v in metric_dict.items()}
        step = _check_step(global_step)
        run = os.path.join(self._get_file_writer().log_dir, run_name or str(time.time()))
        fw = _FileWriter(run, self.max_queue, self.flush_secs, self.filename_suffix)
        try:
            for summary in (exp, start, end, *metrics.values()):
                fw.add_summary(summary, step)
        finally:
            fw.close()

    # -- files -----------------------------------------------------------------------------------
    def flush(self) -> None:
        """Write every pending event to disk."""
        for fw in (self.all_writers or {}).values():
            fw.flush()

    def close(self) -> None:
        """Flush and close the event files (a later ``add_*`` opens a new one)."""
        for fw in (self.all_writers or {}).values():
            fw.flush()
            fw.close()
        self.file_writer = self.all_writers = None

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
