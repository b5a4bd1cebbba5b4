"""One stage of a pipeline: this rank's part of the model, and the point-to-point traffic with
its neighbours (activations forward, their gradients backward).

Each rank holds only its stage's module, with plain local tensors; a stage talks to the stage
before and after it through the communication backend's ``send`` / ``recv`` of NumPy buffers.
What an activation looks like (how many tensors, their dtypes and shapes) is sent ahead of the
first micro-batch of every step, so no stage needs shape arguments; the gradients coming back
have the shapes of what was sent. After the micro-batches, :meth:`PipelineStage.sync_grads`
sums the gradients of tied parameters between the stages holding a copy (Megatron's embedding
group: GPT's token embedding on the first stage, its tied LM head on the last) and averages
every gradient over the data-parallel replicas of the stage.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

import flow
from flow import nn
from flow.errors import FlowError
from flow_dist import env
from flow_dist.comm.backend import get_backend

__all__ = ["PipelineError", "PipelineStage", "PipelineMesh", "pipeline_mesh"]

# tags of the stage-to-stage messages (the MPI backend uses 2 * tag and 2 * tag + 1 on the wire),
# apart from the small tags that flow.distributed's send/recv use by default
_META_LEN_TAG, _META_TAG, _ACT_TAG, _GRAD_TAG = 3001, 3002, 3003, 3004
_DTYPES = ("float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")


class PipelineError(FlowError, ValueError):
    """A pipeline built or stepped in a way it cannot be (a wrong stage index, a batch that does not
    split into the micro-batches, inputs or targets on the wrong stage)."""


@dataclass(frozen=True)
class PipelineMesh:
    """Where this rank sits in ``dp`` replicas of a ``num_stages``-stage pipeline."""

    stage_index: int
    num_stages: int
    group_ranks: tuple  # the global ranks of this rank's pipeline, stage by stage
    dp_ranks: tuple  # the global ranks holding this stage, replica by replica


def pipeline_mesh(num_stages: int, dp: int | None = None) -> PipelineMesh:
    """This rank's place in a job of ``dp`` pipelines of ``num_stages`` stages (``dp`` defaults to the
    world size over ``num_stages``): rank ``r`` runs stage ``r % num_stages`` of replica
    ``r // num_stages``, so a pipeline's stages are consecutive ranks."""
    world, rank = env.get_world_size(), env.get_rank()
    if not isinstance(num_stages, int) or num_stages < 1:
        raise PipelineError(f"pipeline_mesh: num_stages must be a positive int, got {num_stages!r}")
    if dp is None:
        dp = world // num_stages
    if dp < 1 or dp * num_stages != world:
        raise PipelineError(
            f"pipeline_mesh: {dp} replica(s) x {num_stages} stage(s) is {dp * num_stages} ranks, "
            f"but the job has {world}"
        )
    stage, replica = rank % num_stages, rank // num_stages
    return PipelineMesh(
        stage,
        num_stages,
        tuple(replica * num_stages + s for s in range(num_stages)),
        tuple(d * num_stages + stage for d in range(dp)),
    )


def _np_dtype(t) -> str:
    return str(np.dtype(str(t.dtype).removeprefix("flow.")))


def _as_tuple(out, what: str) -> tuple:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    for o in outs:
        if not isinstance(o, flow.Tensor):
            raise PipelineError(f"{what} must be a tensor or a tuple of tensors, got {type(o).__name__}")
        if getattr(o, "is_global", False):
            raise PipelineError(f"{what} is a global tensor: pipeline stages exchange local tensors")
    return tuple(outs)


class PipelineStage:
    """Stage ``stage_index`` of ``num_stages``: ``module`` on this rank, as
    ``torch.distributed.pipelining.PipelineStage``.

    ``group_ranks`` are the global ranks of the pipeline's stages in order (default: ranks
    ``0 .. num_stages - 1``); this rank must be ``group_ranks[stage_index]``. The module of a
    middle or last stage is called with what the stage before returned (a tensor, or a tuple of
    tensors as positional arguments). ``tied_parameters`` (default: the module's own
    ``tied_parameters`` attribute, as :func:`gpt_stages` sets it) lists, in the same order on
    each stage of ``tied_stages`` (default: the first and the last), parameters that are one
    parameter of the whole model: they start from the first of those stages' values and their
    gradients are summed between them. ``dp_ranks``: the global ranks holding this stage in
    each data-parallel replica (this rank among them); their gradients are averaged.
    """

    def __init__(
        self,
        module: nn.Module,
        stage_index: int,
        num_stages: int,
        *,
        group_ranks: Sequence[int] | None = None,
        tied_parameters: Sequence[nn.Parameter] | None = None,
        tied_stages: Sequence[int] | None = None,
        dp_ranks: Sequence[int] | None = None,
    ) -> None:
        if not isinstance(module, nn.Module):
            raise PipelineError(f"PipelineStage: module must be an nn.Module, got {type(module).__name__}")
        if not isinstance(num_stages, int) or num_stages < 1:
            raise PipelineError(f"PipelineStage: num_stages must be a positive int, got {num_stages!r}")
        if not isinstance(stage_index, int) or not 0 <= stage_index < num_stages:
            raise PipelineError(f"PipelineStage: stage_index {stage_index!r} is not in 0..{num_stages - 1}")
        world, rank = env.get_world_size(), env.get_rank()
        ranks = tuple(range(num_stages)) if group_ranks is None else tuple(int(r) for r in group_ranks)
        if len(ranks) != num_stages:
            raise PipelineError(f"PipelineStage: {num_stages} stages need {num_stages} group_ranks, got {list(ranks)}")
        if len(set(ranks)) != len(ranks) or any(not 0 <= r < world for r in ranks):
            raise PipelineError(
                f"PipelineStage: group_ranks {list(ranks)} must be distinct ranks of the job of {world}"
            )
        if ranks[stage_index] != rank:
            raise PipelineError(
                f"PipelineStage: stage {stage_index} runs on rank {ranks[stage_index]} of group_ranks "
                f"{list(ranks)}, but this is rank {rank}"
            )
        self.module = module
        self.stage_index, self.num_stages, self.group_ranks = stage_index, num_stages, ranks
        self.is_first, self.is_last = stage_index == 0, stage_index == num_stages - 1
        self.prev_rank = ranks[stage_index - 1] if not self.is_first else None
        self.next_rank = ranks[stage_index + 1] if not self.is_last else None
        self._p2p = get_backend("cpu", None) if num_stages > 1 else None
        self.recv_wait_s = 0.0  # time blocked in recv (the bubble), this step
        self.send_wait_s = 0.0
        self.max_in_flight = 0  # most micro-batches held for their backward at once, this step
        self.n_microbatches = 1
        self._pending: list = []  # sends in flight
        self._meta_in: list | None = None  # (dtype, shape, floating) of each received tensor
        self._held: dict = {}  # micro-batch -> (received leaves, outputs) until its backward

        self.tied_stages = (0, num_stages - 1) if tied_stages is None else tuple(int(s) for s in tied_stages)
        if tied_parameters is None:
            tied_parameters = getattr(module, "tied_parameters", None) or ()
        self.tied_parameters = list(tied_parameters)
        self._tied_comm = None
        holders = sorted(set(self.tied_stages))
        if any(not 0 <= h < num_stages for h in holders):
            raise PipelineError(
                f"PipelineStage: tied_stages {list(self.tied_stages)} are not all in 0..{num_stages - 1}"
            )
        if self.tied_parameters and stage_index not in holders:
            raise PipelineError(
                f"PipelineStage: stage {stage_index} has tied parameters but is not in tied_stages {holders}"
            )
        if len(holders) > 1 and stage_index in holders and self.tied_parameters:
            self._tied_comm = get_backend("cpu", [ranks[s] for s in holders])
        self.dp_ranks = (rank,) if dp_ranks is None else tuple(int(r) for r in dp_ranks)
        if rank not in self.dp_ranks:
            raise PipelineError(f"PipelineStage: dp_ranks {list(self.dp_ranks)} do not include this rank ({rank})")
        self._dp_comm = get_backend("cpu", self.dp_ranks) if len(self.dp_ranks) > 1 else None
        self._sync_initial_parameters()

    # -- set-up -------------------------------------------------------------------------------
    def _sync_initial_parameters(self) -> None:
        """Replicas of the stage start from replica 0's parameters, tied copies from the first holder's."""
        if self._dp_comm is not None:
            for p in self.module.parameters():
                self._assign(p, self._dp_comm.broadcast(p.detach().numpy(), src=0))
        if self._tied_comm is not None:
            for p in self.tied_parameters:
                self._assign(p, self._tied_comm.broadcast(p.detach().numpy(), src=0))

    @staticmethod
    def _assign(p, value: np.ndarray) -> None:
        with flow.no_grad():
            p.copy_(flow.from_numpy(np.ascontiguousarray(value).reshape(tuple(p.shape))))

    # -- point to point -----------------------------------------------------------------------
    def _send(self, a: np.ndarray, dst: int, tag: int) -> None:
        self._pending.append(self._p2p.send(np.ascontiguousarray(a), dst, tag=tag, async_op=True))

    def _recv(self, shape: tuple, dtype: str, src: int, tag: int) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        t0 = time.perf_counter()
        self._p2p.recv(out, src, tag=tag)
        self.recv_wait_s += time.perf_counter() - t0
        return out

    def wait_sends(self) -> None:
        """Wait for every send in flight (a step ends with none)."""
        t0 = time.perf_counter()
        for w in self._pending:
            w.wait()
        self._pending.clear()
        self.send_wait_s += time.perf_counter() - t0

    def begin_step(self, n_microbatches: int) -> None:
        """Start a step of ``n_microbatches`` (the schedule calls it): the timing starts from zero."""
        self.n_microbatches = n_microbatches
        self.recv_wait_s = self.send_wait_s = 0.0
        self.max_in_flight = 0

    def _send_meta(self, arrays: list) -> None:
        # the micro-batch count travels too, so stages stepped with different counts fail clearly
        meta = [self.n_microbatches, len(arrays)]
        for a in arrays:
            if str(a.dtype) not in _DTYPES:
                raise PipelineError(f"stage {self.stage_index}: cannot send a {a.dtype} activation ({_DTYPES})")
            meta += [_DTYPES.index(str(a.dtype)), a.ndim, *a.shape]
        meta = np.array(meta, dtype=np.int64)
        self._send(np.array([meta.size], dtype=np.int64), self.next_rank, _META_LEN_TAG)
        self._send(meta, self.next_rank, _META_TAG)

    def _recv_meta(self) -> None:
        (size,) = self._recv((1,), "int64", self.prev_rank, _META_LEN_TAG)
        meta = [int(v) for v in self._recv((int(size),), "int64", self.prev_rank, _META_TAG)]
        if meta[0] != self.n_microbatches:
            raise PipelineError(
                f"stage {self.stage_index} runs {self.n_microbatches} micro-batches, but stage "
                f"{self.stage_index - 1} (rank {self.prev_rank}) runs {meta[0]}: "
                "every stage needs the same n_microbatches"
            )
        out, i = [], 2
        for _ in range(meta[1]):
            dtype, ndim = _DTYPES[meta[i]], meta[i + 1]
            out.append((dtype, tuple(meta[i + 2 : i + 2 + ndim]), np.dtype(dtype).kind == "f"))
            i += 2 + ndim
        self._meta_in = out

    # -- one micro-batch ----------------------------------------------------------------------
    def forward_one(self, mb: int, inputs: tuple = ()) -> tuple:
        """Run micro-batch ``mb`` forward (``inputs`` on the first stage; the others receive theirs)
        and send the outputs on; returns the outputs."""
        if self.is_first:
            args = inputs
            leaves: tuple = ()
        else:
            if mb == 0:
                self._recv_meta()
            args = []
            for dtype, shape, floating in self._meta_in:
                t = flow.from_numpy(self._recv(shape, dtype, self.prev_rank, _ACT_TAG))
                if floating:
                    t.requires_grad_(True)
                args.append(t)
            args = leaves = tuple(args)
        outs = _as_tuple(self.module(*args), f"the output of stage {self.stage_index}")
        if not self.is_last:
            arrays = [o.detach().numpy() for o in outs]
            if mb == 0:
                self._send_meta(arrays)
            for a in arrays:
                self._send(a, self.next_rank, _ACT_TAG)
        self._held[mb] = (leaves, outs)
        self.max_in_flight = max(self.max_in_flight, len(self._held))
        return outs

    def backward_one(self, mb: int, loss=None) -> None:
        """Backward of micro-batch ``mb``: from ``loss`` on the last stage, else from the gradients the
        next stage sends back; the gradients of the received activations go to the stage before."""
        leaves, outs = self._held.pop(mb)
        if self.is_last:
            if loss is not None:
                loss.backward()
        else:
            roots, grads = [], []
            for o in outs:
                if not flow.is_floating_point(o):
                    continue
                g = self._recv(tuple(o.shape), _np_dtype(o), self.next_rank, _GRAD_TAG)
                if o.requires_grad:
                    roots.append(o)
                    grads.append(flow.from_numpy(g))
            if roots:
                flow.autograd.backward(roots, grads)
        if not self.is_first:
            for t in leaves:
                if not flow.is_floating_point(t):
                    continue
                g = t.grad.detach().numpy() if t.grad is not None else np.zeros(tuple(t.shape), _np_dtype(t))
                self._send(g, self.prev_rank, _GRAD_TAG)

    # -- after the micro-batches --------------------------------------------------------------
    def sync_grads(self) -> None:
        """Sum the tied parameters' gradients between their stages, then average every gradient over
        the data-parallel replicas (what one process on the whole batch would have)."""
        if self._tied_comm is not None:
            self._all_reduce(self.tied_parameters, self._tied_comm, "sum")
        if self._dp_comm is not None:
            self._all_reduce(list(self.module.parameters()), self._dp_comm, "avg")

    @staticmethod
    def _all_reduce(params: list, comm, op: str) -> None:
        """One all-reduce per dtype over the flattened gradients (a missing gradient counts as zeros,
        so the other ranks never wait for it)."""
        by_dtype: dict = {}
        for p in params:
            by_dtype.setdefault(_np_dtype(p), []).append(p)
        for dtype, ps in by_dtype.items():
            flat = np.concatenate(
                [
                    (p.grad.detach().numpy() if p.grad is not None else np.zeros(tuple(p.shape), dtype)).ravel()
                    for p in ps
                ]
            )
            total = comm.all_reduce(flat, op=op)
            offset = 0
            for p in ps:
                n = int(np.prod(p.shape))
                p.grad = flow.from_numpy(np.ascontiguousarray(total[offset : offset + n]).reshape(tuple(p.shape)))
                offset += n
