"""NumPy's floating-point error state while flow's kernels run.

Kernels compute ``log(0)``, ``x / 0`` or an overflowing ``exp`` the way PyTorch does (``-inf``,
``inf``, ``nan``) and say nothing; NumPy would print a RuntimeWarning from deep inside the kernel
(or raise, under ``np.seterr(all="raise")`` in user code). Every kernel call is therefore made with
NumPy's error state set to "ignore", and the caller's own state is put back afterwards, so user
NumPy code keeps whatever state it chose.

``np.errstate`` costs ~2.5 us per use, as much as a whole small op; NumPy 2 keeps the state in a
context variable, and setting that variable to a precomputed "ignore" value costs ~0.2 us. The
context variable is NumPy-internal, so when it is missing (another NumPy) the public
``np.errstate`` is used instead.
"""

from __future__ import annotations

import numpy as np

try:  # NumPy >= 2: the error state is a ContextVar holding an opaque capsule
    from numpy._core._ufunc_config import _extobj_contextvar as _VAR

    with np.errstate(all="ignore"):
        _IGNORE = _VAR.get()
    fp_set = _VAR.set
    fp_reset = _VAR.reset

    def ignored() -> object:
        """The token to set (with :func:`fp_set`) while a kernel runs."""
        return _IGNORE

except Exception:  # pragma: no cover - older or future NumPy
    _ERRSTATES: list = []

    def fp_set(_value):
        es = np.errstate(all="ignore")
        es.__enter__()
        return es

    def fp_reset(es) -> None:
        es.__exit__(None, None, None)

    def ignored() -> object:
        return None


IGNORE = ignored()


class quiet_fp:
    """``with quiet_fp():`` runs NumPy code under the "ignore" error state (re-entrant, per thread)."""

    __slots__ = ("_tok",)

    def __enter__(self) -> None:
        self._tok = fp_set(IGNORE)

    def __exit__(self, *exc) -> None:
        fp_reset(self._tok)
