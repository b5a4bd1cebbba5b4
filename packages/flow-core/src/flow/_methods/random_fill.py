"""Tensor methods that fill a tensor in place with random samples: ``normal_``, ``uniform_``, ``random_``,
``bernoulli_``, ``exponential_``, ``cauchy_``, ``log_normal_``, ``geometric_``, as in PyTorch.

Samples come from flow's default generator (or ``generator=``), so ``flow.manual_seed`` makes them
reproducible; ``t.normal_(m, s)`` and ``flow.nn.init.normal_(t, m, s)`` draw the same numbers. The write
goes through :func:`flow.ops.inplace.apply_inplace`: the version counter is bumped, a leaf that requires grad
is refused outside ``flow.no_grad()``, and a computed tensor keeps requiring grad with a zero gradient for
its old value (the new value does not depend on it), as PyTorch's in-place random ops do.
"""

from __future__ import annotations

import warnings

import numpy as np

from flow._random import host_rng
from flow.errors import OpError, OpTypeError
from flow.ops.inplace import apply_inplace, check_inplace_allowed


def _number(op: str, name: str, value) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise OpTypeError(op, f"{name} must be a real number, got {type(value).__name__} {value!r}")
    return float(value)


def _integer(op: str, name: str, value) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise OpTypeError(op, f"{name} must be an int, got {type(value).__name__} {value!r}")
    return int(value)


def _floating_only(self, op: str) -> None:
    if not self.dtype.is_floating_point:
        raise OpTypeError(op, f"samples a continuous distribution and needs a floating-point tensor, got {self.dtype}")


def _begin(self, op: str, generator) -> np.random.Generator:
    # Checked before sampling, so a refused call leaves the generator's state as it was.
    check_inplace_allowed(self, op)
    return host_rng(generator)


def _write(self, op: str, values: np.ndarray):
    from flow._creation import tensor

    return apply_inplace(self, tensor(values, dtype=self.dtype, device=self.device), op)


def _shape(self) -> tuple:
    return tuple(self._data.shape)


def _int_range(self) -> tuple[int, int]:
    """The inclusive range of integers ``random_`` may write into this dtype: the dtype's own range, and for
    floating dtypes [-(2^digits), 2^digits], where every integer is exactly representable."""
    npdt = self.dtype.np
    if self.dtype.is_floating_point:
        digits = np.finfo(npdt).nmant + 1
        return -(1 << digits), 1 << digits
    if npdt == np.bool_:
        return 0, 1
    info = np.iinfo(npdt)
    return int(info.min), int(info.max)


def _parse_random_args(args: tuple, kwargs: dict) -> tuple[int, int | None, bool]:
    """PyTorch's three forms: ``random_()``, ``random_(to)``, ``random_(from, to)`` (``from``/``to`` may be
    keywords). Returns (from, to, whether a range was given)."""
    unknown = set(kwargs) - {"from", "to"}
    if unknown or len(args) > 2:
        raise TypeError(
            f"random_() takes random_(), random_(to) or random_(from, to); got {len(args)} positional "
            f"arguments and keywords {sorted(kwargs)}"
        )
    if len(args) == 1 and "to" not in kwargs and "from" not in kwargs:
        return 0, _integer("random_", "to", args[0]), True
    names = ("from", "to")[: len(args)]
    dup = set(names) & set(kwargs)
    if dup:
        raise TypeError(f"random_() got multiple values for argument {sorted(dup)[0]!r}")
    given = dict(zip(names, args), **kwargs)
    if not given:
        return 0, None, False
    if "from" not in given:
        return 0, _integer("random_", "to", given["to"]), True
    if "to" not in given:
        raise TypeError("random_() missing the argument 'to' (pass to=None for the top of the dtype's range)")
    frm = _integer("random_", "from", given["from"])
    to = given["to"]
    return frm, (None if to is None else _integer("random_", "to", to)), True


def _random_bounds(self, frm: int, to: int | None, ranged: bool) -> tuple[int, int]:
    """The inclusive [lo, hi] that ``random_`` draws from, checked against the dtype as PyTorch does."""
    lo_ok, hi_ok = _int_range(self)
    if not ranged:
        return 0, hi_ok
    if self.dtype.is_floating_point:
        # Past 2^digits a floating dtype skips integers, which is worth a warning; only leaving the dtype's
        # finite range (or int64's, in which the samples are drawn) is an error.
        fmax = min(int(np.finfo(self.dtype.np).max), int(np.iinfo(np.int64).max))
        lo_lim, hi_lim = -fmax, fmax
    else:
        lo_lim, hi_lim = lo_ok, hi_ok
    if to is not None and frm >= to:
        raise OpError("random_", f"expects 'from' to be less than 'to', but got from={frm} >= to={to}")
    lo, hi = frm, (hi_ok if to is None else to - 1)
    expected = f"(expected [{lo_lim}, {hi_lim}])"
    if not lo_lim <= lo <= hi_lim:
        raise OpError("random_", f"from={lo} is out of bounds for {self.dtype} {expected}")
    if not lo_lim <= hi <= hi_lim:
        raise OpError("random_", f"to - 1 = {hi} is out of bounds for {self.dtype} {expected}")
    if lo > hi:
        raise OpError("random_", f"expects 'from' <= the top of {self.dtype}'s range {hi}, got from={lo}")
    if lo < lo_ok or hi > hi_ok:
        warnings.warn(
            f"random_: the range [{lo}, {hi}] goes past [{lo_ok}, {hi_ok}]; {self.dtype} cannot represent "
            "every integer there, so the distribution is not uniform over it",
            UserWarning,
            stacklevel=3,
        )
    return lo, hi


class RandomFillMethods:
    __slots__ = ()

    def normal_(self, mean: float = 0.0, std: float = 1.0, *, generator=None):
        """Fill in place with samples from N(mean, std^2).

        >>> w = flow.empty(3, 4).normal_(0.0, 0.02)
        """
        mean, std = _number("normal_", "mean", mean), _number("normal_", "std", std)
        _floating_only(self, "normal_")
        if not std >= 0.0:
            raise OpError("normal_", f"expects std >= 0.0, got std={std}")
        rng = _begin(self, "normal_", generator)
        return _write(self, "normal_", rng.normal(mean, std, _shape(self)))

    def uniform_(self, from_: float = 0.0, to: float = 1.0, *, generator=None, **kwargs):
        """Fill in place with samples from U[from, to) (``from`` may be given as a keyword).

        >>> b = flow.empty(8).uniform_(-0.1, 0.1)
        """
        if "from" in kwargs:
            from_ = kwargs.pop("from")
        if kwargs:
            raise TypeError(f"uniform_() got unexpected keyword arguments {sorted(kwargs)}")
        lo, hi = _number("uniform_", "from", from_), _number("uniform_", "to", to)
        _floating_only(self, "uniform_")
        npdt = self.dtype.np
        top = float(np.finfo(npdt).max)
        for name, v in (("from", lo), ("to", hi)):
            if not -top <= v <= top:
                raise OpError("uniform_", f"{name}={v} is out of bounds for {self.dtype}")
        if lo > hi:
            raise OpError("uniform_", f"expects a [from, to) range, but got from={lo} > to={hi}")
        if hi - lo > top:
            raise OpError("uniform_", f"expects to - from <= {top} (the largest {self.dtype}), got {hi - lo}")
        rng = _begin(self, "uniform_", generator)
        vals = rng.uniform(lo, hi, _shape(self)).astype(npdt)
        if hi > lo:
            # Rounding to a narrow dtype can land on ``to``; the range is half-open, so step back below it.
            below = np.nextafter(np.asarray(hi, npdt), np.asarray(lo, npdt))
            vals[vals >= np.asarray(hi, npdt)] = below
        return _write(self, "uniform_", vals)

    def random_(self, *args, generator=None, **kwargs):
        """Fill in place with integers drawn uniformly from [from, to - 1].

        ``random_()`` spans the dtype's range ([0, 2^digits] for floating dtypes, where each integer is
        exact); ``random_(to)`` is [0, to); ``random_(from, None)`` runs to the top of that range.

        >>> idx = flow.empty(5, dtype=flow.int64).random_(0, 10)
        """
        lo, hi = _random_bounds(self, *_parse_random_args(args, kwargs))
        rng = _begin(self, "random_", generator)
        return _write(self, "random_", rng.integers(lo, hi, size=_shape(self), dtype=np.int64, endpoint=True))

    def bernoulli_(self, p=0.5, *, generator=None):
        """Fill in place with 0/1 samples that are 1 with probability ``p`` (a number, or a tensor of
        probabilities broadcast to this tensor's shape); any dtype.

        >>> keep = flow.empty(4, 4).bernoulli_(0.9)
        """
        from flow._creation import bernoulli
        from flow._tensor import Tensor

        shape = _shape(self)
        if isinstance(p, Tensor):
            probs = np.asarray(p.numpy_host(), dtype=np.float64)
            try:
                probs = np.broadcast_to(probs, shape)
            except ValueError:
                raise OpError(
                    "bernoulli_", f"p of shape {tuple(p.shape)} cannot be broadcast to the tensor's shape {shape}"
                ) from None
            if not np.all((probs >= 0.0) & (probs <= 1.0)):
                raise OpError("bernoulli_", "expects all elements of p to be in [0, 1]")
        else:
            p = _number("bernoulli_", "p", p)
            if not 0.0 <= p <= 1.0:
                raise OpError("bernoulli_", f"expects p to be in [0, 1], got p={p}")
        _begin(self, "bernoulli_", generator)
        # flow.bernoulli draws the samples, so both agree for one seed
        src = p.detach().expand(*shape) if isinstance(p, Tensor) else self.detach()
        drawn = bernoulli(src, None if isinstance(p, Tensor) else p, generator=generator)
        return apply_inplace(self, drawn.to(self.dtype).to(self.device), "bernoulli_")

    def exponential_(self, lambd: float = 1.0, *, generator=None):
        """Fill in place with samples from the exponential distribution of rate ``lambd``."""
        lambd = _number("exponential_", "lambd", lambd)
        _floating_only(self, "exponential_")
        if not lambd > 0.0:
            raise OpError("exponential_", f"expects lambda > 0.0, got lambda={lambd}")
        rng = _begin(self, "exponential_", generator)
        return _write(self, "exponential_", rng.exponential(1.0 / lambd, _shape(self)))

    def cauchy_(self, median: float = 0.0, sigma: float = 1.0, *, generator=None):
        """Fill in place with samples from the Cauchy distribution at ``median`` with scale ``sigma``."""
        median, sigma = _number("cauchy_", "median", median), _number("cauchy_", "sigma", sigma)
        _floating_only(self, "cauchy_")
        if not sigma > 0.0:
            raise OpError("cauchy_", f"expects sigma > 0.0, got sigma={sigma}")
        rng = _begin(self, "cauchy_", generator)
        return _write(self, "cauchy_", median + sigma * rng.standard_cauchy(_shape(self)))

    def log_normal_(self, mean: float = 1.0, std: float = 2.0, *, generator=None):
        """Fill in place with exp(N(mean, std^2)) samples (``mean``/``std`` are those of the log)."""
        mean, std = _number("log_normal_", "mean", mean), _number("log_normal_", "std", std)
        _floating_only(self, "log_normal_")
        if not std > 0.0:
            raise OpError("log_normal_", f"expects std > 0.0, got std={std}")
        rng = _begin(self, "log_normal_", generator)
        return _write(self, "log_normal_", rng.lognormal(mean, std, _shape(self)))

    def geometric_(self, p: float, *, generator=None):
        """Fill in place with the number of Bernoulli(p) trials up to the first success (1, 2, ...)."""
        p = _number("geometric_", "p", p)
        if self.dtype.np == np.bool_:
            raise OpTypeError("geometric_", "needs an integer or floating-point tensor, got bool")
        if not 0.0 < p < 1.0:
            raise OpError("geometric_", f"expects p to be in (0, 1), got p={p}")
        rng = _begin(self, "geometric_", generator)
        return _write(self, "geometric_", rng.geometric(p, _shape(self)))
