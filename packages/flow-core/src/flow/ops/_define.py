"""How the core declares its ops: next to the Python function that calls them.

``defop`` records an op's schema, meta rule and gradient; ``kernel`` records
a reference kernel. Nothing is registered at import: the built-in plugin
:mod:`flow.ops.plugin` registers everything recorded here through the same
hooks a third-party plugin uses.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from flow._dispatch import OpHandle
from flow.registry.ops import Attr, Dtypes, schema

OP_SPECS: list[dict] = []
# ``no_error_samples=`` of ops that take every tensor (any dtype, any shape) and have no attributes
ANY_TENSOR = "takes a tensor of any dtype and shape, and has no attributes"
KERNEL_SPECS: list[dict] = []


def defop(
    name: str,
    inputs: Sequence[str],
    attrs: Sequence[Attr] = (),
    outputs: Sequence[str] = ("out",),
    *,
    meta: Callable,
    dtypes: Dtypes | Mapping[str, Dtypes] | None = None,
    grad: Callable | None = None,
    save: str = "both",
    elementwise: bool = False,
    samples: Callable | None = None,
    **kwargs,
) -> OpHandle:
    """Declare a core op and return its handle (what the Python function calls).

    ``dtypes`` is the dtype rule of every tensor input (or a mapping input name -> rule), see
    :class:`flow.registry.ops.Dtypes`. Every op must give one: opcheck (and so the test suite)
    fails on an input without a rule.
    """
    OP_SPECS.append(
        dict(
            schema=schema(name, inputs, attrs, outputs, dtypes=dtypes),
            meta=meta,
            grad=grad,
            save=save,
            elementwise=elementwise,
            samples=samples,
            **kwargs,
        )
    )
    return OpHandle(name)


def promote_float(op: str | OpHandle, x, k: int = 0):
    """``x`` as input ``k`` of ``op`` takes it: cast to the default float dtype when the op's
    schema promotes integer and bool input there (``FLOAT_PROMOTE``), as is otherwise."""
    from flow import _dtype as D
    from flow.registry import get_op

    opdef = (op.opdef or op.resolve()) if isinstance(op, OpHandle) else get_op(op)
    rule = opdef.schema.inputs[k].dtypes
    if rule is not None and rule.promote and not x.dtype.is_floating_point:
        from flow.ops.conversion import to_dtype

        return to_dtype(x, D._default_dtype)
    return x


def kernel(op: str | OpHandle, device: str = "generic", *, dtypes=None, name: str = "default"):
    """Decorator: record a kernel for ``op``. ``device="generic"`` takes a factory ``fn(xp)``."""
    opname = op.name if isinstance(op, OpHandle) else op

    def deco(fn):
        KERNEL_SPECS.append(dict(op=opname, device=device, fn=fn, dtypes=dtypes, name=name))
        return fn

    return deco


def generic(op: str | OpHandle, fn_of_xp: Callable) -> None:
    """Record a generic kernel given as a factory of the array module (``lambda xp: xp.exp``)."""
    opname = op.name if isinstance(op, OpHandle) else op
    KERNEL_SPECS.append(dict(op=opname, device="generic", fn=fn_of_xp, dtypes=None, name="default"))


def set_samples(op: str | OpHandle, fn: Callable) -> None:
    """Attach opcheck samples to an op declared earlier (``fn() -> iterable of SampleInput``)."""
    opname = op.name if isinstance(op, OpHandle) else op
    for spec in OP_SPECS:
        if spec["schema"].name == opname:
            spec["samples"] = fn
            return
    raise KeyError(f"set_samples: no core op named '{opname}'")
