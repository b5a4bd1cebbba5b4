"""``Independent``: reinterpret some batch dimensions of a distribution as event dimensions.

>>> d = Independent(Normal(flow.zeros(3), flow.ones(3)), 1)  # one event of size 3, not 3 events
>>> d.log_prob(flow.zeros(3)).shape
flow.Size([])
"""

from __future__ import annotations

from flow.distributions import constraints
from flow.distributions.distribution import Distribution, sum_rightmost

__all__ = ["Independent"]


class Independent(Distribution):
    """``base_distribution`` with its ``reinterpreted_batch_ndims`` rightmost batch dimensions made event ones."""

    arg_constraints: dict = {}

    def __init__(
        self, base_distribution: Distribution, reinterpreted_batch_ndims: int, validate_args: bool | None = None
    ) -> None:
        if not isinstance(base_distribution, Distribution):
            raise TypeError(f"Independent: expected a Distribution, got {type(base_distribution).__name__}")
        n = reinterpreted_batch_ndims
        shape = tuple(base_distribution.batch_shape) + tuple(base_distribution.event_shape)
        event_dim = n + len(base_distribution.event_shape)
        if not isinstance(n, int) or n < 0 or n > len(base_distribution.batch_shape):
            raise ValueError(
                f"Independent: expected 0 <= reinterpreted_batch_ndims <= len(base_distribution.batch_shape) = "
                f"{len(base_distribution.batch_shape)}, got {n!r}"
            )
        self.base_dist = base_distribution
        self.reinterpreted_batch_ndims = n
        super().__init__(shape[: len(shape) - event_dim], shape[len(shape) - event_dim :], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None) -> "Independent":
        shape = tuple(batch_shape)
        base = self.base_dist.expand(shape + tuple(self._event_shape[: self.reinterpreted_batch_ndims]))
        return self._expanded(shape, base_dist=base, reinterpreted_batch_ndims=self.reinterpreted_batch_ndims)

    @property
    def has_rsample(self) -> bool:  # type: ignore[override]
        return self.base_dist.has_rsample

    @property
    def has_enumerate_support(self) -> bool:  # type: ignore[override]
        return self.reinterpreted_batch_ndims == 0 and self.base_dist.has_enumerate_support

    @property
    def support(self):
        s = self.base_dist.support
        return constraints.independent(s, self.reinterpreted_batch_ndims) if self.reinterpreted_batch_ndims else s

    @property
    def mean(self):
        return self.base_dist.mean

    @property
    def mode(self):
        return self.base_dist.mode

    @property
    def variance(self):
        return self.base_dist.variance

    def sample(self, sample_shape=()):
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape=()):
        return self.base_dist.rsample(sample_shape)

    def log_prob(self, value):
        return sum_rightmost(self.base_dist.log_prob(value), self.reinterpreted_batch_ndims)

    def entropy(self):
        return sum_rightmost(self.base_dist.entropy(), self.reinterpreted_batch_ndims)

    def __repr__(self) -> str:
        return f"Independent({self.base_dist!r}, {self.reinterpreted_batch_ndims})"
