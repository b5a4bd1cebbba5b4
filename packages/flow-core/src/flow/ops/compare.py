"""Comparisons, logical and bitwise ops, and float classification (isnan, isinf, isfinite)."""

from __future__ import annotations

from flow import _dtype as D
from flow._dispatch import binary, call
from flow.errors import OpTypeError
from flow.ops import meta as M
from flow.ops._define import ANY_TENSOR, defop, generic
from flow.registry.ops import ANY, INTEGRAL


def _def_cmp(name, np_name):
    h = defop(
        name, ["input", "other"], meta=M.elementwise(name, out_dtype=D.bool), dtypes=ANY, save="none", elementwise=True
    )
    generic(h, lambda xp, n=np_name: getattr(xp, n))

    def fn(input, other):
        return binary(h, input, other)

    fn.__name__ = name
    fn.__doc__ = f"Elementwise ``{name}`` comparison giving a bool tensor."
    return h, fn


EQ, eq = _def_cmp("eq", "equal")
NE, ne = _def_cmp("ne", "not_equal")
LT, lt = _def_cmp("lt", "less")
LE, le = _def_cmp("le", "less_equal")
GT, gt = _def_cmp("gt", "greater")
GE, ge = _def_cmp("ge", "greater_equal")
greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne


def _bool_meta(name):
    rule = M.elementwise(name, out_dtype=D.bool)
    return rule


def _def_logical(name, np_name):
    h = defop(name, ["input", "other"], meta=_bool_meta(name), dtypes=ANY, save="none", elementwise=True)
    generic(h, lambda xp, n=np_name: getattr(xp, n))

    def fn(input, other):
        return binary(h, input, other)

    fn.__name__ = name
    fn.__doc__ = f"Elementwise {name.replace('_', ' ')}, treating nonzero as True."
    return h, fn


LOGICAL_AND, logical_and = _def_logical("logical_and", "logical_and")
LOGICAL_OR, logical_or = _def_logical("logical_or", "logical_or")
LOGICAL_XOR, logical_xor = _def_logical("logical_xor", "logical_xor")

LOGICAL_NOT = defop(
    "logical_not",
    ["input"],
    meta=lambda x: M.TensorMeta(tuple(x.shape), D.bool, x.device),
    dtypes=ANY,
    save="none",
    elementwise=True,
    no_error_samples=ANY_TENSOR,
)
generic(LOGICAL_NOT, lambda xp: xp.logical_not)


def logical_not(input):
    """Elementwise NOT, giving a bool tensor."""
    return call(LOGICAL_NOT, input)


def _def_bitwise(name, np_name):
    h = defop(
        name,
        ["input", "other"],
        meta=M.elementwise(name),
        dtypes=INTEGRAL,
        save="none",
        elementwise=True,
        eager_meta=True,
    )
    generic(h, lambda xp, n=np_name: getattr(xp, n))

    def fn(input, other):
        return binary(h, input, other)

    fn.__name__ = name
    return h, fn


BITWISE_AND, bitwise_and = _def_bitwise("bitwise_and", "bitwise_and")
BITWISE_OR, bitwise_or = _def_bitwise("bitwise_or", "bitwise_or")
BITWISE_XOR, bitwise_xor = _def_bitwise("bitwise_xor", "bitwise_xor")


BITWISE_NOT = defop("bitwise_not", ["input"], meta=M.same, dtypes=INTEGRAL, save="none", elementwise=True)
generic(BITWISE_NOT, lambda xp: xp.invert)


def bitwise_not(input):
    return call(BITWISE_NOT, input)


def _def_class(name, np_name):
    h = defop(
        name,
        ["input"],
        meta=lambda x: M.TensorMeta(tuple(x.shape), D.bool, x.device),
        dtypes=ANY,
        save="none",
        elementwise=True,
        no_error_samples="takes a tensor of any dtype and shape (integers are finite), and has no attributes",
    )
    generic(h, lambda xp, n=np_name: getattr(xp, n))

    def fn(input):
        if not isinstance(input, _tensor_class()):
            raise OpTypeError(name, f"'input' must be a Tensor, got {type(input).__name__}")
        return call(h, input)

    fn.__name__ = name
    return h, fn


def _tensor_class():
    from flow._tensor import Tensor

    return Tensor


ISNAN, isnan = _def_class("isnan", "isnan")
ISINF, isinf = _def_class("isinf", "isinf")
ISFINITE, isfinite = _def_class("isfinite", "isfinite")


def equal(input, other) -> bool:
    """True when both tensors have the same shape and elements."""
    if tuple(input.shape) != tuple(other.shape):
        return False
    return bool(eq(input, other).all().item())


def allclose(input, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    return bool(isclose(input, other, rtol, atol, equal_nan).all().item())


def isclose(input, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
    from flow.ops.unary import abs as _abs

    diff = _abs(input - other)
    ok = diff <= atol + rtol * _abs(other)
    ok = ok | (input == other)
    if equal_nan:
        ok = ok | (isnan(input) & isnan(other))
    return ok


# -- opcheck samples ------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import SampleInput  # noqa: E402


def _cmp_samples():
    a = S.ints((3, 4), -2, 3, seed=1).double()
    yield SampleInput((a, S.ints((3, 4), -2, 3, seed=2).double()))
    yield SampleInput((a, S.ints((4,), -2, 3, seed=3).double()))
    yield SampleInput((S.ints((3, 4), -2, 3, seed=4), S.ints((3, 4), -2, 3, seed=5)))
    yield from S.broadcast_errors(a, S.uniform((2, 4), seed=6))


def _bool2():
    yield SampleInput((S.bools((3, 4), 1), S.bools((3, 4), 2)))
    yield SampleInput((S.bools((3, 4), 1), S.bools((4,), 3)))
    yield from S.broadcast_errors(S.bools((3, 4), 1), S.bools((2, 4), 3))


def _int2():
    yield SampleInput((S.ints((3, 4), 0, 16, 1), S.ints((3, 4), 0, 16, 2)))
    yield SampleInput((S.bools((3, 4), 1), S.bools((3, 4), 2)))
    yield from S.broadcast_errors(S.ints((3, 4), 0, 16, 1), S.ints((2, 4), 0, 16, 2))


def _classify():
    import numpy as np

    yield SampleInput((S.t(np.array([0.0, -1.5, np.inf, -np.inf, np.nan, 3.0])),))


for _h in (EQ, NE, LT, LE, GT, GE):
    set_samples(_h, _cmp_samples)
for _h in (LOGICAL_AND, LOGICAL_OR, LOGICAL_XOR):
    set_samples(_h, _bool2)
set_samples(LOGICAL_NOT, lambda: [SampleInput((S.bools((3, 4)),))])
for _h in (BITWISE_AND, BITWISE_OR, BITWISE_XOR):
    set_samples(_h, _int2)
set_samples(BITWISE_NOT, lambda: [SampleInput((S.ints((3, 4), 0, 16),)), SampleInput((S.bools((5,)),))])
for _h in (ISNAN, ISINF, ISFINITE):
    set_samples(_h, lambda: [*_classify(), SampleInput((S.ints((3, 4), -3, 3),)), SampleInput((S.bools((5,)),))])

__all__ = [
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "greater",
    "greater_equal",
    "less",
    "less_equal",
    "not_equal",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logical_not",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_not",
    "isnan",
    "isinf",
    "isfinite",
    "equal",
    "allclose",
    "isclose",
]
