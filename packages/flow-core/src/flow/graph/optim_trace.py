"""Tracing ``optimizer.step()`` and dropout: what the tracer installs while build runs.

``optimizer.step()`` records one fused update op per parameter group and dtype bucket (see
:mod:`flow.graph.optim_ops` for the ops), with the optimizer's state buffers as state inputs
bound to the live flat state buffers (the parameters themselves are state tensors: their live
arrays, updated in place), the learning rate and step counts as host inputs fed before
each run, and an effect that bumps the step counters after it. Dropout's host-drawn mask
becomes the ``bernoulli_mask`` op.
"""

from __future__ import annotations

from functools import partial

import numpy as np

import flow
from flow import _dtype as D
from flow.errors import FlowError
from flow.graph.ir import Effect
from flow.graph.symbolic import GraphTraceError
from flow.ops.meta import TensorMeta


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
    """Before each run: check options changed since the last run (``group["lr"] = x``) and take the
    parameters' new arrays where they were replaced (``param.data = ...``, ``flow.load``)."""
    opt._revalidate()
    for gi in range(len(opt.param_groups)):
        for b in opt._buckets(gi):
            b.check_writable()


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
        # lists (betas=[0.9, 0.99]) become tuples: attributes are hashed
        hyper = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in group.items()
                             if k not in ("params", "lr", "initial_lr")))
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
