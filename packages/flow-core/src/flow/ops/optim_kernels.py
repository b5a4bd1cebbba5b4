"""Generic kernels of the optimizer update ops (:mod:`flow.ops.optim`): the multi-tensor updates.

Each parameter is updated in its own array (the live parameter's storage, shared with its views,
``detach()`` results and ``from_numpy`` sources), the states through one flat view of the
optimizer's flat state buffers (see :mod:`flow.optim._flat`). On NumPy float32/float64 arrays
SGD and Adam run the native multi-tensor code (``native.sgd_update_multi`` /
``adam_update_multi``), anything else the vectorised NumPy/CuPy form over a gathered copy
(:mod:`flow.optim._foreach`). A call is split into runs of at most ``GRAD_CHUNK`` elements that
hold no two parameters sharing memory, so the scratch buffers stay small and tied parameters are
updated one after the other.
"""

from __future__ import annotations

import weakref

import numpy as np

from flow import _dtype as D
from flow.ops._define import kernel
from flow.optim import _flat as flat_mod
from flow.optim._foreach import adam_step, overlaps, sgd_step, split_runs, thread_scratch

# -- flat views -------------------------------------------------------------------------------


def _addr(a) -> int:
    ai = getattr(a, "__array_interface__", None)
    return ai["data"][0] if ai is not None else a.data.ptr


_RUNS: dict = {}


def _contiguous_run(arrays):
    """A 1-d view covering ``arrays`` when they are consecutive C-contiguous pieces of one buffer.

    The answer is cached by the arrays' identities; the cache holds only weak references, so it
    never keeps an optimizer's replaced flat buffers alive."""
    key = tuple(map(id, arrays))
    hit = _RUNS.get(key)
    if hit is not None:
        refs, base_ref, off, n = hit
        base = base_ref()
        if base is not None and all(r() is a for r, a in zip(refs, arrays)):
            return base.reshape(-1)[off : off + n]
    a0 = arrays[0]
    base = a0.base if a0.base is not None else a0
    if not base.flags.c_contiguous:
        return None
    start = expect = _addr(a0)
    for a in arrays:
        if a.dtype != a0.dtype or not a.flags.c_contiguous or (a is not base and a.base is not base):
            return None
        if _addr(a) != expect:
            return None
        expect += a.size * a.itemsize
    off = (start - _addr(base)) // a0.itemsize
    n = (expect - start) // a0.itemsize
    try:
        entry = ([weakref.ref(a) for a in arrays], weakref.ref(base), off, n)
    except TypeError:  # an array type without weak references: no caching
        return base.reshape(-1)[off : off + n]
    if len(_RUNS) > 512:
        _RUNS.clear()
    _RUNS[key] = entry
    return base.reshape(-1)[off : off + n]


def _flat(xp, arrays, inplace: bool):
    """``(flat, write_back)``: one 1-d buffer holding ``arrays``; ``write_back()`` copies it back (None
    when ``flat`` is a view of their own memory)."""
    if inplace:
        run = _contiguous_run(arrays)
        if run is not None:
            return run, None
    flat = xp.concatenate([a.reshape(-1) for a in arrays]) if len(arrays) > 1 else arrays[0].reshape(-1).copy()

    def back():
        o = 0
        for a in arrays:
            a[...] = flat[o : o + a.size].reshape(a.shape)
            o += a.size

    return flat, back


_LOW = (np.dtype(np.float16), np.dtype(D.bfloat16.np))
_F32 = np.dtype(np.float32)


def _compute_dtype(a):
    return _F32 if a.dtype in _LOW else a.dtype


def _ctx(xp, params):
    """``(xp, compute dtype, scratch)`` for the update of ``params`` (this thread's scratch buffers)."""
    cd = _compute_dtype(params[0])
    return xp, cd, thread_scratch(xp, cd)


_CHUNKS: dict = {}


def _chunks(params) -> list[tuple[int, int]]:
    """Ranges of parameters updated by one call: at most ``GRAD_CHUNK`` elements each (a bigger parameter
    alone), so the scratch stays small, and never two parameters that share memory (they are updated
    one after the other). Cached by the arrays' identities (weak references only), as a step updates
    the same arrays every time."""
    if len(params) == 1:
        return [(0, 1)]
    limit = flat_mod.GRAD_CHUNK
    key = (tuple(map(id, params)), limit)
    hit = _CHUNKS.get(key)
    if hit is not None and all(r() is a for r, a in zip(hit[0], params)):
        return hit[1]
    res = split_runs([int(p.size) for p in params], overlaps(params), limit)
    try:
        refs = [weakref.ref(a) for a in params]
    except TypeError:  # an array type without weak references: no caching
        return res
    if len(_CHUNKS) > 256:
        _CHUNKS.clear()
    _CHUNKS[key] = (refs, res)
    return res


def _prepare(params, states, inplace):
    if not inplace:  # functional form: the inputs stay as they were
        params = [p.copy() for p in params]
        states = [s.copy() for s in states]
    return params, states


# -- kernels ------------------------------------------------------------------------------------


@kernel("sgd_update")
def _sgd_kernel(xp):
    def sgd_update(
        params,
        grads,
        bufs,
        lr,
        first_step,
        *,
        momentum=0.0,
        dampening=0.0,
        nesterov=False,
        weight_decay=0.0,
        maximize=False,
        inplace=False,
    ):
        params, bufs = _prepare(params, bufs, inplace)
        lr, first = float(lr), bool(first_step)
        for i0, i1 in _chunks(params):
            ps = params[i0:i1]
            buf, back = _flat(xp, bufs[i0:i1], inplace) if bufs else (None, None)
            _, cd, scratch = _ctx(xp, ps)
            sgd_step(
                xp,
                ps,
                grads[i0:i1],
                buf,
                cd,
                scratch,
                lr,
                float(momentum),
                float(dampening),
                bool(nesterov),
                float(weight_decay),
                first,
                bool(maximize),
            )
            if back is not None:
                back()
        return tuple(params) + tuple(bufs)

    return sgd_update


@kernel("adam_update")
def _adam_kernel(xp):
    def adam_update(
        params,
        grads,
        exp_avgs,
        exp_avg_sqs,
        max_exp_avg_sqs,
        lr,
        step,
        *,
        beta1=0.9,
        beta2=0.999,
        eps=1e-8,
        weight_decay=0.0,
        decoupled=False,
        amsgrad=False,
        maximize=False,
        inplace=False,
    ):
        n = len(params)
        params, states = _prepare(params, list(exp_avgs) + list(exp_avg_sqs) + list(max_exp_avg_sqs), inplace)
        lr, step = float(lr), int(step)
        for i0, i1 in _chunks(params):
            ps = params[i0:i1]
            m, m_back = _flat(xp, states[i0:i1], inplace)
            v, v_back = _flat(xp, states[n + i0 : n + i1], inplace)
            vmax, x_back = _flat(xp, states[2 * n + i0 : 2 * n + i1], inplace) if amsgrad else (None, None)
            _, cd, scratch = _ctx(xp, ps)
            adam_step(
                xp,
                ps,
                grads[i0:i1],
                m,
                v,
                vmax,
                cd,
                scratch,
                step,
                lr,
                float(beta1),
                float(beta2),
                float(eps),
                float(weight_decay),
                bool(decoupled),
                bool(amsgrad),
                bool(maximize),
            )
            for back in (m_back, v_back, x_back):
                if back is not None:
                    back()
        return tuple(params) + tuple(states)

    return adam_update


_CLASSES: dict = {}


def optimizer_class(path: str):
    """``(class, a bare instance)`` of the optimizer named ``module:QualName`` (its ``_apply`` is called)."""
    hit = _CLASSES.get(path)
    if hit is None:
        import importlib

        mod, _, name = path.partition(":")
        cls = importlib.import_module(mod)
        for part in name.split("."):
            cls = getattr(cls, part)
        hit = _CLASSES[path] = (cls, object.__new__(cls))
    return hit


@kernel("optimizer_update")
def _generic_kernel(xp):
    def optimizer_update(params, grads, states, lr, step, present, *, optimizer="", hyper=(), names=(), inplace=False):
        cls, inst = optimizer_class(optimizer)
        n = len(params)
        params, states = _prepare(params, states, inplace)
        group = dict(hyper)
        group["lr"] = float(lr)
        pres = np.asarray(present).reshape(-1)
        was = {name: bool(pres[k]) for k, name in enumerate(names)}
        for i0, i1 in _chunks(params):
            ps = params[i0:i1]
            st, backs = {}, []
            for k, name in enumerate(names):
                st[name], back = _flat(xp, states[k * n + i0 : k * n + i1], inplace)
                backs.append(back)
            numels = np.array([int(a.size) for a in ps], dtype=np.int64)
            starts = np.concatenate([[0], np.cumsum(numels)[:-1]]).astype(np.int64)
            cls._apply(inst, group, ps, grads[i0:i1], st, int(step), (starts, numels, was), _ctx(xp, ps))
            for back in backs:
                if back is not None:
                    back()
        return tuple(params) + tuple(states)

    return optimizer_update
