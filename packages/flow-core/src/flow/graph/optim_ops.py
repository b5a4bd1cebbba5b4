"""Graph-mode ops with state: the fused optimizer updates and the dropout RNG op.

Optimizers keep each group's states in flat buffers and update the parameters, each in its own
memory, with one native multi-tensor call per run of parameters (see :mod:`flow.optim._foreach`).
In a traced step, ``optimizer.step()`` records the same update as **one op per parameter group
and dtype bucket** (so the optimizer updates are already fused; no separate fusion pass is
needed):

``sgd_update(params[], grads[], momentum_buffers[], lr, first_step)``
``adam_update(params[], grads[], exp_avgs[], exp_avg_sqs[], max_exp_avg_sqs[], lr, step)``
``optimizer_update(params[], grads[], states[], lr, step, present)`` (any other Optimizer
subclass: its own ``_apply``, by default ``_update`` over the run gathered into one buffer;
states name-major)

Their meaning is functional (outputs: the new parameters, then the new states); with attribute
``inplace=True`` (what the tracer sets) the kernel writes the outputs into the input buffers and
returns them, and the IR marks the node ``inplace`` so lowering orders every reader of the old
values first. The kernel updates each live parameter array in place (so views of a parameter
see the update, as in eager mode) and the states through one flat view of the optimizer's flat
state buffers, with exactly the calls eager ``step()`` makes, so graph and eager training agree
bit for bit. ``lr``, ``step`` and ``first_step`` are host values fed before each run (so LR
schedules need no recompilation); step counters are bumped after each run by an IR effect.

``bernoulli_mask(input; shape, p, scale)``: dropout's keep mask (``0`` or ``scale``) drawn from
flow's default generator when the node runs, in the same order as eager dropout draws.
"""

from __future__ import annotations

import weakref

import numpy as np

import flow
from flow import _dtype as D
from flow.errors import OpError, OpTypeError
from flow.ops.meta import TensorMeta
from flow.registry.ops import ANY, BOOL, FLOAT, INTEGER, Attr, schema

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
            return base.reshape(-1)[off:off + n]
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
        return base.reshape(-1)[off:off + n]
    if len(_RUNS) > 512:
        _RUNS.clear()
    _RUNS[key] = entry
    return base.reshape(-1)[off:off + n]


def _flat(xp, arrays, inplace: bool):
    """``(flat, write_back)``: one 1-d buffer holding ``arrays``; ``write_back()`` copies it back."""
    if inplace:
        run = _contiguous_run(arrays)
        if run is not None:
            return run, None
    flat = xp.concatenate([a.reshape(-1) for a in arrays]) if len(arrays) > 1 else arrays[0].reshape(-1).copy()

    def back():
        o = 0
        for a in arrays:
            a[...] = flat[o:o + a.size].reshape(a.shape)
            o += a.size

    return flat, back


def _compute_dtype(a):
    return np.dtype(np.float32) if a.dtype in (np.dtype(np.float16), D.bfloat16.np) else a.dtype


def _ctx(xp, params):
    """``(xp, compute dtype, scratch)`` for the update of ``params`` (this thread's scratch buffers)."""
    from flow.optim._foreach import thread_scratch

    cd = _compute_dtype(params[0])
    return xp, cd, thread_scratch(xp, cd)


def _chunks(params) -> list[tuple[int, int]]:
    """Ranges of parameters updated by one call, as eager ``step()`` splits its runs: at most ``GRAD_CHUNK``
    elements each (a bigger parameter alone), so the scratch stays small, and never two parameters that
    share memory (they are updated one after the other)."""
    from flow.optim import _flat
    from flow.optim._foreach import cached_overlaps, split_runs

    return split_runs([int(p.size) for p in params], cached_overlaps(params), _flat.GRAD_CHUNK)


def _prepare(xp, params, states, inplace):
    if not inplace:
        params = [p.copy() for p in params]
        states = [s.copy() for s in states]
    return params, states


# -- kernels ------------------------------------------------------------------------------------
# Each parameter is updated in its own array (the live parameter's storage, shared with its views), the
# states through one flat view of the optimizer's flat state buffers: the same calls as eager step().


def _sgd_kernel(xp):
    from flow.optim._foreach import sgd_step

    def sgd_update(params, grads, bufs, lr, first_step, *, momentum=0.0, dampening=0.0, nesterov=False,
                   weight_decay=0.0, maximize=False, inplace=False):
        params, bufs = _prepare(xp, params, bufs, inplace)
        for i0, i1 in _chunks(params):
            ps = params[i0:i1]
            buf, back = _flat(xp, bufs[i0:i1], inplace) if bufs else (None, None)
            _, cd, scratch = _ctx(xp, ps)
            sgd_step(xp, ps, grads[i0:i1], buf, cd, scratch, float(lr), float(momentum), float(dampening),
                     bool(nesterov), float(weight_decay), bool(first_step), bool(maximize))
            if back is not None:
                back()
        return tuple(params) + tuple(bufs)

    return sgd_update


def _adam_kernel(xp):
    from flow.optim._foreach import adam_step

    def adam_update(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, lr, step, *, beta1=0.9, beta2=0.999,
                    eps=1e-8, weight_decay=0.0, decoupled=False, amsgrad=False, maximize=False, inplace=False):
        n = len(params)
        params, states = _prepare(xp, params, list(exp_avgs) + list(exp_avg_sqs) + list(max_exp_avg_sqs), inplace)
        for i0, i1 in _chunks(params):
            ps = params[i0:i1]
            m, m_back = _flat(xp, states[i0:i1], inplace)
            v, v_back = _flat(xp, states[n + i0:n + i1], inplace)
            vmax, x_back = _flat(xp, states[2 * n + i0:2 * n + i1], inplace) if amsgrad else (None, None)
            _, cd, scratch = _ctx(xp, ps)
            adam_step(xp, ps, grads[i0:i1], m, v, vmax, cd, scratch, int(step), float(lr), float(beta1),
                      float(beta2), float(eps), float(weight_decay), bool(decoupled), bool(amsgrad), bool(maximize))
            for back in (m_back, v_back, x_back):
                if back is not None:
                    back()
        return tuple(params) + tuple(states)

    return adam_update


_CLASSES: dict = {}


def _optimizer_class(path: str):
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


def _generic_kernel(xp):
    def optimizer_update(params, grads, states, lr, step, present, *, optimizer="", hyper=(), names=(),
                         inplace=False):
        cls, inst = _optimizer_class(optimizer)
        n = len(params)
        params, states = _prepare(xp, params, states, inplace)
        group = dict(hyper)
        group["lr"] = float(lr)
        pres = np.asarray(present).reshape(-1)
        was = {name: bool(pres[k]) for k, name in enumerate(names)}
        for i0, i1 in _chunks(params):
            ps = params[i0:i1]
            st, backs = {}, []
            for k, name in enumerate(names):
                st[name], back = _flat(xp, states[k * n + i0:k * n + i1], inplace)
                backs.append(back)
            numels = np.array([int(a.size) for a in ps], dtype=np.int64)
            starts = np.concatenate([[0], np.cumsum(numels)[:-1]]).astype(np.int64)
            cls._apply(inst, group, ps, grads[i0:i1], st, int(step), (starts, numels, was), _ctx(xp, ps))
            for back in backs:
                if back is not None:
                    back()
        return tuple(params) + tuple(states)

    return optimizer_update


def _mask_kernel(xp):
    def bernoulli_mask(x, *, shape=(), p=0.5, scale=1.0):
        from flow._random import host_rng

        keep = host_rng(None).random(tuple(shape)) >= p
        m = keep.astype(x.dtype) * x.dtype.type(scale)
        return m if xp is np else xp.asarray(m)

    return bernoulli_mask


# -- meta rules ---------------------------------------------------------------------------------


def _m(t):
    return TensorMeta(tuple(t.shape), t.dtype, t.device)


def _check_like(op, params, others, what):
    if len(others) != len(params):
        raise OpError(op, f"expected one {what} per parameter ({len(params)}), got {len(others)}")
    for p, o in zip(params, others):
        if tuple(p.shape) != tuple(o.shape):
            raise OpError(op, f"{what} of shape {tuple(o.shape)} for a parameter of shape {tuple(p.shape)}")
        # optimizer states of float16/bfloat16 parameters are float32 (the update runs in float32)
        want = D.float32 if what != "gradient" and p.dtype in (D.float16, D.bfloat16) else p.dtype
        if o.dtype != want:
            raise OpTypeError(op, f"{what} of dtype {o.dtype} for a parameter of dtype {p.dtype} (expected {want})")


def _check_scalars(op, **named):
    # the kernels read these as Python numbers
    for name, t in named.items():
        if len(t.shape) != 0:
            raise OpError(op, f"'{name}' must be a 0-d tensor, got shape {tuple(t.shape)}")


def _sgd_meta(params, grads, bufs, lr, first_step, **attrs):
    if not params:
        raise OpError("sgd_update", "expected at least one parameter")
    _check_scalars("sgd_update", lr=lr, first_step=first_step)
    _check_like("sgd_update", params, grads, "gradient")
    if bufs:
        _check_like("sgd_update", params, bufs, "momentum buffer")
    return tuple(_m(p) for p in params) + tuple(_m(b) for b in bufs)


def _adam_meta(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, lr, step, **attrs):
    if not params:
        raise OpError("adam_update", "expected at least one parameter")
    _check_scalars("adam_update", lr=lr, step=step)
    _check_like("adam_update", params, grads, "gradient")
    _check_like("adam_update", params, exp_avgs, "exp_avg")
    _check_like("adam_update", params, exp_avg_sqs, "exp_avg_sq")
    if attrs.get("amsgrad") or max_exp_avg_sqs:
        _check_like("adam_update", params, max_exp_avg_sqs, "max_exp_avg_sq")
    return tuple(_m(p) for p in params) + tuple(_m(s) for s in (*exp_avgs, *exp_avg_sqs, *max_exp_avg_sqs))


def _generic_meta(params, grads, states, lr, step, present, *, names=(), **attrs):
    if not params:
        raise OpError("optimizer_update", "expected at least one parameter")
    _check_scalars("optimizer_update", lr=lr, step=step)
    _check_like("optimizer_update", params, grads, "gradient")
    if len(states) != len(names) * len(params):
        raise OpError("optimizer_update", f"expected {len(names)} states per parameter, got {len(states)} in all")
    for k, name in enumerate(names):
        _check_like("optimizer_update", params, states[k * len(params):(k + 1) * len(params)], f"state {name!r}")
    if tuple(present.shape) != (len(names),):
        raise OpError("optimizer_update", f"'present' must have one flag per state name ({len(names)},), got shape "
                                          f"{tuple(present.shape)}")
    try:
        cls = _optimizer_class(attrs.get("optimizer", ""))[0]
    except (ImportError, AttributeError, ValueError) as e:
        raise OpError("optimizer_update", f"'optimizer'={attrs.get('optimizer', '')!r} names no optimizer class "
                                          f"('module:QualName'): {e}") from None
    if not hasattr(cls, "_apply"):
        raise OpError("optimizer_update", f"'optimizer'={attrs.get('optimizer')!r} has no _apply (not a flow "
                                          "optimizer)")
    return tuple(_m(p) for p in params) + tuple(_m(s) for s in states)


def _mask_meta(x, *, shape=(), p=0.5, scale=1.0):
    if any(s < 0 for s in shape):
        raise OpError("bernoulli_mask", f"'shape' must hold non-negative sizes, got {tuple(shape)}")
    if not 0.0 <= p <= 1.0:
        raise OpError("bernoulli_mask", f"'p' must be a probability in [0, 1], got {p}")
    return TensorMeta(tuple(int(s) for s in shape), x.dtype, x.device)


# -- samples for opcheck -------------------------------------------------------------------------


def _opt_samples(kind):
    def samples():
        from flow.ops._samples import uniform
        from flow.testing import SampleInput

        shapes = [(3, 4), (5,)]
        ps = [uniform(s, seed=i) for i, s in enumerate(shapes)]
        gs = [uniform(s, seed=10 + i) for i, s in enumerate(shapes)]
        st = [uniform(s, 0.1, 1.0, seed=20 + i) for i, s in enumerate(shapes)]
        lr = flow.tensor(0.1, dtype=flow.float64)
        from flow.errors import OpError as E
        from flow.testing import ErrorInput

        short, odd = gs[:1], [gs[1], gs[0]]  # one gradient too few; gradients of the wrong shapes
        if kind == "sgd":
            yield SampleInput((ps, gs, st, lr, flow.tensor(False)), dict(momentum=0.9, weight_decay=0.01))
            yield SampleInput((ps, gs, [], lr, flow.tensor(True)), dict(nesterov=False, maximize=True))
            yield ErrorInput((ps, short, st, lr, flow.tensor(False)), {}, E, "expected one gradient per parameter")
            yield ErrorInput((ps, odd, st, lr, flow.tensor(False)), {}, E, "gradient of shape (5,)")
            yield ErrorInput((ps, gs, st[:1], lr, flow.tensor(False)), {}, E, "one momentum buffer per parameter")
            yield ErrorInput(([], [], [], lr, flow.tensor(False)), {}, E, "at least one parameter")
            yield ErrorInput((ps, gs, st, lr.reshape(1), flow.tensor(False)), {}, E, "'lr' must be a 0-d tensor")
            yield ErrorInput((ps, [g.float() for g in gs], st, lr, flow.tensor(False)), {}, E, "gradient of dtype")
        elif kind == "adam":
            st2 = [uniform(s, 0.1, 1.0, seed=30 + i) for i, s in enumerate(shapes)]
            yield SampleInput((ps, gs, st, st2, [], lr, flow.tensor(3)), dict(weight_decay=0.01))
            yield SampleInput((ps, gs, st, st2, st2, lr, flow.tensor(1)), dict(amsgrad=True, decoupled=True))
            yield ErrorInput((ps, short, st, st2, [], lr, flow.tensor(3)), {}, E, "expected one gradient")
            yield ErrorInput((ps, gs, odd, st2, [], lr, flow.tensor(3)), {}, E, "exp_avg of shape (5,)")
            yield ErrorInput((ps, gs, st, st2, [], lr, flow.tensor(3)), {"amsgrad": True}, E, "max_exp_avg_sq")
            yield ErrorInput((ps, gs, st, st2, [], lr, flow.tensor([3])), {}, E, "'step' must be a 0-d tensor")
        else:
            hyper = (("alpha", 0.99), ("centered", False), ("eps", 1e-8), ("foreach", None), ("maximize", False),
                     ("momentum", 0.0), ("weight_decay", 0.0), ("capturable", False), ("differentiable", False))
            at = dict(optimizer="flow.optim.rmsprop:RMSprop", hyper=hyper, names=("square_avg",))
            yield SampleInput((ps, gs, st, lr, flow.tensor(2), flow.tensor([True])), at)
            yield ErrorInput((ps, short, st, lr, flow.tensor(2), flow.tensor([True])), at, E, "expected one gradient")
            yield ErrorInput((ps, gs, st[:1], lr, flow.tensor(2), flow.tensor([True])), at, E,
                             "expected 1 states per parameter")
            yield ErrorInput((ps, gs, st, lr, flow.tensor(2), flow.tensor([True, False])), at, E,
                             "'present' must have one flag per state name")
            yield ErrorInput((ps, gs, st, lr, flow.tensor(2), flow.tensor([True])),
                             {**at, "optimizer": "flow.optim:NoSuchOptimizer"}, E, "names no optimizer class")

    return samples


def _mask_samples():
    from flow.ops._samples import uniform
    from flow.testing import ErrorInput, SampleInput

    yield SampleInput((uniform((3, 4)),), dict(shape=(3, 4), p=0.25, scale=4.0 / 3.0), grad=False)
    yield ErrorInput((uniform((3, 4)),), dict(shape=(3, -4), p=0.25), OpError, "non-negative sizes")
    yield ErrorInput((uniform((3, 4)),), dict(shape=(3, 4), p=1.5), OpError, "'p' must be a probability")


# -- registration (the built-in plugin flow.graph calls these) -----------------------------------

_OPS = {
    "sgd_update": (schema("sgd_update", ["*params", "*grads", "*momentum_buffers", "lr", "first_step"],
                          [Attr("momentum", float, 0.0), Attr("dampening", float, 0.0), Attr("nesterov", bool, False),
                           Attr("weight_decay", float, 0.0), Attr("maximize", bool, False),
                           Attr("inplace", bool, False)], outputs=("params", "momentum_buffers"),
                          dtypes={"params": FLOAT, "grads": FLOAT, "momentum_buffers": FLOAT, "lr": FLOAT,
                                  "first_step": BOOL}),
                   _sgd_meta, _sgd_kernel, _opt_samples("sgd")),
    "adam_update": (schema("adam_update", ["*params", "*grads", "*exp_avgs", "*exp_avg_sqs", "*max_exp_avg_sqs",
                                           "lr", "step"],
                           [Attr("beta1", float, 0.9), Attr("beta2", float, 0.999), Attr("eps", float, 1e-8),
                            Attr("weight_decay", float, 0.0), Attr("decoupled", bool, False),
                            Attr("amsgrad", bool, False), Attr("maximize", bool, False), Attr("inplace", bool, False)],
                           outputs=("params", "states"),
                           dtypes={"params": FLOAT, "grads": FLOAT, "exp_avgs": FLOAT, "exp_avg_sqs": FLOAT,
                                   "max_exp_avg_sqs": FLOAT, "lr": FLOAT, "step": INTEGER}),
                    _adam_meta, _adam_kernel, _opt_samples("adam")),
    "optimizer_update": (schema("optimizer_update", ["*params", "*grads", "*states", "lr", "step", "present"],
                                [Attr("optimizer", str, ""), Attr("hyper", tuple, ()), Attr("names", tuple, ()),
                                 Attr("inplace", bool, False)], outputs=("params", "states"),
                                dtypes={"params": FLOAT, "grads": FLOAT, "states": ANY, "lr": FLOAT,
                                        "step": INTEGER, "present": BOOL}),
                         _generic_meta, _generic_kernel, _opt_samples("generic")),
}


def register_ops(registry) -> None:
    for name, (sch, meta, _, samples) in _OPS.items():
        registry.register_op(sch, meta, None, save="none", samples=samples, eager_meta=True,
                             doc=f"fused optimizer update ({name}); see flow.graph.optim_ops")
    registry.register_op(schema("bernoulli_mask", ["input"], [Attr("shape", tuple, (), items=int),
                                                              Attr("p", float, 0.5), Attr("scale", float, 1.0)],
                                dtypes=FLOAT),
                         _mask_meta, None, save="none", samples=_mask_samples, nondeterministic=True,
                         doc="dropout keep mask (0 or scale) drawn from the default generator")


def register_kernels(registry) -> None:
    for name, (_, _, kernel, _) in _OPS.items():
        registry.register_kernel(name, "generic", kernel)
    registry.register_kernel("bernoulli_mask", "generic", _mask_kernel)
