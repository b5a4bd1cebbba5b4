"""Univariate continuous distributions: ``Normal`` and ``Uniform``.

>>> d = Normal(flow.tensor([0.0, 1.0]), flow.tensor([1.0, 2.0]))
>>> d.log_prob(flow.tensor([0.0, 0.0]))
tensor([-0.9189, -1.7370])
"""

from __future__ import annotations

import math

from flow.distributions import constraints
from flow.distributions.distribution import Distribution, broadcast_all

__all__ = ["Normal", "Uniform"]


def _shape(t) -> tuple:
    return tuple(t.shape)


class Normal(Distribution):
    """The normal distribution with mean ``loc`` and standard deviation ``scale``."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(_shape(self.loc), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None) -> "Normal":
        shape = tuple(batch_shape)
        return self._expanded(shape, loc=self.loc.expand(shape), scale=self.scale.expand(shape))

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.scale**2

    def rsample(self, sample_shape=()):
        from flow._creation import randn

        shape = self._extended_shape(sample_shape)
        eps = randn(tuple(shape), dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        var = self.scale**2
        return -((value - self.loc) ** 2) / (2 * var) - self.scale.log() - math.log(math.sqrt(2 * math.pi))

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 * (1 + ((value - self.loc) / (self.scale * math.sqrt(2))).erf())

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()


class Uniform(Distribution):
    """The uniform distribution on the half-open interval ``[low, high)``."""

    has_rsample = True

    def __init__(self, low, high, validate_args: bool | None = None) -> None:
        self.low, self.high = broadcast_all(low, high)
        super().__init__(_shape(self.low), validate_args=validate_args)

    @property
    def arg_constraints(self) -> dict:
        # each bound is constrained by the other, as PyTorch checks low < high
        return {"low": constraints.less_than(self.high), "high": constraints.greater_than(self.low)}

    @property
    def support(self):
        return constraints.half_open_interval(self.low, self.high)

    def expand(self, batch_shape, _instance=None) -> "Uniform":
        shape = tuple(batch_shape)
        return self._expanded(shape, low=self.low.expand(shape), high=self.high.expand(shape))

    @property
    def mean(self):
        return (self.high + self.low) / 2

    @property
    def mode(self):
        return self.low * float("nan")

    @property
    def stddev(self):
        return (self.high - self.low) / 12**0.5

    @property
    def variance(self):
        return (self.high - self.low) ** 2 / 12

    def rsample(self, sample_shape=()):
        from flow._creation import rand

        shape = self._extended_shape(sample_shape)
        u = rand(tuple(shape), dtype=self.low.dtype, device=self.low.device)
        return self.low + u * (self.high - self.low)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        inside = (self.low <= value).to(self.low.dtype) * (self.high > value).to(self.low.dtype)
        return inside.log() - (self.high - self.low).log()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return ((value - self.low) / (self.high - self.low)).clamp(min=0, max=1)

    def entropy(self):
        return (self.high - self.low).log()
