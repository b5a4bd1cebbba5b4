"""Slicing views: basic indexing, narrow/select, split/chunk/unbind, diagonal, movedim, unflatten (+ diag).

Every function here returns views sharing storage and the version counter with
the input (as PyTorch's). Basic indexing (ints, slices, None) is one op,
``basic_index``, whose index attribute is plain data: a tuple of

- an ``int`` (already wrapped, ``0 <= i < size``): select that dim;
- a ``(start, stop, step)`` tuple (``step > 0``): slice that dim;
- ``None``: insert a dim of size 1.

The remaining dims are kept. ``basic_index_put`` is its functional inverse
(a copy of the input with the indexed region replaced), used by gradients and
by ``__setitem__`` under autograd.
"""

from __future__ import annotations

from flow._dispatch import call
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.ops._grad_util import sum_to_shape
from flow.ops.movement import as_view, permute, reshape
from flow.registry.ops import ANY, Attr

FULL = (0, None, 1)  # the slice ``:`` in index-spec form


def _np_index(index) -> tuple:
    # A trailing Ellipsis makes NumPy return a (0-d) view rather than a scalar copy.
    return tuple(slice(*it) if it.__class__ is tuple else it for it in index) + (Ellipsis,)


def index_shape(op: str, shape, index) -> tuple:
    """Shape of ``x[index]`` for an index spec; errors name the dim, its size and the index."""
    shape = tuple(shape)
    out = []
    d = 0
    for it in index:
        if it is None:
            out.append(1)
            continue
        if d >= len(shape):
            raise OpIndexError(op, f"too many indices for a tensor of dimension {len(shape)}")
        n = shape[d]
        if isinstance(it, tuple):
            if len(it) != 3 or any(v is not None and (isinstance(v, bool) or not isinstance(v, int)) for v in it):
                raise OpTypeError(op, f"a slice in the index spec must be (start, stop, step) of ints, got {it!r}")
            start, stop, step = it
            if step is None or step <= 0:
                raise OpError(op, f"slice step must be positive, got {step} (dim {d})")
            out.append(len(range(*slice(start, stop, step).indices(n))))
        elif isinstance(it, int) and not isinstance(it, bool):
            if not 0 <= it < n:
                raise OpIndexError(op, f"index {it} is out of range for dim {d} with size {n}")
        else:
            raise OpTypeError(op, f"invalid entry {it!r} in the index spec")
        d += 1
    return tuple(out) + shape[d:]


def _basic_index_meta(x, index):
    return M.TensorMeta(index_shape("basic_index", x.shape, index), x.dtype, x.device)


def _basic_index_grad(ctx, g):
    from flow._creation import zeros

    z = zeros(ctx.input_shape(0), dtype=g.dtype, device=g.device)
    return (call(BASIC_INDEX_PUT, z, g, index=ctx.attrs["index"]),)


BASIC_INDEX = defop(
    "basic_index",
    ["input"],
    [Attr("index", tuple)],
    meta=_basic_index_meta,
    dtypes=ANY,
    grad=_basic_index_grad,
    save="none",
)


@kernel(BASIC_INDEX)
def _basic_index_kernel(xp):
    def run(x, index):
        return x[_np_index(index)]

    return run


def _basic_put_meta(x, values, index):
    dev = M.check_same_device("basic_index_put", x, values)
    if values.dtype != x.dtype:
        raise OpTypeError("basic_index_put", f"'values' must have the input's dtype {x.dtype}, got {values.dtype}")
    region = index_shape("basic_index_put", x.shape, index)
    M.broadcast_shapes("basic_index_put", region, tuple(values.shape))
    if len(values.shape) > len(region) or M.broadcast_shapes("basic_index_put", region, values.shape) != region:
        raise OpError(
            "basic_index_put",
            f"'values' of shape {tuple(values.shape)} cannot be broadcast to the indexed region of shape {region}",
        )
    return M.TensorMeta(tuple(x.shape), x.dtype, dev)


def _basic_put_grad(ctx, g):
    index = ctx.attrs["index"]
    gx = gv = None
    if ctx.next[0][0] is not None:
        from flow._creation import zeros

        gx = call(BASIC_INDEX_PUT, g, zeros((), dtype=g.dtype, device=g.device), index=index)
    if ctx.next[1][0] is not None:
        gv = sum_to_shape(call(BASIC_INDEX, g, index=index), ctx.input_shape(1))
    return gx, gv


BASIC_INDEX_PUT = defop(
    "basic_index_put",
    ["input", "values"],
    [Attr("index", tuple)],
    meta=_basic_put_meta,
    dtypes=ANY,
    grad=_basic_put_grad,
    save="none",
)


@kernel(BASIC_INDEX_PUT)
def _basic_put_kernel(xp):
    def run(x, values, index):
        out = x.copy()
        out[_np_index(index)] = values
        return out

    return run


def basic_index(input, index: tuple):
    """``input[index]`` for an index spec (see the module doc): a view."""
    return as_view(call(BASIC_INDEX, input, index=tuple(index)), input)


def _wrap_index(op: str, i, size: int, dim: int, arg: str = "index") -> int:
    if isinstance(i, bool) or not isinstance(i, int):
        try:
            i = i.__index__()
        except (AttributeError, TypeError):
            raise OpTypeError(op, f"'{arg}' must be an int, got {type(i).__name__}") from None
    if not -size <= i < size:
        raise OpIndexError(op, f"{arg} {i} is out of range for dim {dim} with size {size}")
    return i + size if i < 0 else i


def select(input, dim: int, index: int):
    """The slice at ``index`` along ``dim``, with that dim removed (a view)."""
    nd = input.ndim
    if nd == 0:
        raise OpIndexError("select", "cannot select from a 0-d tensor")
    d = M.wrap_dim("select", dim, nd)
    i = _wrap_index("select", index, input.shape[d], d)
    return basic_index(input, (FULL,) * d + (i,))


def narrow(input, dim: int, start: int, length: int):
    """``length`` elements of ``dim`` from ``start`` on (a view)."""
    nd = input.ndim
    if nd == 0:
        raise OpIndexError("narrow", "cannot narrow a 0-d tensor")
    d = M.wrap_dim("narrow", dim, nd)
    n = input.shape[d]
    if hasattr(start, "__index__") and not isinstance(start, int):
        start = start.__index__()
    if not -n <= start <= n:
        raise OpIndexError("narrow", f"start {start} is out of range for dim {d} with size {n}")
    start = start + n if start < 0 else start
    if length < 0:
        raise OpError("narrow", f"length must be non-negative, got {length}")
    if start + length > n:
        raise OpIndexError("narrow", f"start ({start}) + length ({length}) exceeds the size {n} of dim {d}")
    return basic_index(input, (FULL,) * d + ((start, start + length, 1),))


# -- split / chunk / unbind: one multi-output op each, outputs are views -------------------
def _split_meta(x, sizes, dim):
    nd = len(x.shape)
    if nd == 0:
        raise OpError("split", "cannot split a 0-d tensor")
    d = M.wrap_dim("split", dim, nd)
    n = x.shape[d]
    if not sizes or any(s < 0 for s in sizes) or sum(sizes) != n:
        raise OpError("split", f"split sizes {list(sizes)} must be non-negative and sum to the size {n} of dim {d}")
    s = tuple(x.shape)
    return tuple(M.TensorMeta(s[:d] + (k,) + s[d + 1 :], x.dtype, x.device) for k in sizes)


def _split_grad(ctx, *gs):
    from flow.ops.shape_ops import cat

    return (cat(list(gs), ctx.attrs["dim"]),)


SPLIT = defop(
    "split",
    ["input"],
    [Attr("sizes", tuple, items=int), Attr("dim", int, 0)],
    outputs=("*outs",),
    meta=_split_meta,
    dtypes=ANY,
    grad=_split_grad,
    save="none",
)


@kernel(SPLIT)
def _split_kernel(xp):
    def run(x, sizes, dim=0):
        d = dim % x.ndim
        pre = (slice(None),) * d
        outs, at = [], 0
        for k in sizes:
            outs.append(x[pre + (slice(at, at + k),)])
            at += k
        return tuple(outs)

    return run


def split(tensor, split_size_or_sections, dim: int = 0):
    """Split into pieces of ``split_size`` (the last may be smaller) or of the listed sizes (views)."""
    if tensor.ndim == 0:
        raise OpError("split", "cannot split a 0-d tensor")
    d = M.wrap_dim("split", dim, tensor.ndim)
    n = tensor.shape[d]
    if isinstance(split_size_or_sections, int) and not isinstance(split_size_or_sections, bool):
        s = split_size_or_sections
        if s < 0 or (s == 0 and n > 0):
            raise OpError("split", f"split_size must be positive, got {s}")
        sizes = [s] * (n // s) + ([n % s] if n % s else []) if n else [0]
    else:
        try:
            sizes = [int(k) for k in split_size_or_sections]
        except TypeError:
            raise OpTypeError(
                "split",
                "split_size_or_sections must be an int or a sequence of ints, got "
                f"{type(split_size_or_sections).__name__}",
            ) from None
        if any(k < 0 for k in sizes) or sum(sizes) != n:
            raise OpError("split", f"split sizes {sizes} must be non-negative and sum to the size {n} of dim {d}")
    outs = call(SPLIT, tensor, sizes=tuple(sizes), dim=d)
    return tuple(as_view(o, tensor) for o in outs)


def chunk(input, chunks: int, dim: int = 0):
    """Split into ``chunks`` pieces of equal size (the last may be smaller; there may be fewer)."""
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks <= 0:
        raise OpError("chunk", f"chunks must be a positive int, got {chunks!r}")
    if input.ndim == 0:
        raise OpError("chunk", "cannot chunk a 0-d tensor")
    d = M.wrap_dim("chunk", dim, input.ndim)
    n = input.shape[d]
    if n == 0:  # PyTorch gives ``chunks`` empty pieces
        return tuple(as_view(o, input) for o in call(SPLIT, input, sizes=(0,) * chunks, dim=d))
    return split(input, -(-n // chunks), d)


def tensor_split(input, indices_or_sections, dim: int = 0):
    """Split at the given indices, or into ``sections`` pieces whose sizes differ by at most one."""
    if input.ndim == 0:
        raise OpError("tensor_split", "cannot split a 0-d tensor")
    d = M.wrap_dim("tensor_split", dim, input.ndim)
    n = input.shape[d]
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        if k <= 0:
            raise OpError("tensor_split", f"number of sections must be positive, got {k}")
        sizes = [n // k + 1] * (n % k) + [n // k] * (k - n % k)
        return tuple(as_view(o, input) for o in call(SPLIT, input, sizes=tuple(sizes), dim=d))
    bounds = [0] + [min(max(int(i) + (n if int(i) < 0 else 0), 0), n) for i in indices_or_sections] + [n]
    # consecutive pieces input[b_k:b_{k+1}] with Python slice semantics (empty when b_k >= b_{k+1})
    return tuple(basic_index(input, (FULL,) * d + ((a, max(a, b), 1),)) for a, b in zip(bounds, bounds[1:]))


def _unbind_meta(x, dim):
    nd = len(x.shape)
    if nd == 0:
        raise OpError("unbind", "cannot unbind a 0-d tensor")
    d = M.wrap_dim("unbind", dim, nd)
    s = tuple(x.shape)
    return tuple(M.TensorMeta(s[:d] + s[d + 1 :], x.dtype, x.device) for _ in range(s[d]))


def _unbind_grad(ctx, *gs):
    from flow.ops.shape_ops import stack

    return (stack(list(gs), ctx.attrs["dim"]),)


UNBIND = defop(
    "unbind",
    ["input"],
    [Attr("dim", int, 0)],
    outputs=("*outs",),
    meta=_unbind_meta,
    dtypes=ANY,
    grad=_unbind_grad,
    save="none",
)


@kernel(UNBIND)
def _unbind_kernel(xp):
    def run(x, dim=0):
        d = dim % x.ndim
        pre = (slice(None),) * d
        return tuple(x[pre + (i, Ellipsis)] for i in range(x.shape[d]))

    return run


def unbind(input, dim: int = 0):
    """The slices along ``dim`` as a tuple of views."""
    d = M.wrap_dim("unbind", dim, input.ndim)
    if input.ndim == 0:
        raise OpError("unbind", "cannot unbind a 0-d tensor")
    if input.shape[d] == 0:
        return ()
    return tuple(as_view(o, input) for o in call(UNBIND, input, dim=d))


# -- movedim / unflatten ---------------------------------------------------------------------
def movedim(input, source, destination):
    """Move dims ``source`` to positions ``destination`` (ints or sequences); a view."""
    src = (source,) if isinstance(source, int) else tuple(source)
    dst = (destination,) if isinstance(destination, int) else tuple(destination)
    if len(src) != len(dst):
        raise OpError("movedim", f"source {src} and destination {dst} must have the same number of dims")
    nd = input.ndim
    s = M.wrap_dims("movedim", src, nd)
    t = M.wrap_dims("movedim", dst, nd)
    perm = [-1] * nd
    for a, b in zip(s, t):
        perm[b] = a
    rest = iter(i for i in range(nd) if i not in s)
    perm = [p if p != -1 else next(rest) for p in perm]
    if perm == list(range(nd)):
        return input
    return permute(input, *perm)


moveaxis = movedim


def unflatten(input, dim: int, sizes):
    """Expand dim ``dim`` into ``sizes`` (one entry may be -1); a view when the layout allows."""
    nd = input.ndim
    d = M.wrap_dim("unflatten", dim, nd)
    sizes = tuple(int(s) for s in sizes)
    if not sizes:
        raise OpError("unflatten", "sizes must be non-empty")
    from flow.ops.movement import infer_shape

    try:
        sizes = infer_shape("unflatten", sizes, input.shape[d])
    except OpError:
        raise OpError("unflatten", f"sizes {sizes} do not multiply to the size {input.shape[d]} of dim {d}") from None
    s = tuple(input.shape)
    return reshape(input, s[:d] + sizes + s[d + 1 :])


# -- diagonal --------------------------------------------------------------------------------
def _diag_dims(op, shape, offset, dim1, dim2):
    nd = len(shape)
    if nd < 2:
        raise OpError(op, f"needs a tensor with at least 2 dims, got shape {tuple(shape)}")
    d1 = M.wrap_dim(op, dim1, nd, "dim1")
    d2 = M.wrap_dim(op, dim2, nd, "dim2")
    if d1 == d2:
        raise OpError(op, f"dim1 and dim2 must differ, both are {d1}")
    n1, n2 = shape[d1], shape[d2]
    length = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
    rest = tuple(s for i, s in enumerate(shape) if i not in (d1, d2))
    return d1, d2, length, rest + (length,)


def _diagonal_meta(x, offset=0, dim1=0, dim2=1):
    return M.TensorMeta(_diag_dims("diagonal", tuple(x.shape), offset, dim1, dim2)[3], x.dtype, x.device)


def _diagonal_grad(ctx, g):
    a = ctx.attrs
    return (
        call(DIAGONAL_BACKWARD, g, shape=tuple(ctx.input_shape(0)), offset=a["offset"], dim1=a["dim1"], dim2=a["dim2"]),
    )


_DIAG_ATTRS = [Attr("offset", int, 0), Attr("dim1", int, 0), Attr("dim2", int, 1)]
DIAGONAL = defop("diagonal", ["input"], _DIAG_ATTRS, meta=_diagonal_meta, dtypes=ANY, grad=_diagonal_grad, save="none")


def _diag_view(xp, x, offset, dim1, dim2):
    """A writable strided view of the diagonal (NumPy's ``diagonal`` is read-only)."""
    d1, d2, length, shape = _diag_dims("diagonal", x.shape, offset, dim1, dim2)
    start = [slice(None)] * x.ndim
    if length:
        start[d2 if offset >= 0 else d1] = slice(abs(offset), None)
    sub = x[tuple(start)]
    strides = tuple(s for i, s in enumerate(x.strides) if i not in (d1, d2)) + (x.strides[d1] + x.strides[d2],)
    return xp.lib.stride_tricks.as_strided(sub, shape, strides)


@kernel(DIAGONAL)
def _diagonal_kernel(xp):
    def run(x, offset=0, dim1=0, dim2=1):
        return _diag_view(xp, x, offset, dim1, dim2)

    return run


def _diag_bw_meta(g, shape, offset=0, dim1=0, dim2=1):
    if any(s < 0 for s in shape):
        raise OpError("diagonal_backward", f"'shape' must hold non-negative sizes, got {tuple(shape)}")
    want = _diag_dims("diagonal_backward", tuple(shape), offset, dim1, dim2)[3]
    if tuple(g.shape) != want:
        raise OpError(
            "diagonal_backward",
            f"'grad' must have shape {want} for an output of shape {tuple(shape)}, got {tuple(g.shape)}",
        )
    return M.TensorMeta(tuple(shape), g.dtype, g.device)


def _diag_bw_grad(ctx, gg):
    a = ctx.attrs
    return (call(DIAGONAL, gg, offset=a["offset"], dim1=a["dim1"], dim2=a["dim2"]),)


DIAGONAL_BACKWARD = defop(
    "diagonal_backward",
    ["grad"],
    [Attr("shape", tuple, items=int)] + _DIAG_ATTRS,
    meta=_diag_bw_meta,
    dtypes=ANY,
    grad=_diag_bw_grad,
    save="none",
)


@kernel(DIAGONAL_BACKWARD)
def _diag_bw_kernel(xp):
    def run(g, shape, offset=0, dim1=0, dim2=1):
        out = xp.zeros(shape, dtype=g.dtype)
        _diag_view(xp, out, offset, dim1, dim2)[...] = g
        return out

    return run


def diagonal(input, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """The diagonal of the (dim1, dim2) planes as the last dim (a view)."""
    return as_view(call(DIAGONAL, input, offset=int(offset), dim1=int(dim1), dim2=int(dim2)), input)


# -- diag -------------------------------------------------------------------------------------------
def diag_embed(input, offset: int = 0, dim1: int = -2, dim2: int = -1):
    """Matrices (in dims ``dim1``, ``dim2``) whose ``offset`` diagonals are the last dim of ``input``."""
    if input.ndim == 0:
        raise OpError("diag_embed", "input must be at least 1-d")
    nd = input.ndim + 1
    d1 = M.wrap_dim("diag_embed", dim1, nd, "dim1")
    d2 = M.wrap_dim("diag_embed", dim2, nd, "dim2")
    if d1 == d2:
        raise OpError("diag_embed", f"dim1 and dim2 must differ, both are {d1}")
    m = input.shape[-1] + abs(int(offset))
    rest = iter(input.shape[:-1])
    shape = tuple(m if i in (d1, d2) else next(rest) for i in range(nd))
    return call(DIAGONAL_BACKWARD, input, shape=shape, offset=int(offset), dim1=d1, dim2=d2)


def diag(input, diagonal: int = 0):
    """1-d input: a square matrix with it on the ``diagonal``; 2-d input: that diagonal (a copy)."""
    if input.ndim == 1:
        return diag_embed(input, diagonal, 0, 1)
    if input.ndim == 2:
        from flow.ops.conversion import clone

        return clone(call(DIAGONAL, input, offset=int(diagonal), dim1=0, dim2=1))
    raise OpError("diag", f"input must be 1-d or 2-d, got shape {tuple(input.shape)}")


def diagflat(input, offset: int = 0):
    return diag_embed(input.reshape(-1), offset, 0, 1)


# -- opcheck samples ---------------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def _index_spec_errors(args, x_shape):
    yield ErrorInput(args, {"index": (x_shape[0],)}, OpIndexError, f"index {x_shape[0]} is out of range for dim 0")
    yield ErrorInput(args, {"index": (-1,)}, OpIndexError, "is out of range for dim 0")
    yield ErrorInput(args, {"index": (0,) * (len(x_shape) + 1)}, OpIndexError, "too many indices")
    yield ErrorInput(args, {"index": ((0, 2, 0),)}, OpError, "slice step must be positive")
    yield ErrorInput(args, {"index": ((0, 2),)}, OpTypeError, "must be (start, stop, step)")
    yield ErrorInput(args, {"index": ("0",)}, OpTypeError, "invalid entry '0'")


def _bi_samples():
    x = S.uniform((4, 5, 3), seed=1)
    yield SampleInput((x,), {"index": (1,)})
    yield SampleInput((x,), {"index": ((1, 4, 2), None, 2)})
    yield SampleInput((x,), {"index": (FULL, (0, 5, 3), FULL, None)})
    yield SampleInput((S.uniform((6,), seed=2),), {"index": (3,)})
    yield SampleInput((x,), {"index": ((3, 1, 1),)})
    yield from _index_spec_errors((x,), (4, 5, 3))


def _bput_samples():
    x = S.uniform((4, 5, 3), seed=1)
    yield SampleInput((x, S.uniform((5, 3), seed=2)), {"index": (1,)})
    yield SampleInput((x, S.uniform((1, 3, 3), seed=3)), {"index": ((1, 4, 2), None, (0, 5, 2))})
    yield SampleInput((x, S.uniform((), seed=4)), {"index": (FULL, 2)})
    yield from _index_spec_errors((x, S.uniform((), seed=4)), (4, 5, 3))
    yield ErrorInput((x, S.uniform((4, 3), seed=2)), {"index": (1,)}, OpError, "cannot be broadcast")
    yield ErrorInput((x, S.uniform((1, 5, 3), seed=2)), {"index": (1,)}, OpError, "cannot be broadcast")
    yield ErrorInput((x, S.ints((5, 3))), {"index": (1,)}, OpTypeError, "must have the input's dtype")


def _split_samples():
    x = S.uniform((5, 3), seed=1)
    yield SampleInput((x,), {"sizes": (2, 0, 3), "dim": 0})
    yield SampleInput((S.uniform((2, 7), seed=2),), {"sizes": (4, 3), "dim": -1})
    yield ErrorInput((x,), {"sizes": (2, 2), "dim": 0}, OpError, "must be non-negative and sum to the size 5")
    yield ErrorInput((x,), {"sizes": (6, -1), "dim": 0}, OpError, "must be non-negative and sum")
    yield ErrorInput((x,), {"sizes": (), "dim": 0}, OpError, "must be non-negative and sum")
    yield ErrorInput((x,), {"sizes": (5,), "dim": 2}, OpIndexError, "out of range")
    yield ErrorInput((S.uniform((), seed=3),), {"sizes": (1,), "dim": 0}, OpError, "cannot split a 0-d tensor")


def _unbind_samples():
    yield SampleInput((S.uniform((3, 4), seed=1),), {"dim": 0})
    yield SampleInput((S.uniform((2, 3, 2), seed=2),), {"dim": 1})
    yield from S.dim_errors(S.uniform((3, 4), seed=1), tuple_dims=False)
    yield ErrorInput((S.uniform((), seed=3),), {"dim": 0}, OpError, "cannot unbind a 0-d tensor")


def _diag_samples():
    yield SampleInput((S.uniform((4, 5), seed=1),), {"offset": 0, "dim1": 0, "dim2": 1})
    yield SampleInput((S.uniform((4, 5), seed=2),), {"offset": 2, "dim1": 0, "dim2": 1})
    yield SampleInput((S.uniform((3, 4, 5), seed=3),), {"offset": -1, "dim1": 2, "dim2": 0})
    yield SampleInput((S.uniform((3, 3), seed=4),), {"offset": 5, "dim1": 0, "dim2": 1})
    x = S.uniform((4, 5), seed=1)
    yield ErrorInput((S.uniform((4,), seed=1),), {"offset": 0, "dim1": 0, "dim2": 1}, OpError, "at least 2 dims")
    yield ErrorInput((x,), {"offset": 0, "dim1": 1, "dim2": 1}, OpError, "dim1 and dim2 must differ")
    yield ErrorInput((x,), {"offset": 0, "dim1": 0, "dim2": 2}, OpIndexError, "'dim2'=2 is out of range")


def _diag_bw_samples():
    yield SampleInput((S.uniform((4,), seed=1),), {"shape": (4, 5), "offset": 0, "dim1": 0, "dim2": 1})
    yield SampleInput((S.uniform((4, 3), seed=2),), {"shape": (3, 4, 5), "offset": -1, "dim1": 2, "dim2": 0})
    g = S.uniform((4,), seed=1)
    yield ErrorInput((g,), {"shape": (3, 5), "offset": 0, "dim1": 0, "dim2": 1}, OpError, "'grad' must have shape")
    yield ErrorInput((g,), {"shape": (4, -5), "offset": 0, "dim1": 0, "dim2": 1}, OpError, "non-negative sizes")
    yield ErrorInput((g,), {"shape": (4,), "offset": 0, "dim1": 0, "dim2": 1}, OpError, "at least 2 dims")


set_samples(BASIC_INDEX, _bi_samples)
set_samples(BASIC_INDEX_PUT, _bput_samples)
set_samples(SPLIT, _split_samples)
set_samples(UNBIND, _unbind_samples)
set_samples(DIAGONAL, _diag_samples)
set_samples(DIAGONAL_BACKWARD, _diag_bw_samples)

__all__ = [
    "select",
    "narrow",
    "split",
    "chunk",
    "tensor_split",
    "unbind",
    "movedim",
    "moveaxis",
    "unflatten",
    "diagonal",
    "diag",
    "diag_embed",
    "diagflat",
]
