"""Graph-mode ops with state: the fused optimizer updates and the dropout RNG op.

Optimizers keep each group's parameters, gradients and states in flat buffers and update them
with one native call per group (see :mod:`flow.optim`). In a traced step, ``optimizer.step()``
records the same update as **one op per parameter group and dtype bucket** (so the optimizer
updates are already fused; no separate fusion pass is needed):

``sgd_update(params[], grads[], momentum_buffers[], lr, first_step)``
``adam_update(params[], grads[], exp_avgs[], exp_avg_sqs[], max_exp_avg_sqs[], lr, step)``
``optimizer_update(params[], grads[], states[], lr, step, present)`` (any other Optimizer
subclass: its own ``_update`` over the flat buffers; states name-major)

Their meaning is functional (outputs: the new parameters, then the new states); with attribute
``inplace=True`` (what the tracer sets) the kernel writes the outputs into the input buffers and
returns them, and the IR marks the node ``inplace`` so lowering orders every reader of the old
values first. When the parameters are consecutive views of one flat buffer (the optimizer's
flat bucket) the kernel makes one native call over it, exactly as eager ``step()`` does, so
graph and eager training agree bit for bit. ``lr``, ``step`` and ``first_step`` are host values
fed before each run (so LR schedules need no recompilation); step counters are bumped after each
run by an IR effect.

``bernoulli_mask(input; shape, p, scale)``: dropout's keep mask (``0`` or ``scale``) drawn from
flow's default generator when the node runs, in the same order as eager dropout draws.
"""

from __future__ import annotations

from functools import partial

import numpy as np

import flow
from flow import _dtype as D
from flow.errors import FlowError, OpError
from flow.graph.ir import Effect
from flow.graph.symbolic import GraphTraceError
from flow.ops.meta import TensorMeta
from flow.registry.ops import Attr, schema

# -- flat views -------------------------------------------------------------------------------


def _addr(a) -> int:
    ai = getattr(a, "__array_interface__", None)
    return ai["data"][0] if ai is not None else a.data.ptr


_RUNS: dict = {}


def _contiguous_run(arrays):
    """A 1-d view covering ``arrays`` when they are consecutive C-contiguous pieces of one buffer."""
    key = tuple(map(id, arrays))
    hit = _RUNS.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], arrays)):
        return hit[1]
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
    view = base.reshape(-1)[off:off + (expect - start) // a0.itemsize]
    if len(_RUNS) > 512:
        _RUNS.clear()
    _RUNS[key] = (list(arrays), view)
    return view


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


_SCRATCH: dict = {}


def _gather(xp, grads, dtype, inplace: bool):
    """The gradients concatenated into one scratch buffer of the compute dtype."""
    n = sum(int(g.size) for g in grads)
    key = (n, np.dtype(dtype).str, id(xp))
    buf = _SCRATCH.get(key) if inplace else None
    if buf is None:
        buf = xp.empty(n, dtype=dtype)
        if inplace:
            if len(_SCRATCH) > 64:
                _SCRATCH.clear()
            _SCRATCH[key] = buf
    if len(grads) == 1:
        buf[...] = grads[0].reshape(-1)
    else:
        xp.concatenate([g.reshape(-1) for g in grads], out=buf)
    return buf


def _compute_dtype(a):
    return np.dtype(np.float32) if a.dtype in (np.dtype(np.float16), D.bfloat16.np) else a.dtype


def _prepare(xp, params, states, inplace):
    if not inplace:
        params = [p.copy() for p in params]
        states = [s.copy() for s in states]
    return params, states


# -- kernels ------------------------------------------------------------------------------------


def _sgd_kernel(xp):
    from flow.optim._flat import use_native
    from flow.optim.sgd import sgd_numpy

    def sgd_update(params, grads, bufs, lr, first_step, *, momentum=0.0, dampening=0.0, nesterov=False,
                   weight_decay=0.0, maximize=False, inplace=False):
        params, bufs = _prepare(xp, params, bufs, inplace)
        p, p_back = _flat(xp, params, inplace)
        cd = _compute_dtype(p)
        g = _gather(xp, grads, cd, inplace)
        if maximize:
            xp.negative(g, out=g)
        buf, b_back = _flat(xp, bufs, inplace) if bufs else (None, None)
        pc = p.astype(cd) if p.dtype != cd else p
        first = buf is not None and bool(first_step)
        args = (float(lr), float(momentum), float(dampening), bool(nesterov), float(weight_decay), first)
        if use_native(pc):
            from flow.backends.cpu import native

            native.sgd_update(pc, g, buf, *args)
        else:
            sgd_numpy(pc, g, buf, *args)
        if pc is not p:
            p[...] = pc
        for back in (p_back, b_back):
            if back is not None:
                back()
        return tuple(params) + tuple(bufs)

    return sgd_update


def _adam_kernel(xp):
    from flow.optim._flat import use_native
    from flow.optim.adam import adam_numpy

    def adam_update(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, lr, step, *, beta1=0.9, beta2=0.999,
                    eps=1e-8, weight_decay=0.0, decoupled=False, amsgrad=False, maximize=False, inplace=False):
        n = len(params)
        params, states = _prepare(xp, params, list(exp_avgs) + list(exp_avg_sqs) + list(max_exp_avg_sqs), inplace)
        p, p_back = _flat(xp, params, inplace)
        cd = _compute_dtype(p)
        g = _gather(xp, grads, cd, inplace)
        if maximize:
            xp.negative(g, out=g)
        m, m_back = _flat(xp, states[:n], inplace)
        v, v_back = _flat(xp, states[n:2 * n], inplace)
        vmax, x_back = _flat(xp, states[2 * n:], inplace) if amsgrad else (None, None)
        pc = p.astype(cd) if p.dtype != cd else p
        args = (int(step), float(lr), float(beta1), float(beta2), float(eps), float(weight_decay), bool(decoupled),
                bool(amsgrad))
        if use_native(pc):
            from flow.backends.cpu import native

            native.adam_update(pc, g, m, v, vmax, *args)
        else:
            adam_numpy(pc, g, m, v, vmax, *args)
        if pc is not p:
            p[...] = pc
        for back in (p_back, m_back, v_back, x_back):
            if back is not None:
                back()
        return tuple(params) + tuple(states)

    return adam_update


_CLASSES: dict = {}


def _optimizer_class(path: str):
    """``(class, a bare instance)`` of the optimizer named ``module:QualName`` (its ``_update`` is called)."""
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
        p, p_back = _flat(xp, params, inplace)
        cd = _compute_dtype(p)
        g = _gather(xp, grads, cd, inplace)
        group = dict(hyper)
        group["lr"] = float(lr)
        if group.get("maximize", False):
            xp.negative(g, out=g)
        st, backs = {}, [p_back]
        for k, name in enumerate(names):
            st[name], back = _flat(xp, states[k * n:(k + 1) * n], inplace)
            backs.append(back)
        numels = np.array([int(a.size) for a in params], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(numels)[:-1]]).astype(np.int64)
        pres = np.asarray(present).reshape(-1)
        was = {name: bool(pres[k]) for k, name in enumerate(names)}
        pc = p.astype(cd) if p.dtype != cd else p
        cls._update(inst, group, pc, g, st, int(step), (starts, numels, was))
        if pc is not p:
            p[...] = pc
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


def _sgd_meta(params, grads, bufs, lr, first_step, **attrs):
    if not params:
        raise OpError("sgd_update", "expected at least one parameter")
    _check_like("sgd_update", params, grads, "gradient")
    if bufs:
        _check_like("sgd_update", params, bufs, "momentum buffer")
    return tuple(_m(p) for p in params) + tuple(_m(b) for b in bufs)


def _adam_meta(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, lr, step, **attrs):
    if not params:
        raise OpError("adam_update", "expected at least one parameter")
    _check_like("adam_update", params, grads, "gradient")
    _check_like("adam_update", params, exp_avgs, "exp_avg")
    _check_like("adam_update", params, exp_avg_sqs, "exp_avg_sq")
    if attrs.get("amsgrad") or max_exp_avg_sqs:
        _check_like("adam_update", params, max_exp_avg_sqs, "max_exp_avg_sq")
    return tuple(_m(p) for p in params) + tuple(_m(s) for s in (*exp_avgs, *exp_avg_sqs, *max_exp_avg_sqs))


def _generic_meta(params, grads, states, lr, step, present, *, names=(), **attrs):
    if not params:
        raise OpError("optimizer_update", "expected at least one parameter")
    _check_like("optimizer_update", params, grads, "gradient")
    if len(states) != len(names) * len(params):
        raise OpError("optimizer_update", f"expected {len(names)} states per parameter, got {len(states)} in all")
    return tuple(_m(p) for p in params) + tuple(_m(s) for s in states)


def _mask_meta(x, *, shape=(), p=0.5, scale=1.0):
    if not x.dtype.is_floating_point:
        raise OpError("bernoulli_mask", f"expected a floating-point input, got {x.dtype}")
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
        if kind == "sgd":
            yield SampleInput((ps, gs, st, lr, flow.tensor(False)), dict(momentum=0.9, weight_decay=0.01))
            yield SampleInput((ps, gs, [], lr, flow.tensor(True)), dict(nesterov=False, maximize=True))
        elif kind == "adam":
            st2 = [uniform(s, 0.1, 1.0, seed=30 + i) for i, s in enumerate(shapes)]
            yield SampleInput((ps, gs, st, st2, [], lr, flow.tensor(3)), dict(weight_decay=0.01))
            yield SampleInput((ps, gs, st, st2, st2, lr, flow.tensor(1)), dict(amsgrad=True, decoupled=True))
        else:
            hyper = (("alpha", 0.99), ("centered", False), ("eps", 1e-8), ("foreach", None), ("maximize", False),
                     ("momentum", 0.0), ("weight_decay", 0.0), ("capturable", False), ("differentiable", False))
            yield SampleInput((ps, gs, st, lr, flow.tensor(2), flow.tensor([True])),
                              dict(optimizer="flow.optim.rmsprop:RMSprop", hyper=hyper, names=("square_avg",)))

    return samples


def _mask_samples():
    from flow.ops._samples import uniform
    from flow.testing import SampleInput

    yield SampleInput((uniform((3, 4)),), dict(shape=(3, 4), p=0.25, scale=4.0 / 3.0), grad=False)


# -- registration (the built-in plugin flow.graph calls these) -----------------------------------

_OPS = {
    "sgd_update": (schema("sgd_update", ["*params", "*grads", "*momentum_buffers", "lr", "first_step"],
                          [Attr("momentum", float, 0.0), Attr("dampening", float, 0.0), Attr("nesterov", bool, False),
                           Attr("weight_decay", float, 0.0), Attr("maximize", bool, False),
                           Attr("inplace", bool, False)], outputs=("params", "momentum_buffers")),
                   _sgd_meta, _sgd_kernel, _opt_samples("sgd")),
    "adam_update": (schema("adam_update", ["*params", "*grads", "*exp_avgs", "*exp_avg_sqs", "*max_exp_avg_sqs",
                                           "lr", "step"],
                           [Attr("beta1", float, 0.9), Attr("beta2", float, 0.999), Attr("eps", float, 1e-8),
                            Attr("weight_decay", float, 0.0), Attr("decoupled", bool, False),
                            Attr("amsgrad", bool, False), Attr("maximize", bool, False), Attr("inplace", bool, False)],
                           outputs=("params", "states")),
                    _adam_meta, _adam_kernel, _opt_samples("adam")),
    "optimizer_update": (schema("optimizer_update", ["*params", "*grads", "*states", "lr", "step", "present"],
                                [Attr("optimizer", str, ""), Attr("hyper", tuple, ()), Attr("names", tuple, ()),
                                 Attr("inplace", bool, False)], outputs=("params", "states")),
                         _generic_meta, _generic_kernel, _opt_samples("generic")),
}


def register_ops(registry) -> None:
    for name, (sch, meta, _, samples) in _OPS.items():
        registry.register_op(sch, meta, None, save="none", samples=samples, eager_meta=True,
                             doc=f"fused optimizer update ({name}); see flow.graph.optim_ops")
    registry.register_op(schema("bernoulli_mask", ["input"], [Attr("shape", tuple, ()), Attr("p", float, 0.5),
                                                              Attr("scale", float, 1.0)]),
                         _mask_meta, None, save="none", samples=_mask_samples, nondeterministic=True,
                         doc="dropout keep mask (0 or scale) drawn from the default generator")


def register_kernels(registry) -> None:
    for name, (_, _, kernel, _) in _OPS.items():
        registry.register_kernel(name, "generic", kernel)
    registry.register_kernel("bernoulli_mask", "generic", _mask_kernel)


# -- tracing ------------------------------------------------------------------------------------


def traced_keep_mask(input, shape, p: float, scale: float):
    """Graph-mode replacement of dropout's host-drawn mask: the ``bernoulli_mask`` op."""
    return flow.ops.call("bernoulli_mask", input, shape=tuple(int(s) for s in shape), p=float(p),
                         scale=float(scale))


def prepare(opt) -> None:
    """Before tracing: the optimizer's flat buckets and state buffers exist (as eager step() makes them)."""
    for gi, group in enumerate(opt.param_groups):
        names = opt._state_names(group)
        for b in opt._buckets(gi):
            for name, fill in names.items():
                b.state(name, fill)


def sync(opt) -> None:
    """Before each run: re-flatten a group whose parameters were re-pointed (param.data = ..., flow.load)."""
    for gi in range(len(opt.param_groups)):
        opt._buckets(gi)


def _bucket(opt, gi, bi):
    return opt._flat[gi][1][bi]


class _StateSlot:
    """The live array of one parameter's optimizer state (a view into the bucket's flat state)."""

    __slots__ = ("opt", "gi", "bi", "name", "fill", "i", "_buf", "_view")

    def __init__(self, opt, gi, bi, name, fill, i) -> None:
        self.opt, self.gi, self.bi, self.name, self.fill, self.i = opt, gi, bi, name, fill, i
        self._buf = self._view = None

    def __call__(self):
        b = _bucket(self.opt, self.gi, self.bi)
        buf = b.states.get(self.name)
        if buf is None:
            buf = b.state(self.name, self.fill)
        if buf is not self._buf:
            o, n = int(b.offsets[self.i]), int(b.numels[self.i])
            self._view = buf[o:o + n].reshape(b.shapes[self.i])
            self._buf = buf
        return self._view


def _feed_lr(opt, gi):
    from flow.optim.optimizer import _float

    return np.asarray(_float(opt.param_groups[gi]["lr"]), dtype=np.float64)


def _uniform(vals, what, opt, gi):
    if len(vals) and vals.min() != vals.max():
        raise FlowError(f"graph mode: the parameters of {type(opt).__name__} group {gi} have different {what} "
                        "(some were updated without the others); a compiled step updates them together. Run "
                        "one eager step with all of them, or reload the optimizer state")
    return vals[0] if len(vals) else 0


def _feed_step(opt, gi, bi, idx):
    b = _bucket(opt, gi, bi)
    return np.asarray(int(_uniform(b.steps[idx], "step counts", opt, gi)) + 1, dtype=np.int64)


def _present(b, name, idx, opt, gi):
    pres = b.present.get(name)
    return bool(_uniform(pres[idx], f"'{name}' states", opt, gi)) if pres is not None else False


def _feed_first(opt, gi, bi, idx, name):
    return np.asarray(not _present(_bucket(opt, gi, bi), name, idx, opt, gi))


def _feed_present(opt, gi, bi, idx, names):
    b = _bucket(opt, gi, bi)
    return np.array([_present(b, n, idx, opt, gi) for n in names], dtype=bool)


def _bump(opt, gi, bi, idx, names):
    b = _bucket(opt, gi, bi)
    b.steps[idx] += 1
    for name, fill in names.items():
        b.state(name, fill)
        b.present[name][idx] = True


def trace_optimizer_step(tracer, opt, closure=None):
    """``optimizer.step()`` while tracing: one update op per param group and dtype bucket."""
    from flow.optim.adam import Adam
    from flow.optim.sgd import SGD

    if closure is not None:
        raise GraphTraceError("graph tracing: optimizer.step(closure) cannot be compiled; compute the loss in the "
                              "traced function and call step() without a closure")
    oname = tracer.ir.meta.setdefault("optimizer_names", {}).get(id(opt)) or type(opt).__name__.lower()
    prev = tracer.phase
    tracer.phase = "optimizer"
    try:
        with flow.no_grad():
            for gi, group in enumerate(opt.param_groups):
                if gi >= len(opt._flat) or opt._flat[gi] is None:
                    raise GraphTraceError(f"graph tracing: {type(opt).__name__} group {gi} was added while tracing")
                names = opt._state_names(group)
                lr = None
                for bi, b in enumerate(opt._flat[gi][1]):
                    idx = [i for i, p in enumerate(b.params) if p.grad is not None]
                    if not idx:
                        continue
                    if lr is None:
                        lr = tracer.host_input(f"{oname}.group{gi}.lr", TensorMeta((), D.float64, b.device),
                                               partial(_feed_lr, opt, gi))
                    _trace_bucket(tracer, opt, oname, gi, bi, b, idx, names, group, lr, SGD, Adam)
    finally:
        tracer.phase = prev


def _trace_bucket(tracer, opt, oname, gi, bi, b, idx, names, group, lr, SGD, Adam):
    params = [b.params[i] for i in idx]
    grads = [p.grad for p in params]
    ia = np.asarray(idx, dtype=np.int64)
    cdt = D.NP_TO_DTYPE[np.dtype(b.cdtype)]
    pnames = [tracer._saved[id(p)][2].name if id(p) in tracer._saved else f"param{i}" for p, i in zip(params, idx)]
    states = []
    for name, fill in names.items():
        for i, pn in zip(idx, pnames):
            states.append(tracer.add_state_array(f"{oname}.{pn}.{name}", "optimizer",
                                                 TensorMeta(b.shapes[i], cdt, b.device),
                                                 _StateSlot(opt, gi, bi, name, fill, i)))
    n = len(params)
    if type(opt)._update is SGD._update and isinstance(opt, SGD):
        first = tracer.host_input(f"{oname}.group{gi}.first_step", TensorMeta((), D.bool, b.device),
                                  partial(_feed_first, opt, gi, bi, ia, "momentum_buffer"))
        outs = flow.ops.call("sgd_update", params, grads, states, lr, first, momentum=float(group["momentum"]),
                             dampening=float(group["dampening"]), nesterov=bool(group["nesterov"]),
                             weight_decay=float(group["weight_decay"]), maximize=bool(group.get("maximize", False)),
                             inplace=True)
    elif type(opt)._update is Adam._update and isinstance(opt, Adam):
        step = tracer.host_input(f"{oname}.group{gi}.step", TensorMeta((), D.int64, b.device),
                                 partial(_feed_step, opt, gi, bi, ia))
        b1, b2 = (float(x) for x in group["betas"])
        outs = flow.ops.call("adam_update", params, grads, states[:n], states[n:2 * n], states[2 * n:], lr, step,
                             beta1=b1, beta2=b2, eps=float(group["eps"]), weight_decay=float(group["weight_decay"]),
                             decoupled=bool(group.get("decoupled_weight_decay", opt._decoupled)),
                             amsgrad=bool(group["amsgrad"]), maximize=bool(group.get("maximize", False)), inplace=True)
    else:
        step = tracer.host_input(f"{oname}.group{gi}.step", TensorMeta((), D.int64, b.device),
                                 partial(_feed_step, opt, gi, bi, ia))
        present = tracer.host_input(f"{oname}.group{gi}.present", TensorMeta((len(names),), D.bool, b.device),
                                    partial(_feed_present, opt, gi, bi, ia, tuple(names)))
        cls = type(opt)
        hyper = tuple(sorted((k, v) for k, v in group.items() if k not in ("params", "lr", "initial_lr")))
        outs = flow.ops.call("optimizer_update", params, grads, states, lr, step, present,
                             optimizer=f"{cls.__module__}:{cls.__qualname__}", hyper=hyper, names=tuple(names),
                             inplace=True)
    node = tracer.last_node
    node.inplace = {k: (k if k < n else k + n) for k in range(len(outs))}
    node.tags["side_effect"] = True
    for k, p in enumerate(params):
        p._data.value = outs[k]._data.value
    for j, s in enumerate(states):
        s._data.value = outs[n + j]._data.value
    tracer.ir.effects.append(Effect(f"{oname}.group{gi}: step counters of {n} parameters",
                                    partial(_bump, opt, gi, bi, ia, dict(names))))
