"""PyTorch's top-level aliases and thin composites of existing ops: ``flow.fix``, ``flow.sgn``,
``flow.hsplit``, ``flow.fmax``, ``flow.dist`` ...

Each is written with flow ops, so its gradient, dtype rules and devices are those of the ops it
calls; none registers an op of its own. Complex-number variants (``sgn``, ``conj`` ...) have their
real-number meaning: flow has no complex dtypes.
"""

from __future__ import annotations

import builtins
import math
import warnings
from typing import Sequence

from flow.errors import OpError, OpTypeError

__all__ = [
    "fix",
    "sgn",
    "ravel",
    "adjoint",
    "resolve_neg",
    "is_neg",
    "is_same_size",
    "is_signed",
    "isneginf",
    "isposinf",
    "isreal",
    "hsplit",
    "vsplit",
    "dsplit",
    "split_with_sizes",
    "unsafe_split",
    "unsafe_split_with_sizes",
    "unsafe_chunk",
    "fmax",
    "fmin",
    "dist",
    "detach",
    "fill",
    "scalar_tensor",
    "range",
    "chain_matmul",
    "heaviside",
    "isin",
    "can_cast",
]


def _t():
    from flow._tensor import Tensor

    return Tensor


def _tensor_arg(op: str, x, arg: str = "input"):
    if not isinstance(x, _t()):
        raise OpTypeError(op, f"'{arg}' must be a Tensor, got {type(x).__name__}")
    return x


def fix(input):
    """``torch.fix``: an alias of :func:`flow.trunc` (rounds towards zero)."""
    from flow.ops.unary import trunc

    return trunc(input)


def sgn(input):
    """``torch.sgn``: the sign of each element (-1, 0 or 1; 0 for NaN, as PyTorch gives); for real
    tensors (flow has no complex ones) :func:`flow.sign` with that NaN rule."""
    from flow.ops.clamp_where import where
    from flow.ops.compare import isnan
    from flow.ops.unary import sign

    out = sign(_tensor_arg("sgn", input))
    return where(isnan(input), 0, out) if input.dtype.is_floating_point else out


def ravel(input):
    """``torch.ravel``: the elements as a 1-D tensor, a view when the layout allows it.

    >>> flow.ravel(flow.ones(2, 3)).shape
    flow.Size([6])
    """
    from flow.ops.movement import reshape

    return reshape(_tensor_arg("ravel", input), (-1,))


def adjoint(input):
    """``torch.adjoint``: the conjugate transpose of the last two dims, a view; for real tensors ``mT``."""
    from flow.ops.movement import transpose

    if _tensor_arg("adjoint", input).dim() < 2:
        raise OpError("adjoint", f"only supported on matrices or batches of matrices, got a {input.dim()}-D tensor")
    return transpose(input, -2, -1)


def conj(input):
    """``torch.conj`` of a real tensor: the tensor itself, its own conjugate (not exported here:
    ``flow.conj`` is :mod:`flow._complex`'s, which calls this for real tensors)."""
    return _tensor_arg("conj", input)


def resolve_neg(input):
    """``torch.resolve_neg``: ``input`` itself, as flow tensors never carry PyTorch's lazy negation bit."""
    return _tensor_arg("resolve_neg", input)


def is_neg(input) -> bool:
    """``torch.is_neg``: False, as flow tensors never carry PyTorch's lazy negation bit."""
    _tensor_arg("is_neg", input)
    return False


def is_same_size(input, other) -> bool:
    """``torch.is_same_size``: True when the two tensors have the same shape."""
    return tuple(_tensor_arg("is_same_size", input).shape) == tuple(_tensor_arg("is_same_size", other, "other").shape)


def is_signed(input) -> bool:
    """``torch.is_signed``: True when ``input``'s dtype holds negative numbers (floating or signed integer)."""
    return _tensor_arg("is_signed", input).dtype.is_signed


def isneginf(input):
    """``torch.isneginf``: True where an element is negative infinity (never for integer tensors)."""
    from flow.ops.compare import isinf, lt

    return isinf(_tensor_arg("isneginf", input)) & lt(input, 0)


def isposinf(input):
    """``torch.isposinf``: True where an element is positive infinity (never for integer tensors)."""
    from flow.ops.compare import gt, isinf

    return isinf(_tensor_arg("isposinf", input)) & gt(input, 0)


def isreal(input):
    """``torch.isreal``: True everywhere (a bool tensor of ``input``'s shape), as flow tensors are real."""
    from flow import _dtype as D
    from flow._creation import ones_like

    return ones_like(_tensor_arg("isreal", input), dtype=D.bool)


def _dim_split(op: str, input, indices_or_sections, dim: int, min_dims: int):
    from flow.ops.views import tensor_split

    if _tensor_arg(op, input).dim() < min_dims:
        raise OpError(op, f"requires a tensor with at least {min_dims} dimension(s), got {input.dim()}")
    if isinstance(indices_or_sections, builtins.int) and not isinstance(indices_or_sections, builtins.bool):
        size = input.shape[dim]
        if indices_or_sections <= 0 or size % indices_or_sections != 0:
            raise OpError(
                op,
                f"cannot split dimension {dim} of size {size} into {indices_or_sections} equal parts "
                "(pass split indices for unequal parts)",
            )
    return tensor_split(input, indices_or_sections, dim)


def hsplit(input, indices_or_sections):
    """``torch.hsplit``: split along dim 1 (dim 0 for a 1-D tensor) into equal parts or at indices."""
    dim = 1 if isinstance(input, _t()) and input.dim() > 1 else 0
    return _dim_split("hsplit", input, indices_or_sections, dim, 1)


def vsplit(input, indices_or_sections):
    """``torch.vsplit``: split along dim 0 of a tensor of at least 2 dims into equal parts or at indices."""
    return _dim_split("vsplit", input, indices_or_sections, 0, 2)


def dsplit(input, indices_or_sections):
    """``torch.dsplit``: split along dim 2 of a tensor of at least 3 dims into equal parts or at indices.

    >>> [p.shape for p in flow.dsplit(flow.zeros(1, 2, 4), 2)]
    [flow.Size([1, 2, 2]), flow.Size([1, 2, 2])]
    """
    return _dim_split("dsplit", input, indices_or_sections, 2, 3)


def split_with_sizes(input, split_sizes: Sequence[int], dim: int = 0):
    """``torch.split_with_sizes``: split ``dim`` into parts of the given sizes, which must add up to its size."""
    from flow.ops.views import split

    sizes = [builtins.int(s) for s in split_sizes]
    if sum(sizes) != _tensor_arg("split_with_sizes", input).shape[dim]:
        raise OpError(
            "split_with_sizes",
            f"split_sizes {sizes} add up to {sum(sizes)}, but dimension {dim} has size {input.shape[dim]}",
        )
    return split(input, sizes, dim)


def unsafe_split(input, split_size: int, dim: int = 0):
    """``torch.unsafe_split``: :func:`flow.split` (the parts are views either way; "unsafe" is about
    PyTorch's autograd checks of in-place writes into them)."""
    from flow.ops.views import split

    return split(input, split_size, dim)


def unsafe_split_with_sizes(input, split_sizes: Sequence[int], dim: int = 0):
    """``torch.unsafe_split_with_sizes``: :func:`split_with_sizes`."""
    return split_with_sizes(input, split_sizes, dim)


def unsafe_chunk(input, chunks: int, dim: int = 0):
    """``torch.unsafe_chunk``: :func:`flow.chunk`."""
    from flow.ops.views import chunk

    return chunk(input, chunks, dim)


def _fminmax(op: str, input, other, take_input):
    from flow.ops.clamp_where import where
    from flow.ops.compare import isnan

    _tensor_arg(op, input)
    _tensor_arg(op, other, "other")
    # NaN loses to a number; where both are NaN the result is NaN. Choosing with where (not
    # flow.maximum) also gives PyTorch's gradient: all of it to the chosen input, also on ties.
    pick = take_input(input, other)
    if other.dtype.is_floating_point:
        pick = pick | isnan(other)
    return where(pick, input, other)


def fmax(input, other):
    """``torch.fmax``: the elementwise maximum, where a NaN loses to a number (``flow.maximum`` propagates it).

    >>> flow.fmax(flow.tensor([1.0, float("nan")]), flow.tensor([float("nan"), 2.0]))
    tensor([1., 2.])
    """
    from flow.ops.compare import ge

    return _fminmax("fmax", input, other, ge)


def fmin(input, other):
    """``torch.fmin``: the elementwise minimum, where a NaN loses to a number (``flow.minimum`` propagates it)."""
    from flow.ops.compare import le

    return _fminmax("fmin", input, other, le)


def dist(input, other, p: float = 2):
    """``torch.dist``: the ``p``-norm of ``input - other`` (broadcast), as a 0-d tensor."""
    from flow.linalg import vector_norm
    from flow.ops.arith import sub

    _tensor_arg("dist", input)
    _tensor_arg("dist", other, "other")
    if not (input.dtype.is_floating_point and other.dtype.is_floating_point):
        raise OpTypeError("dist", f"needs floating-point tensors, got {input.dtype} and {other.dtype}")
    return vector_norm(sub(input, other), p)


def detach(input):
    """``torch.detach``: :meth:`Tensor.detach` (a new tensor sharing the data, outside autograd)."""
    return _tensor_arg("detach", input).detach()


def fill(input, value):
    """``torch.fill``: a new tensor of ``input``'s shape and dtype, every element ``value`` (a number or 0-d tensor)."""
    from flow._creation import full_like

    _tensor_arg("fill", input)
    if isinstance(value, _t()):
        if value.dim() != 0:
            raise OpError("fill", f"value must be a number or a 0-d tensor, got a {value.dim()}-D tensor")
        value = value.item()
    return full_like(input, value)


def scalar_tensor(s, *, dtype=None, device=None, requires_grad: bool = False):
    """``torch.scalar_tensor``: a 0-d tensor holding the number ``s``, of the default float dtype unless ``dtype``."""
    from flow import _dtype as D
    from flow._creation import tensor

    if isinstance(s, _t()) or not isinstance(s, (builtins.int, builtins.float, builtins.bool)):
        raise OpTypeError("scalar_tensor", f"'s' must be a Python number, got {type(s).__name__}")
    return tensor(s, dtype=dtype or D._default_dtype, device=device, requires_grad=requires_grad)


def range(
    start: float = 0, end: float | None = None, step: float = 1, *, dtype=None, device=None, requires_grad: bool = False
):  # noqa: A001
    """``torch.range`` (deprecated there too): like :func:`flow.arange`, but ``end`` is included and the
    dtype is the default float dtype unless given.

    >>> flow.range(1, 4)
    tensor([1., 2., 3., 4.])
    """
    from flow import _dtype as D
    from flow._creation import arange

    warnings.warn(
        "flow.range is deprecated, as torch.range is: it includes `end`, unlike Python's range; use flow.arange",
        UserWarning,
        stacklevel=2,
    )
    if end is None:
        start, end = 0, start
    if step == 0 or (end - start) * step < 0:
        raise OpError("range", f"step must be non-zero and point from start to end, got {start=}, {end=}, {step=}")
    n = math.floor((end - start) / step) + 1
    dtype = dtype or D._default_dtype
    # start + i * step in float64, as PyTorch computes it, then cast: no drift of a running sum
    vals = arange(n, dtype=D.float64, device=device) * step + start
    out = vals.to(dtype)
    return out.requires_grad_() if requires_grad else out


def chain_matmul(*matrices):
    """``torch.chain_matmul`` (deprecated there): the product of the 2-D ``matrices``, as
    :func:`flow.linalg.multi_dot`."""
    from flow.linalg import multi_dot

    warnings.warn(
        "flow.chain_matmul is deprecated, as torch.chain_matmul is; use flow.linalg.multi_dot",
        UserWarning,
        stacklevel=2,
    )
    if not matrices:
        raise OpError("chain_matmul", "expects one or more matrices")
    for i, m in enumerate(matrices):
        if _tensor_arg("chain_matmul", m, f"matrices[{i}]").dim() != 2:
            raise OpError("chain_matmul", f"matrices[{i}] must be 2-D, got {m.dim()}-D")
    return matrices[0].clone() if len(matrices) == 1 else multi_dot(list(matrices))


def heaviside(input, values):
    """``torch.heaviside``: 0 where ``input < 0``, 1 where ``input > 0``, ``values`` (broadcast) where it is 0.

    A NaN input gives 0, as in PyTorch. Both tensors must have the same dtype.
    """
    from flow.ops.clamp_where import where
    from flow.ops.compare import eq, gt

    _tensor_arg("heaviside", input)
    _tensor_arg("heaviside", values, "values")
    if input.dtype is not values.dtype:
        raise OpTypeError(
            "heaviside", f"input and values must have the same dtype, got {input.dtype} and {values.dtype}"
        )
    return where(eq(input, 0), values, gt(input, 0).to(input.dtype))


def isin(elements, test_elements, *, assume_unique: bool = False, invert: bool = False):
    """``torch.isin``: True where an element of ``elements`` occurs in ``test_elements`` (either may be a
    number). ``assume_unique`` is accepted for PyTorch's signature and changes nothing here."""
    from flow import _dtype as D
    from flow._creation import tensor, zeros
    from flow.ops.compare import eq

    T = _t()
    if not isinstance(elements, T) and not isinstance(test_elements, T):
        raise OpTypeError("isin", "expects 'elements' or 'test_elements' to be a Tensor, got two numbers")
    dev = elements.device if isinstance(elements, T) else test_elements.device
    e = elements if isinstance(elements, T) else tensor(elements, device=dev)
    t = (test_elements if isinstance(test_elements, T) else tensor(test_elements, device=dev)).reshape(-1)
    if t.numel() == 0:
        out = zeros(tuple(e.shape), dtype=D.bool, device=dev)
    else:
        # all pairs at once: memory is numel(elements) * numel(test_elements)
        out = eq(e.unsqueeze(-1), t).any(-1)
    return ~out if invert else out


def can_cast(from_, to) -> bool:
    """``torch.can_cast``: True when PyTorch's casting rules allow ``from_`` to ``to`` in type promotion:
    never to a lower kind (float to integer, integer to bool), any size within a kind."""
    from flow import _dtype as D

    for arg, d in (("from_", from_), ("to", to)):
        if not isinstance(d, D.dtype):
            raise OpTypeError("can_cast", f"'{arg}' must be a flow.dtype, got {type(d).__name__}")
    return to.category >= from_.category
