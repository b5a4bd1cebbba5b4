"""``kl_divergence(p, q)`` and ``register_kl``, as ``torch.distributions.kl``.

The implementation for a pair of types is the registered one whose types are the most specific
superclasses of ``type(p)`` and ``type(q)``.

>>> kl_divergence(Normal(0.0, 1.0), Normal(1.0, 1.0))
tensor(0.5000)
"""

from __future__ import annotations

from typing import Callable

from flow.distributions.continuous import Normal, Uniform
from flow.distributions.discrete import Bernoulli, Categorical
from flow.distributions.distribution import Distribution, sum_rightmost
from flow.distributions.independent import Independent
from flow.distributions.multivariate_normal import MultivariateNormal, _batch_mahalanobis
from flow.linalg import solve_triangular

__all__ = ["kl_divergence", "register_kl"]

_KL_REGISTRY: dict = {}


def register_kl(type_p: type, type_q: type) -> Callable:
    """Decorator registering ``fn(p, q)`` as the KL divergence of a ``type_p`` from a ``type_q``."""
    for t, name in ((type_p, "type_p"), (type_q, "type_q")):
        if not isinstance(t, type) or not issubclass(t, Distribution):
            raise TypeError(f"register_kl: expected {name} to be a subclass of Distribution, got {t!r}")

    def decorator(fn: Callable) -> Callable:
        _KL_REGISTRY[type_p, type_q] = fn
        return fn

    return decorator


def _dispatch(tp: type, tq: type) -> Callable | None:
    best, best_rank = None, None
    for (p, q), fn in _KL_REGISTRY.items():
        if issubclass(tp, p) and issubclass(tq, q):
            rank = (tp.__mro__.index(p), tq.__mro__.index(q))
            if best_rank is None or rank < best_rank:
                best, best_rank = fn, rank
    return best


def kl_divergence(p: Distribution, q: Distribution):
    """``KL(p || q)``, batched over the distributions' batch shape."""
    fn = _dispatch(type(p), type(q))
    if fn is None:
        raise NotImplementedError(
            f"No KL(p || q) is implemented for p type {type(p).__name__} and q type {type(q).__name__}"
        )
    return fn(p, q)


def _inf_where(cond, value):
    from flow._creation import full_like

    return value.where(~cond, full_like(value, float("inf")))


def _zero_where(cond, value):
    from flow._creation import zeros_like

    # not value * 0: the value may already be inf there, and inf * 0 is nan
    return value.where(~cond, zeros_like(value))


@register_kl(Normal, Normal)
def _kl_normal_normal(p: Normal, q: Normal):
    var_ratio = (p.scale / q.scale) ** 2
    t1 = ((p.loc - q.loc) / q.scale) ** 2
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p: Categorical, q: Categorical):
    from flow.ops.shape_ops import broadcast_tensors

    t = p.probs * (p.logits - q.logits)
    qz, pz = broadcast_tensors(q.probs == 0, p.probs == 0)
    t = _zero_where(pz, _inf_where(qz, t))
    return t.sum(-1)


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p: Bernoulli, q: Bernoulli):
    from flow.nn.functional import softplus

    t1 = p.probs * (softplus(-q.logits) - softplus(-p.logits))
    t1 = _zero_where(p.probs == 0, _inf_where(q.probs == 0, t1))
    t2 = (1 - p.probs) * (softplus(q.logits) - softplus(p.logits))
    t2 = _zero_where(p.probs == 1, _inf_where(q.probs == 1, t2))
    return t1 + t2


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p: Uniform, q: Uniform):
    result = ((q.high - q.low) / (p.high - p.low)).log()
    return _inf_where((q.low > p.low) | (q.high < p.high), result)


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_mvn_mvn(p: MultivariateNormal, q: MultivariateNormal):
    from flow.ops.shape_ops import broadcast_shapes

    if p.event_shape != q.event_shape:
        raise ValueError(
            f"KL-divergence between two Multivariate Normals with different event shapes cannot be computed: "
            f"{tuple(p.event_shape)} and {tuple(q.event_shape)}"
        )
    half_term1 = q._half_log_det() - p._half_log_det()
    batch = tuple(
        broadcast_shapes(tuple(q._unbroadcasted_scale_tril.shape[:-2]), tuple(p._unbroadcasted_scale_tril.shape[:-2]))
    )
    k = p.event_shape[0]
    q_L = q._unbroadcasted_scale_tril.expand(batch + (k, k))
    p_L = p._unbroadcasted_scale_tril.expand(batch + (k, k))
    term2 = (solve_triangular(q_L, p_L, upper=False) ** 2).sum((-2, -1))
    term3 = _batch_mahalanobis(q._unbroadcasted_scale_tril, q.loc - p.loc)
    return half_term1 + 0.5 * (term2 + term3 - k)


@register_kl(Independent, Independent)
def _kl_independent_independent(p: Independent, q: Independent):
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError("KL between Independents with different reinterpreted_batch_ndims is not implemented")
    return sum_rightmost(kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)
