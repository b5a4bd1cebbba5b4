"""Tensor methods PyTorch has under a second name or as an in-place twin: ``x.absolute()``,
``x.greater(y)``, ``x.cos_()``, ``x.mH``, ``x.hsplit(2)`` ...

Aliases call the method they stand for, looked up when called, so a later, dedicated implementation
of the target is what runs. In-place twins compute the out-of-place method and write the result
with :func:`flow.ops.inplace.inplace_call`, as the hand-written in-place composites do (autograd
rebasing, version counter, the dtype check). :class:`AliasedMethods` holds them all and is the last
of Tensor's bases, so a method any other mixin (or Tensor itself) defines wins over its alias.
"""

from __future__ import annotations

from typing import Callable

import flow.ops.aliases as _AL
from flow.ops.inplace import inplace_call

# second name -> the method it stands for
_ALIASES = {
    "absolute": "abs",
    "absolute_": "abs_",
    "arccos": "acos",
    "arccos_": "acos_",
    "arcsin": "asin",
    "arcsin_": "asin_",
    "arctan": "atan",
    "arctan_": "atan_",
    "arctan2": "atan2",
    "arctan2_": "atan2_",
    "greater": "gt",
    "greater_": "gt_",
    "greater_equal": "ge",
    "greater_equal_": "ge_",
    "less": "lt",
    "less_": "lt_",
    "less_equal": "le",
    "less_equal_": "le_",
    "not_equal": "ne",
    "not_equal_": "ne_",
    "multiply_": "mul_",
    "divide_": "div_",
    "subtract_": "sub_",
    "true_divide_": "div_",
    "negative_": "neg_",
    "fix": "trunc",
    "fix_": "trunc_",
}

# in-place twin -> the out-of-place method whose result it writes into ``self``
_INPLACE = {
    name + "_": name
    for name in (
        "acos asin atan atan2 cos cosh sin sinh tan erf expm1 log10 log1p log2 rsqrt ceil trunc sign square logit "
        "nan_to_num fmod remainder floor_divide bitwise_and bitwise_or bitwise_xor bitwise_not logical_and "
        "logical_or logical_xor logical_not clamp_max cumsum cumprod eq ne lt le gt ge sgn heaviside sinc i0 mvlgamma"
    ).split()
}


def _alias(name: str, target: str) -> Callable:
    def method(self, *args, **kwargs):
        return getattr(self, target)(*args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"``Tensor.{name}``: an alias of :meth:`Tensor.{target}`."
    return method


def _inplace(name: str, target: str) -> Callable:
    # inplace_call, not apply_inplace: several targets are composites (nan_to_num, logit ...) whose
    # inner ops save ``self``; it hands them a snapshot so the write does not invalidate their gradients
    def method(self, *args, **kwargs):
        return inplace_call(self, name, lambda src, *a: getattr(src, target)(*a, **kwargs), *args)

    method.__name__ = name
    method.__doc__ = f"``Tensor.{name}``: :meth:`Tensor.{target}` written into this tensor."
    return method


class AliasMethods:
    __slots__ = ()

    def positive(self):
        """``x.positive()``: ``x`` itself; PyTorch refuses bool tensors, and so does flow."""
        from flow import _dtype as D
        from flow.errors import OpTypeError

        if self.dtype is D.bool:
            raise OpTypeError("positive", "is not supported for bool tensors")
        return self

    def sgn(self):
        return _AL.sgn(self)

    def ravel(self):
        return _AL.ravel(self)

    def adjoint(self):
        return _AL.adjoint(self)

    @property
    def mH(self):
        """The conjugate transpose of the last two dims; for real tensors ``mT``."""
        return _AL.adjoint(self)

    def conj(self):
        return _AL.conj(self)

    def resolve_neg(self):
        return _AL.resolve_neg(self)

    def is_neg(self) -> bool:
        return _AL.is_neg(self)

    def is_same_size(self, other) -> bool:
        return _AL.is_same_size(self, other)

    def is_signed(self) -> bool:
        return _AL.is_signed(self)

    def is_nonzero(self) -> bool:
        from flow._typeinfo import is_nonzero

        return is_nonzero(self)

    @property
    def itemsize(self) -> int:
        """Bytes per element (``x.element_size()``)."""
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes the elements take: ``numel() * itemsize``."""
        return self.numel() * self.dtype.itemsize

    def isneginf(self):
        return _AL.isneginf(self)

    def isposinf(self):
        return _AL.isposinf(self)

    def isreal(self):
        return _AL.isreal(self)

    def hsplit(self, indices_or_sections):
        return _AL.hsplit(self, indices_or_sections)

    def vsplit(self, indices_or_sections):
        return _AL.vsplit(self, indices_or_sections)

    def dsplit(self, indices_or_sections):
        return _AL.dsplit(self, indices_or_sections)

    def split_with_sizes(self, split_sizes, dim: int = 0):
        return _AL.split_with_sizes(self, split_sizes, dim)

    def unsafe_split(self, split_size: int, dim: int = 0):
        return _AL.unsafe_split(self, split_size, dim)

    def unsafe_split_with_sizes(self, split_sizes, dim: int = 0):
        return _AL.unsafe_split_with_sizes(self, split_sizes, dim)

    def unsafe_chunk(self, chunks: int, dim: int = 0):
        return _AL.unsafe_chunk(self, chunks, dim)

    def fmax(self, other):
        return _AL.fmax(self, other)

    def fmin(self, other):
        return _AL.fmin(self, other)

    def dist(self, other, p: float = 2):
        return _AL.dist(self, other, p)

    def heaviside(self, values):
        return _AL.heaviside(self, values)

    # methods of functions flow has at top level (or in flow.special / flow.nn.functional)
    def sinc(self):
        from flow import sinc

        return sinc(self)

    def i0(self):
        from flow import i0

        return i0(self)

    def mvlgamma(self, p: int):
        from flow.special import multigammaln

        return multigammaln(self, p)

    def float_power(self, exponent):
        from flow import float_power

        return float_power(self, exponent)

    def multinomial(self, num_samples: int, replacement: bool = False, *, generator=None):
        from flow import multinomial

        return multinomial(self, num_samples, replacement, generator=generator)

    def bernoulli(self, p: float | None = None, *, generator=None):
        from flow import bernoulli

        return bernoulli(self, p, generator=generator)

    def hardshrink(self, lambd: float = 0.5):
        from flow.nn.functional import hardshrink

        return hardshrink(self, lambd)

    def prelu(self, weight):
        from flow.nn.functional import prelu

        return prelu(self, weight)

    def diagflat(self, offset: int = 0):
        from flow.ops.views import diagflat

        return diagflat(self, offset)


def methods() -> dict[str, object]:
    """Every method (and property) this module offers, by name."""
    out: dict[str, object] = {n: _alias(n, t) for n, t in _ALIASES.items()}
    out.update((n, _inplace(n, t)) for n, t in _INPLACE.items())
    out.update((n, v) for n, v in vars(AliasMethods).items() if not n.startswith("_"))
    return out


# the mixin, generated from the tables above; last among Tensor's bases (see flow._tensor)
AliasedMethods = type("AliasedMethods", (), {"__slots__": (), "__module__": __name__, **methods()})
