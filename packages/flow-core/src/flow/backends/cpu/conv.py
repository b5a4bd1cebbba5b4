"""conv2d and its two backward kernels on the CPU with the native im2col / col2im (``flow._C``).

When :mod:`flow.backends.cpu.threads` bound NumPy's BLAS, all of a convolution runs in one native call:
flow's OpenMP threads each take whole batch chunks (columns and a single-threaded GEMM per chunk;
the weight gradient by fixed blocks of its columns), so there is one thread pool and results do
not depend on the thread count. Otherwise the Python loop below runs.

The GEMM is NumPy's matmul (OpenBLAS) around the native column kernels, which fuse padding,
stride and dilation into the copy (no padded input), fill a column buffer reused across batch
chunks, and add the input gradient's columns straight into the (unpadded) input gradient. A
chunk of one image (the large layers) needs no layout change at all: the GEMM writes the image's
output in place, and the output gradient of one image is already the GEMM's operand.

Covered: float32 / float64, ``groups=1``, any stride, padding (negative crops), dilation and
kernel size, any input layout (made C-contiguous first). Everything else (grouped / depthwise
convolutions, integer dtypes, or the extension not built) runs the NumPy reference kernels of
:mod:`flow.ops.nn_conv`, as does everything when ``FLOW_CONV_REFERENCE=1`` (to measure one against
the other).

``out=``: each kernel also writes into a given C-contiguous array of the result's shape and dtype
(graph memory planning's arena; :data:`OUT_VARIANTS` are the op-signature forms, registered by
:mod:`flow.graph.out_variants`). The native paths compute straight into it; what runs elsewhere
(reference kernels, 16-bit floats through the float32 adapter) computes a result and copies it in.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from flow.backends.cpu import native, threads
from flow.errors import OpError, OpTypeError
from flow.ops import nn_conv as R

_NATIVE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# From this many output pixels an image's GEMM is wide enough on its own: forward and input gradient go
# one image at a time (no gather / scatter of the output between layouts; measured on ResNet-18 shapes:
# per-image products were faster from 256 pixels, the batched chunk below that).
_PER_IMAGE_PIXELS = 256
# Column buffers are kept per thread and reused: a fresh multi-MB buffer faults its pages in on every
# call (glibc hands large blocks back to the OS), which cost the stem convolution of ResNet-18 a third
# of its time. Buffers above this size are not kept.
_KEEP_BYTES = 64 << 20
_SCRATCH = threading.local()
# Eager hooks installed by flow.backends.cpu.winograd.set_conv_algorithm: a result, or None for the GEMM below.
eager_forward = None
eager_backward_input = None


def use_native(a: np.ndarray, groups: int) -> bool:
    """Whether the native column kernels handle this dtype / group count (else the reference runs)."""
    return (
        native.HAVE_NATIVE
        and groups == 1
        and a.dtype in _NATIVE_DTYPES
        and os.environ.get("FLOW_CONV_REFERENCE") != "1"
    )


def _fused() -> bool:
    """Whether the one-call kernels (GEMM inside flow's parallel region) are available."""
    return threads.BLAS_PATH is not None


def _task_images(N: int, K: int, P: int, itemsize: int) -> int:
    """Images per task of the one-call forward / input gradient: one when an image's GEMM is wide
    enough, else the chunk of the Python path. From the shapes only, never the thread count."""
    if P >= _PER_IMAGE_PIXELS:
        return 1
    return max(1, R._chunks(N, K * P * itemsize, P)[0].stop) if N else 1


def _geom(kh: int, kw: int, stride: tuple, padding: tuple, dilation: tuple, Ho: int, Wo: int) -> tuple:
    """The geometry arguments of the native conv kernels (padding given as (top, bottom, left, right))."""
    return kh, kw, stride[0], stride[1], padding[0], padding[2], dilation[0], dilation[1], Ho, Wo


def _plan(N: int, K: int, P: int, itemsize: int, per_image: bool = False) -> tuple[list, int]:
    """Batch chunks (the reference kernels' sizes: ~4 MB of columns each, or single images when
    ``per_image`` and the images are large enough) and the largest chunk."""
    if per_image and P >= _PER_IMAGE_PIXELS:
        return [slice(i, i + 1) for i in range(N)], min(N, 1)
    chunks = R._chunks(N, K * P * itemsize, P)
    return chunks, max((s.stop - s.start for s in chunks), default=0)


def _scratch(slot: str, size: int, dtype: np.dtype) -> np.ndarray:
    """A flat buffer of at least ``size`` elements, this thread's for ``slot`` (contents undefined)."""
    bufs = getattr(_SCRATCH, "bufs", None)
    if bufs is None:
        bufs = _SCRATCH.bufs = {}
    buf = bufs.get((slot, dtype))
    if buf is None or buf.size < size:
        buf = np.empty(size, dtype=dtype)
        if size * buf.itemsize <= _KEEP_BYTES:
            bufs[(slot, dtype)] = buf
    return buf


def _check_out(op: str, out: np.ndarray, shape: tuple, dtype: np.dtype, inputs: tuple) -> None:
    """Raise unless ``out`` can take the result in place: an ndarray of ``shape`` and ``dtype``, C-contiguous
    (the native kernels address it as one flat block), writeable and apart from every input."""
    if not isinstance(out, np.ndarray):
        raise OpTypeError(op, f"'out' must be a NumPy array, got {type(out).__name__}")
    if out.dtype != dtype:
        raise OpTypeError(op, f"'out' has dtype {out.dtype} but the result has dtype {dtype}")
    if tuple(out.shape) != tuple(shape):
        raise OpError(op, f"'out' has shape {tuple(out.shape)} but the result has shape {tuple(shape)}")
    if not out.flags.c_contiguous:
        raise OpError(op, "'out' must be C-contiguous")
    if not out.flags.writeable:
        raise OpError(op, "'out' is read-only")
    if any(a is not None and np.may_share_memory(out, a) for a in inputs):
        raise OpError(op, "'out' overlaps an input; the kernels read the inputs while writing it")


def _into(out: np.ndarray | None, r: np.ndarray) -> np.ndarray:
    """``r``, or ``r`` copied into ``out`` (the paths that cannot write into ``out`` directly)."""
    if out is None:
        return r
    np.copyto(out, r)
    return out


def _rows(g: np.ndarray, sl: slice, buf: np.ndarray) -> np.ndarray:
    """The chunk's output gradient (n, O, P) as GEMM rows (O, n * P), copied into ``buf`` if n > 1."""
    gs = g[sl]
    n, O, P = gs.shape
    if n == 1:
        return gs[0]
    rows = buf[: O * n * P].reshape(O, n, P)
    np.copyto(rows, gs.transpose(1, 0, 2))
    return rows.reshape(O, n * P)


def conv2d_forward(
    x, w, b, stride: tuple, padding: tuple, dilation: tuple, groups: int, out: np.ndarray | None = None
) -> np.ndarray:
    """``conv2d(x, w, b)`` (NCHW); see :func:`flow.ops.nn_conv.conv2d_forward` for the arguments.
    ``out``: an (N, O, Ho, Wo) array the result is written into (and returned)."""
    N, C, H, W = x.shape
    O, _, kh, kw = w.shape
    Ho, Wo = R.conv_out_size("conv2d", (H, W), (kh, kw), stride, padding, dilation)
    if out is not None:
        _check_out("conv2d", out, (N, O, Ho, Wo), x.dtype, (x, w, b))
    if eager_forward is not None and (y := eager_forward(x, w, b, stride, padding, dilation, groups)) is not None:
        return _into(out, y)
    if not use_native(x, groups):
        return _into(out, R.conv2d_forward(np, x, w, b, stride, padding, dilation, groups))
    K, P = C * kh * kw, Ho * Wo
    x = np.ascontiguousarray(x)
    wm = np.ascontiguousarray(w).reshape(O, K)
    res = np.empty((N, O, P), dtype=x.dtype) if out is None else out.reshape(N, O, P)  # a view of out
    if _fused():
        nb = _task_images(N, K, P, x.itemsize)
        native._C.conv2d_gemm_forward(x, wm, res, *_geom(kh, kw, stride, padding, dilation, Ho, Wo), nb)
        return _bias(res, b, out, (N, O, Ho, Wo))
    # a 1x1, stride-1, unpadded kernel reads every pixel once in place: the image is its own columns
    identity = (kh, kw) == (1, 1) and stride == (1, 1) and not any(padding)
    chunks, nmax = _plan(N, K, P, x.itemsize, per_image=True)
    cols = _scratch("cols", 0 if identity and nmax == 1 else K * nmax * P, x.dtype)
    rbuf = _scratch("res", O * nmax * P if nmax > 1 else 0, x.dtype)
    for sl in chunks:
        n = sl.stop - sl.start
        if identity and n == 1:
            c = x[sl.start].reshape(C, P)
        else:
            c = cols[: K * n * P].reshape(K, n * P)
            native.im2col(x[sl], kernel_size=(kh, kw), stride=stride, padding=padding, dilation=dilation, out=c)
        if n == 1:
            np.matmul(wm, c, out=res[sl.start])
        else:
            r = rbuf[: O * n * P].reshape(O, n * P)
            np.matmul(wm, c, out=r)
            res[sl] = r.reshape(O, n, P).transpose(1, 0, 2)
    return _bias(res, b, out, (N, O, Ho, Wo))


def _bias(res: np.ndarray, b, out: np.ndarray | None, shape: tuple) -> np.ndarray:
    """The forward result ``res`` (a view of ``out`` when given) in ``shape``, with the bias added in place."""
    y = res.reshape(shape)
    if b is not None:
        y += b.reshape(1, shape[1], 1, 1)
    return y if out is None else out


def conv2d_backward_input(
    g,
    w,
    input_size: tuple,
    stride: tuple,
    padding: tuple,
    dilation: tuple,
    groups: int,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The input gradient of conv2d: ``w^T @ grad_output`` per chunk, col2im-added into a zeroed result.
    ``out``: an (N, C, H, W) array the result is written into (and returned)."""
    N, O, Ho, Wo = g.shape
    _, Cg, kh, kw = w.shape
    H, W = input_size
    if out is not None:
        _check_out("conv2d_backward_input", out, (N, Cg * groups, H, W), g.dtype, (g, w))
    hook = eager_backward_input
    if hook is not None and (y := hook(g, w, input_size, stride, padding, dilation, groups)) is not None:
        return _into(out, y)
    if not use_native(g, groups):
        return _into(out, R.conv2d_backward_input(np, g, w, input_size, stride, padding, dilation, groups))
    C = Cg  # groups == 1 from here on
    K, P = C * kh * kw, Ho * Wo
    wt = np.ascontiguousarray(w).reshape(O, K).T  # (K, O): a transposed operand, no copy (BLAS transposes)
    gr = np.ascontiguousarray(g).reshape(N, O, P)
    if _fused():
        # the native tasks zero their own images of dx right before adding into them (no zeroing pass)
        dx = np.empty((N, C, H, W), dtype=g.dtype) if out is None else out
        wm = np.ascontiguousarray(w).reshape(O, K)
        nb = _task_images(N, K, P, g.itemsize)
        geom = _geom(kh, kw, stride, padding, dilation, Ho, Wo)
        native._C.conv2d_gemm_backward_input(gr, wm, dx, *geom, nb, True)  # zero=True
        return dx
    if out is None:
        dx = np.zeros((N, C, H, W), dtype=g.dtype)
    else:
        dx = out
        dx.fill(0)  # col2im adds into it
    chunks, nmax = _plan(N, K, P, g.itemsize, per_image=True)
    dcols = _scratch("cols", K * nmax * P, g.dtype)
    gbuf = _scratch("res", O * nmax * P if nmax > 1 else 0, g.dtype)
    for sl in chunks:
        n = sl.stop - sl.start
        d = dcols[: K * n * P].reshape(K, n * P)
        np.matmul(wt, _rows(gr, sl, gbuf), out=d)
        native.col2im(d, dx[sl], kernel_size=(kh, kw), stride=stride, padding=padding, dilation=dilation)
    return dx


def conv2d_backward_weight(
    g,
    x,
    weight_size: tuple,
    stride: tuple,
    padding: tuple,
    dilation: tuple,
    groups: int,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The weight gradient of conv2d: the sum over chunks of ``grad_output @ cols^T``.
    ``out``: an (O, C / groups, kh, kw) array the result is written into (and returned)."""
    N, C = x.shape[:2]
    O, Ho, Wo = g.shape[1:]
    kh, kw = weight_size
    if out is not None:
        _check_out("conv2d_backward_weight", out, (O, C // groups, kh, kw), x.dtype, (g, x))
    if not use_native(x, groups):
        return _into(out, R.conv2d_backward_weight(np, g, x, weight_size, stride, padding, dilation, groups))
    K, P = C * kh * kw, Ho * Wo
    x = np.ascontiguousarray(x)
    gr = np.ascontiguousarray(g).reshape(N, O, P)
    dw = np.empty((O, K), dtype=x.dtype) if out is None else out.reshape(O, K)  # a view of out
    if _fused():
        nb = max((s.stop - s.start for s in R._chunks(N, K * P * x.itemsize, P)), default=1)
        native._C.conv2d_gemm_backward_weight(gr, x, dw, *_geom(kh, kw, stride, padding, dilation, Ho, Wo), nb)
        return dw.reshape(O, C, kh, kw) if out is None else out
    acc = dw
    chunks, nmax = _plan(N, K, P, x.itemsize)
    if not chunks:  # an empty batch: the sum over no images
        acc.fill(0)
    cols = _scratch("cols", K * nmax * P, x.dtype)
    gbuf = _scratch("res", O * nmax * P if nmax > 1 else 0, x.dtype)
    part = _scratch("part", O * K, x.dtype)[: O * K].reshape(O, K) if len(chunks) > 1 else None
    for k, sl in enumerate(chunks):
        n = sl.stop - sl.start
        c = cols[: K * n * P].reshape(K, n * P)
        native.im2col(x[sl], kernel_size=(kh, kw), stride=stride, padding=padding, dilation=dilation, out=c)
        # the first chunk's product is the sum so far; later ones go through one (O, K) scratch
        np.matmul(_rows(gr, sl, gbuf), c.T, out=acc if k == 0 else part)
        if k:
            acc += part
    return acc.reshape(O, C, kh, kw) if out is None else out


# -- out= forms with the op signatures (the kernels of flow.ops.nn_conv), for graph memory planning -------
def _lowp_into(op: str, args: tuple, attrs: dict, out: np.ndarray | None) -> np.ndarray | None:
    """16-bit floats: what eager dispatch runs (the float32 adapter of flow.backends.cpu.lowp), copied
    into ``out``; None for the other dtypes (the kernels above take them)."""
    from flow.backends.cpu.lowp import LOWP

    if args[0].dtype not in LOWP:
        return None
    from flow import _dtype as D
    from flow.registry import REGISTRY

    fn = REGISTRY.resolve_kernel(REGISTRY.ops[op], "cpu", D.as_dtype(args[0].dtype))
    r = fn(*args, **attrs)
    if out is not None:
        if r.shape != out.shape or r.dtype != out.dtype:
            raise OpError(op, f"'out' has shape {out.shape} and dtype {out.dtype}, the result {r.shape} {r.dtype}")
        np.copyto(out, r)
        return out
    return r


def conv2d_out(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    stride: tuple = (1, 1),
    padding: tuple = (0, 0, 0, 0),
    dilation: tuple = (1, 1),
    groups: int = 1,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The ``conv2d`` CPU kernel with ``out=``."""
    attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    r = _lowp_into("conv2d", (x, w, b), attrs, out)
    if r is not None:
        return r
    return conv2d_forward(x, w, b, tuple(stride), tuple(padding), tuple(dilation), groups, out=out)


def conv2d_backward_input_out(
    g: np.ndarray,
    w: np.ndarray,
    input_size: tuple = (),
    stride: tuple = (1, 1),
    padding: tuple = (0, 0, 0, 0),
    dilation: tuple = (1, 1),
    groups: int = 1,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The ``conv2d_backward_input`` CPU kernel with ``out=``."""
    attrs = dict(input_size=input_size, stride=stride, padding=padding, dilation=dilation, groups=groups)
    r = _lowp_into("conv2d_backward_input", (g, w), attrs, out)
    if r is not None:
        return r
    return conv2d_backward_input(
        g, w, tuple(input_size), tuple(stride), tuple(padding), tuple(dilation), groups, out=out
    )


def conv2d_backward_weight_out(
    g: np.ndarray,
    x: np.ndarray,
    weight_size: tuple = (),
    stride: tuple = (1, 1),
    padding: tuple = (0, 0, 0, 0),
    dilation: tuple = (1, 1),
    groups: int = 1,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The ``conv2d_backward_weight`` CPU kernel with ``out=``."""
    attrs = dict(weight_size=weight_size, stride=stride, padding=padding, dilation=dilation, groups=groups)
    r = _lowp_into("conv2d_backward_weight", (g, x), attrs, out)
    if r is not None:
        return r
    return conv2d_backward_weight(
        g, x, tuple(weight_size), tuple(stride), tuple(padding), tuple(dilation), groups, out=out
    )


# op -> out-variant of its "default" cpu kernel (registered by flow.graph.out_variants)
OUT_VARIANTS = {
    "conv2d": conv2d_out,
    "conv2d_backward_input": conv2d_backward_input_out,
    "conv2d_backward_weight": conv2d_backward_weight_out,
}
