"""Discrete distributions: ``Bernoulli`` and ``Categorical``, given ``probs`` or ``logits``.

The parameterisation not given is derived on first use, as PyTorch does: ``logits`` of a
``Categorical`` are normalised log-probabilities, those of a ``Bernoulli`` are log-odds.

>>> Categorical(logits=flow.tensor([0.0, 1.0])).probs
tensor([0.2689, 0.7311])
"""

from __future__ import annotations

from flow.distributions import constraints
from flow.distributions.distribution import Distribution, broadcast_all, lazy_property

__all__ = ["Bernoulli", "Categorical"]


def _one_of(probs, logits, name: str) -> None:
    if (probs is None) == (logits is None):
        raise ValueError(f"{name}: either `probs` or `logits` must be specified, but not both")


def _eps(t) -> float:
    import numpy as np

    return float(np.finfo(t.detach().numpy().dtype).eps)


def _as_float(x, name: str, what: str):
    from flow._creation import tensor
    from flow._tensor import Tensor

    if isinstance(x, Tensor):
        if not x.dtype.is_floating_point:
            raise TypeError(f"{name}: {what} must be a floating-point Tensor, got {x.dtype}")
        return x
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return tensor(float(x))
    raise TypeError(f"{name}: {what} must be a Tensor or a number, got {type(x).__name__}")


class Bernoulli(Distribution):
    """A 0/1 variable that is 1 with probability ``probs`` (``sigmoid(logits)``)."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        _one_of(probs, logits, "Bernoulli")
        if probs is not None:
            (self.probs,) = broadcast_all(_as_float(probs, "Bernoulli", "probs"))
            shape = tuple(self.probs.shape)
        else:
            (self.logits,) = broadcast_all(_as_float(logits, "Bernoulli", "logits"))
            shape = tuple(self.logits.shape)
        super().__init__(shape, validate_args=validate_args)

    @property
    def _param(self):
        return self.__dict__["probs"] if "probs" in self.__dict__ else self.__dict__["logits"]

    def expand(self, batch_shape, _instance=None) -> "Bernoulli":
        shape = tuple(batch_shape)
        params = {k: self.__dict__[k].expand(shape) for k in ("probs", "logits") if k in self.__dict__}
        return self._expanded(shape, **params)

    @lazy_property
    def logits(self):
        p = self.probs
        eps = _eps(p)
        p = p.clamp(min=eps, max=1 - eps)
        return p.log() - (-p).log1p()

    @lazy_property
    def probs(self):
        return self.logits.sigmoid()

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        m = (self.probs >= 0.5).to(self.probs.dtype)
        return m.where(self.probs != 0.5, m * float("nan"))

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        from flow._creation import bernoulli
        from flow.autograd.grad_mode import no_grad

        shape = tuple(self._extended_shape(sample_shape))
        with no_grad():
            return bernoulli(self.probs.expand(shape))

    def log_prob(self, value):
        from flow.nn.functional import binary_cross_entropy_with_logits

        if self._validate_args:
            self._validate_sample(value)
        from flow.ops.shape_ops import broadcast_tensors

        logits, value = broadcast_tensors(self.logits, value.to(self.logits.dtype))
        return -binary_cross_entropy_with_logits(logits, value, reduction="none")

    def entropy(self):
        from flow.nn.functional import binary_cross_entropy_with_logits

        return binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    def enumerate_support(self, expand: bool = True):
        from flow._creation import arange

        values = arange(2, dtype=self._param.dtype).reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand((2,) + tuple(self._batch_shape)) if expand else values


class Categorical(Distribution):
    """One of ``K`` categories ``0 .. K-1``, with probabilities along the last dimension of ``probs``/``logits``.

    ``probs`` need not sum to one (they are normalised); ``logits`` are unnormalised log-probabilities.
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.independent(constraints.real, 1)}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        _one_of(probs, logits, "Categorical")
        if probs is not None:
            probs = _as_float(probs, "Categorical", "probs")
            if probs.dim() < 1:
                raise ValueError("Categorical: `probs` parameter must be at least one-dimensional")
            self.probs = probs / probs.sum(-1, keepdim=True)
            param = self.probs
        else:
            logits = _as_float(logits, "Categorical", "logits")
            if logits.dim() < 1:
                raise ValueError("Categorical: `logits` parameter must be at least one-dimensional")
            self.logits = logits - logits.logsumexp(-1, keepdim=True)
            param = self.logits
        self._num_events = param.shape[-1]
        super().__init__(tuple(param.shape[:-1]), validate_args=validate_args)

    @property
    def _param(self):
        return self.__dict__["probs"] if "probs" in self.__dict__ else self.__dict__["logits"]

    def expand(self, batch_shape, _instance=None) -> "Categorical":
        shape = tuple(batch_shape)
        full = shape + (self._num_events,)
        params = {k: self.__dict__[k].expand(full) for k in ("probs", "logits") if k in self.__dict__}
        new = self._expanded(shape, **params)
        new._num_events = self._num_events
        return new

    @property
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    @lazy_property
    def logits(self):
        eps = _eps(self.probs)
        return self.probs.clamp(min=eps, max=1 - eps).log()

    @lazy_property
    def probs(self):
        from flow.nn.functional import softmax

        return softmax(self.logits, dim=-1)

    @property
    def param_shape(self):
        return self._param.shape

    @property
    def mean(self):
        from flow._creation import full

        return full(tuple(self._extended_shape()), float("nan"), dtype=self._param.dtype)

    @property
    def mode(self):
        return self.probs.argmax(-1)

    @property
    def variance(self):
        return self.mean

    def sample(self, sample_shape=()):
        from flow._creation import multinomial
        from flow._tensor import Size
        from flow.autograd.grad_mode import no_grad

        sample_shape = Size(tuple(sample_shape) if not isinstance(sample_shape, int) else (sample_shape,))
        n = 1
        for s in sample_shape:
            n *= s
        with no_grad():
            probs_2d = self.probs.reshape(-1, self._num_events)
            draws = multinomial(probs_2d, n, replacement=True)  # (batch, n)
            return draws.T.reshape(tuple(self._extended_shape(sample_shape)))

    def log_prob(self, value):
        from flow.ops.shape_ops import broadcast_tensors

        if self._validate_args:
            self._validate_sample(value)
        value = value.long().unsqueeze(-1)
        value, log_pmf = broadcast_tensors(value, self.logits)
        return log_pmf.gather(-1, value[..., :1]).squeeze(-1)

    def entropy(self):
        import numpy as np

        # logits may be -inf where a probability is 0; 0 * -inf must count as 0
        min_real = float(np.finfo(self.logits.detach().numpy().dtype).min)
        logits = self.logits.clamp(min=min_real)
        return -(logits * self.probs).sum(-1)

    def enumerate_support(self, expand: bool = True):
        from flow._creation import arange

        values = arange(self._num_events).reshape((-1,) + (1,) * len(self._batch_shape))
        return values.expand((self._num_events,) + tuple(self._batch_shape)) if expand else values
