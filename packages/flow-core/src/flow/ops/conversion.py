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


def _cast_like_meta(x, other):
    op = "cast_like"
    if not M.is_tensor_like(x):
        raise OpTypeError(op, f"'x' must be a Tensor, got {type(x).__name__}")
    if not M.is_tensor_like(other):
        raise OpTypeError(op, f"'other' must be a Tensor (only its dtype is read), got {type(other).__name__}")
    return M.TensorMeta(tuple(x.shape), other.dtype, x.device)


def _cast_like_grad(ctx, g):
    src = ctx.input_dtype(0)
    return (g.to(src) if src.is_floating_point else None), None


# ``cast`` with the dtype taken from a tensor: a composite that means "x in the dtype of that
# activation" (batch norm's float32 weight applied to its input) records it as this op, so a graph
# pass that changes the activation's dtype (AMP) changes the result's with it, where a ``cast`` to
# the dtype seen at trace time would stay float32. ``other`` is never saved: the gradient needs
# only x's dtype.
CAST_LIKE = defop(
    "cast_like",
    ["x", "other"],
    meta=_cast_like_meta,
    dtypes=ANY,
    grad=_cast_like_grad,
    save="none",
)


@kernel(CAST_LIKE)
def _cast_like_kernel(xp):
    def run(x, other):
        # a new array even when the dtypes agree: the op is no view op (graph memory planning may
        # reuse its output's buffer); the eager no-op is cast_like() returning x without a call
        return x.astype(other.dtype, copy=True)

    return run


def cast_like(x, other) -> "Tensor":  # noqa: F821
    """``x`` converted to ``other``'s dtype, with ``x``'s shape and device (``Tensor.type_as``).

    ``other`` is read only for its dtype: its values, shape and device do not matter, and it gets
    no gradient; ``x``'s gradient is the output's converted back to ``x``'s dtype. An eager tensor
    already of that dtype comes back as it is (no copy), as with ``x.to(dtype)``. In a traced graph
    the op is recorded even then, so that passes changing dtypes (AMP) keep the result in
    ``other``'s dtype; ``simplify`` removes the calls that stay no-ops.

    >>> import flow
    >>> w = flow.ones(3)
    >>> cast_like(w, flow.zeros(2).bfloat16()).dtype
    flow.bfloat16
    """
    from flow._kinds import KINDS
    from flow._tensor import Tensor

    if not isinstance(x, Tensor):
        raise OpTypeError("cast_like", f"'x' must be a Tensor, got {type(x).__name__}")
    if not isinstance(other, Tensor):
        raise OpTypeError("cast_like", f"'other' must be a Tensor (only its dtype is read), got {type(other).__name__}")
    if x._data.__class__ not in KINDS and other._data.__class__ not in KINDS:  # eager arrays
        if x.dtype is other.dtype:
            return x
        if x.device is not other.device:  # only the dtype is read, wherever other lives
            return to_dtype(x, other.dtype)
    # other's autograd history is none of the result's business (it gets no gradient)
    return call(CAST_LIKE, x, other.detach() if other._requires_grad else other)


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
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def _cast_samples():
    x = S.uniform((3, 4), seed=1)
    for name in ("float32", "float64", "float16", "bfloat16"):
        # only a float64 round trip is exact enough for finite differences
        yield SampleInput((x,), {"dtype": name}, rtol=1e-2, atol=1e-2, grad=name == "float64")
    yield SampleInput((x,), {"dtype": "int64"}, grad=False)
    yield SampleInput((S.ints((5,), 0, 3),), {"dtype": "bool"})


def _cast_like_samples():
    x = S.uniform((3, 4), seed=1)
    # dtypes=(None,): opcheck keeps the samples' own dtypes (each pair is the point of the sample)
    for dx, do in (("float32", "float64"), ("float32", "bfloat16"), ("bfloat16", "float32"), ("float16", "float32")):
        other = S.uniform((2,), seed=2).to(getattr(D, do))
        yield SampleInput((x.to(getattr(D, dx)), other), dtypes=(None,), rtol=1e-2, atol=1e-2, grad=False)
    yield SampleInput((x, S.uniform((5, 1), seed=3)))  # same dtype: a copy, gradient the identity
    yield SampleInput((x, S.ints((2,), 0, 3)), grad=False)  # float -> int64
    yield SampleInput((S.ints((4,), 0, 3), x), dtypes=(None,), grad=False)  # int64 -> float
    yield ErrorInput((x, 3), {}, OpTypeError, "'other' must be a Tensor")
    yield ErrorInput((x, None), {}, OpTypeError, "input 'other' is required")


set_samples(CAST, _cast_samples)
set_samples(CAST_LIKE, _cast_like_samples)
set_samples(CLONE, S.unary())
set_samples(CONTIGUOUS, lambda: [SampleInput((S.uniform((4, 3), seed=1).t(),))])


def check_tensor(op: str, x, arg: str = "input") -> None:
    from flow._tensor import Tensor

    if not isinstance(x, Tensor):
        raise OpTypeError(op, f"'{arg}' must be a Tensor, got {type(x).__name__}")
