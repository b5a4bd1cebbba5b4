"""The optimizer update ops: what ``optimizer.step()`` runs, in eager and in graph mode.

``step()`` of every :class:`flow.optim.Optimizer` calls one of these ops through the dispatcher
(``flow.ops.call``) per parameter group, dtype bucket and run of parameters in the same state,
so interceptors, devices and graph passes see an optimizer update as one op:

``sgd_update(params[], grads[], momentum_buffers[], lr, first_step)``
``adam_update(params[], grads[], exp_avgs[], exp_avg_sqs[], max_exp_avg_sqs[], lr, step)``
``optimizer_update(params[], grads[], states[], lr, step, present)``: any other optimizer (Adagrad,
RMSprop, LAMB, a subclass): its ``_apply`` (by default ``_update`` over the run gathered into one
buffer) on a bare instance of the class named by attribute ``optimizer`` (``"module:QualName"``),
with the group's options in ``hyper``; ``states`` are name-major (every parameter's first state,
then the second ...) and ``present`` says, per state name, whether it held a value before the step.

The meaning is functional (outputs: the new parameters, then the new states, in input order);
with ``inplace=True`` (what ``step()`` passes, and what a kernel must then honour) the kernel
writes the outputs into the input arrays and returns those arrays, so each parameter is updated
in its own memory. ``lr``, ``first_step``, ``step`` and ``present`` are 0-d / 1-d host tensors
(graph mode feeds them before every run, so learning-rate schedules need no recompilation);
the optimizer keeps the step counts. :func:`inplace_outputs` gives the IR's in-place map.

A device plugin registers its own kernel with ``registry.register_kernel("adam_update", "cuda",
fn)`` (or for a dtype); ``fn`` takes the input arrays (lists for the variadic inputs) and the
attributes. The CPU kernels are the native multi-tensor code (:mod:`flow.ops.optim_kernels`).
"""

from __future__ import annotations

from flow import _dtype as D
from flow.errors import OpError, OpTypeError
from flow.ops._define import defop
from flow.ops.meta import TensorMeta
from flow.registry.ops import ANY, BOOL, FLOAT, INTEGER, Attr

__all__ = ["UPDATE_OPS", "inplace_outputs", "sgd_update", "adam_update", "optimizer_update"]

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
    from flow.ops.optim_kernels import optimizer_class

    if not params:
        raise OpError("optimizer_update", "expected at least one parameter")
    _check_scalars("optimizer_update", lr=lr, step=step)
    _check_like("optimizer_update", params, grads, "gradient")
    if len(states) != len(names) * len(params):
        raise OpError("optimizer_update", f"expected {len(names)} states per parameter, got {len(states)} in all")
    for k, name in enumerate(names):
        _check_like("optimizer_update", params, states[k * len(params) : (k + 1) * len(params)], f"state {name!r}")
    if tuple(present.shape) != (len(names),):
        raise OpError(
            "optimizer_update",
            f"'present' must have one flag per state name ({len(names)},), got shape {tuple(present.shape)}",
        )
    try:
        cls = optimizer_class(attrs.get("optimizer", ""))[0]
    except (ImportError, AttributeError, ValueError) as e:
        raise OpError(
            "optimizer_update",
            f"'optimizer'={attrs.get('optimizer', '')!r} names no optimizer class ('module:QualName'): {e}",
        ) from None
    if not hasattr(cls, "_apply"):
        raise OpError(
            "optimizer_update", f"'optimizer'={attrs.get('optimizer')!r} has no _apply (not a flow optimizer)"
        )
    return tuple(_m(p) for p in params) + tuple(_m(s) for s in states)


# -- samples for opcheck -------------------------------------------------------------------------


def _opt_samples(kind):
    def samples():
        from flow._creation import tensor
        from flow.errors import OpError as E
        from flow.ops._samples import uniform
        from flow.testing import ErrorInput, SampleInput

        shapes = [(3, 4), (5,)]
        ps = [uniform(s, seed=i) for i, s in enumerate(shapes)]
        gs = [uniform(s, seed=10 + i) for i, s in enumerate(shapes)]
        st = [uniform(s, 0.1, 1.0, seed=20 + i) for i, s in enumerate(shapes)]
        lr = tensor(0.1, dtype=D.float64)
        short, odd = gs[:1], [gs[1], gs[0]]  # one gradient too few; gradients of the wrong shapes
        if kind == "sgd":
            yield SampleInput((ps, gs, st, lr, tensor(False)), dict(momentum=0.9, weight_decay=0.01))
            yield SampleInput((ps, gs, [], lr, tensor(True)), dict(nesterov=False, maximize=True))
            yield ErrorInput((ps, short, st, lr, tensor(False)), {}, E, "expected one gradient per parameter")
            yield ErrorInput((ps, odd, st, lr, tensor(False)), {}, E, "gradient of shape (5,)")
            yield ErrorInput((ps, gs, st[:1], lr, tensor(False)), {}, E, "one momentum buffer per parameter")
            yield ErrorInput(([], [], [], lr, tensor(False)), {}, E, "at least one parameter")
            yield ErrorInput((ps, gs, st, lr.reshape(1), tensor(False)), {}, E, "'lr' must be a 0-d tensor")
            yield ErrorInput((ps, [g.float() for g in gs], st, lr, tensor(False)), {}, E, "gradient of dtype")
        elif kind == "adam":
            st2 = [uniform(s, 0.1, 1.0, seed=30 + i) for i, s in enumerate(shapes)]
            yield SampleInput((ps, gs, st, st2, [], lr, tensor(3)), dict(weight_decay=0.01))
            yield SampleInput((ps, gs, st, st2, st2, lr, tensor(1)), dict(amsgrad=True, decoupled=True))
            yield ErrorInput((ps, short, st, st2, [], lr, tensor(3)), {}, E, "expected one gradient")
            yield ErrorInput((ps, gs, odd, st2, [], lr, tensor(3)), {}, E, "exp_avg of shape (5,)")
            yield ErrorInput((ps, gs, st, st2, [], lr, tensor(3)), {"amsgrad": True}, E, "max_exp_avg_sq")
            yield ErrorInput((ps, gs, st, st2, [], lr, tensor([3])), {}, E, "'step' must be a 0-d tensor")
        else:
            hyper = (
                ("alpha", 0.99),
                ("centered", False),
                ("eps", 1e-8),
                ("foreach", None),
                ("maximize", False),
                ("momentum", 0.0),
                ("weight_decay", 0.0),
                ("capturable", False),
                ("differentiable", False),
            )
            at = dict(optimizer="flow.optim.rmsprop:RMSprop", hyper=hyper, names=("square_avg",))
            yield SampleInput((ps, gs, st, lr, tensor(2), tensor([True])), at)
            yield ErrorInput((ps, short, st, lr, tensor(2), tensor([True])), at, E, "expected one gradient")
            yield ErrorInput((ps, gs, st[:1], lr, tensor(2), tensor([True])), at, E, "expected 1 states per parameter")
            yield ErrorInput(
                (ps, gs, st, lr, tensor(2), tensor([True, False])), at, E, "'present' must have one flag per state name"
            )
            yield ErrorInput(
                (ps, gs, st, lr, tensor(2), tensor([True])),
                {**at, "optimizer": "flow.optim:NoSuchOptimizer"},
                E,
                "names no optimizer class",
            )

    return samples


# -- the ops --------------------------------------------------------------------------------------

_COMMON = dict(save="none", eager_meta=True)

sgd_update = defop(
    "sgd_update",
    ["*params", "*grads", "*momentum_buffers", "lr", "first_step"],
    [
        Attr("momentum", float, 0.0),
        Attr("dampening", float, 0.0),
        Attr("nesterov", bool, False),
        Attr("weight_decay", float, 0.0),
        Attr("maximize", bool, False),
        Attr("inplace", bool, False),
    ],
    outputs=("params", "momentum_buffers"),
    meta=_sgd_meta,
    samples=_opt_samples("sgd"),
    dtypes={"params": FLOAT, "grads": FLOAT, "momentum_buffers": FLOAT, "lr": FLOAT, "first_step": BOOL},
    doc="torch.optim.SGD's update of a list of parameters (flow.optim.SGD.step)",
    **_COMMON,
)

adam_update = defop(
    "adam_update",
    ["*params", "*grads", "*exp_avgs", "*exp_avg_sqs", "*max_exp_avg_sqs", "lr", "step"],
    [
        Attr("beta1", float, 0.9),
        Attr("beta2", float, 0.999),
        Attr("eps", float, 1e-8),
        Attr("weight_decay", float, 0.0),
        Attr("decoupled", bool, False),
        Attr("amsgrad", bool, False),
        Attr("maximize", bool, False),
        Attr("inplace", bool, False),
    ],
    outputs=("params", "states"),
    meta=_adam_meta,
    samples=_opt_samples("adam"),
    dtypes={
        "params": FLOAT,
        "grads": FLOAT,
        "exp_avgs": FLOAT,
        "exp_avg_sqs": FLOAT,
        "max_exp_avg_sqs": FLOAT,
        "lr": FLOAT,
        "step": INTEGER,
    },
    doc="torch.optim.Adam/AdamW's update of a list of parameters (flow.optim.Adam.step)",
    **_COMMON,
)

optimizer_update = defop(
    "optimizer_update",
    ["*params", "*grads", "*states", "lr", "step", "present"],
    [Attr("optimizer", str, ""), Attr("hyper", tuple, ()), Attr("names", tuple, ()), Attr("inplace", bool, False)],
    outputs=("params", "states"),
    meta=_generic_meta,
    samples=_opt_samples("generic"),
    dtypes={"params": FLOAT, "grads": FLOAT, "states": ANY, "lr": FLOAT, "step": INTEGER, "present": BOOL},
    doc="any other optimizer's update (its _apply), e.g. flow.optim.RMSprop.step",
    **_COMMON,
)

#: the optimizer update ops, by name
UPDATE_OPS = frozenset({"sgd_update", "adam_update", "optimizer_update"})


def inplace_outputs(op_name: str, n_params: int, n_outputs: int) -> dict[int, int]:
    """``{output index: flat tensor-input index}`` of an update op called with ``inplace=True``: the new
    parameters go into the parameters (inputs ``0..n-1``), the new states into the states, which come
    after the ``n`` gradients (flat input ``k + n`` for output ``k >= n``)."""
    if op_name not in UPDATE_OPS:
        raise KeyError(f"inplace_outputs: '{op_name}' is not an optimizer update op ({sorted(UPDATE_OPS)})")
    return {k: (k if k < n_params else k + n_params) for k in range(n_outputs)}
