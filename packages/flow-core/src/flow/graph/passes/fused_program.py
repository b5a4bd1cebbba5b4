"""The ``fused_elementwise`` op: what the ``fusion`` pass replaces a group of elementwise nodes with.

Schema: ``fused_elementwise(Tensor[] inputs, *, program) -> (*outs)``. The ``program``
(:class:`FusedProgram`) is the whole computation as plain, hashable data, so CSE, JSON dumps and
kernel caches can key on it:

* ``shape``: the iteration shape (every elementwise instruction produces a value of this shape);
* ``inputs``: ``(shape, dtype name)`` per tensor input; an input's shape broadcasts to ``shape``
  (NumPy rules; ``expand`` nodes in front of the group are absorbed this way);
* ``instrs``: ``(op name, args, attrs, dtype name)`` in evaluation order; an argument is
  ``("i", k)`` (input ``k``), ``("t", j)`` (the result of instruction ``j``) or ``("c", value)``
  (a scalar constant, as the op received it); ``attrs`` are the node's attributes as sorted items;
* ``outputs``: the instructions whose values leave the group, in output order;
* ``reduce``: how many trailing dims of ``shape`` the ``sum``/``mean`` instructions reduce (0:
  none). A reduction only produces an output; its input is an instruction of the group.

Kernels: each device's lowering (the CPU backend's native loop, :mod:`flow.backends.cpu.fusion`,
registered for ``cpu``; see :mod:`flow.graph.pass_tables`) and a generic reference kernel that
runs each instruction with the op's own reference kernel
(any NumPy-like device; also what a native build falls back to). Both accept ``out=`` (a buffer,
or one per output with ``None`` for "allocate"), which memory planning uses.
The op has no gradient: fusion runs on the whole traced step, backward included.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

import numpy as np

FUSED_OP = "fused_elementwise"


@dataclass(frozen=True)
class FusedProgram:
    shape: tuple
    inputs: tuple
    instrs: tuple
    outputs: tuple
    reduce: int = 0

    @cached_property
    def key(self) -> str:
        text = repr((self.shape, self.inputs, [(o, a, t, d) for o, a, t, d in self.instrs], self.outputs, self.reduce))
        return hashlib.sha256(text.encode()).hexdigest()

    @cached_property
    def _hash(self) -> int:
        return hash(self.key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, FusedProgram) and other.key == self.key

    def out_shape(self, k: int) -> tuple:
        op, _, attrs, _ = self.instrs[self.outputs[k]]
        if op in ("sum", "mean"):
            keep = dict(attrs).get("keepdim", False)
            r = self.reduce
            return tuple(self.shape[: len(self.shape) - r]) + ((1,) * r if keep else ())
        return tuple(self.shape)

    def out_dtype(self, k: int) -> str:
        return self.instrs[self.outputs[k]][3]

    @property
    def ops(self) -> list:
        return [i[0] for i in self.instrs]

    def __repr__(self) -> str:
        dt = {"float32": "f32", "float64": "f64", "bool": "b1"}
        outs = ",".join(dt.get(self.out_dtype(k), "?") for k in range(len(self.outputs)))
        return (
            f"<{'+'.join(self.ops)} over [{','.join(map(str, self.shape))}] -> {outs}"
            f"{' reduce ' + str(self.reduce) if self.reduce else ''} #{self.key[:8]}>"
        )


# -- the op: meta rule, reference kernel, CPU kernel ------------------------------------------------
def _meta(inputs, program):
    from flow import _dtype as D
    from flow.errors import OpError
    from flow.ops.meta import TensorMeta

    if not isinstance(program, FusedProgram):
        raise OpError(FUSED_OP, f"'program' must be a FusedProgram, got {type(program).__name__}")
    if len(inputs) != len(program.inputs):
        raise OpError(FUSED_OP, f"the program takes {len(program.inputs)} inputs, got {len(inputs)}")
    for k, (x, (shape, dt)) in enumerate(zip(inputs, program.inputs)):
        if tuple(x.shape) != tuple(shape) or x.dtype.name != dt:
            raise OpError(
                FUSED_OP, f"input {k} is {x.dtype.name}{list(x.shape)}, the program expects {dt}{list(shape)}"
            )
    dev = inputs[0].device if inputs else None
    metas = tuple(
        TensorMeta(program.out_shape(k), D.as_dtype(program.out_dtype(k)), dev) for k in range(len(program.outputs))
    )
    return metas[0] if len(metas) == 1 else metas


_REF_CACHE: dict = {}


def _ref_op(name: str, dtype_name: str):
    from flow import _dtype as D
    from flow.graph.passes.constant_folding import reference_kernel
    from flow.registry import get_op

    key = (name, dtype_name)
    fn = _REF_CACHE.get(key)
    if fn is None:
        fn = _REF_CACHE[key] = reference_kernel(get_op(name), D.as_dtype(dtype_name))
    return fn


def evaluate(program: FusedProgram, inputs: list, xp=np) -> list:
    """Run the program instruction by instruction with each op's reference kernel (the unfused
    computation); returns the outputs (broadcast to their shapes, own memory)."""
    vals: list = []
    for op, args, attrs, dt in program.instrs:
        a = []
        first_dt = None
        for kind, x in args:
            if kind == "i":
                v = inputs[x]
                first_dt = first_dt or program.inputs[x][1]
            elif kind == "t":
                v = vals[x]
                first_dt = first_dt or program.instrs[x][3]
            else:
                v = x
            a.append(v)
        fn = _ref_op(op, first_dt or dt)
        vals.append(fn(*a, **dict(attrs)))
    outs = []
    for k, j in enumerate(program.outputs):
        shape, dt = program.out_shape(k), np.dtype(program.out_dtype(k))
        v = xp.asarray(vals[j])
        outs.append(xp.array(xp.broadcast_to(v, shape), dtype=dt, copy=True))
    return outs


def store(outs: list, out):
    if out is None:
        return outs[0] if len(outs) == 1 else tuple(outs)
    bufs = (out,) if not isinstance(out, (tuple, list)) else out
    res = []
    for o, b in zip(outs, bufs):
        if b is None:
            res.append(o)
        else:
            b[...] = o
            res.append(b)
    return res[0] if len(res) == 1 else tuple(res)


def _reference_kernel(xp):
    def fused_reference(inputs, program, out=None):
        return store(evaluate(program, list(inputs), xp), out)

    fused_reference.supports_out = True
    return fused_reference


def _samples():
    from flow import _dtype as D
    from flow.testing import SampleInput

    rng = np.random.default_rng(0)
    out = []
    for dt in ("float32", "float64"):
        x = flow_tensor(rng.standard_normal((3, 4)))
        b = flow_tensor(rng.standard_normal((4,)))
        prog = FusedProgram(
            (3, 4),
            (((3, 4), dt), ((4,), dt)),
            (
                ("mul", (("i", 0), ("i", 1)), (), dt),
                ("add", (("t", 0), ("c", 0.5)), (), dt),
                ("tanh", (("t", 1),), (), dt),
                ("gt", (("t", 2), ("c", 0.0)), (), "bool"),
                ("sum", (("t", 2),), (("dim", (1,)), ("keepdim", False)), dt),
            ),
            (2, 3, 4),
            reduce=1,
        )
        out.append(SampleInput(([x, b],), {"program": prog}, grad=False, dtypes=(D.as_dtype(dt),)))
    from flow.errors import OpError
    from flow.testing import ErrorInput

    out.append(ErrorInput(([x, b],), {"program": "mul"}, OpError, "'program' must be a FusedProgram"))
    out.append(ErrorInput(([x],), {"program": prog}, OpError, "the program takes 2 inputs, got 1"))
    out.append(ErrorInput(([x, x],), {"program": prog}, OpError, "input 1 is"))
    return out


def flow_tensor(a):
    import flow

    return flow.tensor(a)


def register_op(registry) -> None:
    from flow.registry import Attr, schema
    from flow.registry.ops import ANY

    registry.register_op(
        schema(FUSED_OP, ["*inputs"], [Attr("program", object)], outputs=("*outs",), dtypes=ANY),
        _meta,
        None,
        samples=_samples,
        doc="A group of elementwise ops (and trailing reductions) as one loop.",
    )


def register_kernels(registry) -> None:
    registry.register_kernel(FUSED_OP, "generic", _reference_kernel)
