"""Pipeline schedules: the order in which a stage runs its micro-batches forward and backward.

``ScheduleGPipe`` runs every micro-batch forward, then every one backward (Huang et al., 2019);
``Schedule1F1B`` runs ``num_stages - 1 - stage_index`` forwards first, then alternates one
forward and one backward, then the remaining backwards (PipeDream-Flush, Narayanan et al.,
2021): the same bubble, but a stage holds at most ``num_stages - stage_index`` micro-batches'
activations instead of all of them. Both as ``torch.distributed.pipelining``:
``schedule.step(*inputs, target=None, losses=None)``.

The batch is split along dim 0 into ``n_microbatches`` equal micro-batches; each micro-batch's
loss is scaled by ``1 / n_microbatches`` before its backward, so the accumulated gradients are
those of the mean loss over the whole batch (for a loss that is a mean over equal micro-batches)
and the optimizer step after ``step()`` is the one a single process takes on the whole batch.
Sends are asynchronous and receives block, so neither schedule can deadlock; the time a stage
spends blocked in receives is its bubble (``schedule.timing``).
"""

from __future__ import annotations

import time
from typing import Callable

import flow
from flow_dist.pipeline.stage import PipelineError, PipelineStage

__all__ = ["ScheduleGPipe", "Schedule1F1B"]


def _split(t, n: int, what: str) -> list:
    if not isinstance(t, flow.Tensor):
        raise PipelineError(f"{what} must be a tensor, got {type(t).__name__}")
    if t.ndim == 0 or t.shape[0] % n:
        size = "a 0-d tensor" if t.ndim == 0 else f"a batch of {t.shape[0]}"
        raise PipelineError(f"{what}: {size} does not split along dim 0 into {n} equal micro-batches")
    return list(t.chunk(n, dim=0))


class _Schedule:
    """What both schedules share: checking the call, splitting the batch, the loss, the timing."""

    def __init__(self, stage: PipelineStage, n_microbatches: int, loss_fn: Callable | None = None) -> None:
        if not isinstance(stage, PipelineStage):
            raise PipelineError(f"{type(self).__name__}: stage must be a PipelineStage, got {type(stage).__name__}")
        if not isinstance(n_microbatches, int) or n_microbatches < 1:
            raise PipelineError(f"{type(self).__name__}: n_microbatches must be a positive int, got {n_microbatches!r}")
        if stage.is_last and loss_fn is None:
            raise PipelineError(f"{type(self).__name__}: the last stage needs a loss_fn(output, target)")
        self.stage, self.n_microbatches, self.loss_fn = stage, n_microbatches, loss_fn
        self.timing: dict = {}

    def step(self, *inputs, target=None, losses: list | None = None) -> flow.Tensor | tuple | None:
        """One pass of the whole batch through the pipeline, gradients accumulated into ``.grad``
        (tied and data-parallel gradients synchronised). ``inputs`` on the first stage, ``target``
        on the last; ``losses`` (a list, last stage) gets each micro-batch's loss. Returns the
        outputs of the whole batch on the last stage (micro-batches concatenated), None elsewhere."""
        st, m = self.stage, self.n_microbatches
        name = type(self).__name__
        if st.is_first and not inputs:
            raise PipelineError(f"{name}.step: the first stage needs the batch's inputs")
        if not st.is_first and inputs:
            raise PipelineError(f"{name}.step: stage {st.stage_index} receives its inputs; pass them on stage 0 only")
        if st.is_last and target is None:
            raise PipelineError(f"{name}.step: the last stage (stage {st.stage_index}) needs target=")
        if not st.is_last and target is not None:
            raise PipelineError(f"{name}.step: target= goes to the last stage, not stage {st.stage_index}")
        if losses is not None and not isinstance(losses, list):
            raise PipelineError(f"{name}.step: losses must be a list, got {type(losses).__name__}")
        chunks = [_split(x, m, f"{name}.step: input {i}") for i, x in enumerate(inputs)]
        self._mb_inputs = [tuple(c[k] for c in chunks) for k in range(m)]
        self._mb_targets = _split(target, m, f"{name}.step: target") if target is not None else None
        self._outputs: list = [None] * m
        self._losses: list = [None] * m
        self._scaled: dict = {}  # micro-batch -> its loss / n_microbatches, until its backward

        st.begin_step(m)
        t0 = time.perf_counter()
        self._run()
        st.wait_sends()
        t1 = time.perf_counter()
        st.sync_grads()
        t2 = time.perf_counter()
        self.timing = {
            "schedule_s": t1 - t0,
            "recv_wait_s": st.recv_wait_s,
            "send_wait_s": st.send_wait_s,
            "sync_s": t2 - t1,
            "bubble": (st.recv_wait_s + st.send_wait_s) / (t1 - t0) if t1 > t0 else 0.0,
        }
        if not st.is_last:
            return None
        if losses is not None:
            losses.extend(self._losses)
        outs = self._outputs
        if len(outs[0]) == 1:
            return flow.cat([o[0] for o in outs], dim=0)
        return tuple(flow.cat([o[i] for o in outs], dim=0) for i in range(len(outs[0])))

    def _forward(self, k: int) -> None:
        st = self.stage
        outs = st.forward_one(k, self._mb_inputs[k] if st.is_first else ())
        if st.is_last:
            out = outs[0] if len(outs) == 1 else outs
            loss = self.loss_fn(out, self._mb_targets[k])
            self._losses[k] = loss.detach()
            self._scaled[k] = loss / self.n_microbatches
            self._outputs[k] = tuple(o.detach() for o in outs)

    def _backward(self, k: int) -> None:
        loss = self._scaled.pop(k) if self.stage.is_last else None
        self.stage.backward_one(k, loss)

    def _run(self) -> None:
        raise NotImplementedError


class ScheduleGPipe(_Schedule):
    """All forwards, then all backwards (see the module docs)."""

    def _run(self) -> None:
        for k in range(self.n_microbatches):
            self._forward(k)
        for k in range(self.n_microbatches):
            self._backward(k)


class Schedule1F1B(_Schedule):
    """Warm-up forwards, then one forward and one backward at a time, then the last backwards."""

    def _run(self) -> None:
        st, m = self.stage, self.n_microbatches
        warmup = min(st.num_stages - 1 - st.stage_index, m)
        for k in range(warmup):
            self._forward(k)
        for k in range(warmup, m):
            self._forward(k)
            self._backward(k - warmup)
        for k in range(m - warmup, m):
            self._backward(k)
