"""Complex tensors (``torch.complex64`` / ``complex128``) for FFT-based models.

A complex tensor is a :class:`ComplexTensor`: a ``flow.Tensor`` whose data is a :class:`ComplexArray`
holding two real flow tensors, the real and imaginary parts. Every supported operation is written
with real flow ops on the parts, so autograd follows PyTorch's convention for complex tensors (for a
real loss ``L``: ``z.grad == dL/d(z.real) + 1j * dL/d(z.imag)``).

>>> z = flow.complex(flow.tensor([3.0]), flow.tensor([4.0]))
>>> z.abs()
tensor([5.])

Supported: construction (:func:`complex`, :func:`polar`, :func:`view_as_complex`, ``flow.tensor`` of
complex numbers or complex NumPy arrays), ``real`` / ``imag``, :func:`view_as_real` (a copy, not a
view), ``conj``, ``abs``, ``angle``, ``exp``, ``+ - * /`` with complex tensors, real tensors and numbers
on either side, ``@`` / ``flow.matmul``, ``==``, ``sum`` / ``mean``, the shape and indexing ops
(``reshape``, ``view``, ``permute``, ``transpose``, slicing, ``cat``, ``stack`` ...), ``to``,
``clone``, ``detach``, ``numpy``, ``requires_grad_`` / ``backward`` / ``grad``, and the transforms of
:mod:`flow.fft`. Every other op raises :class:`flow.errors.OpTypeError` naming it.
"""

from __future__ import annotations

from flow._complex._array import ComplexArray, cdouble, cfloat, complex64, complex128, complex_dtype
from flow._complex._ops import angle, complex, conj, imag, polar, real, tensor, view_as_complex, view_as_real
from flow._complex._tensor import ComplexTensor

__all__ = [
    "ComplexTensor",
    "ComplexArray",
    "complex_dtype",
    "complex64",
    "complex128",
    "cfloat",
    "cdouble",
    "complex",
    "polar",
    "view_as_complex",
    "view_as_real",
    "real",
    "imag",
    "angle",
    "conj",
    "tensor",
]
