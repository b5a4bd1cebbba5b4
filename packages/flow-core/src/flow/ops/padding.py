"""``pad`` (``torch.nn.functional.pad``): constant, reflect, replicate and circular modes.

The pad tuple lists (left, right) pairs starting from the LAST dim, as in
PyTorch. Constant padding is one op (negative amounts crop; its gradient is
the same op with the amounts negated). The other modes gather the input with
an index map along each padded dim (``index_select``), so their gradients
(scatter-adds) come from that op.
"""

from __future__ import annotations

from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.registry.ops import ANY, Attr

_NP_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _padded_shape(op, shape, pad):
    if len(pad) % 2:
        raise OpError(op, f"the pad tuple must have an even length (pairs per dim), got {len(pad)}: {pad}")
    if len(pad) // 2 > len(shape):
        raise OpError(op, f"the pad tuple {pad} pads {len(pad) // 2} dims but the input has only {len(shape)}")
    out = list(shape)
    for i in range(len(pad) // 2):
        d = len(shape) - 1 - i
        n = shape[d] + pad[2 * i] + pad[2 * i + 1]
        if n < 0:
            raise OpError(
                op, f"padding {pad[2 * i : 2 * i + 2]} of dim {d} (size {shape[d]}) gives a negative size {n}"
            )
        out[d] = n
    return tuple(out)


def _pad_meta(x, pad, value=0.0):
    return M.TensorMeta(_padded_shape("pad", tuple(x.shape), tuple(pad)), x.dtype, x.device)


def _pad_grad(ctx, g):
    return (call(PAD, g, pad=tuple(-p for p in ctx.attrs["pad"]), value=0.0),)


PAD = defop(
    "constant_pad",
    ["input"],
    [Attr("pad", tuple, items=int), Attr("value", (float, int, bool), 0.0)],
    meta=_pad_meta,
    dtypes=ANY,
    grad=_pad_grad,
    save="none",
)


@kernel(PAD)
def _pad_kernel(xp):
    def run(x, pad, value=0.0):
        nd = x.ndim
        widths = [(0, 0)] * nd
        crop = [slice(None)] * nd
        for i in range(len(pad) // 2):
            d = nd - 1 - i
            lo, hi = pad[2 * i], pad[2 * i + 1]
            widths[d] = (max(lo, 0), max(hi, 0))
            n = x.shape[d] + max(lo, 0) + max(hi, 0)
            crop[d] = slice(max(-lo, 0), n - max(-hi, 0))
        if not any(map(any, widths)):  # only cropping: copy, never alias the input
            return xp.array(x[tuple(crop)], copy=True)
        return xp.ascontiguousarray(xp.pad(x, widths, mode="constant", constant_values=value)[tuple(crop)])

    return run


def _index_map(n: int, lo: int, hi: int, mode: str):
    import numpy as np

    return np.pad(np.arange(n), (lo, hi), mode=_NP_MODES[mode])


def pad(input, pad, mode: str = "constant", value=None):
    """Pad (or, with negative amounts in constant mode, crop) the last ``len(pad) // 2`` dims."""
    from flow._tensor import Tensor

    if not isinstance(input, Tensor):
        raise OpTypeError("pad", f"'input' must be a Tensor, got {type(input).__name__}")
    try:
        pad = tuple(int(p) for p in pad)
    except TypeError:
        raise OpTypeError("pad", f"'pad' must be a sequence of ints, got {type(pad).__name__}") from None
    shape = tuple(input.shape)
    _padded_shape("pad", shape, pad)
    if mode == "constant":
        v = 0 if value is None else value
        if not input.dtype.is_floating_point:
            v = bool(v) if input.dtype.category == 0 else int(v)
        return call(PAD, input, pad=pad, value=v if isinstance(v, (bool, int)) else float(v))
    if mode not in _NP_MODES:
        raise OpError("pad", f"mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
    if value not in (None, 0, 0.0):
        raise OpError("pad", f"a padding value is only allowed in constant mode, got value={value} with mode={mode!r}")
    from flow._creation import tensor
    from flow.ops.indexing import index_select

    out = input
    for i in range(len(pad) // 2):
        d = len(shape) - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        n = shape[d]
        if lo < 0 or hi < 0:
            raise OpError("pad", f"negative padding {(lo, hi)} is only supported in constant mode (dim {d})")
        if not lo and not hi:
            continue
        if mode == "reflect" and (lo >= n or hi >= n):
            raise OpError("pad", f"reflect padding {(lo, hi)} must be less than the size {n} of dim {d}")
        if mode == "circular" and (lo > n or hi > n):
            raise OpError(
                "pad",
                f"circular padding {(lo, hi)} must be at most the size {n} of dim {d} "
                "(it would wrap around more than once)",
            )
        if mode == "replicate" and n == 0:
            raise OpError("pad", f"replicate padding of the empty dim {d}")
        idx = tensor(_index_map(n, lo, hi, mode), device=input.device)
        out = index_select(out, d, idx)
    return out if out is not input else input.clone()


# -- opcheck samples -------------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def _pad_samples():
    x = S.uniform((2, 3, 4), seed=1)
    yield SampleInput((x,), {"pad": (1, 2), "value": 0.0})
    yield SampleInput((S.uniform((2, 3, 4), seed=2),), {"pad": (1, -2, 0, 2), "value": 1.5})
    yield SampleInput((S.uniform((3, 4), seed=3),), {"pad": (-1, -1, 2, 0), "value": -1.0})
    yield SampleInput((S.ints((3, 4), seed=3),), {"pad": (0, 1), "value": 7})
    yield ErrorInput((x,), {"pad": (1, 2, 3), "value": 0.0}, OpError, "even length")
    yield ErrorInput((x,), {"pad": (1,) * 8, "value": 0.0}, OpError, "pads 4 dims but the input has only 3")
    yield ErrorInput((x,), {"pad": (-3, -2), "value": 0.0}, OpError, "gives a negative size")


set_samples(PAD, _pad_samples)

__all__ = ["pad"]
