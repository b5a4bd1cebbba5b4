"""bfloat16 / float16 on the CPU: float32 compute between native conversions.

NumPy has no fast float16 / bfloat16 arithmetic (ml_dtypes' bfloat16 ``@`` is about twice as slow
as float32's and returns float32; its elementwise loops are 2-40x slower). So on the CPU an op on
low-precision tensors runs its float32 kernel: the low-precision inputs are converted to float32
(``flow._C``, bit-exact with ``astype``), the float32 kernel runs (NumPy's BLAS for matmul, linear
and conv; the native softmax, layer-norm and GELU kernels), and floating outputs are rounded back
to the dtype the op's meta rule gives them: the input's low dtype for most ops, float32 where the
meta rule says so (a float32 ``found_inf`` flag, a mixed-precision layer norm's float32 weight
gradient). Reductions and normalisations therefore accumulate in float32, and the result dtypes
are the meta rule's.

The mechanism is the CPU device's ``kernel_adapter`` (see :class:`flow.registry.DeviceType`): it
is asked once per (op, dtype) when the dispatcher resolves a kernel for a dtype no kernel is
registered for, so float32 / float64 calls never pass through here, and a kernel a plugin
registers for ``bfloat16`` itself is used as it is.

- Ops that only move data (reshape, cat, gather, ...) keep running on the low-precision arrays:
  NumPy copies 2-byte items as fast as any, and views must stay views.
- An op whose float32 kernel returns a view of an input is found out on its first call and from
  then on runs on the low-precision arrays too (a view of a float32 copy would not alias).
- An op that updates inputs in place (``inplace=True``: the optimizer updates) gets float32
  copies, and what it wrote is rounded back into the original buffers.
- Inputs that are not of the low dtype (float32 weights of a bfloat16 activation, a float32 loss
  scale) are passed as they are, and an output that is one of them comes back as it is.

>>> import flow
>>> a = flow.randn(4, 8).bfloat16()
>>> (a @ flow.randn(8, 3).bfloat16()).dtype
flow.bfloat16
"""

from __future__ import annotations

from typing import Callable

import ml_dtypes
import numpy as np

from flow.backends.cpu import native

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
LOWP = (BF16, F16)

# Ops that only move, select or copy values: exact in any dtype and as fast on 2-byte items.
DTYPE_TRANSPARENT = frozenset(
    {
        "basic_index",
        "basic_index_put",
        "cat",
        "clone",
        "constant_pad",
        "contiguous",
        "diagonal",
        "diagonal_backward",
        "embedding",
        "expand",
        "flip",
        "gather",
        "index",
        "index_select",
        "nonzero",
        "permute",
        "reshape",
        "roll",
        "select_along_dim",
        "split",
        "stack",
        "tril",
        "triu",
        "unbind",
        "where",
    }
)


# ---------------------------------------------------------------------------------------------
# conversions


def to_f32(a: np.ndarray) -> np.ndarray:
    """A float32 copy of a bfloat16 / float16 array (native, exact)."""
    dt = a.dtype
    if not native.HAVE_NATIVE:
        return a.astype(F32)
    if not a.flags.c_contiguous:
        # a strided view (a transpose in a backward matmul): widen in the view's own memory order
        # (``order="K"``), so no 2-byte transpose copy is made first and the float32 result keeps
        # the layout BLAS reads as a transpose for free
        if dt == BF16:
            u = a.view(np.uint16).astype(np.uint32, order="K")
            u <<= 16
            return u.view(F32)
        return a.astype(F32, order="K")
    if dt == BF16:
        return native.bf16_to_f32(a)
    if dt == F16:
        return native.f16_to_f32(a)
    return a.astype(F32)


def from_f32(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``a`` rounded to ``dtype`` (bfloat16 / float16), round to nearest even as ``astype``."""
    if a.dtype != F32 or not native.HAVE_NATIVE:
        return a.astype(dtype)  # float64: one rounding, not two through float32
    if dtype == BF16:
        return native.f32_to_bf16(a)
    return native.f32_to_f16(a)


def write_back(dst: np.ndarray, src: np.ndarray) -> None:
    """Round float32 ``src`` into the low-precision array ``dst`` in place."""
    src = np.ascontiguousarray(src).reshape(dst.shape)  # (ascontiguousarray makes a 0-d array 1-d)
    if native.HAVE_NATIVE and dst.flags.c_contiguous and dst.flags.writeable:
        (native.f32_to_bf16 if dst.dtype == BF16 else native.f32_to_f16)(src, out=dst)
    else:
        dst[...] = from_f32(src, dst.dtype)


# ---------------------------------------------------------------------------------------------
# the float32 path for every op without a low-precision kernel


def kernel_adapter(op, dtype, fn: Callable) -> Callable:
    """The CPU's ``DeviceType.kernel_adapter``: the kernel to run for ``op`` on a first input of ``dtype``
    when only ``fn`` (a kernel registered for any dtype) is there."""
    if dtype is None or dtype.np not in LOWP or op.name in DTYPE_TRANSPARENT:
        return fn
    if getattr(fn, "handles_low_precision", False):  # reads and writes 16-bit floats itself (fused kernels)
        return fn
    from flow import _dtype as D
    from flow.registry import REGISTRY

    f32_kernel = REGISTRY.resolve_kernel(op, "cpu", D.float32)
    return upcast_kernel(f32_kernel, fn, dtype.np, op)


def upcast_kernel(f32_kernel: Callable, direct: Callable, low: np.dtype, op=None) -> Callable:
    """Run ``f32_kernel`` on float32 copies of the ``low`` arrays and round floating outputs to the
    dtypes ``op``'s meta rule gives (to ``low`` without ``op``); ``direct`` (the kernel on the arrays
    as they are) serves ops found to return views."""
    state = {"direct": False}
    # input dtypes and attributes -> the output dtypes the meta rule gives: the float32 kernel's
    # results are all float32, so only the meta rule knows which of them are meant to be low
    wanted: dict = {}

    def run(*arrays, **attrs):
        if state["direct"]:
            return direct(*arrays, **attrs)
        ups: dict[int, tuple] = {}  # id(float32 copy) -> (copy, original)
        kept: dict[int, np.ndarray] = {}  # id -> floating input of another dtype, passed as it is
        args = [_up(a, low, ups, kept) for a in arrays]
        out = f32_kernel(*args, **attrs)
        inplace = attrs.get("inplace") is True
        targets = _targets(op, arrays, attrs, wanted) if op is not None else None
        if out.__class__ is tuple or out.__class__ is list:
            if targets is None or len(targets) != len(out):
                targets = (None,) * len(out)
            res = [_down(o, low, ups, inplace, kept, t) for o, t in zip(out, targets)]
            if any(r is _VIEW for r in res):
                state["direct"] = True
                return direct(*arrays, **attrs)
            return tuple(res) if out.__class__ is tuple else res
        r = _down(out, low, ups, inplace, kept, targets[0] if targets is not None and len(targets) == 1 else None)
        if r is _VIEW:
            state["direct"] = True
            return direct(*arrays, **attrs)
        return r

    run.__name__ = f"lowp_{getattr(f32_kernel, '__name__', 'kernel')}"
    run.__wrapped__ = f32_kernel
    return run


_VIEW = object()  # marker: an output aliases a float32 copy (the op returns a view)


_META_DEVICE = None  # flow.device("cpu"), the device of the metas the adapter builds
_WANTED_SIZE = 256  # signatures remembered per adapted kernel


def _targets(op, arrays: tuple, attrs: dict, wanted: dict):
    """The NumPy dtype each output should have (None: not floating, or unknown), from ``op``'s meta
    rule on metas of ``arrays``; remembered per input dtypes and attributes. None when the meta rule
    cannot tell without data (the outputs are then rounded to the low dtype)."""
    try:
        key = (tuple([_dtype_key(a) for a in arrays]), tuple(attrs.items()) if attrs else ())
        hit = wanted.get(key, _MISSING)
    except TypeError:  # an unhashable attribute: no caching
        key, hit = None, _MISSING
    if hit is not _MISSING:
        return hit
    from flow.errors import FlowError

    try:
        metas = op.meta(*[_meta_of(a) for a in arrays], **attrs)
    except FlowError:  # e.g. a data-dependent output shape: the meta rule needs the values
        res = None
    else:
        metas = metas if metas.__class__ is tuple or metas.__class__ is list else (metas,)
        res = tuple([_float_np(m) for m in metas])
    if key is not None:
        if len(wanted) >= _WANTED_SIZE:
            wanted.clear()
        wanted[key] = res
    return res


_MISSING = object()


def _float_np(m):
    dt = getattr(m, "dtype", None)
    return dt.np if dt is not None and dt.is_floating_point else None


def _dtype_key(a):
    if a.__class__ is np.ndarray:
        return a.dtype
    if a.__class__ is list or a.__class__ is tuple:
        return tuple([_dtype_key(x) for x in a])
    if isinstance(a, np.generic):
        return a.dtype
    if a is None or isinstance(a, (bool, int, float)):
        return a.__class__
    return a  # another non-tensor input: by value (unhashable ones are not cached)


def _meta_of(a):
    """What the meta rule sees of a kernel argument (as the dispatcher gives it: metas for arrays,
    Python numbers for NumPy scalars)."""
    global _META_DEVICE
    if a.__class__ is np.ndarray:
        if _META_DEVICE is None:
            from flow._device import device

            _META_DEVICE = device("cpu")
        from flow._dtype import NP_TO_DTYPE
        from flow.ops.meta import TensorMeta

        return TensorMeta(tuple(a.shape), NP_TO_DTYPE[a.dtype], _META_DEVICE)
    if (a.__class__ is list or a.__class__ is tuple) and any(x.__class__ is np.ndarray for x in a):
        return a.__class__(_meta_of(x) for x in a)
    if isinstance(a, np.generic):
        return a.item()
    return a


def _up(a, low: np.dtype, ups: dict, kept: dict):
    if a.__class__ is np.ndarray:
        if a.dtype != low:
            if a.dtype.kind == "f":
                kept[id(a)] = a
            return a
        u = to_f32(a)
        ups[id(u)] = (u, a)
        return u
    if a.__class__ is list or a.__class__ is tuple:
        return a.__class__(_up(x, low, ups, kept) for x in a)
    if isinstance(a, np.generic) and a.dtype == low:  # a scalar operand of the tensor's dtype
        return np.float32(a)
    return a


def _down(o, low: np.dtype, ups: dict, inplace: bool, kept: dict, target):
    """The output ``o`` of the float32 kernel as the op's caller gets it: in ``target`` (the meta
    rule's dtype; None: ``low`` for a floating output)."""
    want = low if target is None else target
    if o.__class__ is not np.ndarray:
        if isinstance(o, np.generic) and o.dtype.kind == "f":
            return np.asarray(o).astype(want)[()]
        return o
    hit = ups.get(id(o))
    if hit is not None:  # the kernel handed back an input (updated in place, or unchanged)
        u, orig = hit
        if inplace:
            write_back(orig, u)
            return orig
        # unchanged: the input itself, unless the meta rule wants another dtype (then the float32
        # copy, which nothing else holds, is that output)
        if want == low:
            return orig
        return u if u.dtype == want else u.astype(want)
    if kept and id(o) in kept:  # an input of another dtype handed back (updated in place, or unchanged)
        return o
    b = o.base
    while b is not None:
        if id(b) in ups:
            return _VIEW
        b = getattr(b, "base", None)
    if o.dtype.kind == "f" and o.dtype != want:
        return from_f32(o, want) if want in LOWP else o.astype(want)
    return o


# ---------------------------------------------------------------------------------------------
# matmul / linear: native 16-bit GEMM (csrc/lowp_gemm.cpp)


def _blas_bound() -> bool:
    from flow.backends.cpu import threads

    return threads.BLAS_PATH is not None and hasattr(native._C, "lowp_gemm") and native._C.blas_ready()


def _f32_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    from flow.backends.cpu import threads

    return threads.matmul(to_f32(a), to_f32(b))


def gemm(
    a: np.ndarray,
    b: np.ndarray,
    bias: np.ndarray | None = None,
    out: np.ndarray | None = None,
    out_dtype: np.dtype | None = None,
) -> np.ndarray:
    """``a @ b (+ bias)`` for bfloat16 / float16 ``a`` and ``b`` (and ``bias``) with float32 accumulation.

    Batched and broadcast as ``np.matmul``; bit-exact with rounding ``a.astype(float32) @
    b.astype(float32) (+ bias)`` to ``out_dtype`` (the inputs' dtype by default, or float32). Runs
    the native GEMM (float32 panels converted per cache-sized tile, no whole-array copies) when a
    BLAS is bound, else converts the operands to float32 as the other ops on these dtypes do.
    ``out`` (an array of the result's shape and dtype) receives the result when given.

    >>> x = np.ones((2, 3), BF16)
    >>> gemm(x, np.ones((3, 4), BF16)).dtype == BF16
    True
    """
    low = a.dtype
    if low not in LOWP or b.dtype != low or (bias is not None and bias.dtype != low):
        got = f"{a.dtype}, {b.dtype}" + ("" if bias is None else f", {bias.dtype}")
        raise TypeError(f"lowp gemm: expected bfloat16 or float16 operands of one dtype, got {got}")
    want = low if out_dtype is None else np.dtype(out_dtype)
    if want not in (low, F32):
        raise TypeError(f"lowp gemm: out_dtype must be {low} or float32, got {want}")
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        if a.ndim == 0 or b.ndim == 0:
            raise ValueError(f"lowp gemm: both operands need at least 1 dimension, got shapes {a.shape} and {b.shape}")
        # vector products and mismatched shapes: NumPy's matmul does the products and the errors
        r = _f32_matmul(a, b)
        return _finish(r + to_f32(bias) if bias is not None else r, want, out)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    shape = batch + (a.shape[-2], b.shape[-1])
    if not _blas_bound():
        r = _f32_matmul(a, b)
        if bias is not None:
            r += to_f32(bias)
        return _finish(r, want, out)
    if bias is not None and (bias.shape != (shape[-1],) or not bias.flags.c_contiguous):
        bias = np.ascontiguousarray(np.broadcast_to(bias, (shape[-1],)))
    res = out
    if res is None or res.dtype != want or res.shape != shape or not res.flags.c_contiguous or not res.flags.writeable:
        res = np.empty(shape, want)
    # broadcast batch dims are stride-0 views: the native side walks them without copies
    a = np.broadcast_to(a, batch + a.shape[-2:]).view(np.uint16)
    b = np.broadcast_to(b, batch + b.shape[-2:]).view(np.uint16)
    native._C.lowp_gemm(
        a,
        b,
        None if bias is None else bias.view(np.uint16),
        res if want == F32 else res.view(np.uint16),
        "bfloat16" if low == BF16 else "float16",
    )
    if out is not None and res is not out:
        out[...] = res
        return out
    return res


def _finish(r: np.ndarray, want: np.dtype, out: np.ndarray | None) -> np.ndarray:
    r = r if want == F32 else from_f32(r, want)
    if out is None:
        return r
    out[...] = r
    return out


def _gemm_kernels() -> dict:
    """The bfloat16 / float16 ``matmul`` and ``linear`` kernels, with their ``out=`` variants."""

    def matmul(a, b):
        return gemm(a, b)

    def matmul_out(a, b, out=None):
        return gemm(a, b, out=out)

    def linear(x, w, b=None):
        return gemm(x, w.T, b)

    def linear_out(x, w, b=None, out=None):
        return gemm(x, w.T, b, out=out)

    return {"matmul": (matmul, matmul_out), "linear": (linear, linear_out)}


# ---------------------------------------------------------------------------------------------
# cast


def convert(x: np.ndarray, target: np.dtype) -> np.ndarray:
    """A new array: ``x`` in ``target``, native between float32 and bfloat16 / float16."""
    src = x.dtype
    if src == F32 and target in LOWP:
        return from_f32(x, target)
    if src in LOWP and target.kind == "f" and target != src:
        f = to_f32(x)  # exact, so float64 and the other 16-bit type round once, as astype does
        if target == F32:
            return f
        return from_f32(f, target) if target in LOWP else f.astype(target)
    return x.astype(target)  # integers and bool: as NumPy / ml_dtypes convert (inf, NaN included)


def cast_kernel(xp) -> Callable:
    """The CPU ``cast`` kernel: native between float32 and bfloat16 / float16, ``astype`` otherwise."""

    def run(x, dtype):
        from flow import _dtype as D

        return convert(x, D.as_dtype(dtype).np)

    return run


def cast_like_kernel(xp) -> Callable:
    """The CPU ``cast_like`` kernel: ``cast`` to the dtype of the second array."""
    return lambda x, other: convert(x, other.dtype)


def register(registry) -> None:
    """Native low-precision kernels for the ``cpu`` device, and the float32 path for the rest."""
    from flow import _dtype as D

    cpu = registry._device_types.get("cpu")
    if cpu is not None:
        cpu.kernel_adapter = kernel_adapter
    if native.HAVE_NATIVE and "cast" in registry._ops:
        # for float32 sources too: float32 -> bfloat16 / float16 is where the native rounding pays
        registry.register_kernel("cast", "cpu", cast_kernel(np), dtypes=[D.float32, D.bfloat16, D.float16])
    if native.HAVE_NATIVE and "cast_like" in registry._ops:
        registry.register_kernel("cast_like", "cpu", cast_like_kernel(np), dtypes=[D.float32, D.bfloat16, D.float16])
    if native.HAVE_NATIVE and _blas_bound():
        # without a bound BLAS the adapter's float32 path above serves these ops as before
        for op_name, (fn, out) in _gemm_kernels().items():
            if op_name in registry._ops:
                registry.register_kernel(op_name, "cpu", fn, dtypes=[D.bfloat16, D.float16], out=out)
