"""Complex tensors: :class:`ComplexTensor`, a ``flow.Tensor`` whose data is a :class:`ComplexArray`.

Every computation on a complex tensor is written with real flow ops on its two parts, so autograd,
devices and interceptors see ordinary ops, and the gradients follow PyTorch's convention for
complex tensors: for a real loss ``L``, ``z.grad == dL/d(z.real) + 1j * dL/d(z.imag)``.

``ComplexArray`` is registered as an array kind (see :mod:`flow.array_kinds`): an op reaching the
dispatcher with a complex input goes to :func:`flow._complex._ops.handler`, which answers the
supported ops and raises a clear error for every other one.
"""

from __future__ import annotations

import numpy as np

from flow._complex._array import ComplexArray, complex_of
from flow._tensor import Tensor
from flow.errors import AutogradError, OpError, OpTypeError


class ComplexTensor(Tensor):
    """A complex tensor (``dtype`` ``flow.complex64`` or ``flow.complex128``): a pair of real tensors.

    Build one with :func:`flow.complex`, :func:`flow.polar`, :func:`flow.view_as_complex`,
    ``flow.tensor`` of complex numbers, or a complex FFT. Autograd lives on the parts: ``requires_grad``
    is that of ``real`` / ``imag``, and ``.grad`` is the complex tensor of their gradients.

    >>> z = flow.complex(flow.tensor([1.0, 0.0]), flow.tensor([2.0, -1.0]))
    >>> z.abs()
    tensor([2.2361, 1.0000])
    """

    __slots__ = ()

    @classmethod
    def _from_parts(cls, re: Tensor, im: Tensor) -> "ComplexTensor":
        # not Tensor._make: that sets ``grad = None``, which here would clear the parts' gradients
        t = object.__new__(cls)
        t._data = ComplexArray(re, im)
        t.dtype = complex_of(re.dtype, "complex")
        t.device = re.device
        t._requires_grad = False  # the dispatcher reads the slot; autograd is the parts'
        t._version = [0]
        t._base = None
        t._extra = None
        return t

    def _each(self, fn) -> "ComplexTensor":
        d = self._data
        return ComplexTensor._from_parts(fn(d.re), fn(d.im))

    # -- parts ------------------------------------------------------------------------------------
    @property
    def real(self) -> Tensor:
        """The real part (the tensor itself, so in-place changes and gradients reach this tensor)."""
        return self._data.re

    @property
    def imag(self) -> Tensor:
        """The imaginary part (the tensor itself, as :attr:`real`)."""
        return self._data.im

    def is_complex(self) -> bool:
        return True

    def is_floating_point(self) -> bool:
        return False

    def conj(self) -> "ComplexTensor":
        """The complex conjugate (a new tensor; PyTorch's lazy conjugate bit is not modelled)."""
        d = self._data
        return ComplexTensor._from_parts(d.re, -d.im)

    def conj_physical(self) -> "ComplexTensor":
        return self.conj()

    def resolve_conj(self) -> "ComplexTensor":
        return self

    def is_conj(self) -> bool:
        return False

    def abs(self) -> Tensor:
        from flow._complex._ops import c_abs

        return c_abs(self)

    __abs__ = abs

    def angle(self) -> Tensor:
        return _atan2(self._data.im, self._data.re)

    def exp(self) -> "ComplexTensor":
        from flow._complex._ops import c_exp

        return c_exp(self)

    # -- arithmetic (the reflected forms win over a real left operand: this class is a subclass) ----
    def __add__(self, other):
        from flow._complex._ops import c_add

        return c_add(self, other)

    def __radd__(self, other):
        from flow._complex._ops import c_add

        return c_add(other, self)

    def __sub__(self, other):
        from flow._complex._ops import c_sub

        return c_sub(self, other)

    def __rsub__(self, other):
        from flow._complex._ops import c_sub

        return c_sub(other, self)

    def __mul__(self, other):
        from flow._complex._ops import c_mul

        return c_mul(self, other)

    def __rmul__(self, other):
        from flow._complex._ops import c_mul

        return c_mul(other, self)

    def __truediv__(self, other):
        from flow._complex._ops import c_div

        return c_div(self, other)

    def __rtruediv__(self, other):
        from flow._complex._ops import c_div

        return c_div(other, self)

    def __matmul__(self, other):
        from flow._complex._ops import c_matmul

        return c_matmul(self, other)

    def __rmatmul__(self, other):
        from flow._complex._ops import c_matmul

        return c_matmul(other, self)

    def __neg__(self) -> "ComplexTensor":
        return self._each(lambda t: -t)

    def __eq__(self, other):
        from flow._complex._ops import c_eq

        return c_eq(self, other)

    def __ne__(self, other):
        from flow._complex._ops import c_eq

        return ~c_eq(self, other)

    __hash__ = Tensor.__hash__

    # -- copies, devices, dtypes ------------------------------------------------------------------
    def detach(self) -> "ComplexTensor":
        return self._each(lambda t: t.detach())

    def clone(self, *, memory_format=None) -> "ComplexTensor":
        return self._each(lambda t: t.clone())

    def to(self, *args, **kwargs) -> "ComplexTensor":
        """``to(device)``, ``to(dtype)`` (complex64 / complex128 only), ``to(device, dtype)``, ``to(other)``."""
        from flow._complex._array import as_complex_dtype

        dtype = kwargs.pop("dtype", None)
        device = kwargs.pop("device", None)
        kwargs.pop("non_blocking", None)
        kwargs.pop("copy", None)
        if kwargs:
            raise OpTypeError("to", f"unexpected arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, Tensor):
                device, dtype = a.device, a.dtype
            elif (isinstance(a, str) and not _names_dtype(a)) or type(a).__name__ == "device" or isinstance(a, int):
                device = a
            else:
                dtype = a
        out = self
        if dtype is not None:
            cd = as_complex_dtype(dtype, "to")
            if cd is None:
                raise OpTypeError(
                    "to",
                    f"cannot cast a complex tensor to the real dtype {dtype}; take .real, .imag or .abs() first",
                )
            out = out._each(lambda t: t.to(cd.to_real()))
        if device is not None:
            out = out._each(lambda t: t.to(device))
        return out

    def _to_real(self, name: str):
        raise OpTypeError(
            name, "a complex tensor cannot be cast to a real dtype (PyTorch drops the imaginary part); take .real"
        )

    def float(self):  # noqa: A003 - PyTorch's names
        self._to_real("float")

    def double(self):
        self._to_real("double")

    def half(self):
        self._to_real("half")

    def bfloat16(self):
        self._to_real("bfloat16")

    def long(self):
        self._to_real("long")

    def int(self):  # noqa: A003
        self._to_real("int")

    def bool(self):  # noqa: A003
        self._to_real("bool")

    def cfloat(self) -> "ComplexTensor":
        from flow._complex._array import complex64

        return self.to(complex64)

    def cdouble(self) -> "ComplexTensor":
        from flow._complex._array import complex128

        return self.to(complex128)

    def cpu(self) -> "ComplexTensor":
        return self.to("cpu")

    def type_as(self, other) -> "ComplexTensor":
        return self.to(other.dtype)

    def numpy(self, *, force: bool = False) -> np.ndarray:
        if self.requires_grad and not force:
            raise AutogradError("numpy: can't call numpy() on a tensor that requires grad; use .detach().numpy()")
        return np.asarray(self._data)

    def numpy_host(self) -> np.ndarray:
        return np.asarray(self._data)

    def item(self) -> complex:
        if self.numel() != 1:
            raise OpError("item", f"a tensor with {self.numel()} elements cannot be converted to a Python number")
        return complex(np.asarray(self._data).reshape(()))

    def tolist(self):
        return np.asarray(self._data).tolist()

    def __bool__(self) -> bool:
        return bool(self.item())

    def __complex__(self) -> complex:
        return self.item()

    def __float__(self):
        raise OpTypeError("float", "a complex tensor cannot be converted to a float; take .real or .abs() first")

    def __reduce_ex__(self, protocol):
        from flow._complex._ops import _rebuild

        return (_rebuild, (np.asarray(self._data), str(self.device), self.requires_grad))

    # -- autograd: the parts' ---------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        d = self._data
        return d.re.requires_grad or d.im.requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        d = self._data
        d.re.requires_grad = value
        d.im.requires_grad = value

    def requires_grad_(self, requires_grad: bool = True) -> "ComplexTensor":
        d = self._data
        d.re.requires_grad_(requires_grad)
        d.im.requires_grad_(requires_grad)
        return self

    @property
    def is_leaf(self) -> bool:
        d = self._data
        return d.re.is_leaf and d.im.is_leaf

    @property
    def grad_fn(self):
        d = self._data
        return d.re.grad_fn or d.im.grad_fn

    @grad_fn.setter
    def grad_fn(self, value) -> None:
        if value is not None:
            raise AutogradError("grad_fn: a complex tensor's autograd history is that of its parts")

    @property
    def grad(self):
        from flow._creation import zeros_like

        d = self._data
        gr, gi = d.re.grad, d.im.grad
        if gr is None and gi is None:
            return None
        gr = zeros_like(d.re) if gr is None else gr
        gi = zeros_like(d.im) if gi is None else gi
        return ComplexTensor._from_parts(gr, gi)

    @grad.setter
    def grad(self, value) -> None:
        d = self._data
        if value is None:
            d.re.grad = None
            d.im.grad = None
            return
        if not isinstance(value, ComplexTensor) or tuple(value.shape) != tuple(self.shape):
            raise OpTypeError("grad", f"a complex tensor's grad must be a complex tensor of shape {tuple(self.shape)}")
        d.re.grad = value._data.re
        d.im.grad = value._data.im

    def retain_grad(self) -> None:
        self._data.re.retain_grad()
        self._data.im.retain_grad()

    def backward(self, gradient=None, retain_graph: bool | None = None, create_graph: bool = False, inputs=None):
        """``backward(gradient)``: a complex ``gradient`` ``g`` back-propagates ``sum(Re(conj(g) * z))``, as PyTorch."""
        from flow import autograd

        if gradient is None:
            raise AutogradError("backward: grad can be implicitly created only for real scalar outputs")
        if not isinstance(gradient, ComplexTensor):
            raise OpTypeError("backward", "the gradient of a complex tensor must be a complex tensor")
        d = self._data
        autograd.backward(
            [d.re, d.im],
            [gradient._data.re, gradient._data.im],
            retain_graph=retain_graph,
            create_graph=create_graph,
            inputs=inputs,
        )

    def __repr__(self) -> str:
        from flow._complex._ops import complex_repr

        return complex_repr(self)

    __str__ = __repr__


def _names_dtype(name: str) -> bool:
    from flow import _dtype as D

    if "complex" in name:
        return True
    try:
        D.as_dtype(name)
    except TypeError:
        return False
    return True


def _atan2(y: Tensor, x: Tensor) -> Tensor:
    from flow import atan2

    return atan2(y, x)
