"""NumPy's floating-point warnings while flow's kernels run.

Kernels compute ``log(0)``, ``x / 0`` or an overflowing ``exp`` the way PyTorch does (``-inf``,
``inf``, ``nan``) and say nothing; NumPy would print a RuntimeWarning from deep inside the kernel,
or raise under ``np.seterr(all="raise")`` or a user's ``warnings.simplefilter("error")``.

Setting NumPy's error state around every kernel call costs 0.2-0.6 us (``np.errstate`` 2.5 us), as
much as a whole small op, so the common case costs nothing instead:

- a warnings filter ignores RuntimeWarnings raised from flow's own modules (a NumPy warning is
  attributed to the Python frame that called the ufunc: a kernel, or the dispatcher calling a bare
  ufunc kernel), and from the modules of plugin kernels (:func:`quiet_module`); user code's
  warnings are untouched;
- when the user's settings turn the warning into an exception anyway (a filter of theirs that
  comes first, ``np.seterr(all="raise")``), the dispatcher runs the kernel again under NumPy's
  "ignore" state (:class:`quiet_fp`): eager kernels are functions of their inputs, so a second
  run gives the result PyTorch would have given;
- the graph executor sets the "ignore" state once around a whole step (its kernels may write
  into buffers in place, where a second run would not be the same).
"""

from __future__ import annotations

import re
import warnings

import numpy as np

FP_ERRORS = (FloatingPointError, RuntimeWarning)  # what a kernel raises when the user asked NumPy to

_QUIET: set[str] = {"flow"}


def _install_filter() -> None:
    names = "|".join(re.escape(m) for m in sorted(_QUIET))
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=rf"(?:{names})(?:\..*)?$")


def quiet_module(module: str) -> None:
    """Ignore NumPy RuntimeWarnings raised from ``module`` (and its submodules), as from flow's own
    kernels; the registry calls this for the module of every kernel a plugin registers."""
    top = module.split(".")[0]
    if top and top not in _QUIET and top != "__main__":
        _QUIET.add(top)
        _install_filter()


_install_filter()

try:  # NumPy >= 2 keeps the error state in a ContextVar: setting it is ~10x cheaper than np.errstate
    from numpy._core._ufunc_config import _extobj_contextvar as _VAR

    with np.errstate(all="ignore"):
        IGNORE = _VAR.get()
    fp_set = _VAR.set
    fp_reset = _VAR.reset
except Exception:  # pragma: no cover - another NumPy: the public context manager
    IGNORE = None

    def fp_set(_value):
        es = np.errstate(all="ignore")
        es.__enter__()
        return es

    def fp_reset(es) -> None:
        es.__exit__(None, None, None)


class quiet_fp:
    """``with quiet_fp():`` runs NumPy code under the "ignore" error state, and with RuntimeWarnings
    ignored, whatever the caller's filters say (re-entrant, per thread)."""

    __slots__ = ("_tok", "_cw")

    def __enter__(self) -> None:
        self._cw = warnings.catch_warnings()
        self._cw.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)
        self._tok = fp_set(IGNORE)

    def __exit__(self, *exc) -> None:
        fp_reset(self._tok)
        self._cw.__exit__(*exc)
