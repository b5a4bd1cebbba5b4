"""``t[key]`` and ``t[key] = value`` with PyTorch's semantics, and ``index_put``.

A key is split into its basic part (ints, slices, None, Ellipsis), applied first
as a view (``basic_index``), and its advanced part (integer tensors/lists, bool
masks), applied to that view as a copy (op ``index``). As in PyTorch, ints are
basic: ``x[0, :, [1, 2]]`` has shape ``(x.shape[1], 2)``. Bool masks become
integer indices (``nonzero``). The advanced part follows NumPy's placement
rule: the broadcast index shape replaces the indexed dims when they are
adjacent, and goes first otherwise.

The gradient of ``index`` is ``index_put`` with ``accumulate=True`` (repeated
indices add up); ``index_put``'s gradient is ``index`` again, so any order works.
"""

from __future__ import annotations

from flow import _dtype as D
from flow._dispatch import call
from flow.autograd.grad_mode import STATE
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.ops._grad_util import sum_to_shape
from flow.ops.indexing import add_at, check_range
from flow.ops.movement import as_view
from flow.ops.views import BASIC_INDEX, BASIC_INDEX_PUT, FULL, _np_index, index_shape
from flow.registry.ops import ANY, INTEGER, Attr


def adv_shape(op: str, shape, indices, dims) -> tuple:
    """Shape of ``x[adv]`` where ``indices[k]`` indexes dim ``dims[k]`` (NumPy's placement rule)."""
    shape = tuple(shape)
    if len(indices) != len(dims) or not dims:
        raise OpError(op, f"expected one index per dim in dims={dims}, got {len(indices)} indices")
    for k, (t, d) in enumerate(zip(indices, dims)):
        if t.dtype.category != 1:
            raise OpTypeError(op, f"index {k} must be an integer tensor, got {t.dtype}")
        if isinstance(d, bool) or not isinstance(d, int):
            raise OpTypeError(op, f"dims {dims} must hold ints")
        if not 0 <= d < len(shape) or (k and d <= dims[k - 1]):
            raise OpError(op, f"dims {dims} must be increasing dims of a {len(shape)}-d tensor")
    b = M.broadcast_shapes(op, *[tuple(t.shape) for t in indices])
    if dims[-1] - dims[0] == len(dims) - 1:  # adjacent: replace in place
        return shape[: dims[0]] + b + shape[dims[-1] + 1 :]
    return b + tuple(s for i, s in enumerate(shape) if i not in dims)


def _np_adv(x, indices, dims):
    idx = [slice(None)] * x.ndim
    for t, d in zip(indices, dims):
        idx[d] = t
    return tuple(idx)


def _index_meta(x, indices, dims):
    dev = M.check_same_device("index", x, *indices)
    return M.TensorMeta(adv_shape("index", x.shape, indices, dims), x.dtype, dev)


def _index_grad(ctx, g):
    from flow._creation import zeros

    indices = ctx.inputs[1]
    z = zeros(ctx.input_shape(0), dtype=g.dtype, device=g.device)
    return call(INDEX_PUT, z, g, list(indices), dims=ctx.attrs["dims"], accumulate=True), [None] * len(indices)


INDEX = defop(
    "index",
    ["input", "*indices"],
    [Attr("dims", tuple, items=int)],
    meta=_index_meta,
    grad=_index_grad,
    dtypes={"input": ANY, "indices": INTEGER},
    save="inputs",
)


@kernel(INDEX)
def _index_kernel(xp):
    def run(x, indices, dims):
        for t, d in zip(indices, dims):
            check_range("index", t, x.shape[d], d, allow_negative=True)
        return x[_np_adv(x, indices, dims)]

    return run


def _index_put_meta(x, values, indices, dims, accumulate=False):
    dev = M.check_same_device("index_put", x, values, *indices)
    if values.dtype != x.dtype:
        raise OpTypeError("index_put", f"'values' must have the dtype of 'input' ({x.dtype}), got {values.dtype}")
    region = adv_shape("index_put", x.shape, indices, dims)
    vs = tuple(values.shape)
    if len(vs) > len(region) or M.broadcast_shapes("index_put", region, vs) != region:
        raise OpError("index_put", f"'values' of shape {vs} cannot be broadcast to the indexed shape {region}")
    return M.TensorMeta(tuple(x.shape), x.dtype, dev)


def _index_put_grad(ctx, g):
    from flow._creation import zeros

    _, _, indices = ctx.inputs
    dims, acc = ctx.attrs["dims"], ctx.attrs.get("accumulate", False)
    gx = gv = None
    if ctx.next[0][0] is not None:
        gx = (
            g
            if acc
            else call(
                INDEX_PUT, g, zeros((), dtype=g.dtype, device=g.device), list(indices), dims=dims, accumulate=False
            )
        )
    if ctx.next[1][0] is not None:
        gv = sum_to_shape(call(INDEX, g, list(indices), dims=dims), ctx.input_shape(1))
    return gx, gv, [None] * len(indices)


INDEX_PUT = defop(
    "index_put",
    ["input", "values", "*indices"],
    [Attr("dims", tuple, items=int), Attr("accumulate", bool, False)],
    meta=_index_put_meta,
    grad=_index_put_grad,
    dtypes={"input": ANY, "values": ANY, "indices": INTEGER},
    save="inputs",
)


@kernel(INDEX_PUT)
def _index_put_kernel(xp):
    def run(x, values, indices, dims, accumulate=False):
        for t, d in zip(indices, dims):
            check_range("index_put", t, x.shape[d], d, allow_negative=True)
        out = x.copy()
        idx = _np_adv(x, indices, dims)
        if accumulate:
            add_at(xp, out, idx, values)
        else:
            out[idx] = values
        return out

    return run


# -- parsing keys ----------------------------------------------------------------------------------
def _to_index_tensor(op, k, device):
    import numpy as np

    from flow._creation import tensor
    from flow._tensor import Tensor

    if isinstance(k, Tensor):
        t = k
    else:
        a = np.asarray(k)
        if a.size == 0:
            a = a.astype(np.int64)
        if a.dtype.kind not in "biu":
            raise OpTypeError(op, f"index lists must hold ints or bools, got {a.dtype}")
        t = tensor(a)
    if t.dtype.category == 2:
        raise OpTypeError(op, f"tensors used as indices must be integer or bool tensors, got {t.dtype}")
    if t.device is not device:
        t = t.to(device)
    return t


def parse_key(op: str, x, key):
    """Split a key into a basic index spec and advanced ``(view_dim, int_tensor)`` entries."""
    import numpy as np

    from flow._tensor import Tensor

    if not isinstance(key, tuple):
        key = (key,)
    items = []
    for k in key:
        if k is None or k is Ellipsis or isinstance(k, slice):
            items.append(k)
        elif isinstance(k, (bool, np.bool_)):
            items.append(("mask0", bool(k)))
        elif isinstance(k, (int, np.integer)):
            items.append(int(k))
        elif isinstance(k, Tensor) and k.ndim == 0 and k.dtype.category == 1:
            items.append(int(k.item()))  # a 0-d integer tensor selects, like an int (a view)
        elif isinstance(k, (Tensor, list, tuple, np.ndarray, range)):
            t = _to_index_tensor(op, list(k) if isinstance(k, range) else k, x.device)
            if t.dtype is D.bool or t.dtype is D.uint8:
                items.append(("mask", t.to(D.bool)) if t.ndim else ("mask0", bool(t.item())))
            else:
                items.append(("int", t))
        elif hasattr(k, "__index__"):
            items.append(int(k.__index__()))
        else:
            raise OpTypeError(
                op,
                f"invalid index of type {type(k).__name__}; use ints, slices, None, Ellipsis, integer or bool tensors",
            )
    shape = tuple(x.shape)
    consumed = sum(
        1
        if isinstance(k, (int, slice))
        else k[1].ndim
        if isinstance(k, tuple) and k[0] == "mask"
        else 1
        if isinstance(k, tuple) and k[0] == "int"
        else 0
        for k in items
    )
    n_ell = sum(1 for k in items if k is Ellipsis)
    if n_ell > 1:
        raise OpIndexError(op, "an index can only have a single ellipsis ('...')")
    if consumed > len(shape):
        raise OpIndexError(op, f"too many indices for a tensor of dimension {len(shape)} ({consumed} given)")
    spec, adv = [], []
    d = vd = 0
    for k in items:
        if k is Ellipsis:
            fill = len(shape) - consumed
            spec.extend([FULL] * fill)
            d += fill
            vd += fill
        elif k is None:
            spec.append(None)
            vd += 1
        elif isinstance(k, int):
            n = shape[d]
            if not -n <= k < n:
                raise OpIndexError(op, f"index {k} is out of range for dim {d} with size {n}")
            spec.append(k + n if k < 0 else k)
            d += 1
        elif isinstance(k, slice):
            step = 1 if k.step is None else int(k.step.__index__())
            if step <= 0:
                raise OpError(op, f"slice step must be greater than zero, got {step} (dim {d})")
            start = None if k.start is None else int(k.start.__index__())
            stop = None if k.stop is None else int(k.stop.__index__())
            norm = slice(start, stop, step).indices(shape[d])
            spec.append(FULL if norm == (0, shape[d], 1) else norm)
            d += 1
            vd += 1
        elif k[0] == "mask0":  # a 0-d mask: a new dim of size 1 (True) or 0 (False)
            from flow._creation import zeros

            spec.append(None)
            adv.append((vd, zeros(1 if k[1] else 0, dtype=D.int64, device=x.device)))
            vd += 1
        elif k[0] == "mask":
            m = k[1]
            ms = tuple(m.shape)
            if ms != shape[d : d + len(ms)]:
                raise OpIndexError(
                    op,
                    f"the shape of the mask {list(ms)} at index {d} does not match the shape "
                    f"of the indexed tensor {list(shape[d : d + len(ms)])} at index {d}",
                )
            from flow.ops.indexing import nonzero

            for j, t in enumerate(nonzero(m, as_tuple=True)):
                spec.append(FULL)
                adv.append((vd + j, t))
            d += len(ms)
            vd += len(ms)
        else:
            spec.append(FULL)
            t = k[1]
            n = shape[d]
            check_range(op, t._data, n, d, allow_negative=True)
            adv.append((vd, t))
            d += 1
            vd += 1
    while spec and spec[-1] == FULL:
        spec.pop()
    return tuple(spec), adv


def getitem(x, key):
    """``x[key]``: a view for basic keys, a copy once integer tensors or masks take part."""
    spec, adv = parse_key("getitem", x, key)
    if not adv:
        return as_view(call(BASIC_INDEX, x, index=spec), x)
    # ``index`` saves its inputs but its gradient only reads the indices; handing it a basic view with a
    # private version counter (never returned) keeps later in-place writes to x from invalidating it.
    v = call(BASIC_INDEX, x, index=spec) if spec or x.requires_grad else x
    return call(INDEX, v, [t for _, t in adv], dims=tuple(d for d, _ in adv))


def _as_value(op, x, value):
    from flow._creation import tensor
    from flow._tensor import Tensor

    if isinstance(value, Tensor):
        if value.device is not x.device:
            if value.ndim != 0 and value.device.type != "cpu":
                raise OpError(op, f"'value' is on {value.device} but the tensor is on {x.device}")
            value = value.to(x.device)
        return value if value.dtype is x.dtype else value.to(x.dtype)
    try:
        return tensor(value, dtype=x.dtype, device=x.device)
    except (TypeError, ValueError) as e:
        raise OpTypeError(op, f"cannot assign a value of type {type(value).__name__}: {e}") from None


def _fit(op, value, region):
    """Drop leading size-1 dims of ``value`` beyond the region's rank; check it broadcasts to the region."""
    vs = tuple(value.shape)
    while len(vs) > len(region) and vs[0] == 1:
        vs = vs[1:]
    ok = len(vs) <= len(region)
    if ok:
        try:
            ok = M.broadcast_shapes(op, region, vs) == tuple(region)
        except OpError:
            ok = False
    if not ok:
        raise OpError(
            op, f"cannot assign a value of shape {tuple(value.shape)} to the indexed region of shape {tuple(region)}"
        )
    return value if vs == tuple(value.shape) else value.reshape(vs)


def setitem(x, key, value) -> None:
    """``x[key] = value`` in place (through views; the version counter is bumped)."""
    from flow._tensor import Tensor
    from flow.ops.inplace import apply_inplace, check_inplace_allowed

    op = "setitem"
    check_inplace_allowed(x, op)
    spec, adv = parse_key(op, x, key)
    region = index_shape(op, x.shape, spec)
    if adv:
        region = adv_shape(op, region, [t for _, t in adv], tuple(d for d, _ in adv))
    grad = STATE.grad_enabled and (x.requires_grad or (isinstance(value, Tensor) and value.requires_grad))
    if not grad:
        if isinstance(value, Tensor) or not isinstance(value, (int, float, bool)):
            val = _fit(op, _as_value(op, x, value), region)._data
        else:
            val = value
        view = x._data[_np_index(spec)]
        try:
            if adv:
                view[_np_adv(view, [t._data for _, t in adv], tuple(d for d, _ in adv))] = val
            else:
                view[...] = val
        except (ValueError, OverflowError) as e:
            raise OpError(op, f"cannot write into this tensor: {e}") from None
        x._version[0] += 1
        return
    val = _fit(op, _as_value(op, x, value), region)
    if adv:
        inds, dims = [t for _, t in adv], tuple(d for d, _ in adv)
        # index_put saves its inputs but its gradient only reads the indices: give it a view of x with a
        # private version counter, so the write below (and later ones) do not invalidate that node.
        sub = call(BASIC_INDEX, x, index=spec)
        new = call(INDEX_PUT, sub, val, inds, dims=dims, accumulate=False)
        result = call(BASIC_INDEX_PUT, x, new, index=spec)
    else:
        result = call(BASIC_INDEX_PUT, x, val, index=spec)
    apply_inplace(x, result, op)


def index_put(input, indices, values, accumulate: bool = False):
    """A copy of ``input`` with ``values`` put at the advanced index ``indices`` (a tuple of tensors/None).

    ``accumulate=True`` adds instead, summing repeated indices.
    """
    from flow._tensor import Tensor

    if not isinstance(indices, (tuple, list)):
        raise OpTypeError("index_put", f"'indices' must be a tuple of tensors, got {type(indices).__name__}")
    if len(indices) > input.ndim:
        raise OpIndexError("index_put", f"too many indices ({len(indices)}) for a tensor of dimension {input.ndim}")
    if not isinstance(values, Tensor):
        values = _as_value("index_put", input, values)
    elif values.dtype is not input.dtype:
        values = values.to(input.dtype)
    key = tuple(slice(None) if t is None else t for t in indices)
    spec, adv = parse_key("index_put", input, key)
    if spec or not adv:
        raise OpTypeError("index_put", "'indices' must hold integer or bool tensors (None for a whole dim)")
    inds, dims = [t for _, t in adv], tuple(d for d, _ in adv)
    region = adv_shape("index_put", input.shape, inds, dims)
    return call(INDEX_PUT, input, _fit("index_put", values, region), inds, dims=dims, accumulate=bool(accumulate))


# -- opcheck samples -----------------------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def _adv_index_errors(args, x, extra):
    """Error inputs of ``index``/``index_put``: ``args`` are the tensors before the indices."""
    i = S.ints((2,), 0, 3, seed=5)
    yield ErrorInput((*args, [i, i]), {"dims": (0,), **extra}, OpError, "one index per dim")
    yield ErrorInput((*args, [i, i]), {"dims": (2, 1), **extra}, OpError, "must be increasing dims")
    yield ErrorInput((*args, [i]), {"dims": (3,), **extra}, OpError, "must be increasing dims")
    yield ErrorInput((*args, [i, S.ints((3,), 0, 3)]), {"dims": (0, 1), **extra}, OpError, "cannot be broadcast")
    yield ErrorInput((*args, [i + 4]), {"dims": (0,), **extra}, OpIndexError, "out of range", values=True)
    yield ErrorInput((*args, [i - 9]), {"dims": (0,), **extra}, OpIndexError, "out of range", values=True)


def _index_samples():
    x = S.uniform((4, 5, 3), seed=1)
    yield SampleInput((x, [S.ints((6,), -4, 4, seed=2)]), {"dims": (0,)})
    yield SampleInput((x, [S.ints((2, 3), 0, 5, seed=3), S.ints((3,), -3, 3, seed=4)]), {"dims": (1, 2)})
    yield SampleInput((x, [S.ints((2,), 0, 4, seed=5), S.ints((2,), 0, 3, seed=6)]), {"dims": (0, 2)})
    yield SampleInput((x, [S.ints((2,), 0, 4, seed=5, dtype=D.int32)]), {"dims": (1,)})
    yield from _adv_index_errors((x,), x, {})


def _index_put_samples():
    x = S.uniform((4, 5, 3), seed=1)
    yield SampleInput((x, S.uniform((3, 5, 3), seed=2), [S.t([0, 3, 1])]), {"dims": (0,), "accumulate": False})
    yield SampleInput(
        (x, S.uniform((2,), seed=3), [S.t([[0, 1], [1, 4]]), S.t([2, 0])]), {"dims": (1, 2), "accumulate": False}
    )
    yield SampleInput(
        (x, S.uniform((6, 5), seed=4), [S.ints((6,), 0, 4, seed=5), S.ints((6,), 0, 3, seed=6)]),
        {"dims": (0, 2), "accumulate": True},
    )
    yield from _adv_index_errors((x, S.uniform((), seed=2)), x, {"accumulate": False})
    i = S.ints((2,), 0, 3, seed=5)
    yield ErrorInput(
        (x, S.ints((5, 3)), [i]), {"dims": (0,), "accumulate": False}, OpTypeError, "'values' must have the dtype"
    )
    yield ErrorInput((x, S.uniform((3, 5, 3)), [i]), {"dims": (0,), "accumulate": True}, OpError, "cannot be broadcast")


set_samples(INDEX, _index_samples)
set_samples(INDEX_PUT, _index_put_samples)

__all__ = ["index_put"]
