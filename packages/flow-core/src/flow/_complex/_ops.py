"""The computations on complex tensors, each written with real flow ops on the two parts.

``(a + bi)(c + di) = (ac - bd) + (ad + bc)i`` and the like: autograd differentiates the real ops,
which gives PyTorch's gradients for complex tensors (``dL/dRe + i dL/dIm``). A real operand (a real
tensor, a Python ``int`` / ``float``) has no imaginary part: it is carried as ``None`` so that no
zero tensors are made and its gradient stays real.

:func:`handler` is the array-kind handler of :class:`~flow._complex._array.ComplexArray`: it answers
the ops that act on each part alike (shape and indexing ops, ``sum``, ``mean``, ``clone`` ...) by
running them on both parts, the arithmetic ops with the formulas here, and raises
:class:`flow.errors.OpTypeError` naming the op for every other one.
"""

from __future__ import annotations

import builtins
import numbers

import numpy as np

from flow._complex._array import ComplexArray, as_complex_dtype, complex_of, default_complex
from flow._complex._tensor import ComplexTensor
from flow._dtype import get_default_dtype
from flow._tensor import Tensor
from flow.array_kinds import register_array_kind
from flow.errors import OpError, OpTypeError

SUPPORTED = (
    "complex tensors support only: construction (flow.complex, flow.polar, flow.view_as_complex, flow.tensor), "
    ".real, .imag, flow.view_as_real, conj, abs, angle, exp, + - * / @ (with complex, real tensors and numbers), "
    "==, sum, mean, shape and indexing ops (reshape, view, permute, transpose, slicing, cat, stack ...), to, "
    "clone, detach, numpy and the flow.fft transforms"
)

# ops that act on the real and imaginary parts alike (R-linear and position-wise): run on each part
_PART_WISE = frozenset(
    {
        "reshape",
        "permute",
        "expand",
        "flip",
        "roll",
        "basic_index",
        "index",
        "index_select",
        "select_along_dim",
        "diagonal",
        "tril",
        "triu",
        "sum",
        "mean",
        "cumsum",
        "clone",
        "contiguous",
        "unbind",
        "split",
        "cat",
        "stack",
        "constant_pad",
    }
)


def unsupported(op: str) -> OpTypeError:
    return OpTypeError(op, f"this op does not support complex tensors; {SUPPORTED}")


def parts(x, op: str) -> tuple:
    """``(re, im)`` of an operand: a complex tensor's parts, a real tensor with ``None``, a number's parts."""
    if isinstance(x, ComplexTensor):
        return x._data.re, x._data.im
    if isinstance(x, Tensor):
        if x.dtype.category == 0:
            raise OpTypeError(op, "a complex tensor cannot be combined with a bool tensor")
        return x, None
    if isinstance(x, bool):
        raise OpTypeError(op, "a complex tensor cannot be combined with a bool")
    if isinstance(x, numbers.Complex):
        x = builtins.complex(x)
        return x.real, (x.imag if x.imag != 0 else None)
    raise OpTypeError(op, f"expected a tensor or a number, got {type(x).__name__}")


def make(re, im) -> ComplexTensor:
    """A complex tensor from two parts (``None`` or a number for a zero or constant part): one dtype
    (promoted as PyTorch promotes the complex operands), one shape (broadcast)."""
    from flow import _creation as C

    if not isinstance(re, Tensor):
        re = C.full_like(im, 0.0 if re is None else re)
    if not isinstance(im, Tensor):
        im = C.full_like(re, 0.0 if im is None else im)
    if not re.dtype.is_floating_point:
        re = re.to(im.dtype if im.dtype.is_floating_point else _default_part())
    if not im.dtype.is_floating_point:
        im = im.to(re.dtype)
    if re.dtype is not im.dtype:
        from flow import _dtype as D

        dt = D.promote_types(re.dtype, im.dtype)
        re, im = re.to(dt), im.to(dt)
    if tuple(re.shape) != tuple(im.shape):
        from flow import broadcast_tensors

        re, im = broadcast_tensors(re, im)
    complex_of(re.dtype, "complex")  # float16 / bfloat16 parts have no complex dtype here
    return ComplexTensor._from_parts(re, im)


def _default_part():
    from flow import _dtype as D

    return D.get_default_dtype()


def _mul(x, y):
    return None if x is None or y is None else x * y


def _add(x, y):
    return y if x is None else x if y is None else x + y


def _sub(x, y):
    return x if y is None else -y if x is None else x - y


def c_add(a, b, alpha=1) -> ComplexTensor:
    (ar, ai), (br, bi) = parts(a, "add"), parts(b, "add")
    if alpha != 1:
        br, bi = br * alpha, _mul(bi, alpha)
    return make(_add(ar, br), _add(ai, bi))


def c_sub(a, b, alpha=1) -> ComplexTensor:
    (ar, ai), (br, bi) = parts(a, "sub"), parts(b, "sub")
    if alpha != 1:
        br, bi = br * alpha, _mul(bi, alpha)
    return make(_sub(ar, br), _sub(ai, bi))


def c_mul(a, b) -> ComplexTensor:
    (ar, ai), (br, bi) = parts(a, "mul"), parts(b, "mul")
    return make(_sub(ar * br, _mul(ai, bi)), _add(_mul(ar, bi), _mul(ai, br)))


def c_div(a, b) -> ComplexTensor:
    (ar, ai), (br, bi) = parts(a, "div"), parts(b, "div")
    if bi is None:
        return make(ar / br, None if ai is None else ai / br)
    den = br * br + bi * bi
    return make(_add(ar * br, _mul(ai, bi)) / den, _sub(_mul(ai, br), ar * bi) / den)


def c_matmul(a, b) -> ComplexTensor:
    from flow import matmul

    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise OpTypeError("matmul", "both operands of @ must be tensors")
    (ar, ai), (br, bi) = parts(a, "matmul"), parts(b, "matmul")

    def mm(x, y):
        return None if x is None or y is None else matmul(x, y)

    return make(_sub(mm(ar, br), mm(ai, bi)), _add(mm(ar, bi), mm(ai, br)))


def c_eq(a, b) -> Tensor:
    from flow import _creation as C

    (ar, ai), (br, bi) = parts(a, "eq"), parts(b, "eq")
    im_eq = (ai == (0.0 if bi is None else bi)) if ai is not None else (bi == 0.0)
    return (ar == br) & im_eq if isinstance(im_eq, Tensor) else (ar == br) & C.tensor(bool(im_eq))


def c_abs(z: ComplexTensor) -> Tensor:
    """``|z|``; its gradient at ``z == 0`` is 0, as PyTorch's (``sgn(0) == 0``), not NaN."""
    from flow import sqrt, where

    d = z._data
    sq = d.re * d.re + d.im * d.im
    zero = sq == 0
    # the inner where keeps sqrt's infinite slope at 0 out of the gradient
    return where(zero, sq * 0.0, sqrt(where(zero, sq + 1.0, sq)))


def c_exp(z: ComplexTensor) -> ComplexTensor:
    from flow import cos, exp, sin

    d = z._data
    r = exp(d.re)
    return ComplexTensor._from_parts(r * cos(d.im), r * sin(d.im))


def complex(real: Tensor, imag: Tensor, *, out=None) -> ComplexTensor:  # noqa: A001 - PyTorch's name
    """``torch.complex``: the complex tensor ``real + 1j * imag`` (float32 -> complex64, float64 -> complex128;
    broadcast). Gradients flow back to ``real`` and ``imag``.

    >>> flow.complex(flow.tensor([1.0]), flow.tensor([2.0]))
    tensor([1.+2.j])
    """
    for name, x in (("real", real), ("imag", imag)):
        if not isinstance(x, Tensor) or isinstance(x, ComplexTensor):
            raise OpTypeError("complex", f"'{name}' must be a real floating-point tensor, got {_what(x)}")
        if x.dtype not in (_F32, _F64):
            raise OpTypeError("complex", f"'{name}' must be float32 or float64, got {x.dtype}")
    if real.dtype is not imag.dtype:
        raise OpTypeError("complex", f"expected 'real' and 'imag' of one dtype, got {real.dtype} and {imag.dtype}")
    if out is not None:
        raise OpTypeError("complex", "'out=' is not supported")
    # copies, as PyTorch's: the new tensor's parts are not the caller's tensors
    return make(real.clone(), imag.clone())


def polar(abs: Tensor, angle: Tensor, *, out=None) -> ComplexTensor:  # noqa: A002 - PyTorch's names
    """``torch.polar``: ``abs * (cos(angle) + 1j * sin(angle))``."""
    from flow import cos, sin

    for name, x in (("abs", abs), ("angle", angle)):
        if not isinstance(x, Tensor) or isinstance(x, ComplexTensor):
            raise OpTypeError("polar", f"'{name}' must be a real floating-point tensor, got {_what(x)}")
        if x.dtype not in (_F32, _F64):
            raise OpTypeError("polar", f"'{name}' must be float32 or float64, got {x.dtype}")
    if abs.dtype is not angle.dtype:
        raise OpTypeError("polar", f"expected 'abs' and 'angle' of one dtype, got {abs.dtype} and {angle.dtype}")
    if out is not None:
        raise OpTypeError("polar", "'out=' is not supported")
    return make(abs * cos(angle), abs * sin(angle))


def view_as_complex(input: Tensor) -> ComplexTensor:
    """``torch.view_as_complex``: a float tensor of shape ``(..., 2)`` as a complex tensor of shape ``(...)``.
    The parts are slices of ``input``, so gradients reach it."""
    if not isinstance(input, Tensor) or isinstance(input, ComplexTensor):
        raise OpTypeError("view_as_complex", f"expected a real floating-point tensor, got {_what(input)}")
    if input.dtype not in (_F32, _F64):
        raise OpTypeError("view_as_complex", f"is only supported for float32 and float64 tensors, got {input.dtype}")
    if input.ndim == 0 or input.shape[-1] != 2:
        raise OpError("view_as_complex", f"the last dimension must have size 2, got shape {tuple(input.shape)}")
    return ComplexTensor._from_parts(input[..., 0], input[..., 1])


def view_as_real(input: ComplexTensor) -> Tensor:
    """``torch.view_as_real``: a complex tensor as a real tensor of shape ``(..., 2)`` (real, imaginary).
    Unlike PyTorch's this is a copy (the parts are stacked), not a view; gradients flow as PyTorch's."""
    from flow import stack

    if not isinstance(input, ComplexTensor):
        raise OpTypeError("view_as_real", f"is only supported for complex tensors, got {_what(input)}")
    d = input._data
    return stack([d.re, d.im], -1)


def real(input: Tensor) -> Tensor:
    """``torch.real``: the real part of a complex tensor; a real tensor itself."""
    if isinstance(input, ComplexTensor):
        return input.real
    if not isinstance(input, Tensor):
        raise OpTypeError("real", f"expected a tensor, got {_what(input)}")
    return input


def imag(input: ComplexTensor) -> Tensor:
    """``torch.imag``: the imaginary part of a complex tensor (a real tensor has none: an error, as PyTorch)."""
    if not isinstance(input, ComplexTensor):
        raise OpTypeError("imag", f"is not implemented for real tensors, got {_what(input)}")
    return input.imag


def conj(input: Tensor) -> Tensor:
    """``torch.conj``: the complex conjugate of a complex tensor; a real tensor is its own conjugate."""
    if isinstance(input, ComplexTensor):
        return input.conj()
    from flow.ops.aliases import conj as real_conj

    return real_conj(input)


def angle(input: Tensor) -> Tensor:
    """``torch.angle``: the argument of each element (a real tensor's: 0 or pi)."""
    if isinstance(input, ComplexTensor):
        return input.angle()
    if not isinstance(input, Tensor):
        raise OpTypeError("angle", f"expected a tensor, got {_what(input)}")
    from flow import atan2, zeros_like

    x = input if input.dtype.is_floating_point else input.to(_default_part())
    return atan2(zeros_like(x), x)


def from_host(a: np.ndarray, dtype, device, requires_grad: bool) -> ComplexTensor:
    """A complex tensor holding a copy of the complex NumPy array ``a`` (``flow.tensor`` of complex data)."""
    from flow import _creation as C

    cd = as_complex_dtype(dtype, "tensor") if dtype is not None else None
    if dtype is not None and cd is None:
        raise OpTypeError("tensor", f"complex data cannot be stored as the real dtype {dtype}")
    if cd is None:
        cd = as_complex_dtype(a.dtype, "tensor")
    rd = cd.to_real()
    re = C.tensor(np.ascontiguousarray(a.real), dtype=rd, device=device)
    im = C.tensor(np.ascontiguousarray(a.imag), dtype=rd, device=device)
    z = ComplexTensor._from_parts(re, im)
    return z.requires_grad_() if requires_grad else z


def tensor(data, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """``flow.tensor`` that also takes complex data (Python complex numbers, complex NumPy arrays,
    a complex ``dtype``): a :class:`ComplexTensor`; anything else is as :func:`flow._creation.tensor`."""
    from flow import _creation as C

    cd = as_complex_dtype(dtype, "tensor") if dtype is not None else None
    if dtype is not None and cd is None and (isinstance(data, ComplexTensor) or _has_complex(data)):
        raise OpTypeError("tensor", f"complex data cannot be stored as the real dtype {dtype}")
    if isinstance(data, ComplexTensor):
        return from_host(np.asarray(data._data), dtype or data.dtype, device or data.device, requires_grad)
    if cd is None and not isinstance(data, builtins.complex) and not _complex_array(data):
        try:
            return C.tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)
        except OpError:
            # nested lists holding complex numbers: NumPy tells whether they are complex
            if not isinstance(data, (list, tuple)) or not _complex_array(_as_array(data)):
                raise
    a = _as_array(data)
    if a.dtype.kind != "c":
        a = a.astype(np.complex128)
    if cd is None and not isinstance(data, np.ndarray):
        # Python numbers give the default complex dtype (complex64 with float32 the default), as PyTorch
        cd = default_complex()
    return from_host(a, cd, device, requires_grad)


def _has_complex(data) -> bool:
    if isinstance(data, builtins.complex) or _complex_array(data):
        return True
    if isinstance(data, (list, tuple)):
        try:
            return np.asarray(data).dtype.kind == "c"
        except (ValueError, TypeError):
            return False
    return False


def _as_array(data) -> np.ndarray:
    try:
        return np.asarray(data)
    except (ValueError, TypeError) as e:
        raise OpError("tensor", f"could not build a tensor from the given data: {e}") from None


def _complex_array(data) -> bool:
    return isinstance(data, (np.ndarray, np.generic)) and data.dtype.kind == "c"


def _what(x) -> str:
    return f"a {x.dtype} tensor" if isinstance(x, Tensor) else type(x).__name__


def _rebuild(a: np.ndarray, device: str, requires_grad: bool) -> ComplexTensor:
    return from_host(a, None, device, requires_grad)


def complex_repr(z: ComplexTensor) -> str:
    """PyTorch's way of printing complex tensors: ``tensor([1.+2.j, 0.-1.j])``, with the dtype when it
    is not the default complex dtype, and ``requires_grad=True`` / ``grad_fn``."""
    a = np.asarray(z._data)
    finite = np.concatenate([a.real.ravel(), a.imag.ravel()])
    finite = finite[np.isfinite(finite)]
    whole = finite.size == 0 or bool(np.all(finite == np.round(finite)))
    prec = 0 if whole else 4

    def fmt(v: builtins.complex) -> str:
        re = f"{v.real:.{prec}f}" + ("." if whole else "")
        im = f"{abs(v.imag):.{prec}f}" + ("." if whole else "")
        return f"{re}{'-' if np.signbit(v.imag) else '+'}{im}j"

    body = np.array2string(a, separator=", ", formatter={"complex_kind": fmt}, prefix="tensor(")
    extras = []
    if z.dtype is not default_complex():
        extras.append(f"dtype={z.dtype!r}")
    if z.grad_fn is not None:
        extras.append(f"grad_fn=<{type(z.grad_fn).__name__}>")
    elif z.requires_grad:
        extras.append("requires_grad=True")
    return "tensor(" + body + "".join(", " + e for e in extras) + ")"


def _part_wise(op, inputs: tuple, attrs: dict):
    from flow._creation import zeros_like
    from flow._dispatch import call

    def pick(k):
        out = []
        for x in inputs:
            if isinstance(x, ComplexTensor):
                out.append(x._data.im if k else x._data.re)
            elif isinstance(x, (list, tuple)) and any(isinstance(t, ComplexTensor) for t in x):
                out.append(type(x)(_part_of(t, k, zeros_like) for t in x))
            elif isinstance(x, Tensor) and x.dtype.is_floating_point and op.name not in _INDEX_OPS:
                raise unsupported(op.name)  # a real data operand next to a complex one
            else:
                out.append(x)
        return tuple(out)

    re = call(op, *pick(0), **attrs)
    im = call(op, *pick(1), **attrs)
    if isinstance(re, tuple):
        return tuple(ComplexTensor._from_parts(r, i) for r, i in zip(re, im))
    return ComplexTensor._from_parts(re, im)


_INDEX_OPS = frozenset({"index", "index_select", "basic_index", "select_along_dim"})


def _part_of(t, k: int, zeros_like):
    if isinstance(t, ComplexTensor):
        return t._data.im if k else t._data.re
    return zeros_like(t) if k else t  # a real tensor in a list of complex ones: zero imaginary part


def handler(op, inputs: tuple, attrs: dict):
    """The array-kind handler of complex tensors (see the module docs)."""
    name = op.name
    if name in _PART_WISE:
        return _part_wise(op, inputs, attrs)
    if name in _BINARY and len(inputs) == 2:
        return _BINARY[name](*inputs, **attrs)
    if name == "neg":
        return -inputs[0]
    if name == "abs":
        return c_abs(inputs[0])
    if name == "exp":
        return c_exp(inputs[0])
    if name in ("eq", "ne"):
        r = c_eq(*inputs)
        return r if name == "eq" else ~r
    if name == "cast" and isinstance(inputs[0], ComplexTensor):
        dt = attrs.get("dtype")
        if as_complex_dtype(dt, "cast") is not None:
            return inputs[0].to(dt)
        from flow import _dtype as D

        if D.as_dtype(dt).is_floating_point:
            # the promotion of an op's front end (true division, sin ...): a complex tensor is already
            # "floating", so it goes on unchanged and the op itself answers (or names itself in the error);
            # explicit casts to a real dtype (to, float, double) are refused by ComplexTensor itself
            return inputs[0]
        raise OpTypeError("cast", f"a complex tensor cannot be cast to the real dtype {dt}; {SUPPORTED}")
    raise unsupported(name)


_BINARY = {"add": c_add, "sub": c_sub, "mul": c_mul, "div": c_div, "matmul": c_matmul}


def _float_dtypes():
    from flow import _dtype as D

    return D.float32, D.float64


_F32, _F64 = _float_dtypes()
register_array_kind(ComplexArray, handler)


def promote_pair(a, b) -> tuple:
    """The operands of a binary op with a complex one: a real tensor next to it becomes complex
    (PyTorch's promotion; integer and 16-bit ones through the default float dtype), so the complex
    kind's handler computes the op on the real and imaginary parts."""

    def up(x):
        if not isinstance(x, Tensor) or x.dtype.is_complex:
            return x
        if not x.dtype.is_floating_point or x.dtype.itemsize < 4:
            x = x.to(get_default_dtype())
        return complex(x, x * 0)

    return up(a), up(b)
