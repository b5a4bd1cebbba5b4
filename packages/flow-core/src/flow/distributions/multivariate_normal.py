"""The multivariate normal distribution, parameterised by a covariance, precision or Cholesky factor.

Everything is computed from the lower-triangular factor ``scale_tril`` (``covariance = L L^T``),
as PyTorch does, with :func:`flow.linalg.cholesky` and :func:`flow.linalg.solve_triangular` (ops, so it
runs on any device and under graph mode).

>>> d = MultivariateNormal(flow.zeros(2), covariance_matrix=flow.eye(2))
>>> d.log_prob(flow.zeros(2))
tensor(-1.8379)
"""

from __future__ import annotations

import math

from flow.distributions import constraints
from flow.distributions.distribution import Distribution, lazy_property
from flow.linalg import cholesky, solve_triangular

__all__ = ["MultivariateNormal"]


def _batch_mahalanobis(L, x):
    """``x^T (L L^T)^-1 x`` over the last dimension, broadcasting ``L``'s and ``x``'s batches."""
    z = solve_triangular(L, x.unsqueeze(-1), upper=False).squeeze(-1)
    return (z**2).sum(-1)


def _precision_to_scale_tril(P):
    # Factor the precision with its rows and columns reversed: U = flip(chol(flip(P))) is upper triangular
    # with P = U U^T, so covariance = U^-T U^-1 and its lower Cholesky factor is (U^T)^-1.
    from flow._creation import eye

    Lf = cholesky(P.flip((-2, -1)))
    L_inv = Lf.flip((-2, -1)).mT
    Id = eye(P.shape[-1], dtype=P.dtype, device=P.device)
    return solve_triangular(L_inv, Id.expand(tuple(P.shape)), upper=False)


class MultivariateNormal(Distribution):
    """A normal distribution over vectors of size ``k``: ``loc`` (``(..., k)``) and exactly one of
    ``covariance_matrix``, ``precision_matrix`` or ``scale_tril`` (``(..., k, k)``)."""

    arg_constraints = {
        "loc": constraints.real_vector,
        "covariance_matrix": constraints.positive_definite,
        "precision_matrix": constraints.positive_definite,
        "scale_tril": constraints.lower_cholesky,
    }
    support = constraints.real_vector
    has_rsample = True

    def __init__(
        self,
        loc,
        covariance_matrix=None,
        precision_matrix=None,
        scale_tril=None,
        validate_args: bool | None = None,
    ) -> None:
        from flow.ops.shape_ops import broadcast_shapes

        given = [m for m in (covariance_matrix, precision_matrix, scale_tril) if m is not None]
        if len(given) != 1:
            raise ValueError(
                "MultivariateNormal: exactly one of covariance_matrix, precision_matrix or scale_tril may be specified"
            )
        if loc.dim() < 1:
            raise ValueError("MultivariateNormal: loc must be at least one-dimensional")
        m = given[0]
        name = (
            "scale_tril"
            if scale_tril is not None
            else "covariance_matrix"
            if covariance_matrix is not None
            else "precision_matrix"
        )
        if m.dim() < 2 or m.shape[-1] != m.shape[-2]:
            raise ValueError(f"MultivariateNormal: {name} must be at least two-dimensional, with square matrices")
        if m.shape[-1] != loc.shape[-1]:
            raise ValueError(
                f"MultivariateNormal: loc has {loc.shape[-1]} dimensions but {name} is {m.shape[-1]}x{m.shape[-1]}"
            )
        batch = tuple(broadcast_shapes(tuple(m.shape[:-2]), tuple(loc.shape[:-1])))
        k = loc.shape[-1]
        self.__dict__[name] = m.expand(batch + (k, k))
        self.loc = loc.expand(batch + (k,))
        super().__init__(batch, (k,), validate_args=validate_args)
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = cholesky(covariance_matrix)
        else:
            self._unbroadcasted_scale_tril = _precision_to_scale_tril(precision_matrix)

    def expand(self, batch_shape, _instance=None) -> "MultivariateNormal":
        shape = tuple(batch_shape)
        k = self._event_shape[0]
        params = {
            n: self.__dict__[n].expand(shape + (k, k))
            for n in ("covariance_matrix", "precision_matrix", "scale_tril")
            if n in self.__dict__
        }
        new = self._expanded(shape, loc=self.loc.expand(shape + (k,)), **params)
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril
        return new

    @lazy_property
    def scale_tril(self):
        k = self._event_shape[0]
        return self._unbroadcasted_scale_tril.expand(tuple(self._batch_shape) + (k, k))

    @lazy_property
    def covariance_matrix(self):
        L = self._unbroadcasted_scale_tril
        k = self._event_shape[0]
        return (L @ L.mT).expand(tuple(self._batch_shape) + (k, k))

    @lazy_property
    def precision_matrix(self):
        from flow._creation import eye

        L = self._unbroadcasted_scale_tril
        k = self._event_shape[0]
        L_inv = solve_triangular(L, eye(k, dtype=L.dtype, device=L.device).expand(tuple(L.shape)), upper=False)
        return (L_inv.mT @ L_inv).expand(tuple(self._batch_shape) + (k, k))

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return (self._unbroadcasted_scale_tril**2).sum(-1).expand(tuple(self._batch_shape) + tuple(self._event_shape))

    def rsample(self, sample_shape=()):
        from flow._creation import randn

        shape = tuple(self._extended_shape(sample_shape))
        eps = randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + (self._unbroadcasted_scale_tril @ eps.unsqueeze(-1)).squeeze(-1)

    def _half_log_det(self):
        return self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        M = _batch_mahalanobis(self._unbroadcasted_scale_tril, value - self.loc)
        k = self._event_shape[0]
        return -0.5 * (k * math.log(2 * math.pi) + M) - self._half_log_det()

    def entropy(self):
        k = self._event_shape[0]
        H = 0.5 * k * (1.0 + math.log(2 * math.pi)) + self._half_log_det()
        return H.expand(tuple(self._batch_shape)) if self._batch_shape else H
