"""Optimizers in a traced step: their states and host values become graph state and host inputs.

``optimizer.step()`` runs as in eager mode while ``build`` is traced: it calls the update ops of
:mod:`flow.ops.optim` through the dispatcher, and the tracer (an interceptor) records them like
any op. What this module does is bind the optimizer's tensors before tracing and finish after:

- :func:`prepare` (before tracing): the flat buckets and state buffers exist, as an eager step
  makes them.
- :class:`OptimizerBinding` (while tracing): each parameter's state view (``exp_avg`` ...) is a
  state input bound to the live flat state buffer, the learning rate and the step / first-step /
  present values the ops take are host inputs fed before each run (so LR schedules need no
  recompilation); the host-side bookkeeping the traced ``step()`` did (step counters, present
  flags) is undone when tracing ends, and each update node gets an effect that does it after
  every run instead. Update nodes are marked in place (their kernels write each output into its
  input's buffer; lowering orders every reader of the old values first) and tagged ``optimizer``.
- :func:`sync` (before each run): options changed since the last run are checked again and
  replaced parameter arrays are taken.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import partial

import numpy as np

from flow.array_kinds import storage_of
from flow.errors import FlowError
from flow.graph.ir import Effect
from flow.graph.symbolic import GraphTraceError
from flow.ops.meta import TensorMeta
from flow.ops.optim import UPDATE_OPS, inplace_outputs

# Ops whose output is a piece of their input (registered by plugins: flow-dist's ``sbp_boxing``, which
# slices a broadcast parameter into the rows a ZeRO update covers): an update may take such a piece of
# a parameter instead of the parameter, and is still known as that parameter's update.
PIECE_OPS: set[str] = set()


def _param_of(v):
    """The value an update's parameter input is, or is a piece of (through :data:`PIECE_OPS`)."""
    while v.kind != "state" and v.producer is not None and v.producer.name in PIECE_OPS:
        v = v.producer.inputs[0]
    return v


def prepare(opt) -> None:
    """Before tracing: the optimizer's flat buckets and state buffers exist (as eager step() makes them)."""
    for gi, group in enumerate(opt.param_groups):
        names = opt._state_names(group)
        for b in opt._buckets(gi):
            for name, fill in names.items():
                b.state_views(name, fill)


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
    """The live array of one parameter's optimizer state (a view into the bucket's flat state), found
    again after the group's buckets were rebuilt (carried states) or a buffer was replaced."""

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
            # what the traced state tensor held: the piece of a global parameter, or what its StateLayout
            # wraps (a ZeRO shard); the graph binds the array's storage, as the tracer did
            piece = buf[o : o + n].reshape(b.state_shapes[self.i])
            self._view = storage_of(b.wrap_state(self.i, piece))
            self._buf = buf
        return self._view


# -- host values fed before each run ------------------------------------------------------------
def _uniform(vals, what, opt, gi):
    if len(vals) and vals.min() != vals.max():
        raise FlowError(
            f"graph mode: the parameters of {type(opt).__name__} group {gi} have different {what} "
            "(some were updated without the others); a compiled step updates them together. Run "
            "one eager step with all of them, or reload the optimizer state"
        )
    return vals[0] if len(vals) else 0


def _feed_lr(opt, gi, bi, idx):
    from flow.optim.optimizer import _float

    return np.asarray(_float(opt.param_groups[gi]["lr"]), dtype=np.float64)


def _feed_step(opt, gi, bi, idx):
    b = _bucket(opt, gi, bi)
    return np.asarray(int(_uniform(b.steps[idx], "step counts", opt, gi)) + 1, dtype=np.int64)


def _present(b, name, idx, opt, gi):
    pres = b.present.get(name)
    return bool(_uniform(pres[idx], f"'{name}' states", opt, gi)) if pres is not None else False


def _feed_first_step(opt, gi, bi, idx):
    return np.asarray(not _present(_bucket(opt, gi, bi), "momentum_buffer", idx, opt, gi))


def _feed_present(opt, gi, bi, idx, names=()):
    b = _bucket(opt, gi, bi)
    return np.array([_present(b, n, idx, opt, gi) for n in names], dtype=bool)


_FEEDERS = {"lr": _feed_lr, "step": _feed_step, "first_step": _feed_first_step}


def _bump(opt, gi, bi, idx, names):
    b = _bucket(opt, gi, bi)
    b.steps[idx] += 1
    for name, fill in names.items():
        b.state(name, fill)
        b.present[name][idx] = True


def _flag_state(ir, node):
    """The getter of the state a node's ``skip_if`` flag is written to (read by host bookkeeping after a run)."""
    flag = node.tags["skip_if"]
    for st, new in ir.updates:
        if new is flag:
            return ir.state_specs[st.id].get
    raise GraphTraceError(
        f"graph tracing: the skip_if flag of '{node.name}' must be written to a state (e.g. the grad "
        "scaler's found_inf) so that the step counters can follow it"
    )


def _unless(flag_get, fn) -> None:
    if not float(flag_get().reshape(-1)[0]):
        fn()


@contextmanager
def binding(tracer, optimizers):
    """``with binding(tracer, [(name, optimizer)]) as b``: call ``b.bind()`` once the modules' parameters
    are state inputs (so states are named after them); on a clean exit the update nodes are finished,
    and whatever happens the optimizers are restored."""
    ob = OptimizerBinding(tracer, optimizers)
    try:
        yield ob
        ob.finish()
    finally:
        ob.close()


class OptimizerBinding:
    """Binds the optimizers of one trace (see the module docstring); :meth:`close` ends it."""

    def __init__(self, tracer, optimizers) -> None:
        self.tracer = tracer
        self.optimizers = list(optimizers)
        self._hosts: list = []  # (tensor, its array before tracing)
        self._saved: list = []  # (bucket, steps, present) as they were before tracing
        self._where: dict = {}  # id(param) -> (optimizer name, opt, gi, bi, i)
        self._idx: dict = {}  # (id(opt), gi, bi) -> indices of the parameters with a gradient, filled lazily

    def bind(self) -> None:
        """Make the optimizers' parameters, states and host values graph inputs."""
        for oname, opt in self.optimizers:
            self._bind(oname, opt)

    def _bind(self, oname: str, opt) -> None:
        tr = self.tracer
        pnames = {}
        for gi, group in enumerate(opt.param_groups):
            for i, p in enumerate(group["params"]):
                pnames[id(p)] = tr.add_state_tensor(p, f"{oname}.group{gi}.param{i}", "param").name
        for gi, group in enumerate(opt.param_groups):
            names = opt._state_names(group)
            for bi, b in enumerate(opt._flat[gi][1]):
                self._saved.append((b, b.steps.copy(), {k: v.copy() for k, v in b.present.items()}))
                for i, p in enumerate(b.params):
                    self._where[id(p)] = (oname, opt, gi, bi, i)
                for name, fill in names.items():
                    for i, t in enumerate(b.state_views(name, fill)):
                        v = tr.add_state_tensor(t, f"{oname}.{pnames[id(b.params[i])]}.{name}", "optimizer")
                        # bound to the bucket's live buffer even after a rebuild of the group
                        tr.ir.state_specs[v.id].get = _StateSlot(opt, gi, bi, name, fill, i)
                for feed in ("lr",) + opt._feed_names():
                    self._host(f"{oname}.group{gi}.{feed}", b, feed, opt, gi, bi, names)

    def _host(self, name, b, feed, opt, gi, bi, names) -> None:
        from flow import _dtype as D

        shape, dtype = {
            "lr": ((), D.float64),
            "step": ((), D.int64),
            "first_step": ((), D.bool),
            "present": ((len(names),), D.bool),
        }[feed]
        arr, t = b.feed(feed, shape, dtype)
        idx = partial(self._grads_of, opt, gi, bi)
        fn = partial(_feed_present, names=tuple(names)) if feed == "present" else _FEEDERS[feed]
        sym = self.tracer.host_input(name, TensorMeta(shape, dtype, b.device), lambda: fn(opt, gi, bi, idx()))
        self._hosts.append((t, arr))
        t._data = sym._data

    def _grads_of(self, opt, gi, bi):
        return self._idx[(id(opt), gi, bi)]

    def finish(self) -> None:
        """After ``build`` returned: mark the update nodes in place and give each its bookkeeping effect."""
        tr = self.tracer
        ir = tr.ir
        for node in ir.nodes:
            if node.name not in UPDATE_OPS or not node.attrs.get("inplace"):
                continue
            params = node.inputs[0]
            node.inplace = inplace_outputs(node.name, len(params), len(node.outputs))
            node.tags["side_effect"] = True
            node.tags["phase"] = "optimizer"
            where = []
            for v in map(_param_of, params):
                spec = ir.state_specs.get(v.id) if v.kind == "state" else None
                hit = self._where.get(id(spec.tensor)) if spec is not None and spec.tensor is not None else None
                if hit is None:
                    raise GraphTraceError(
                        f"graph tracing: '{node.name}' updates a parameter of an optimizer the graph does not "
                        "know; add it with nn.Graph.add_optimizer, or make it visible to flow.compile (a "
                        "global, a closure variable or an argument of the compiled function)"
                    )
                where.append(hit)
            oname, opt, gi, bi, _ = where[0]
            ia = np.asarray([w[4] for w in where], dtype=np.int64)
            key = (id(opt), gi, bi)
            self._idx[key] = ia if key not in self._idx else np.union1d(self._idx[key], ia)
            names = dict(opt._state_names(opt.param_groups[gi]))
            bump = partial(_bump, opt, gi, bi, ia, names)
            if node.tags.get("skip_if") is not None:  # a skipped update (loss scaling) leaves the counters too
                bump = partial(_unless, _flag_state(ir, node), bump)
            ir.effects.append(Effect(f"{oname}.group{gi}: step counters of {len(ia)} parameters", bump))
        for key in self._keys():
            self._idx.setdefault(key, np.zeros(0, dtype=np.int64))

    def _keys(self):
        for _, opt in self.optimizers:
            for gi in range(len(opt.param_groups)):
                for bi in range(len(opt._flat[gi][1])):
                    yield (id(opt), gi, bi)

    def close(self) -> None:
        """Restore what tracing changed: the host tensors' arrays and the optimizers' bookkeeping."""
        for t, arr in self._hosts:
            t._data = arr
        for b, steps, present in self._saved:
            b.steps[...] = steps
            for k, v in present.items():
                b.present[k][...] = v
