"""Dtype casts, copies and device transfers."""

from __future__ import annotations

from flow import _dtype as D
from flow._dispatch import call
from flow.errors import OpTypeError
from flow.ops import meta as M
from flow.ops._define import ANY_TENSOR, defop, kernel
from flow.registry.ops import ANY, Attr


def _cast_meta(x, dtype):
    return M.TensorMeta(tuple(x.shape), D.as_dtype(dtype), x.device)


def _cast_grad(ctx, g):
    src = ctx.input_dtype(0)
    return (g.to(src) if src.is_floating_point else None,)


CAST = defop(
    "cast",
    ["x"],
    [Attr("dtype", str, choices=tuple(d.name for d in D.ALL_DTYPES))],
    meta=_cast_meta,
    dtypes=ANY,
    grad=_cast_grad,
    save="none",
)


@kernel(CAST)
def _cast_kernel(xp):
    def run(x, dtype):
        return x.astype(D.as_dtype(dtype).np)

    return run


def to_dtype(x, dtype) -> "Tensor":  # noqa: F821
    """Cast ``x`` to ``dtype`` (a no-op returning ``x`` when it already has it)."""
    dtype = D.as_dtype(dtype)
    if x.dtype is dtype:
        return x
    return call(CAST, x, dtype=dtype.name)


CLONE = defop(
    "clone", ["x"], meta=M.same, dtypes=ANY, grad=lambda ctx, g: (g,), save="none", no_error_samples=ANY_TENSOR
)


@kernel(CLONE)
def _clone_kernel(xp):
    def run(x):
        return xp.array(x, copy=True)

    return run


def clone(x, *, memory_format=None) -> "Tensor":  # noqa: F821
    """A copy of ``x`` with its own storage; gradients flow back to ``x``."""
    return call(CLONE, x)


CONTIGUOUS = defop(
    "contiguous", ["x"], meta=M.same, dtypes=ANY, grad=lambda ctx, g: (g,), save="none", no_error_samples=ANY_TENSOR
)


@kernel(CONTIGUOUS)
def _contig_kernel(xp):
    # ascontiguousarray alone makes a 0-d array 1-d
    return lambda x: xp.ascontiguousarray(x).reshape(x.shape)


def contiguous(x) -> "Tensor":  # noqa: F821
    flags = getattr(x._data, "flags", None)
    if flags is None or flags.c_contiguous:
        return x
    return call(CONTIGUOUS, x)


# -- opcheck samples --------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import SampleInput  # noqa: E402


def _cast_samples():
    x = S.uniform((3, 4), seed=1)
    for name in ("float32", "float64", "float16", "bfloat16"):
        # only a float64 round trip is exact enough for finite differences
        yield SampleInput((x,), {"dtype": name}, rtol=1e-2, atol=1e-2, grad=name == "float64")
    yield SampleInput((x,), {"dtype": "int64"}, grad=False)
    yield SampleInput((S.ints((5,), 0, 3),), {"dtype": "bool"})


set_samples(CAST, _cast_samples)
set_samples(CLONE, S.unary())
set_samples(CONTIGUOUS, lambda: [SampleInput((S.uniform((4, 3), seed=1).t(),))])


def check_tensor(op: str, x, arg: str = "input") -> None:
    from flow._tensor import Tensor

    if not isinstance(x, Tensor):
        raise OpTypeError(op, f"'{arg}' must be a Tensor, got {type(x).__name__}")
