"""``flow.Tensor``: an array of a device's array module plus autograd metadata.

The class keeps only what every tensor needs (data, dtype, device, autograd
links, version counter); methods named after ops come from the mixins in
:mod:`flow._methods`, one per op family, each delegating to the functional API.
"""

from __future__ import annotations

import numpy as np

from flow import _dtype as D
from flow._device import CPU, device
from flow._dispatch import _KINDS
from flow._methods.aliases import AliasedMethods
from flow._methods.autograd import AutogradMethods
from flow._methods.compat import CompatMethods
from flow._methods.conversion import ConversionMethods
from flow._methods.dlpack import DLPackMethods
from flow._methods.elementwise import ElementwiseMethods
from flow._methods.extra_ops import ExtraOpsMethods
from flow._methods.factories_like import NewTensorMethods
from flow._methods.global_ import GlobalMethods
from flow._methods.indexing import IndexingMethods
from flow._methods.linalg import LinalgMethods
from flow._methods.linalg_decomp import LinalgDecompMethods
from flow._methods.masked_scatter import MaskedScatterMethods
from flow._methods.movement import MovementMethods
from flow._methods.nn import NNMethods
from flow._methods.python_map import PythonMapMethods
from flow._methods.random_fill import RandomFillMethods
from flow._methods.reduction import ReductionMethods
from flow._methods.sparse import SparseLayoutMethods
from flow._methods.view_meta import ViewMetaMethods

_ndarray = np.ndarray


class Tensor(
    CompatMethods,
    AutogradMethods,
    ConversionMethods,
    ElementwiseMethods,
    ReductionMethods,
    MovementMethods,
    IndexingMethods,
    LinalgMethods,
    NNMethods,
    GlobalMethods,
    NewTensorMethods,
    RandomFillMethods,
    ViewMetaMethods,
    MaskedScatterMethods,
    PythonMapMethods,
    ExtraOpsMethods,
    LinalgDecompMethods,
    SparseLayoutMethods,
    DLPackMethods,
    AliasedMethods,  # last: every dedicated method wins over its alias
):
    """A multi-dimensional array on a device, with autograd.

    Build tensors with :func:`flow.tensor`, the factories (``flow.zeros`` ...)
    or :func:`flow.from_numpy`. ``flow.Tensor(data)`` copies ``data`` like
    ``flow.tensor``; ``flow.Tensor(2, 3)`` makes an uninitialised float tensor.
    """

    __slots__ = (
        "_data",  # array of the device's array module
        "dtype",
        "device",
        "_requires_grad",  # read through the requires_grad property; the dispatcher reads the slot
        "grad",
        "grad_fn",  # autograd Node that produced this tensor, None for leaves
        "_out_idx",  # which output of grad_fn this is
        "_version",  # [int] shared with views: in-place ops bump it
        "_base",  # the tensor this one is a view of
        "_view_ver",  # a view's: the version of its storage its grad_fn was recorded at (see ops/view_inplace)
        "_extra",  # rarely used: hooks, retain_grad, names (a dict or None)
        "__weakref__",
        "__dict__",  # subclasses (Parameter, user subclasses) may add attributes
    )

    def __init__(self, *args, dtype=None, device=None, requires_grad: bool = False) -> None:
        from flow._tensor_init import tensor_init

        tensor_init(self, args, dtype, device, requires_grad)

    # -- construction fast path (used by the dispatcher) -----------------------
    @classmethod
    def _make(cls, data, dtype: D.dtype, dev: device) -> "Tensor":
        t = object.__new__(cls)
        t._data = data
        t.dtype = dtype
        t.device = dev
        t._requires_grad = False
        t.grad = None
        t.grad_fn = None
        t._version = [0]
        t._base = None
        t._extra = None
        return t

    # -- basic properties --------------------------------------------------------
    # Shape, dims and element counts come from the array (an array kind's logical array, see
    # flow.array_kinds, answers ``shape``, ``ndim`` and ``size`` for the whole tensor).
    @property
    def shape(self) -> "Size":
        return Size(self._data.shape)

    def size(self, dim: int | None = None):
        """The shape (``flow.Size``), or the length of one dim."""
        shape = self._data.shape
        if dim is None:
            return Size(shape)
        return shape[_wrap_dim(dim, len(shape), "size")]

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def dim(self) -> int:
        return self._data.ndim

    def numel(self) -> int:
        return int(self._data.size)

    def nelement(self) -> int:
        return int(self._data.size)

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def requires_grad(self) -> bool:
        """Whether autograd records ops on this tensor (settable on leaves; floating dtypes only)."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        from flow._methods.autograd import set_requires_grad

        set_requires_grad(self, value)

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def is_meta(self) -> bool:
        return self.device.type == "meta"

    @property
    def data(self) -> "Tensor":
        """A tensor sharing storage with this one, detached from autograd."""
        return self.detach()

    @data.setter
    def data(self, value: "Tensor") -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f"Tensor.data must be set to a Tensor, got {type(value).__name__}")
        self._data = value._data
        self.dtype = value.dtype
        self.device = value.device

    @property
    def T(self) -> "Tensor":
        """All dims reversed (PyTorch's ``.T``)."""
        return self.permute(*range(self.ndim - 1, -1, -1))

    @property
    def mT(self) -> "Tensor":
        return self.transpose(-2, -1)

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def is_contiguous(self, memory_format=None) -> bool:
        flags = getattr(self._data, "flags", None)
        return bool(flags.c_contiguous) if flags is not None else True

    def data_ptr(self) -> int:
        iface = getattr(self._data, "__array_interface__", None) or getattr(
            self._data, "__cuda_array_interface__", None
        )
        return int(iface["data"][0]) if iface else 0

    def stride(self, dim: int | None = None):
        st = getattr(self._data, "strides", None)
        if st is None:
            if self._data.__class__ in _KINDS:
                raise RuntimeError(
                    f"stride: tensors whose data is a {type(self._data).__name__} (an array kind) have no strides"
                )
            raise RuntimeError(f"stride: tensors on device '{self.device}' have no strides")
        st = tuple(s // self.dtype.itemsize for s in st)
        return st if dim is None else st[_wrap_dim(dim, self.ndim, "stride")]

    def __len__(self) -> int:
        shape = self._data.shape
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

    def __iter__(self):
        if not self._data.shape:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        n = self.numel()
        if n != 1:
            raise RuntimeError(f"Boolean value of a tensor with {n} elements is ambiguous; use .any() or .all()")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.category != 1 or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __repr__(self) -> str:
        from flow._repr import tensor_repr

        return tensor_repr(self)

    def __reduce_ex__(self, protocol):
        # Pickling goes through NumPy so DataLoader workers can send tensors; flow.save
        # never uses pickle.
        from flow._creation import _rebuild_tensor

        return (_rebuild_tensor, (self.numpy_host(), self.dtype.name, str(self.device), self._requires_grad))

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def numpy_host(self) -> np.ndarray:
        from flow.registry import get_device_type

        d = self._data
        if d.__class__ is not _ndarray and d.__class__ in _KINDS:
            return _kind_host(d)
        if self.device is CPU:
            return d
        return get_device_type(self.device.type).to_host(self._data)

    def __format__(self, spec: str) -> str:
        if not self._data.shape:
            return format(self.item(), spec)
        return object.__format__(self, spec)


class Size(tuple):
    """A tensor's shape: a tuple with ``numel()``, as ``torch.Size``."""

    __slots__ = ()

    def numel(self) -> int:
        n = 1
        for s in self:
            n *= s
        return n

    def __repr__(self) -> str:
        return f"flow.Size([{', '.join(map(str, self))}])"

    def __getitem__(self, item):
        r = tuple.__getitem__(self, item)
        return Size(r) if isinstance(item, slice) else r


def _kind_host(a) -> np.ndarray:
    """The host value of an array kind's array (its ``__array__``; see flow.array_kinds)."""
    if getattr(type(a), "__array__", None) is None:
        from flow.errors import FlowError

        raise FlowError(
            f"tensors whose data is a {type(a).__name__} (an array kind) have no host value: "
            f"the class defines no __array__()"
        )
    return np.asarray(a)


def _wrap_dim(dim: int, ndim: int, op: str) -> int:
    from flow.errors import OpIndexError

    n = max(ndim, 1)
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
        raise OpIndexError(op, f"dim must be an int, got {type(dim).__name__}")
    if dim < -n or dim >= n:
        raise OpIndexError(op, f"dim {dim} is out of range for a {ndim}-d tensor (expected {-n} <= dim < {n})")
    return dim + n if dim < 0 else dim


def wrap_dim(dim: int, ndim: int, op: str) -> int:
    """Normalise a possibly negative ``dim`` for a tensor of ``ndim`` dims; clear error if out of range."""
    if 0 <= dim < ndim:
        return dim
    return _wrap_dim(dim, ndim, op)
