"""Views and data movement: reshape/view, permute/transpose, expand (more as added).

View ops return tensors that share storage and the version counter with their
base, as in PyTorch.
"""

from __future__ import annotations

from flow._dispatch import call
from flow.errors import OpError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.registry.ops import ANY, Attr


def as_view(out, base):
    """Mark ``out`` as a view of ``base``: shared version counter, ``_base`` link."""
    out._version = base._version
    # the root of differentiable views; an alias such as detach()'s or a Parameter is a root of its own
    out._base = base if base._base is None or base._view_ver is None else base._base
    out._view_ver = base._version[0]
    return out


def infer_shape(op: str, shape, numel: int) -> tuple:
    shape = tuple(int(s) for s in shape)
    neg = [i for i, s in enumerate(shape) if s == -1]
    if len(neg) > 1:
        raise OpError(op, f"only one dimension can be -1, got shape {shape}")
    for s in shape:
        if s < -1:
            raise OpError(op, f"invalid shape dimension {s} in {shape}")
    known = 1
    for s in shape:
        if s != -1:
            known *= s
    if neg:
        if known == 0 or numel % known:
            raise OpError(op, f"shape {shape} is invalid for input of size {numel}")
        shape = shape[: neg[0]] + (numel // known,) + shape[neg[0] + 1 :]
    elif known != numel:
        raise OpError(op, f"shape {shape} is invalid for input of size {numel}")
    return shape


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _reshape_meta(x, shape):
    return M.TensorMeta(infer_shape("reshape", shape, _numel(x.shape)), x.dtype, x.device)


RESHAPE = defop(
    "reshape",
    ["input"],
    [Attr("shape", tuple, items=int)],
    meta=_reshape_meta,
    dtypes=ANY,
    grad=lambda ctx, g: (g.reshape(ctx.input_shape(0)),),
    save="none",
)


@kernel(RESHAPE)
def _reshape_kernel(xp):
    def run(x, shape):
        return x.reshape(shape)

    return run


def _shape_args(shape) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return tuple(int(s) for s in shape)


def reshape(input, *shape):
    """A tensor with the same data and a new shape; a view when the layout allows."""
    shape = _shape_args(shape)
    shape = infer_shape("reshape", shape, input._data.size)
    if shape == input._data.shape:
        return input
    out = call(RESHAPE, input, shape=shape)
    if getattr(out._data, "base", None) is not None:
        as_view(out, input)
    return out


def view(input, *shape):
    """Same as :func:`reshape` but errors if a copy would be needed (PyTorch's ``view``)."""
    shape = infer_shape("view", _shape_args(shape), input._data.size)
    flags = getattr(input._data, "flags", None)
    if flags is not None and not flags.c_contiguous and input._data.size > 1:
        import numpy as np

        try:
            v = input._data.view()
            v.shape = shape
        except (AttributeError, ValueError):
            raise OpError(
                "view", f"view of shape {shape} is not compatible with the input's strides; use .reshape(...) instead"
            ) from None
        del np
    out = call(RESHAPE, input, shape=shape)
    return as_view(out, input)


def _permute_meta(x, dims):
    nd = len(x.shape)
    if len(dims) != nd:
        raise OpError("permute", f"dims {dims} must name each of the {nd} dims exactly once")
    d = M.wrap_dims("permute", dims, nd)
    return M.TensorMeta(tuple(x.shape[i] for i in d), x.dtype, x.device)


def _permute_grad(ctx, g):
    dims = M.wrap_dims("permute", ctx.attrs["dims"], len(ctx.input_shape(0)))
    inv = [0] * len(dims)
    for i, d in enumerate(dims):
        inv[d] = i
    return (g.permute(*inv),)


PERMUTE = defop(
    "permute",
    ["input"],
    [Attr("dims", tuple, items=int)],
    meta=_permute_meta,
    dtypes=ANY,
    grad=_permute_grad,
    save="none",
)


@kernel(PERMUTE)
def _permute_kernel(xp):
    def run(x, dims):
        return xp.transpose(x, dims)

    return run


def permute(input, *dims):
    """Reorder dims (a view)."""
    dims = _shape_args(dims)
    return as_view(call(PERMUTE, input, dims=dims), input)


def transpose(input, dim0: int, dim1: int):
    """Swap two dims (a view)."""
    nd = input.ndim
    d0 = M.wrap_dim("transpose", dim0, nd, "dim0")
    d1 = M.wrap_dim("transpose", dim1, nd, "dim1")
    perm = list(range(nd))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return permute(input, *perm)


swapaxes = transpose
swapdims = transpose


def t(input):
    """Transpose a 2-d tensor (0-d and 1-d are returned as is)."""
    if input.ndim > 2:
        raise OpError("t", f"expects a tensor with <= 2 dims, got {input.ndim}")
    return input if input.ndim < 2 else transpose(input, 0, 1)


def _expand_meta(x, shape):
    shape = tuple(shape)
    if len(shape) < len(x.shape):
        raise OpError("expand", f"the number of sizes {len(shape)} must be >= the tensor's dims {len(x.shape)}")
    lead = len(shape) - len(x.shape)
    out = list(shape[:lead])
    for s in out:
        if s < 0:
            raise OpError("expand", f"-1 is not allowed in a leading, non-existing dimension ({shape})")
    for i, (have, want) in enumerate(zip(x.shape, shape[lead:])):
        if want == -1:
            want = have
        elif want < 0:
            raise OpError("expand", f"sizes must be non-negative (or -1 to keep a dim), got {want} at dim {lead + i}")
        if have != want and have != 1:
            raise OpError(
                "expand",
                f"the expanded size {want} must match the existing size {have} at dim {lead + i}"
                f" (input shape {tuple(x.shape)}, target {shape})",
            )
        out.append(want)
    return M.TensorMeta(tuple(out), x.dtype, x.device)


def _expand_grad(ctx, g):
    from flow.ops._grad_util import sum_to_shape

    return (sum_to_shape(g, ctx.input_shape(0)),)


EXPAND = defop(
    "expand",
    ["input"],
    [Attr("shape", tuple, items=int)],
    meta=_expand_meta,
    dtypes=ANY,
    grad=_expand_grad,
    save="none",
)


@kernel(EXPAND)
def _expand_kernel(xp):
    def run(x, shape):
        lead = len(shape) - x.ndim
        full = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(shape))
        return xp.broadcast_to(x, full)

    return run


def expand(input, *sizes):
    """Broadcast to a larger shape without copying (-1 keeps a dim)."""
    shape = _shape_args(sizes)
    if shape == tuple(input._data.shape):
        return input
    m = _expand_meta(input, shape)
    return as_view(call(EXPAND, input, shape=m.shape), input)


def expand_as(input, other):
    return expand(input, *other.shape)


def _unsqueeze_meta(x, dim):
    d = M.wrap_dim("unsqueeze", dim, len(x.shape) + 1)
    s = tuple(x.shape)
    return M.TensorMeta(s[:d] + (1,) + s[d:], x.dtype, x.device)


def unsqueeze(input, dim: int):
    """Insert a size-1 dim at ``dim`` (a view)."""
    m = _unsqueeze_meta(input, dim)
    return as_view(call(RESHAPE, input, shape=m.shape), input)


def squeeze(input, dim=None):
    """Drop size-1 dims (all, or those in ``dim``) (a view)."""
    s = tuple(input.shape)
    if dim is None:
        shape = tuple(x for x in s if x != 1)
    else:
        dims = M.wrap_dims("squeeze", dim, len(s)) if s else ()
        shape = tuple(x for i, x in enumerate(s) if not (i in dims and x == 1))
    if shape == s:
        return input
    return as_view(call(RESHAPE, input, shape=shape), input)


def flatten(input, start_dim: int = 0, end_dim: int = -1):
    """Merge dims ``start_dim..end_dim`` into one."""
    s = tuple(input.shape)
    if not s:
        return reshape(input, 1)
    a = M.wrap_dim("flatten", start_dim, len(s), "start_dim")
    b = M.wrap_dim("flatten", end_dim, len(s), "end_dim")
    if a > b:
        raise OpError("flatten", f"start_dim {start_dim} comes after end_dim {end_dim}")
    n = 1
    for x in s[a : b + 1]:
        n *= x
    return reshape(input, s[:a] + (n,) + s[b + 1 :])


# -- opcheck samples ------------------------------------------------------------------
from flow.errors import OpIndexError, OpTypeError  # noqa: E402
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def _reshape_samples():
    x = S.uniform((2, 3, 4), seed=1)
    yield SampleInput((x,), {"shape": (6, 4)})
    yield SampleInput((x,), {"shape": (-1, 2)})
    yield SampleInput((S.uniform((6,), seed=2),), {"shape": (2, 1, 3)})
    yield SampleInput((S.uniform((0, 3), seed=2),), {"shape": (3, 0, 5)})
    yield ErrorInput((x,), {"shape": (5, 5)}, OpError, "invalid for input of size 24")
    yield ErrorInput((x,), {"shape": (-1, -1)}, OpError, "only one dimension can be -1")
    yield ErrorInput((x,), {"shape": (-2, -12)}, OpError, "invalid shape dimension -2")
    yield ErrorInput((x,), {"shape": ("6", 4)}, OpTypeError, "attribute 'shape' must hold int")
    yield ErrorInput((S.uniform((0, 3), seed=2),), {"shape": (-1, 0)}, OpError, "invalid for input of size 0")


def _permute_samples():
    x = S.uniform((2, 3, 4), seed=1)
    yield SampleInput((x,), {"dims": (2, 0, 1)})
    yield SampleInput((S.uniform((2, 3), seed=2),), {"dims": (1, 0)})
    yield SampleInput((x,), {"dims": (-1, 0, 1)})
    yield ErrorInput((x,), {"dims": (1, 0)}, OpError, "must name each of the 3 dims")
    yield ErrorInput((x,), {"dims": (0, 1, 1)}, OpError, "names a dimension twice")
    yield ErrorInput((x,), {"dims": (0, 1, 3)}, OpIndexError, "out of range")


def _expand_samples():
    x = S.uniform((3, 1), seed=1)
    yield SampleInput((x,), {"shape": (2, 3, 4)})
    yield SampleInput((x,), {"shape": (-1, 0)})
    yield SampleInput((S.uniform((1,), seed=2),), {"shape": (5,)})
    yield ErrorInput((x,), {"shape": (4,)}, OpError, "must be >= the tensor's dims")
    yield ErrorInput((x,), {"shape": (2, 4)}, OpError, "must match the existing size 3")
    yield ErrorInput((x,), {"shape": (-1, 3, 4)}, OpError, "-1 is not allowed")
    yield ErrorInput((x,), {"shape": (3, -2)}, OpError, "sizes must be non-negative")
    yield ErrorInput((x,), {"shape": (-3, 3, 4)}, OpError, "-1 is not allowed")


set_samples(RESHAPE, _reshape_samples)
set_samples(PERMUTE, _permute_samples)
set_samples(EXPAND, _expand_samples)

__all__ = [
    "reshape",
    "view",
    "permute",
    "transpose",
    "swapaxes",
    "swapdims",
    "t",
    "expand",
    "expand_as",
    "unsqueeze",
    "squeeze",
    "flatten",
]
