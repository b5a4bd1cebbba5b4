"""The ``Distribution`` base class, as ``torch.distributions.Distribution``.

Shapes follow PyTorch: ``sample(sample_shape)`` has shape ``sample_shape + batch_shape +
event_shape``; ``log_prob`` drops the event dimensions. Parameter validation is on by default
(``Distribution.set_default_validate_args(False)`` or ``validate_args=False`` turns it off): a
parameter outside its constraint raises ``ValueError``, and so does a ``log_prob`` value outside
the support.
"""

from __future__ import annotations

from typing import Any

from flow.autograd.grad_mode import no_grad
from flow.distributions import constraints

__all__ = ["Distribution"]


def _size(shape) -> tuple:
    from flow._tensor import Size

    if isinstance(shape, int):
        shape = (shape,)
    return Size(tuple(int(s) for s in shape))


def broadcast_all(*values) -> tuple:
    """The values as tensors broadcast to one shape; numbers take the dtype of the tensors given (or the default)."""
    from flow._creation import tensor
    from flow._dtype import get_default_dtype
    from flow._tensor import Tensor
    from flow.ops.shape_ops import broadcast_tensors

    ref = next((v for v in values if isinstance(v, Tensor)), None)
    out = []
    for v in values:
        if isinstance(v, Tensor):
            out.append(v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            dtype = ref.dtype if ref is not None and ref.dtype.is_floating_point else get_default_dtype()
            out.append(tensor(float(v), dtype=dtype, device=ref.device if ref is not None else None))
        else:
            raise TypeError(f"expected a Tensor or a number for a distribution parameter, got {type(v).__name__}")
    return tuple(broadcast_tensors(*out))


class lazy_property:
    """An attribute computed on first read and then cached on the instance (``probs`` from ``logits`` ...)."""

    def __init__(self, fn) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        value = self.fn(instance)
        instance.__dict__[self.fn.__name__] = value
        return value


def sum_rightmost(value, dim: int):
    """``value`` summed over its ``dim`` rightmost dimensions."""
    if dim == 0:
        return value
    return value.reshape(tuple(value.shape[: value.dim() - dim]) + (-1,)).sum(-1)


class Distribution:
    """Base class of probability distributions: ``sample``/``rsample``, ``log_prob``, ``entropy``, moments."""

    has_rsample = False
    has_enumerate_support = False
    _validate_default = True  # PyTorch's default is __debug__, which is True unless python -O

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Turn parameter and sample validation on or off for distributions made afterwards."""
        if value not in (True, False):
            raise ValueError(f"set_default_validate_args: expected True or False, got {value!r}")
        Distribution._validate_default = value

    def __init__(self, batch_shape=(), event_shape=(), validate_args: bool | None = None) -> None:
        self._batch_shape = _size(batch_shape)
        self._event_shape = _size(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        else:
            self._validate_args = Distribution._validate_default
        if self._validate_args:
            self._check_parameters()

    def _check_parameters(self) -> None:
        for param, constraint in self.arg_constraints.items():
            if isinstance(constraint, constraints._Dependent):
                continue
            if param not in self.__dict__ and isinstance(getattr(type(self), param, None), lazy_property):
                continue  # the other parameterisation (probs for logits ...) is derived, hence valid
            value = getattr(self, param)
            if not bool(constraint.check(value).all().item()):
                raise ValueError(
                    f"Expected parameter {param} (Tensor of shape {tuple(value.shape)}) of distribution {self!r} "
                    f"to satisfy the constraint {constraint!r}, but found invalid values:\n{value}"
                )

    # -- shapes -----------------------------------------------------------
    @property
    def batch_shape(self):
        return self._batch_shape

    @property
    def event_shape(self):
        return self._event_shape

    def _extended_shape(self, sample_shape=()) -> tuple:
        return _size(tuple(_size(sample_shape)) + tuple(self._batch_shape) + tuple(self._event_shape))

    def expand(self, batch_shape, _instance=None) -> "Distribution":
        """The same distribution with its parameters broadcast to ``batch_shape`` (no copies are validated)."""
        raise NotImplementedError(f"{type(self).__name__}.expand is not defined")

    def _expanded(self, batch_shape, **params) -> "Distribution":
        new = type(self).__new__(type(self))
        new.__dict__.update(params)
        Distribution.__init__(new, batch_shape, self._event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    # -- what subclasses define ---------------------------------------------
    @property
    def arg_constraints(self) -> dict:
        return {}

    @property
    def support(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.support is not defined")

    @property
    def mean(self):
        raise NotImplementedError(f"{type(self).__name__}.mean is not defined")

    @property
    def mode(self):
        raise NotImplementedError(f"{type(self).__name__}.mode is not defined")

    @property
    def variance(self):
        raise NotImplementedError(f"{type(self).__name__}.variance is not defined")

    @property
    def stddev(self):
        return self.variance.sqrt()

    def rsample(self, sample_shape=()):
        """A reparameterised sample: differentiable with respect to the parameters."""
        raise NotImplementedError(f"{type(self).__name__} has no reparameterised sampler (rsample)")

    def sample(self, sample_shape=()):
        """A sample of shape ``sample_shape + batch_shape + event_shape``, outside the autograd graph."""
        with no_grad():
            return self.rsample(sample_shape)

    def sample_n(self, n: int):
        return self.sample((n,))

    def log_prob(self, value):
        raise NotImplementedError(f"{type(self).__name__}.log_prob is not defined")

    def cdf(self, value):
        raise NotImplementedError(f"{type(self).__name__}.cdf is not defined")

    def entropy(self):
        raise NotImplementedError(f"{type(self).__name__}.entropy is not defined")

    def perplexity(self):
        return self.entropy().exp()

    def enumerate_support(self, expand: bool = True):
        raise NotImplementedError(f"{type(self).__name__}.enumerate_support is not defined")

    # -- checks -------------------------------------------------------------
    def _validate_sample(self, value) -> None:
        from flow._tensor import Tensor

        if not isinstance(value, Tensor):
            raise ValueError(f"The value argument to log_prob must be a Tensor, got {type(value).__name__}")
        n = len(self._event_shape)
        if tuple(value.shape[value.dim() - n :] if n else ()) != tuple(self._event_shape) or value.dim() < n:
            raise ValueError(
                f"The right-most size of value must match event_shape: {tuple(value.shape)} vs "
                f"{tuple(self._event_shape)}"
            )
        actual = tuple(value.shape[: value.dim() - n])
        expected = tuple(self._batch_shape)
        for i, j in zip(reversed(actual), reversed(expected)):
            if i != 1 and j != 1 and i != j:
                raise ValueError(f"Value is not broadcastable with batch_shape+event_shape: {actual} vs {expected}")
        if not bool(self.support.check(value).all().item()):
            raise ValueError(
                f"Expected value argument (Tensor of shape {tuple(value.shape)}) to be within the support "
                f"({self.support!r}) of the distribution {self!r}, but found invalid values:\n{value}"
            )

    def __repr__(self) -> str:
        names = [k for k in self.arg_constraints if k in self.__dict__]
        parts = []
        for k in names:
            v = self.__dict__[k]
            parts.append(f"{k}: {v.item() if v.numel() == 1 else tuple(v.shape)}")
        return f"{type(self).__name__}({', '.join(parts)})"
