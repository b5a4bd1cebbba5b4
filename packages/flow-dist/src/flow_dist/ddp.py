"""``flow.nn.parallel.DistributedDataParallel``: replicas of a module on every process, with
their gradients averaged during backward.

At construction every parameter and buffer is broadcast from rank 0, so all replicas start
equal. Parameters are grouped into buckets of about ``bucket_size_mb`` (in reverse order, as
backward produces their gradients); when the last gradient of a bucket has been accumulated (a
post-accumulate-grad hook), the bucket's gradients are flattened and an asynchronous all-reduce
starts, while backward goes on with the earlier layers. When the backward pass ends
(:func:`flow.autograd.queue_callback`) the all-reduces are waited for and each ``.grad`` gets the
average over the replicas. Buckets start in the same order on every rank, since every rank runs
the same backward.

- ``no_sync()``: gradients only accumulate locally; the next backward outside it averages the
  accumulated ones.
- A parameter without a gradient in a pass (unused by this forward) counts as a zero gradient:
  its bucket is reduced at the end of the pass, so the other ranks never wait for it; if no rank
  produced a gradient it stays ``None``.
- ``broadcast_buffers``: buffers (running statistics) are broadcast from rank 0 before each
  forward.
- In a compiled graph (``nn.Graph`` / ``flow.compile`` tracing a step through the wrapper) the
  average of each gradient and the buffers' broadcast are recorded as ``sbp_boxing`` nodes of the
  graph, whose ``gradient_buckets`` pass fuses the gradients' all-reduces into buckets.
- torch's keywords work: ``output_device``, ``process_group`` (the whole job: ``group.WORLD`` of
  ``flow.distributed``), ``bucket_cap_mb`` (``bucket_size_mb``), and the reducer's tuning options
  (``dim``, ``gradient_as_bucket_view``, ``static_graph``, ...), which change no result here.
- ``state_dict`` keys carry the ``module.`` prefix, as in PyTorch; ``.module`` is the wrapped
  module.
"""

from __future__ import annotations

import contextlib

import numpy as np

import flow
from flow import nn
from flow.graph.symbolic import SymbolicArray
from flow_dist import boxing
from flow_dist.comm.backend import get_backend
from flow_dist.comm.errors import CommError
from flow_dist.global_array import GlobalArray
from flow_dist.sbp import broadcast, partial_sum

__all__ = ["DistributedDataParallel"]


def _boxed(piece, world: int, *layouts):
    """``piece`` as the local piece of a tensor over all ranks laid out as ``layouts[0]``, converted
    through the other layouts: the conversions a traced DDP step records (sbp_boxing nodes)."""
    from flow_dist.placement import Placement

    g = GlobalArray(piece, Placement("cpu", list(range(world))), layouts[0], tuple(piece.shape))
    for nd in layouts[1:]:
        g = boxing.box(g, nd)
    return g.local


# torch.nn.parallel.DistributedDataParallel's options that only tune its reducer
_TORCH_TUNING = {"dim", "check_reduction", "gradient_as_bucket_view", "static_graph", "init_sync"}


class _Bucket:
    __slots__ = ("params", "sizes", "dtype", "ready", "work", "flat", "total")

    def __init__(self, params: list) -> None:
        self.params = params
        self.sizes = [int(p._data.size) for p in params]
        self.dtype = params[0]._data.dtype
        self.ready = 0
        self.work = None
        n = sum(self.sizes)  # kept from step to step: no fresh pages to fault in every step
        self.flat = np.empty(n, self.dtype)
        self.total = np.empty(n, self.dtype)


class DistributedDataParallel(nn.Module):
    def __init__(
        self,
        module: nn.Module,
        device_ids=None,
        bucket_size_mb: float = 25.0,
        broadcast_buffers: bool = True,
        find_unused_parameters: bool = False,
        *,
        output_device=None,
        process_group=None,
        bucket_cap_mb: float | None = None,
        **torch_options,
    ) -> None:
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError(f"DistributedDataParallel: expected an nn.Module, got {type(module).__name__}")
        # torch's keywords: bucket_cap_mb is bucket_size_mb; the others (dim, static_graph,
        # gradient_as_bucket_view, ...) tune torch's reducer and change no result here
        unknown = sorted(set(torch_options) - _TORCH_TUNING)
        if unknown:
            raise TypeError(f"DistributedDataParallel: unexpected keyword argument(s) {unknown}")
        if bucket_cap_mb is not None:
            bucket_size_mb = bucket_cap_mb
        ranks = getattr(process_group, "ranks", None)
        if ranks is not None and tuple(ranks) != tuple(range(get_backend("cpu").size)):
            raise CommError(
                f"DistributedDataParallel: process_group {list(ranks)} is not the whole job; replicas on a "
                "subgroup are not supported"
            )
        if bucket_size_mb <= 0:
            raise ValueError(f"DistributedDataParallel: bucket_size_mb must be positive, got {bucket_size_mb}")
        self.module = module
        self.broadcast_buffers = broadcast_buffers
        self.bucket_size_mb = bucket_size_mb
        seen, params = set(), []
        for name, p in module.named_parameters():
            if p._data.__class__ is not np.ndarray:
                raise CommError(
                    f"DistributedDataParallel: parameter '{name}' is not a local CPU tensor (a global module "
                    "needs no DDP: its gradients are reduced by its SBP)"
                )
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                params.append(p)
        self._comm = get_backend("cpu")
        self._world = self._comm.size
        with flow.no_grad():
            for t in params + [b for b in module.buffers()]:
                t._data[...] = self._comm.broadcast(t._data, src=0)
        self._buckets = self._make_buckets(params, bucket_size_mb * 2**20)
        self._bucket_of = {id(p): b for b in self._buckets for p in b.params}
        self._sync = True
        self._in_pass = False
        self._handles = [p.register_post_accumulate_grad_hook(self._on_grad) for p in params]

    @staticmethod
    def _make_buckets(params: list, limit: float) -> list:
        buckets, cur, size = [], [], 0
        for p in reversed(params):  # backward gives the last layers' gradients first
            nbytes = p._data.nbytes
            if cur and (size + nbytes > limit or p._data.dtype != cur[0]._data.dtype):
                buckets.append(_Bucket(cur))
                cur, size = [], 0
            cur.append(p)
            size += nbytes
        if cur:
            buckets.append(_Bucket(cur))
        return buckets

    # -- forward ------------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        if self.broadcast_buffers and self._world > 1:
            with flow.no_grad():
                for b in self.module.buffers():
                    if b._data.__class__ is SymbolicArray:  # traced: rank 0's value, as boxing ops
                        b._data[...] = _boxed(b._data, self._world, (broadcast,), (partial_sum,), (broadcast,))
                    else:
                        b._data[...] = self._comm.broadcast(b._data, src=0)
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Accumulate gradients locally; the first backward after the block averages them."""
        old = self._sync
        self._sync = False
        try:
            yield
        finally:
            self._sync = old

    # -- backward -----------------------------------------------------------------------------
    def _on_grad(self, p) -> None:
        if not self._sync or self._world == 1:
            return
        g = p.grad
        if g is not None and g._data.__class__ is SymbolicArray:
            # traced by a graph: the average is an all-reduce node of the graph (the graph's
            # gradient_buckets pass fuses them into buckets that overlap backward)
            with flow.no_grad():
                scaled = g * (1.0 / self._world)
                avg = _boxed(scaled._data, self._world, (partial_sum,), (broadcast,))
                p.grad = flow.array_kinds.wrap(avg, g.device, dtype=g.dtype)
            return
        if p._data.__class__ is not np.ndarray:
            raise CommError(
                "DistributedDataParallel: a parameter became a global tensor after the module was wrapped "
                "(Module.to_global); a global module needs no DDP, so use it without the wrapper"
            )
        if not self._in_pass:
            self._in_pass = True
            flow.autograd.queue_callback(self._finish)
        b = self._bucket_of[id(p)]
        b.ready += 1
        if b.ready == len(b.params):
            self._launch(b)
        for other in self._buckets:  # MPI moves data only when polled: nudge those in flight
            if other.work is not None:
                other.work.is_completed()

    def _launch(self, b: _Bucket) -> None:
        offset = 0
        for p, n in zip(b.params, b.sizes):
            g = p.grad
            if g is None:
                b.flat[offset : offset + n] = 0
            else:
                b.flat[offset : offset + n] = g._data.reshape(-1)
            offset += n
        b.work = self._comm.all_reduce(b.flat, op="sum", async_op=True, out=b.total)

    def _finish(self) -> None:
        self._in_pass = False
        for b in self._buckets:  # buckets a parameter without a gradient held back
            if b.work is None:
                self._launch(b)
        scale = 1.0 / self._world
        for b in self._buckets:
            total = b.work.wait()
            offset = 0
            for p, n in zip(b.params, b.sizes):
                piece = total[offset : offset + n]
                offset += n
                g = p.grad
                if g is not None and g._data.flags.c_contiguous and g._data.flags.writeable:
                    np.multiply(piece, scale, out=g._data.reshape(-1))  # the average, in one pass
                elif g is not None:
                    g._data[...] = (piece * scale).reshape(p._data.shape)
                elif piece.any():  # unused here, used elsewhere
                    p.grad = flow.from_numpy((piece * scale).reshape(p._data.shape))
            b.ready = 0
            b.work = None
