"""The report of :func:`flow_amp.debug.compare`: rows of relative errors, op by op, and their table.

The error of an output is ``||a - b||_2 / max(||a||_2, tiny)`` (:func:`rel_error`): ``a`` the
float32 run's value, ``b`` the mixed-precision run's, both in float64, over all elements (the
Frobenius norm), ``tiny`` the smallest normal float32 so that an all-zero reference gives 0 when the
other run agrees and a huge error when it does not. A non-finite value in one run that the other
does not have (an fp16 overflow to inf, a nan) is an infinite error.

Default thresholds (``DEFAULT_THRESHOLD``): one rounding to bfloat16 (8 significant bits) changes a
value by at most 2**-8 ~ 3.9e-3 relative, about 2.3e-3 in the norm for values spread over an
interval; a correctly coloured step puts a handful of roundings between two float32 points (input
and weight casts, a low-precision matmul's output, the clear ops that follow it), and in practice
its ops stay at 1e-3 to 2e-2 (gradients a little higher: they pass through more roundings). 5e-2,
about 13 worst-case roundings, sits above that and well below what an op that loses precision gives
(a cancellation or an ``exp`` of a rounded input: 1e-1 to 1). float16 has 11 bits (2**-11 ~ 4.9e-4
per rounding), hence 1e-2 for it.
"""

from __future__ import annotations

import linecache
import os
from dataclasses import dataclass
from typing import Iterator

import numpy as np

__all__ = ["DEFAULT_THRESHOLD", "FORWARD", "BACKWARD", "rel_error", "Site", "Row", "GradRow", "Unmatched", "Report"]

DEFAULT_THRESHOLD = {"bfloat16": 5e-2, "float16": 1e-2}
FORWARD = "forward"
BACKWARD = "backward"
TINY = float(np.finfo(np.float32).tiny)


def rel_error(ref, other) -> float:
    """``||ref - other||_2 / max(||ref||_2, tiny)`` in float64 (see the module docstring)."""
    a = np.asarray(ref, dtype=np.float64)
    b = np.asarray(other, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    fa, fb = np.isfinite(a), np.isfinite(b)
    if not (fa.all() and fb.all()):
        same = (a == b) | (np.isnan(a) & np.isnan(b))  # the same inf, or nan in both: agreement
        if (~(fa & fb) & ~same).any():
            return float("inf")
        keep = fa & fb
        a, b = a[keep], b[keep]
    den = float(np.linalg.norm(a.ravel()))
    return float(np.linalg.norm((a - b).ravel())) / max(den, TINY)


@dataclass(frozen=True)
class Site:
    """The line of user code that made an op call (the first frame outside flow and flow_amp)."""

    filename: str
    lineno: int
    function: str

    @property
    def code(self) -> str:
        return linecache.getline(self.filename, self.lineno).strip()

    def __str__(self) -> str:
        name = self.filename
        try:
            rel = os.path.relpath(name)
            name = rel if not rel.startswith("..") else os.path.basename(name)
        except ValueError:  # another drive on Windows
            name = os.path.basename(name)
        return f"{name}:{self.lineno}"


@dataclass(frozen=True)
class Row:
    """One op call matched between the two runs.

    ``err`` is the largest relative error of its floating outputs (``errs``: one per output; None
    for a non-tensor output and for discrete ones, which hold decisions rather than rounded numbers:
    a bool mask, indices, a cast of those to a float dtype; ``err`` is None when all are); for
    discrete outputs ``mismatch`` is the fraction of elements that differ (a relu's mask flips where
    its input is near zero). ``in_err`` is the largest error of its floating tensor inputs as this op
    received them (None when unknown), so ``err`` well above ``in_err`` means this op lost the
    precision. ``in_mismatch`` is the largest fraction of differing elements among its discrete
    inputs: a relu's gradient multiplies by its mask, and a mask whose elements flip in a fraction
    ``p`` of places changes the gradient by about ``sqrt(p)`` (0.25% of flips: 5%), with no op at fault.
    A backward op's ``of`` is the row of the forward op it differentiates, and its ``site`` is that op's.
    ``dtype`` is the dtype the mixed-precision run produced, ``ref_dtype`` the float32 run's.
    """

    index: int
    phase: str
    op: str
    of: int | None
    site: Site | None
    shapes: tuple
    dtype: str | None
    ref_dtype: str | None
    err: float | None
    errs: tuple
    in_err: float | None
    mismatch: float | None = None
    in_mismatch: float | None = None


@dataclass(frozen=True)
class GradRow:
    """The gradient of one leaf (a parameter, an input that requires grad) in the two runs."""

    name: str
    shape: tuple
    dtype: str | None
    err: float
    first_use: int | None  # the row of the first op that read the leaf
    site: Site | None


@dataclass(frozen=True)
class Unmatched:
    """An op call of one run (``run``: "float32" or "amp") with no counterpart in the other."""

    run: str
    op: str
    phase: str
    site: Site | None
    shapes: tuple


def _e(x: float | None) -> str:
    if x is None:
        return "-"
    return "inf" if x == float("inf") else f"{x:.1e}"


def _short(site: Site | None, width: int = 28) -> str:
    """A site that fits a column: the path as given, else the file's name, else its tail."""
    if site is None:
        return "-"
    s = str(site)
    if len(s) > width:
        s = f"{os.path.basename(site.filename)}:{site.lineno}"
    return s if len(s) <= width else ".." + s[-(width - 2) :]


def _shape(shapes: tuple) -> str:
    s = [x for x in shapes if x is not None]
    if not s:
        return "-"
    return str(s[0]) + (f" +{len(s) - 1}" if len(s) > 1 else "")


class Report:
    """What :func:`flow_amp.debug.compare` found: ``rows`` (op calls in the float32 run's execution
    order, forward and backward), ``grads`` (the leaves' gradients) and ``unmatched`` (op calls of
    one run with no counterpart; left out of it are the casts autocast inserted, counted by ``inserted``,
    and ``extra_casts``, the other casts only the mixed-precision run made: library code bringing a
    weight to its input's dtype, type promotion of mixed operands, and their gradients)."""

    def __init__(
        self,
        rows: list[Row],
        grads: list[GradRow],
        unmatched: list[Unmatched],
        *,
        threshold: float,
        dtype: str,
        device_type: str,
        inserted: int,
        extra_casts: int = 0,
        losses: tuple = (None, None),
    ) -> None:
        self.rows = rows
        self.grads = grads
        self.unmatched = unmatched
        self.threshold = threshold
        self.dtype = dtype
        self.device_type = device_type
        self.inserted = inserted
        self.extra_casts = extra_casts
        self.loss_ref, self.loss_amp = losses

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows)

    def __getitem__(self, i: int) -> Row:
        return self.rows[i]

    def divergences(self, threshold: float | None = None) -> list[Row]:
        """Every row whose error passes ``threshold`` (the report's by default)."""
        t = self.threshold if threshold is None else threshold
        return [r for r in self.rows if r.err is not None and r.err > t]

    def first_divergence(self, threshold: float | None = None, phase: str | None = None) -> Row | None:
        """The first op, in execution order, whose output error passes ``threshold`` (the
        report's by default), among ``phase`` ("forward", "backward") or all; None if none does."""
        t = self.threshold if threshold is None else threshold
        for r in self.rows:
            if r.err is not None and r.err > t and (phase is None or r.phase == phase):
                return r
        return None

    def grad_divergences(self, threshold: float | None = None) -> list[GradRow]:
        t = self.threshold if threshold is None else threshold
        return [g for g in self.grads if g.err > t]

    def __repr__(self) -> str:
        first = self.first_divergence()
        where = "none" if first is None else f"#{first.index} {first.op} at {first.site}"
        return f"<Report {self.dtype}/{self.device_type}: {len(self.rows)} ops, first divergence: {where}>"

    def __str__(self) -> str:
        return self.table()

    def table(self, max_rows: int | None = 40) -> str:
        """The report as text: a summary, the op table (at most ``max_rows`` rows: the first ones,
        those around the first divergence, the last ones), the gradients."""
        first = self.first_divergence()
        lines = self._summary(first)
        lines.append("")
        lines.append(
            f"  {'#':>4}  {'phase':5}  {'op':22} {'of':>4}  {'source':28} {'shape':16} {'dtype':9} {'in err':8} err"
        )
        last = -1
        for k in self._shown(first, max_rows):
            if k > last + 1:
                lines.append(f"  {'':>4}  ... {k - last - 1} rows ...")
            lines.append(self._line(self.rows[k], first))
            last = k
        if last < len(self.rows) - 1:
            lines.append(f"  {'':>4}  ... {len(self.rows) - 1 - last} rows ...")
        if self.grads:
            lines += ["", self._grad_table(max_rows)]
        if self.unmatched:
            lines += ["", f"unmatched op calls ({len(self.unmatched)}):"]
            for u in self.unmatched[:10]:
                lines.append(f"    {u.run:8} {u.phase:8} {u.op:22} {_shape(u.shapes):16} {u.site or '-'}")
            if len(self.unmatched) > 10:
                lines.append(f"    ... {len(self.unmatched) - 10} more")
        return "\n".join(lines)

    def _summary(self, first: Row | None) -> list[str]:
        nb = sum(r.phase == BACKWARD for r in self.rows)
        lines = [
            f"flow.amp.debug.compare: autocast {self.dtype} on {self.device_type} against float32, "
            f"threshold {self.threshold:.1e}",
            f"{len(self.rows)} op calls compared ({len(self.rows) - nb} forward, {nb} backward), "
            f"{self.inserted} casts autocast inserted and {self.extra_casts} other casts only it needed left out, "
            f"{len(self.unmatched)} unmatched",
        ]
        if self.loss_ref is not None:
            lines.append(f"loss: float32 {self.loss_ref:.6g}, {self.dtype} {self.loss_amp:.6g}")
        if first is None:
            lines.append("no op's error passes the threshold")
        else:
            of = f" (gradient of #{first.of} {self.rows[first.of].op})" if first.of is not None else ""
            lines.append(
                f"first divergence: #{first.index} {first.op}{of} at {first.site or '?'}"
                f"{' in ' + first.site.function if first.site else ''}: error {_e(first.err)}, "
                f"its inputs {_e(first.in_err)}"
            )
            if first.in_mismatch:
                lines.append(
                    f"    {first.in_mismatch:.2%} of a discrete input (a mask) differ: where a relu's input is "
                    "near zero, the two runs take different sides"
                )
            if first.site is not None and first.site.code:
                lines.append(f"    {first.site.code}")
            if first.phase == BACKWARD:
                fwd = self.first_divergence(phase=FORWARD)
                lines.append(
                    "forward pass: no op passes the threshold"
                    if fwd is None
                    else f"first divergence in the forward pass: #{fwd.index} {fwd.op} at {fwd.site or '?'}: "
                    f"error {_e(fwd.err)}, its inputs {_e(fwd.in_err)}"
                )
        bad = self.grad_divergences()
        if bad:
            worst = _e(max(g.err for g in bad))
            lines.append(f"{len(bad)} of {len(self.grads)} gradients pass the threshold (worst: {worst})")
        return lines

    def _shown(self, first: Row | None, max_rows: int | None) -> list[int]:
        n = len(self.rows)
        if max_rows is None or n <= max_rows:
            return list(range(n))
        keep = set(range(min(5, n))) | set(range(max(0, n - 3), n))
        if first is not None:
            keep |= set(range(max(0, first.index - 5), min(n, first.index + 6)))
        # then the largest errors, while there is room
        for r in sorted(self.rows, key=lambda r: -(r.err or 0.0)):
            if len(keep) >= max_rows:
                break
            keep.add(r.index)
        return sorted(keep)

    def _line(self, r: Row, first: Row | None) -> str:
        mark = ">" if first is not None and r.index == first.index else " "
        of = "-" if r.of is None else f"#{r.of}"
        ph = "fwd" if r.phase == FORWARD else "bwd"
        src = _short(r.site)
        err = _e(r.err) if not r.mismatch else f"{_e(r.err)} ({r.mismatch:.2%} differ)"
        return (
            f"{mark} {r.index:>4}  {ph:5}  {r.op[:22]:22} {of:>4}  {src:28} {_shape(r.shapes)[:16]:16} "
            f"{(r.dtype or '-'):9} {_e(r.in_err):8} {err}"
        )

    def _grad_table(self, max_rows: int | None) -> str:
        grads = self.grads
        head = f"gradients ({len(grads)} leaves)"
        if max_rows is not None and len(grads) > max_rows:
            grads = sorted(grads, key=lambda g: -g.err)[:max_rows]
            head += f", the {max_rows} largest errors"
        lines = [head + ":", f"  {'name':30} {'shape':16} {'dtype':9} {'err':8} first used by"]
        for g in grads:
            mark = ">" if g.err > self.threshold else " "
            use = "-" if g.first_use is None else f"#{g.first_use} {self.rows[g.first_use].op} {g.site or ''}"
            lines.append(f"{mark} {g.name[:30]:30} {str(g.shape)[:16]:16} {(g.dtype or '-'):9} {_e(g.err):8} {use}")
        return "\n".join(lines)
