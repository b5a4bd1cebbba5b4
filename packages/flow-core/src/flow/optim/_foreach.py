"""Multi-tensor optimizer updates: a list of parameter arrays, each updated in its own memory.

A parameter is never moved: its array is the storage that every view, ``detach()`` and
``from_numpy`` alias of it shares (as in PyTorch), so an update writes into that array. The
optimizer's states are flat (one buffer per state, the parameters' elements one after the
other), and one call updates a run of parameters:

- SGD and Adam/AdamW on float32/float64 NumPy arrays: one native multi-tensor call
  (``native.sgd_update_multi`` / ``adam_update_multi``) that walks the (param, grad) arrays and
  the flat state slices; a parameter or gradient that is not C-contiguous or not of the compute
  dtype (float16/bfloat16, a transposed parameter) goes through a scratch copy that is written back.
- any other update (NumPy fallback, Adagrad, RMSprop, LAMB, other devices): the run's parameters
  are gathered into a contiguous scratch buffer of the compute dtype, updated there by the
  optimizer's flat ``_update``, and scattered back; a run of one contiguous parameter of the
  compute dtype is updated where it is, with no copy.

The kernels of the update ops (:mod:`flow.ops.optim_kernels`), which ``Optimizer.step()`` runs in
eager and in graph mode alike, call the functions here.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

_NATIVE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


_NATIVE: list = []  # flow.backends.cpu.native, imported on first use


def _native():
    if not _NATIVE:
        from flow.backends.cpu import native

        _NATIVE.append(native)
    return _NATIVE[0]


def native_ok(xp, cdtype) -> bool:
    """Whether the native multi-tensor kernels can run for this array module and compute dtype."""
    return xp is np and _native().HAVE_NATIVE and np.dtype(cdtype) in _NATIVE_DTYPES


class Scratch:
    """Grow-only 1-d work buffers of one compute dtype, by role ("param", "grad")."""

    __slots__ = ("xp", "dtype", "bufs")

    def __init__(self, xp, dtype) -> None:
        self.xp, self.dtype, self.bufs = xp, np.dtype(dtype), {}

    def get(self, role: str, n: int):
        buf = self.bufs.get(role)
        if buf is None or buf.shape[0] < n:
            self.bufs.pop(role, None)  # free the old one before allocating the larger one
            buf = self.bufs[role] = self.xp.empty(n, dtype=self.dtype)
        return buf[:n]

    def size(self, role: str) -> int:
        buf = self.bufs.get(role)
        return 0 if buf is None else int(buf.shape[0])


_LOCAL = threading.local()


def thread_scratch(xp, dtype) -> Scratch:
    """A :class:`Scratch` of this thread (graph-mode kernels, which have no bucket to keep one)."""
    d = getattr(_LOCAL, "scratch", None)
    if d is None:
        d = _LOCAL.scratch = {}
    key = (id(xp), np.dtype(dtype).str)
    s = d.get(key)
    if s is None:
        s = d[key] = Scratch(xp, dtype)
    return s


# -- memory extents: which parameters share memory --------------------------------------------
def _extent(a) -> tuple[int, int]:
    """``[lo, hi)``: the bytes ``a`` may touch (exact for contiguous arrays, a bound for strided ones)."""
    if a.size == 0:
        return 0, 0
    ai = getattr(a, "__array_interface__", None)
    ptr = ai["data"][0] if ai is not None else int(a.data.ptr)
    lo = hi = ptr
    for n, s in zip(a.shape, a.strides):
        if s < 0:
            lo += s * (n - 1)
        else:
            hi += s * (n - 1)
    return lo, hi + a.itemsize


def overlaps(arrays) -> np.ndarray:
    """For each array, the index of the last earlier array whose memory it may share, else -1.

    Updates over a gathered copy must not put two such parameters in one run (the second would
    start from the first one's old values); most models have none, found in one sort."""
    n = len(arrays)
    out = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return out
    ext = np.array([_extent(a) for a in arrays], dtype=np.int64).reshape(n, 2)
    lo, hi = ext[:, 0], ext[:, 1]
    nonempty = hi > lo
    order = np.argsort(lo[nonempty], kind="stable")
    slo, shi = lo[nonempty][order], hi[nonempty][order]
    if len(slo) < 2 or not (slo[1:] < np.maximum.accumulate(shi)[:-1]).any():
        return out
    ov = (lo[:, None] < hi[None, :]) & (lo[None, :] < hi[:, None]) & nonempty[:, None] & nonempty[None, :]
    ov &= np.tri(n, k=-1, dtype=bool)  # only earlier arrays
    has = ov.any(axis=1)
    out[has] = n - 1 - np.argmax(ov[has, ::-1], axis=1)
    return out


_OVERLAPS: dict = {}


def cached_overlaps(arrays) -> np.ndarray:
    """:func:`overlaps`, cached by the arrays' identities (weak references only)."""
    key = tuple(map(id, arrays))
    hit = _OVERLAPS.get(key)
    if hit is not None and all(r() is a for r, a in zip(hit[0], arrays)):
        return hit[1]
    res = overlaps(arrays)
    try:
        refs = [weakref.ref(a) for a in arrays]
    except TypeError:  # an array type without weak references: no caching
        return res
    if len(_OVERLAPS) > 256:
        _OVERLAPS.clear()
    _OVERLAPS[key] = (refs, res)
    return res


def split_runs(numels, conflicts, limit: int, start: int = 0, stop: int | None = None) -> list[tuple[int, int]]:
    """Ranges ``[i0, i1)`` of ``start:stop`` of at most ``limit`` elements (a larger array alone) that hold no
    two arrays sharing memory (``conflicts`` from :func:`overlaps`)."""
    stop = len(numels) if stop is None else stop
    out, i0, size = [], start, 0
    for i in range(start, stop):
        n = int(numels[i])
        if i > i0 and (size + n > limit or conflicts[i] >= i0):
            out.append((i0, i))
            i0, size = i, 0
        size += n
    if stop > i0:
        out.append((i0, stop))
    return out


# -- gather / scatter --------------------------------------------------------------------------
def _is_plain(a, cdtype) -> bool:
    """An array the native kernels can read where it is."""
    return a.dtype == cdtype and a.flags.c_contiguous


def _updatable(a, cdtype) -> bool:
    """An array that can be updated where it is (CuPy's flags have no ``writeable``: always writable)."""
    return a.dtype == cdtype and a.flags.c_contiguous and getattr(a.flags, "writeable", True)


def flat_params(xp, params, cdtype, scratch: Scratch):
    """``(flat, copied)``: the parameters as one contiguous 1-d array of the compute dtype. A lone
    contiguous parameter of that dtype is its own flat view (``copied`` False, nothing to write back)."""
    if len(params) == 1 and _updatable(params[0], cdtype):
        return params[0].reshape(-1), False
    n = sum(int(a.size) for a in params)
    out = scratch.get("param", n)
    _gather(xp, params, out)
    return out, True


def write_params(flat, params) -> None:
    """Copy ``flat`` (from :func:`flat_params`) back into each parameter's own array (cast to its dtype)."""
    o = 0
    for a in params:
        n = int(a.size)
        a[...] = flat[o : o + n].reshape(a.shape)
        o += n


def flat_grads(xp, grads, cdtype, scratch: Scratch, copy: bool = True):
    """The gradients as one contiguous 1-d array of the compute dtype, gathered into the scratch buffer
    (the caller may overwrite it); ``copy=False``: a lone contiguous gradient of that dtype is returned
    itself (flattened) for a caller that only reads it."""
    if not copy and len(grads) == 1 and _is_plain(grads[0], cdtype):
        return grads[0].reshape(-1)
    n = sum(int(a.size) for a in grads)
    out = scratch.get("grad", n)
    _gather(xp, grads, out)
    return out


def _gather(xp, arrays, out) -> None:
    if len(arrays) == 1:
        out[...] = arrays[0].reshape(-1)
    else:
        xp.concatenate([a.reshape(-1) for a in arrays], out=out)


def flat_update(update, xp, params, grads, cdtype, scratch: Scratch, maximize: bool = False) -> None:
    """Run ``update(p, g)`` (in place on 1-d compute-dtype arrays; ``g`` may be overwritten) over the
    parameters gathered into one buffer, and write the result back into each parameter's memory."""
    p, copied = flat_params(xp, params, cdtype, scratch)
    g = flat_grads(xp, grads, cdtype, scratch)
    if maximize:
        xp.negative(g, out=g)
    update(p, g)
    if copied:
        write_params(p, params)


def _native_lists(params, grads, cdtype, scratch: Scratch):
    """``(params, grads, copies)`` for a native multi-tensor call: each array itself where the kernel can
    use it, else a contiguous compute-dtype copy in the scratch buffers; ``copies`` pairs each parameter
    copy with the array it must be written back into."""
    ps, gs, copies = [], [], []
    need_p = need_g = 0
    for a, g in zip(params, grads):
        if not _updatable(a, cdtype):
            need_p += int(a.size)
        if not _is_plain(g, cdtype):
            need_g += int(g.size)
    pbuf = scratch.get("param", need_p) if need_p else None
    gbuf = scratch.get("grad", need_g) if need_g else None
    po = go = 0
    for a, g in zip(params, grads):
        if need_p and not _updatable(a, cdtype):
            n = int(a.size)
            c = pbuf[po : po + n].reshape(a.shape)
            c[...] = a
            copies.append((a, c))
            a = c
            po += n
        if need_g and not _is_plain(g, cdtype):
            n = int(g.size)
            c = gbuf[go : go + n].reshape(g.shape)
            c[...] = g
            g = c
            go += n
        ps.append(a)
        gs.append(g)
    return ps, gs, copies


def _write_copies(copies) -> None:
    for a, c in copies:
        a[...] = c


# -- the fused updates ---------------------------------------------------------------------------
def sgd_step(
    xp,
    params,
    grads,
    buf,
    cdtype,
    scratch: Scratch,
    lr: float,
    momentum: float,
    dampening: float,
    nesterov: bool,
    weight_decay: float,
    first_step: bool,
    maximize: bool,
) -> None:
    """One torch.optim.SGD step of ``params`` (in place) from ``grads``; ``buf`` is the flat momentum
    buffer of the run (None without momentum), overwritten on ``first_step``."""
    from flow.optim.sgd import sgd_numpy

    first = buf is not None and first_step
    if native_ok(xp, cdtype):
        ps, gs, copies = _native_lists(params, grads, cdtype, scratch)
        _native().sgd_update_multi(ps, gs, buf, lr, momentum, dampening, nesterov, weight_decay, first, maximize)
        _write_copies(copies)
        return
    flat_update(
        lambda p, g: sgd_numpy(p, g, buf, lr, momentum, dampening, nesterov, weight_decay, first),
        xp,
        params,
        grads,
        cdtype,
        scratch,
        maximize,
    )


def adam_step(
    xp,
    params,
    grads,
    m,
    v,
    vmax,
    cdtype,
    scratch: Scratch,
    step: int,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    decoupled: bool,
    amsgrad: bool,
    maximize: bool,
) -> None:
    """One torch.optim.Adam / AdamW step of ``params`` (in place); ``m``, ``v``, ``vmax`` are the run's flat
    states (``vmax`` None without AMSGrad) and ``step`` the 1-based step count."""
    from flow.optim.adam import adam_numpy

    args = (step, lr, beta1, beta2, eps, weight_decay, decoupled, amsgrad)
    if native_ok(xp, cdtype):
        ps, gs, copies = _native_lists(params, grads, cdtype, scratch)
        _native().adam_update_multi(ps, gs, m, v, vmax, *args, maximize)
        _write_copies(copies)
        return
    flat_update(lambda p, g: adam_numpy(p, g, m, v, vmax, *args), xp, params, grads, cdtype, scratch, maximize)
