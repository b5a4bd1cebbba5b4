"""Constraints on distribution parameters and values (``flow.distributions.constraints``).

A constraint's ``check(value)`` is a bool tensor saying, per element (per event for ``event_dim``
> 0), whether ``value`` satisfies it, as ``torch.distributions.constraints``.

>>> constraints.positive.check(flow.tensor([1.0, -1.0]))
tensor([ True, False])
"""

from __future__ import annotations

__all__ = [
    "Constraint",
    "boolean",
    "dependent",
    "greater_than",
    "independent",
    "integer_interval",
    "interval",
    "less_than",
    "lower_cholesky",
    "positive",
    "positive_definite",
    "real",
    "real_vector",
    "simplex",
    "unit_interval",
]


class Constraint:
    """A region of values; ``event_dim`` is how many rightmost dimensions make one checked event."""

    is_discrete = False
    event_dim = 0

    def check(self, value):
        raise NotImplementedError(f"{type(self).__name__}.check is not defined")

    def __repr__(self) -> str:
        return type(self).__name__[1:] + "()"


class _Dependent(Constraint):
    """A placeholder whose region depends on other parameters; it is never checked."""

    def __init__(self, *, is_discrete: bool = False, event_dim: int = 0) -> None:
        self.is_discrete = is_discrete
        self.event_dim = event_dim

    def __call__(self, *, is_discrete: bool = False, event_dim: int = 0) -> "_Dependent":
        return _Dependent(is_discrete=is_discrete, event_dim=event_dim)

    def check(self, value):
        raise ValueError("cannot determine the validity of a dependent constraint")


class _Boolean(Constraint):
    is_discrete = True

    def check(self, value):
        return (value == 0) | (value == 1)


class _IntegerInterval(Constraint):
    is_discrete = True

    def __init__(self, lower_bound: int, upper_bound: int) -> None:
        self.lower_bound = lower_bound
        self.upper_bound = upper_bound

    def check(self, value):
        return (value % 1 == 0) & (value >= self.lower_bound) & (value <= self.upper_bound)

    def __repr__(self) -> str:
        return f"IntegerInterval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _Real(Constraint):
    def check(self, value):
        return value == value  # False only for NaN


class _GreaterThan(Constraint):
    def __init__(self, lower_bound) -> None:
        self.lower_bound = lower_bound

    def check(self, value):
        return value > self.lower_bound

    def __repr__(self) -> str:
        return f"GreaterThan(lower_bound={self.lower_bound})"


class _LessThan(Constraint):
    def __init__(self, upper_bound) -> None:
        self.upper_bound = upper_bound

    def check(self, value):
        return value < self.upper_bound

    def __repr__(self) -> str:
        return f"LessThan(upper_bound={self.upper_bound})"


class _Interval(Constraint):
    def __init__(self, lower_bound, upper_bound) -> None:
        self.lower_bound = lower_bound
        self.upper_bound = upper_bound

    def check(self, value):
        return (value >= self.lower_bound) & (value <= self.upper_bound)

    def __repr__(self) -> str:
        return f"Interval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _HalfOpenInterval(_Interval):
    def check(self, value):
        return (value >= self.lower_bound) & (value < self.upper_bound)

    def __repr__(self) -> str:
        return f"HalfOpenInterval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _Independent(Constraint):
    """``base`` checked over ``reinterpreted_batch_ndims`` more rightmost dimensions (all must hold)."""

    def __init__(self, base: Constraint, reinterpreted_batch_ndims: int) -> None:
        self.base_constraint = base
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims
        self.is_discrete = base.is_discrete
        self.event_dim = base.event_dim + reinterpreted_batch_ndims

    def check(self, value):
        ok = self.base_constraint.check(value)
        n = self.reinterpreted_batch_ndims
        if n:
            ok = ok.reshape(tuple(ok.shape[: ok.dim() - n]) + (-1,)).all(-1)
        return ok

    def __repr__(self) -> str:
        return f"IndependentConstraint({self.base_constraint!r}, {self.reinterpreted_batch_ndims})"


class _Simplex(Constraint):
    event_dim = 1

    def check(self, value):
        return (value >= 0).all(-1) & ((value.sum(-1) - 1).abs() < 1e-6)


class _LowerCholesky(Constraint):
    event_dim = 2

    def check(self, value):
        lower = (value.tril() == value).reshape(tuple(value.shape[:-2]) + (-1,)).all(-1)
        positive_diag = (value.diagonal(dim1=-2, dim2=-1) > 0).all(-1)
        return lower & positive_diag


class _PositiveDefinite(Constraint):
    event_dim = 2

    def check(self, value):
        import numpy as np

        from flow._creation import tensor

        a = value.detach().numpy()
        sym = np.all(np.isclose(a, np.swapaxes(a, -1, -2), rtol=1e-6, atol=1e-6), axis=(-2, -1))
        # symmetric with every eigenvalue positive; eigvalsh only reads one triangle, hence the symmetry test
        pd = np.linalg.eigvalsh(a).min(axis=-1) > 0 if a.size else np.ones(a.shape[:-2], dtype=bool)
        return tensor(np.asarray(sym & pd), device=value.device)


dependent = _Dependent()
boolean = _Boolean()
real = _Real()
real_vector = _Independent(real, 1)
positive = _GreaterThan(0.0)
unit_interval = _Interval(0.0, 1.0)
simplex = _Simplex()
lower_cholesky = _LowerCholesky()
positive_definite = _PositiveDefinite()
greater_than = _GreaterThan
less_than = _LessThan
interval = _Interval
half_open_interval = _HalfOpenInterval
integer_interval = _IntegerInterval
independent = _Independent
