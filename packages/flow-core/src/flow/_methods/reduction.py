"""Tensor methods for reductions, statistics, scans and sorting."""

from __future__ import annotations

import flow.ops.reduction as _R
import flow.ops.reduction_minmax as _RM
import flow.ops.reduction_stats as _RS
import flow.ops.sorting as _S


class ReductionMethods:
    __slots__ = ()

    # -- sums and products ------------------------------------------------------------
    def sum(self, dim=None, keepdim: bool = False, *, dtype=None):
        return _R.sum(self, dim, keepdim, dtype=dtype)

    def mean(self, dim=None, keepdim: bool = False, *, dtype=None):
        return _R.mean(self, dim, keepdim, dtype=dtype)

    def prod(self, dim=None, keepdim: bool = False, *, dtype=None):
        return _R.prod(self, dim, keepdim, dtype=dtype)

    def nansum(self, dim=None, keepdim: bool = False, *, dtype=None):
        return _R.nansum(self, dim, keepdim, dtype=dtype)

    def nanmean(self, dim=None, keepdim: bool = False, *, dtype=None):
        return _R.nanmean(self, dim, keepdim, dtype=dtype)

    # -- extremes ------------------------------------------------------------------------
    def max(self, dim=None, keepdim: bool = False):
        return _RM.max(self, dim, keepdim)

    def min(self, dim=None, keepdim: bool = False):
        return _RM.min(self, dim, keepdim)

    def amax(self, dim=(), keepdim: bool = False):
        return _RM.amax(self, dim, keepdim)

    def amin(self, dim=(), keepdim: bool = False):
        return _RM.amin(self, dim, keepdim)

    def aminmax(self, *, dim=None, keepdim: bool = False):
        return _RM.aminmax(self, dim=dim, keepdim=keepdim)

    def argmax(self, dim=None, keepdim: bool = False):
        return _RM.argmax(self, dim, keepdim)

    def argmin(self, dim=None, keepdim: bool = False):
        return _RM.argmin(self, dim, keepdim)

    # -- logical -------------------------------------------------------------------------
    def all(self, dim=None, keepdim: bool = False):
        return _R.all(self, dim, keepdim)

    def any(self, dim=None, keepdim: bool = False):
        return _R.any(self, dim, keepdim)

    def count_nonzero(self, dim=None):
        return _R.count_nonzero(self, dim)

    # -- statistics ----------------------------------------------------------------------
    def var(self, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
        return _RS.var(self, dim, unbiased, keepdim, correction=correction)

    def std(self, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
        return _RS.std(self, dim, unbiased, keepdim, correction=correction)

    def logsumexp(self, dim=None, keepdim: bool = False):
        return _RS.logsumexp(self, dim, keepdim)

    def norm(self, p="fro", dim=None, keepdim: bool = False, dtype=None):
        return _RS.norm(self, p, dim, keepdim, dtype)

    # -- scans ---------------------------------------------------------------------------
    def cumsum(self, dim, *, dtype=None):
        return _RS.cumsum(self, dim, dtype=dtype)

    def cumprod(self, dim, *, dtype=None):
        return _RS.cumprod(self, dim, dtype=dtype)

    # -- sorting and selection -------------------------------------------------------------
    def sort(self, dim: int = -1, descending: bool = False, *, stable: bool = False):
        return _S.sort(self, dim, descending, stable=stable)

    def argsort(self, dim: int = -1, descending: bool = False, *, stable: bool = False):
        return _S.argsort(self, dim, descending, stable=stable)

    def msort(self):
        return _S.msort(self)

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):  # noqa: A002
        return _S.topk(self, k, dim, largest, sorted)

    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False):
        return _S.kthvalue(self, k, dim, keepdim)

    def median(self, dim=None, keepdim: bool = False):
        return _S.median(self, dim, keepdim)

    def nanmedian(self, dim=None, keepdim: bool = False):
        return _S.nanmedian(self, dim, keepdim)

    def mode(self, dim: int = -1, keepdim: bool = False):
        return _S.mode(self, dim, keepdim)

    def unique(
        self,
        sorted: bool = True,
        return_inverse: bool = False,
        return_counts: bool = False,  # noqa: A002
        dim=None,
    ):
        return _S.unique(self, sorted, return_inverse, return_counts, dim)

    def unique_consecutive(self, return_inverse: bool = False, return_counts: bool = False, dim=None):
        return _S.unique_consecutive(self, return_inverse, return_counts, dim)
