"""Probability distributions (``flow.distributions``), as ``torch.distributions``.

>>> d = flow.distributions.Normal(flow.tensor(0.0), flow.tensor(1.0))
>>> x = d.rsample((4,))  # differentiable with respect to loc and scale
>>> d.log_prob(x).shape
flow.Size([4])
"""

from flow.distributions import constraints
from flow.distributions.continuous import Normal, Uniform
from flow.distributions.discrete import Bernoulli, Categorical
from flow.distributions.distribution import Distribution
from flow.distributions.independent import Independent
from flow.distributions.kl import kl_divergence, register_kl
from flow.distributions.multivariate_normal import MultivariateNormal

__all__ = [
    "Bernoulli",
    "Categorical",
    "Distribution",
    "Independent",
    "MultivariateNormal",
    "Normal",
    "Uniform",
    "constraints",
    "kl_divergence",
    "register_kl",
]
