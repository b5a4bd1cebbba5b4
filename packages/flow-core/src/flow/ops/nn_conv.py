"""Convolutions: conv2d and its two backward ops (conv1d and conv_transpose2d build on them).

Ops (NCHW layout; ``padding`` is explicit ``(top, bottom, left, right)``, a negative side crops):

* ``conv2d(input, weight, bias?)`` - im2col per batch chunk, then one batched matmul per group.
* ``conv2d_backward_input(grad_output, weight; input_size)`` - the adjoint of conv2d in its input:
  a stride-1 convolution with the flipped kernel, or (strided) matmul + col2im by strided adds.
  ``conv_transpose2d`` is this op.
* ``conv2d_backward_weight(grad_output, input; weight_size)`` - im2col + batched matmul.

The three ops are bilinear and each one's gradient is written with the others, so gradients of any
order work. The NumPy kernels here are the reference; on the CPU, float32/float64 ungrouped convolutions
run :mod:`flow.backends.cpu.conv` (native im2col / col2im around the same GEMM).
"""

from __future__ import annotations

from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.registry.ops import NUMERIC, Attr

# im2col buffers are built for batch chunks of about this many bytes (bounded memory, mostly in cache;
# measured best among 2-32 MB for ResNet-18 layer shapes).
_COLS_BYTES = 4 << 20
_MIN_COLS = 256

_CONV_ATTRS = [
    Attr("stride", tuple, (1, 1), items=int),
    Attr("padding", tuple, (0, 0, 0, 0), items=int),
    Attr("dilation", tuple, (1, 1), items=int),
    Attr("groups", int, 1),
]


# -- shape rules shared by the ops and the functional wrappers --------------------------------------
def conv_out_size(op: str, in_size, ksize, stride, pads, dilation) -> tuple:
    """Output spatial size of a convolution; errors when the kernel exceeds the padded input."""
    out = []
    for i, (L, k, s, d) in enumerate(zip(in_size, ksize, stride, dilation)):
        padded = L + pads[2 * i] + pads[2 * i + 1]
        eff = d * (k - 1) + 1
        if padded < eff:
            raise OpError(
                op,
                f"kernel size {eff} (kernel {k}, dilation {d}) along spatial dim {i} can't be greater "
                f"than the padded input size {padded} (input {L} + padding "
                f"{pads[2 * i]}+{pads[2 * i + 1]})",
            )
        out.append((padded - eff) // s + 1)
    return tuple(out)


def check_conv_params(op: str, stride, pads, dilation, groups, nd: int, allow_negative_pad: bool = True) -> None:
    for name, v, lo in (("stride", stride, 1), ("dilation", dilation, 1)):
        if len(v) != nd or any(not isinstance(s, int) or s < lo for s in v):
            raise OpError(op, f"'{name}' must be {nd} int(s) >= {lo}, got {v}")
    if len(pads) != 2 * nd or any(not isinstance(p, int) for p in pads):
        raise OpError(op, f"'padding' must be {2 * nd} ints, got {pads}")
    if not allow_negative_pad and any(p < 0 for p in pads):
        raise OpError(op, f"'padding' must be non-negative, got {pads}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise OpError(op, f"'groups' must be a positive int, got {groups!r}")


def check_conv_shapes(op: str, xs: tuple, ws: tuple, groups: int, bias_shape=None, weight_arg="weight") -> None:
    """Channel/group agreement of an (N, C, *spatial) input and an (O, C/groups, *kernel) weight."""
    nd = len(xs) - 2
    if len(ws) != nd + 2:
        raise OpError(
            op,
            f"'{weight_arg}' must be {nd + 2}-d (out_channels, in_channels/groups, "
            f"{', '.join(['k'] * nd)}), got shape {ws}",
        )
    O, Cg = ws[0], ws[1]
    if O % groups:
        raise OpError(op, f"'{weight_arg}' has {O} output channels, which is not divisible by groups={groups}")
    if Cg * groups != xs[1]:
        raise OpError(
            op,
            f"expected 'input' with {Cg * groups} channels (weight.shape[1]={Cg} * groups={groups}), "
            f"got {xs[1]} channels (input shape {xs}, weight shape {ws})",
        )
    if bias_shape is not None and tuple(bias_shape) != (O,):
        raise OpError(op, f"'bias' must have shape ({O},) (one per output channel), got {tuple(bias_shape)}")


def _check_floats(op: str, *named):
    """The tensors share one dtype (which kinds of dtype the schema says); their device."""
    first = None
    for name, t in named:
        if t is None:
            continue
        if first is None:
            first = (name, t)
        elif t.dtype != first[1].dtype:
            raise OpTypeError(
                op, f"'{name}' has dtype {t.dtype} but '{first[0]}' has {first[1].dtype}; they must be the same"
            )
    return M.check_same_device(op, *[t for _, t in named])


def _conv2d_meta(x, w, b=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    dev = _check_floats("conv2d", ("input", x), ("weight", w), ("bias", b))
    M.check_ndim("conv2d", x, 4)
    check_conv_params("conv2d", stride, padding, dilation, groups, 2)
    xs, ws = tuple(x.shape), tuple(w.shape)
    check_conv_shapes("conv2d", xs, ws, groups, None if b is None else b.shape)
    ho, wo = conv_out_size("conv2d", xs[2:], ws[2:], stride, padding, dilation)
    return M.TensorMeta((xs[0], ws[0], ho, wo), x.dtype, dev)


def _bwi_meta(g, w, input_size=(), stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    op = "conv2d_backward_input"
    dev = _check_floats(op, ("grad_output", g), ("weight", w))
    M.check_ndim(op, g, 4, "grad_output")
    M.check_ndim(op, w, 4, "weight")
    check_conv_params(op, stride, padding, dilation, groups, 2)
    gs, ws = tuple(g.shape), tuple(w.shape)
    if len(input_size) != 2 or any(not isinstance(s, int) or s < 1 for s in input_size):
        raise OpError(op, f"'input_size' must be 2 positive ints (H, W), got {input_size}")
    if gs[1] != ws[0] or ws[0] % groups:
        raise OpError(
            op, f"'grad_output' has {gs[1]} channels but 'weight' has {ws[0]} output channels (groups={groups})"
        )
    out = conv_out_size(op, input_size, ws[2:], stride, padding, dilation)
    if out != gs[2:]:
        raise OpError(
            op,
            f"an input of spatial size {tuple(input_size)} gives a conv output of {out}, but "
            f"'grad_output' has spatial size {gs[2:]}",
        )
    return M.TensorMeta((gs[0], ws[1] * groups) + tuple(input_size), g.dtype, dev)


def _bww_meta(g, x, weight_size=(), stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    op = "conv2d_backward_weight"
    dev = _check_floats(op, ("grad_output", g), ("input", x))
    M.check_ndim(op, g, 4, "grad_output")
    M.check_ndim(op, x, 4, "input")
    check_conv_params(op, stride, padding, dilation, groups, 2)
    gs, xs = tuple(g.shape), tuple(x.shape)
    if len(weight_size) != 2 or any(not isinstance(s, int) or s < 1 for s in weight_size):
        raise OpError(op, f"'weight_size' must be 2 positive ints (kH, kW), got {weight_size}")
    if gs[0] != xs[0]:
        raise OpError(op, f"'grad_output' has batch {gs[0]} but 'input' has batch {xs[0]}")
    if gs[1] % groups or xs[1] % groups:
        raise OpError(
            op, f"channels of 'grad_output' ({gs[1]}) and 'input' ({xs[1]}) must be divisible by groups={groups}"
        )
    out = conv_out_size(op, xs[2:], weight_size, stride, padding, dilation)
    if out != gs[2:]:
        raise OpError(
            op,
            f"'input' of spatial size {xs[2:]} gives a conv output of {out}, but 'grad_output' has "
            f"spatial size {gs[2:]}",
        )
    return M.TensorMeta((gs[1], xs[1] // groups) + tuple(weight_size), g.dtype, dev)


# -- gradients (flow ops only, so they are differentiable again) ------------------------------------
def _attrs(ctx):
    a = ctx.attrs
    return dict(stride=a["stride"], padding=a["padding"], dilation=a["dilation"], groups=a["groups"])


def _conv2d_grad(ctx, g):
    x, w, b = ctx.inputs
    kw = _attrs(ctx)
    gx = gw = gb = None
    if ctx.next[0][0] is not None:
        gx = call(CONV2D_BACKWARD_INPUT, g, w, input_size=tuple(x.shape[2:]), **kw)
    if ctx.next[1][0] is not None:
        gw = call(CONV2D_BACKWARD_WEIGHT, g, x, weight_size=tuple(w.shape[2:]), **kw)
    if b is not None and ctx.next[2][0] is not None:
        gb = g.sum(dim=(0, 2, 3))
    return gx, gw, gb


def _bwi_grad(ctx, gg):
    # out = A_w^T g, linear in g and in w: d/dg = conv2d(gg, w), d/dw = backward_weight(g, gg)
    g, w = ctx.inputs
    kw = _attrs(ctx)
    dg = dw = None
    if ctx.next[0][0] is not None:
        dg = call(CONV2D, gg, w, None, **kw)
    if ctx.next[1][0] is not None:
        dw = call(CONV2D_BACKWARD_WEIGHT, g, gg, weight_size=tuple(w.shape[2:]), **kw)
    return dg, dw


def _bww_grad(ctx, gg):
    g, x = ctx.inputs
    kw = _attrs(ctx)
    dg = dx = None
    if ctx.next[0][0] is not None:
        dg = call(CONV2D, x, gg, None, **kw)
    if ctx.next[1][0] is not None:
        dx = call(CONV2D_BACKWARD_INPUT, g, gg, input_size=tuple(x.shape[2:]), **kw)
    return dg, dx


# Integers convolve in their own dtype (as PyTorch on the CPU); bools do not.
CONV2D = defop(
    "conv2d",
    ["input", "weight", "bias?"],
    _CONV_ATTRS,
    meta=_conv2d_meta,
    dtypes=NUMERIC,
    grad=_conv2d_grad,
    save="inputs",
)
CONV2D_BACKWARD_INPUT = defop(
    "conv2d_backward_input",
    ["grad_output", "weight"],
    [Attr("input_size", tuple, items=int)] + _CONV_ATTRS,
    meta=_bwi_meta,
    dtypes=NUMERIC,
    grad=_bwi_grad,
    save="inputs",
)
CONV2D_BACKWARD_WEIGHT = defop(
    "conv2d_backward_weight",
    ["grad_output", "input"],
    [Attr("weight_size", tuple, items=int)] + _CONV_ATTRS,
    meta=_bww_meta,
    dtypes=NUMERIC,
    grad=_bww_grad,
    save="inputs",
)


# -- kernels ----------------------------------------------------------------------------------------
def pad2d(xp, x, pads, value=0):
    """Pad (or, for negative sides, crop) the last two dims by ``(top, bottom, left, right)``."""
    pt, pb, pl, pr = pads
    if not (pt or pb or pl or pr):
        return x
    H, W = x.shape[-2:]
    Hp, Wp = H + pt + pb, W + pl + pr
    out = (
        xp.full(x.shape[:-2] + (Hp, Wp), value, dtype=x.dtype)
        if value
        else xp.zeros(x.shape[:-2] + (Hp, Wp), dtype=x.dtype)
    )
    h0, h1, w0, w1 = max(0, -pt), min(H, H + pb), max(0, -pl), min(W, W + pr)
    if h1 > h0 and w1 > w0:
        out[..., h0 + pt : h1 + pt, w0 + pl : w1 + pl] = x[..., h0:h1, w0:w1]
    return out


def unpad2d(xp, xpad, pads, H, W):
    """The adjoint of :func:`pad2d`: the (H, W) input region of a padded array (zeros where cropped)."""
    pt, pb, pl, pr = pads
    if min(pads) >= 0:
        v = xpad[..., pt : pt + H, pl : pl + W]
        return v if not (pt or pb or pl or pr) else xp.ascontiguousarray(v)
    out = xp.zeros(xpad.shape[:-2] + (H, W), dtype=xpad.dtype)
    h0, h1, w0, w1 = max(0, -pt), min(H, H + pb), max(0, -pl), min(W, W + pr)
    if h1 > h0 and w1 > w0:
        out[..., h0:h1, w0:w1] = xpad[..., h0 + pt : h1 + pt, w0 + pl : w1 + pl]
    return out


def window(a, i, j, stride, dilation, Ho, Wo):
    """The strided (Ho, Wo) slice of ``a`` that kernel tap (i, j) reads."""
    sh, sw = stride
    dh, dw = dilation
    return a[..., i * dh : i * dh + sh * (Ho - 1) + 1 : sh, j * dw : j * dw + sw * (Wo - 1) + 1 : sw]


def _im2col(xp, xpad, kh, kw, stride, dilation, Ho, Wo):
    """(n, C, Hp, Wp) -> columns (C, kh, kw, n, Ho, Wo) by kh*kw strided copies (no per-pixel work).

    Channels first and the batch chunk next to the pixels: one matmul per group covers the whole
    chunk, whatever the image size.
    """
    n, c = xpad.shape[:2]
    xt = xpad.transpose(1, 0, 2, 3)
    if kh == kw == 1 and stride == (1, 1) and xpad.shape[2:] == (Ho, Wo) and n == 1:
        return xt.reshape(c, 1, 1, n, Ho, Wo)
    cols = xp.empty((c, kh, kw, n, Ho, Wo), dtype=xpad.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, i, j] = window(xt, i, j, stride, dilation, Ho, Wo)
    return cols


def _chunks(n: int, bytes_per_item: int, pixels: int):
    """Batch slices whose columns take about _COLS_BYTES (at least _MIN_COLS matmul columns)."""
    if n == 0:
        return []
    step = max(1, _COLS_BYTES // max(1, bytes_per_item), -(-_MIN_COLS // max(1, pixels)))
    step = min(n, step)
    if -(-n // step) > 1:  # even chunks
        step = -(-n // -(-n // step))
    return [slice(s, min(n, s + step)) for s in range(0, n, step)]


def _group_rows(xp, g, G):
    """(n, O, P) -> (G, O/G, n*P): the chunk's output gradient as matmul rows per group."""
    n, O, P = g.shape
    return xp.ascontiguousarray(g.reshape(n, G, O // G, P).transpose(1, 2, 0, 3)).reshape(G, O // G, n * P)


def conv2d_forward(xp, x, w, b, stride, padding, dilation, groups):
    N, C, H, W = x.shape
    O, Cg, kh, kw = w.shape
    Ho, Wo = conv_out_size("conv2d", (H, W), (kh, kw), stride, padding, dilation)
    G, K, P = groups, Cg * kh * kw, Ho * Wo
    xpad = pad2d(xp, x, padding)
    wm = w.reshape(G, O // G, K)
    out = xp.empty((N, O, P), dtype=x.dtype)
    for sl in _chunks(N, C * kh * kw * P * x.itemsize, P):
        cols = _im2col(xp, xpad[sl], kh, kw, stride, dilation, Ho, Wo)
        n = cols.shape[3]
        r = xp.matmul(wm, cols.reshape(G, K, n * P))  # (G, O/G, n*P)
        out[sl] = r.reshape(O, n, P).transpose(1, 0, 2)
    out = out.reshape(N, O, Ho, Wo)
    if b is not None:
        out += b.reshape(1, O, 1, 1)
    return out


def conv2d_backward_input(xp, g, w, input_size, stride, padding, dilation, groups):
    N, O, Ho, Wo = g.shape
    _, Cg, kh, kw = w.shape
    H, W = input_size
    G = groups
    C = Cg * G
    if stride == (1, 1):
        # a stride-1 conv of grad_output with the flipped, in/out-swapped kernel
        wt = w.reshape(G, O // G, Cg, kh, kw)[:, :, :, ::-1, ::-1].transpose(0, 2, 1, 3, 4).reshape(C, O // G, kh, kw)
        dh, dw = dilation
        pt, pb, pl, pr = padding
        pads = (dh * (kh - 1) - pt, dh * (kh - 1) - pb, dw * (kw - 1) - pl, dw * (kw - 1) - pr)
        return conv2d_forward(xp, g, xp.ascontiguousarray(wt), None, (1, 1), pads, dilation, G)
    # matmul to columns, then col2im: one strided add per kernel tap
    pt, pb, pl, pr = padding
    K, P = Cg * kh * kw, Ho * Wo
    wm = w.reshape(G, O // G, K).transpose(0, 2, 1)
    dxp = xp.zeros((C, N, H + pt + pb, W + pl + pr), dtype=g.dtype)
    gr = g.reshape(N, O, P)
    for sl in _chunks(N, C * kh * kw * P * g.itemsize, P):
        gt = _group_rows(xp, gr[sl], G)
        n = gt.shape[2] // P
        dcols = xp.matmul(wm, gt).reshape(C, kh, kw, n, Ho, Wo)
        d = dxp[:, sl]
        for i in range(kh):
            for j in range(kw):
                window(d, i, j, stride, dilation, Ho, Wo)[...] += dcols[:, i, j]
    return xp.ascontiguousarray(unpad2d(xp, dxp.transpose(1, 0, 2, 3), padding, H, W))


def conv2d_backward_weight(xp, g, x, weight_size, stride, padding, dilation, groups):
    N, C, H, W = x.shape
    O, Ho, Wo = g.shape[1:]
    kh, kw = weight_size
    G = groups
    Cg = C // G
    K, P = Cg * kh * kw, Ho * Wo
    xpad = pad2d(xp, x, padding)
    gr = g.reshape(N, O, P)
    acc = xp.zeros((G, O // G, K), dtype=x.dtype)
    for sl in _chunks(N, C * kh * kw * P * x.itemsize, P):
        cols = _im2col(xp, xpad[sl], kh, kw, stride, dilation, Ho, Wo)
        n = cols.shape[3]
        acc += xp.matmul(_group_rows(xp, gr[sl], G), cols.reshape(G, K, n * P).transpose(0, 2, 1))
    return acc.reshape(O, Cg, kh, kw)


@kernel(CONV2D)
def _conv2d_kernel(xp):
    def run(x, w, b=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
        return conv2d_forward(xp, x, w, b, tuple(stride), tuple(padding), tuple(dilation), groups)

    return run


@kernel(CONV2D_BACKWARD_INPUT)
def _bwi_kernel(xp):
    def run(g, w, input_size=(), stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
        return conv2d_backward_input(
            xp, g, w, tuple(input_size), tuple(stride), tuple(padding), tuple(dilation), groups
        )

    return run


@kernel(CONV2D_BACKWARD_WEIGHT)
def _bww_kernel(xp):
    def run(g, x, weight_size=(), stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
        return conv2d_backward_weight(
            xp, g, x, tuple(weight_size), tuple(stride), tuple(padding), tuple(dilation), groups
        )

    return run


# The CPU kernels: native im2col / col2im around the GEMM (flow.backends.cpu.conv), which falls back to the
# NumPy kernels above for what it does not cover (groups > 1, non-float dtypes, FLOW_CONV_REFERENCE=1).
@kernel(CONV2D, "cpu", name="default")
def _conv2d_cpu(x, w, b=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    from flow.backends.cpu import conv

    return conv.conv2d_forward(x, w, b, tuple(stride), tuple(padding), tuple(dilation), groups)


@kernel(CONV2D_BACKWARD_INPUT, "cpu", name="default")
def _bwi_cpu(g, w, input_size=(), stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    from flow.backends.cpu import conv

    return conv.conv2d_backward_input(g, w, tuple(input_size), tuple(stride), tuple(padding), tuple(dilation), groups)


@kernel(CONV2D_BACKWARD_WEIGHT, "cpu", name="default")
def _bww_cpu(g, x, weight_size=(), stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    from flow.backends.cpu import conv

    return conv.conv2d_backward_weight(g, x, tuple(weight_size), tuple(stride), tuple(padding), tuple(dilation), groups)


# -- opcheck samples (small, so finite differences are quick) ---------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402

_CASES = [  # input shape, weight shape, attrs
    ((1, 2, 5, 5), (3, 2, 3, 3), dict(stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)),
    ((2, 2, 5, 6), (2, 2, 2, 3), dict(stride=(2, 1), padding=(0, 1, 1, 0), dilation=(1, 1), groups=1)),
    ((1, 4, 6, 5), (4, 2, 3, 2), dict(stride=(2, 2), padding=(1, 1, 0, 0), dilation=(1, 2), groups=2)),
    ((1, 2, 4, 4), (2, 1, 1, 1), dict(stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=2)),
    ((1, 1, 5, 5), (2, 1, 2, 2), dict(stride=(1, 1), padding=(0, -1, 1, 0), dilation=(2, 1), groups=1)),
]


_AT = dict(stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1)


def _param_errors(args, extra):
    """Error inputs for bad stride/padding/dilation/groups of a conv op called with ``args``."""
    for name, bad in (("stride", (0, 1)), ("stride", (1,)), ("dilation", (1, -1)), ("padding", (1, 1)), ("groups", 0)):
        yield ErrorInput(args, {**_AT, **extra, name: bad}, OpError, f"'{name}' must be")


def _conv2d_samples():
    for k, (xs, ws, at) in enumerate(_CASES):
        b = S.uniform((ws[0],), seed=30 + k) if k % 2 == 0 else None
        yield SampleInput((S.uniform(xs, seed=10 + k), S.uniform(ws, seed=20 + k), b), dict(at))
    yield SampleInput((S.ints((1, 2, 4, 4), -3, 3, seed=1), S.ints((3, 2, 2, 2), -3, 3, seed=2), None), dict(_AT))
    x, w, b = S.uniform((1, 2, 5, 5), seed=10), S.uniform((3, 2, 3, 3), seed=20), S.uniform((3,), seed=30)
    yield ErrorInput((x[0], w, b), _AT, OpError, "'input' must be 4-d")
    yield ErrorInput((x, w[0], b), _AT, OpError, "'weight' must be 4-d")
    yield ErrorInput((x, S.uniform((3, 3, 3, 3)), b), _AT, OpError, "expected 'input' with 3 channels")
    yield ErrorInput((x, w, b), {**_AT, "groups": 2}, OpError, "not divisible by groups=2")
    yield ErrorInput((x, w, S.uniform((2,))), _AT, OpError, "'bias' must have shape (3,)")
    yield ErrorInput((x, S.uniform((3, 2, 6, 3)), b), _AT, OpError, "can't be greater than the padded input")
    yield ErrorInput((x, w, S.uniform((3,)).float()), _AT, OpTypeError, "must be the same")
    yield ErrorInput((S.uniform((1, 2, 0, 5)), w, b), _AT, OpError, "can't be greater than the padded input")
    yield from _param_errors((x, w, b), {})


def _bwi_samples():
    for k, (xs, ws, at) in enumerate(_CASES):
        out = conv_out_size("conv2d", xs[2:], ws[2:], at["stride"], at["padding"], at["dilation"])
        g = S.uniform((xs[0], ws[0]) + out, seed=40 + k)
        yield SampleInput((g, S.uniform(ws, seed=20 + k)), dict(at, input_size=xs[2:]))
    g, w = S.uniform((1, 3, 5, 5), seed=40), S.uniform((3, 2, 3, 3), seed=20)
    at = {**_AT, "padding": (1, 1, 1, 1), "input_size": (5, 5)}
    yield ErrorInput((g, w), {**at, "input_size": (5, 0)}, OpError, "'input_size' must be 2 positive ints")
    yield ErrorInput((g, w), {**at, "input_size": (6, 5)}, OpError, "gives a conv output of")
    yield ErrorInput((g[:, :2], w), at, OpError, "'grad_output' has 2 channels")
    yield ErrorInput((g[0], w), at, OpError, "'grad_output' must be 4-d")
    yield from _param_errors((g, w), {"input_size": (5, 5)})


def _bww_samples():
    for k, (xs, ws, at) in enumerate(_CASES):
        out = conv_out_size("conv2d", xs[2:], ws[2:], at["stride"], at["padding"], at["dilation"])
        g = S.uniform((xs[0], ws[0]) + out, seed=40 + k)
        yield SampleInput((g, S.uniform(xs, seed=10 + k)), dict(at, weight_size=ws[2:]))
    g, x = S.uniform((1, 3, 5, 5), seed=40), S.uniform((1, 2, 5, 5), seed=10)
    at = {**_AT, "padding": (1, 1, 1, 1), "weight_size": (3, 3)}
    yield ErrorInput((g, x), {**at, "weight_size": (3,)}, OpError, "'weight_size' must be 2 positive ints")
    yield ErrorInput((g, x), {**at, "weight_size": (2, 3)}, OpError, "gives a conv output of")
    yield ErrorInput((g, S.uniform((2, 2, 5, 5))), at, OpError, "has batch 1 but 'input' has batch 2")
    yield ErrorInput((g, x), {**at, "groups": 2}, OpError, "divisible by groups=2")
    yield from _param_errors((g, x), {"weight_size": (3, 3)})


set_samples(CONV2D, _conv2d_samples)
set_samples(CONV2D_BACKWARD_INPUT, _bwi_samples)
set_samples(CONV2D_BACKWARD_WEIGHT, _bww_samples)

__all__: list[str] = []
