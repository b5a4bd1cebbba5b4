"""Pipeline parallelism in graph mode: an ``nn.Graph`` whose block has a pipeline stage.

>>> class TrainGraph(flow.nn.Graph):
...     def __init__(self, stage_module, opt, s, placement):
...         super().__init__()
...         self.stage = stage_module                   # this rank's stage (gpt_stages)
...         self.stage.to(flow.nn.graph.GraphModule).set_stage(s, placement)
...         self.add_optimizer(opt)
...         self.config.set_gradient_accumulation_steps(4)   # 4 micro-batches
...     def build(self, x, y):
...         loss = lm_loss(self.stage(x), y)
...         loss.backward()
...         return loss

With flow-dist loaded and more than one rank, ``nn.Graph`` hands such a call to
:func:`run_pipeline_graph`. This rank's part of ``build`` becomes one module: on the first stage,
``build`` up to the staged block's call, whose output is sent on; on a later stage, the block
called on the activations received from the stage before (its arguments in ``build`` are not
used), then, on the last stage, the rest of ``build`` up to ``loss.backward()``, whose loss is the
output. :class:`flow.graph.split_step.SplitStep` compiles that module as a forward and a backward
graph; a 1F1B schedule (:class:`~flow_dist.pipeline.Schedule1F1B`'s order) runs them micro-batch by
micro-batch with the point-to-point sends of :class:`~flow_dist.pipeline.PipelineStage`, the
backward of the last stage seeded with ``1 / n_microbatches``.

What runs compiled: each stage's forward and backward of a micro-batch (and the loss on the last
stage). What runs eagerly: the sends and receives between them, the gradient sums of tied
parameters and the data-parallel averages (:meth:`PipelineStage.sync_grads`), and the optimizer
step, once per call after the schedule (``optimizer.step()`` on the accumulated gradients).

The layout is :func:`pipeline_mesh`'s: the staged block's placement holds this rank and its
data-parallel replicas (ranks ``s, s + S, ...`` for stage ``s`` of ``S = world / len(ranks)``).
One top-level block per rank carries a stage; the call returns the mean loss of the micro-batches
on the last stage and None on the others.
"""

from __future__ import annotations

import weakref

import numpy as np

import flow
from flow import nn
from flow_dist import env
from flow_dist.pipeline.schedule import Schedule1F1B, _split
from flow_dist.pipeline.stage import _ACT_TAG, _GRAD_TAG, PipelineError, PipelineStage, _as_tuple, _np_dtype

__all__ = ["run_pipeline_graph", "GraphPipelineStage", "graph_stage"]

# each pipelined graph's stage on this rank, built on its first call
_STAGES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _StageDone(Exception):
    """Ends ``build`` after the staged block on a stage that is not the last (carries its output)."""

    def __init__(self, out) -> None:
        super().__init__("stage done")
        self.out = out


class _StageCall:
    """Stands in for the staged block while ``build`` is traced: runs the stage module on this
    rank's inputs (the received activations on a later stage) and stops ``build`` after it on a
    stage that is not the last."""

    def __init__(self, module: nn.Module, acts: tuple | None, last: bool) -> None:
        self.module, self.acts, self.last = module, acts, last
        self.called = False

    def __call__(self, *args, **kwargs):
        if self.called:
            raise PipelineError("pipeline graph: build calls the staged block more than once")
        self.called = True
        out = self.module(*args, **kwargs) if self.acts is None else self.module(*self.acts)
        if not self.last:
            raise _StageDone(out)
        return out

    def __getattr__(self, name: str):
        return getattr(self.module, name)


class _StageProgram(nn.Module):
    """This rank's part of the graph's ``build`` as a module (see the module docs): its inputs are
    the received activations (not on the first stage) followed by the micro-batch's inputs."""

    def __init__(self, graph, block_name: str, first: bool, last: bool, n_acts: int) -> None:
        super().__init__()
        self.stage = dict(graph.named_blocks())[block_name].module
        d = self.__dict__
        d["_graph"], d["_block_name"], d["_first"], d["_last"], d["_n_acts"] = graph, block_name, first, last, n_acts

    def forward(self, *flat):
        acts = None if self._first else tuple(flat[: self._n_acts])
        args = flat[0 if self._first else self._n_acts :]
        call = _StageCall(self.stage, acts, self._last)
        # loss.backward() in build records the loss instead of running: the compiled backward
        # starts from it with the schedule's seed
        with self._graph.substitute_block(self._block_name, call), flow.autograd.capture_backward() as calls:
            try:
                self._graph.build(*args)
            except _StageDone as done:
                return done.out
        if not call.called:
            raise PipelineError(f"pipeline graph: build never calls the staged block '{self._block_name}'")
        if len(calls) != 1 or any(g is not None for g in calls[0].grad_tensors) or calls[0].inputs is not None:
            raise PipelineError(
                "pipeline graph: build must call backward() once, on a scalar loss, without gradient= or inputs="
            )
        tensors = calls[0].tensors
        root = tensors[0] if len(tensors) == 1 else None
        if root is None or root.ndim != 0:
            raise PipelineError("pipeline graph: on the last stage build must call loss.backward() on a scalar loss")
        return root


class GraphPipelineStage(PipelineStage):
    """A :class:`PipelineStage` whose micro-batches run through a compiled
    :class:`flow.graph.split_step.SplitStep` (forward, then backward from the gradients the next
    stage sends) instead of eager autograd."""

    def __init__(self, program: _StageProgram, split, *args, **kwargs) -> None:
        super().__init__(program.stage, *args, **kwargs)
        self.program, self.split = program, split
        self.mb_inputs: list = []
        self.losses: list = []

    def forward_one(self, mb: int, inputs: tuple = ()) -> tuple:
        acts: tuple = ()
        if not self.is_first:  # the meta message of this call was received before the schedule
            got = []
            for dtype, shape, floating in self._meta_in:
                t = flow.from_numpy(self._recv(shape, dtype, self.prev_rank, _ACT_TAG))
                got.append(t.requires_grad_(True) if floating else t)
            acts = tuple(got)
        out, saved = self.split.forward(*acts, *self.mb_inputs[mb])
        outs = _as_tuple(out, f"the output of stage {self.stage_index}")
        if self.is_last:
            self.losses.append(outs[0])
        else:
            arrays = [o.numpy() for o in outs]
            if mb == 0:
                self._send_meta(arrays)
            for a in arrays:
                self._send(a, self.next_rank, _ACT_TAG)
        self._held[mb] = (acts, outs, saved)
        self.max_in_flight = max(self.max_in_flight, len(self._held))
        return outs

    def backward_one(self, mb: int, loss=None) -> None:
        acts, outs, saved = self._held.pop(mb)
        step = saved.step
        if self.is_last:
            seeds = [flow.tensor(1.0 / self.n_microbatches, dtype=outs[0].dtype)]
        else:
            got = {}
            for j, o in enumerate(outs):
                if flow.is_floating_point(o):  # the next stage sends one gradient per floating output
                    got[j] = flow.from_numpy(self._recv(tuple(o.shape), _np_dtype(o), self.next_rank, _GRAD_TAG))
            seeds = [got.get(j) for j in step.diff_outputs]
        in_grads = self.split.backward(saved, seeds)
        if not self.is_first:
            for t, g in zip(acts, in_grads):
                if flow.is_floating_point(t):
                    a = g.numpy() if g is not None else np.zeros(tuple(t.shape), _np_dtype(t))
                    self._send(a, self.prev_rank, _GRAD_TAG)


class _GraphSchedule(Schedule1F1B):
    """1F1B's order over a :class:`GraphPipelineStage` (the loss is part of the last stage's graph)."""

    def _forward(self, k: int) -> None:
        self.stage.forward_one(k)

    def _backward(self, k: int) -> None:
        self.stage.backward_one(k)


def _staged_block(graph):
    staged = [(name, b) for name, b in graph.named_blocks() if b.config.stage_id is not None]
    rank = env.get_rank()
    mine = []
    for name, b in staged:
        p = b.config.placement
        if p is None:
            raise PipelineError(
                f"pipeline graph: block '{name}' has stage {b.config.stage_id} but no placement; "
                "use block.to(flow.nn.graph.GraphModule).set_stage(stage_id, placement)"
            )
        if rank in [int(r) for r in np.asarray(p.ranks).ravel()]:
            mine.append((name, b))
    if len(mine) != 1 or len(staged) != 1:
        raise PipelineError(
            f"pipeline graph: rank {rank} needs exactly one top-level block with a stage, the one whose "
            f"placement holds it; the graph has {[n for n, _ in staged]} with stages, "
            f"{[n for n, _ in mine]} on this rank"
        )
    return mine[0]


def _prepare(graph):
    from flow.graph.split_step import SplitStep

    name, block = _staged_block(graph)
    dp_ranks = tuple(int(r) for r in np.asarray(block.config.placement.ranks).ravel())
    world = env.get_world_size()
    num_stages = world // len(dp_ranks)
    s = block.config.stage_id
    expect = tuple(d * num_stages + s for d in range(len(dp_ranks)))
    if num_stages * len(dp_ranks) != world or dp_ranks != expect or s >= num_stages:
        raise PipelineError(
            f"pipeline graph: stage {s} is placed on ranks {list(dp_ranks)}; with {world} ranks in "
            f"{len(dp_ranks)} replica(s) stage {s} runs on ranks {list(expect)} (rank r runs stage r % {num_stages})"
        )
    replica = env.get_rank() // num_stages
    group = tuple(replica * num_stages + k for k in range(num_stages))
    first, last = s == 0, s == num_stages - 1
    program = _StageProgram(graph, name, first, last, 0)
    split = SplitStep(program, graph.config, f"{graph.name}[stage {s}]")
    st = GraphPipelineStage(program, split, s, num_stages, group_ranks=group, dp_ranks=dp_ranks)
    return st


def graph_stage(graph) -> GraphPipelineStage | None:
    """This rank's stage of a pipelined ``nn.Graph`` (its schedule state, compile count and peak of
    micro-batches in flight), or None before the graph's first pipelined call."""
    return _STAGES.get(graph)


def run_pipeline_graph(graph, args: tuple, kwargs: dict):
    """``nn.Graph.__call__`` of a graph with a staged block under more than one rank: one training
    step as a pipeline (see the module docs); NotImplemented on one rank (the graph then runs its
    usual compiled step, stages ignored)."""
    if env.get_world_size() == 1:
        return NotImplemented
    if kwargs:
        raise PipelineError("pipeline graph: pass the inputs of build positionally")
    if not graph.optimizers():
        raise PipelineError("pipeline graph: a pipelined graph trains; add an optimizer")
    if graph.get_grad_scaler() is not None:
        raise PipelineError("pipeline graph: loss scaling (set_grad_scaler) is not supported with pipeline stages")
    st = _STAGES.get(graph)
    if st is None:
        st = _STAGES[graph] = _prepare(graph)
    n = graph.config.gradient_accumulation_steps
    chunks = [_split(a, n, f"pipeline graph '{graph.name}': input {i}") for i, a in enumerate(args)]
    st.mb_inputs = [tuple(c[k] for c in chunks) for k in range(n)]
    st.losses = []
    params = list(st.module.parameters())
    for p in params:
        p.grad = None  # each call's gradients are its own, as in the compiled step
    sched = _GraphSchedule(st, n, loss_fn=_no_loss)
    st.begin_step(n)
    if not st.is_first:
        # what the activations look like comes ahead of them: the program's inputs start with them
        st._recv_meta()
        st.program.__dict__["_n_acts"] = len(st._meta_in)
    sched._run()
    st.wait_sends()
    st.sync_grads()
    for opt in graph.optimizers():
        opt.step()
    for p in params:
        p.grad = None
    if not st.is_last:
        return None
    return flow.stack(st.losses).mean()


def _no_loss(out, target):
    return out
