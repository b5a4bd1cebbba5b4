"""Tensor methods of the special functions, scans, scatters, quantiles and the other ops of
:mod:`flow.ops.extra_math`, :mod:`flow.ops.scatter_ops`, :mod:`flow.ops.tensor_extra` and
:mod:`flow.ops.distance`, with the in-place variants PyTorch has."""

from __future__ import annotations

import flow.ops.distance as _DI
import flow.ops.extra_math as _EM
import flow.ops.scatter_ops as _SC
import flow.ops.tensor_extra as _TE
from flow.ops.inplace import inplace_call


class ExtraOpsMethods:
    __slots__ = ()

    # -- special functions and elementwise math ----------------------------------------------
    def lgamma(self):
        return _EM.lgamma(self)

    def digamma(self):
        return _EM.digamma(self)

    def polygamma(self, n: int):
        return _EM.polygamma(n, self)

    def erfc(self):
        return _EM.erfc(self)

    def erfinv(self):
        return _EM.erfinv(self)

    def exp2(self):
        return _EM.exp2(self)

    def frac(self):
        return _EM.frac(self)

    def rad2deg(self):
        return _EM.rad2deg(self)

    def deg2rad(self):
        return _EM.deg2rad(self)

    def logaddexp(self, other):
        return _EM.logaddexp(self, other)

    def logaddexp2(self, other):
        return _EM.logaddexp2(self, other)

    def xlogy(self, other):
        return _EM.xlogy(self, other)

    def lgamma_(self):
        return inplace_call(self, "lgamma_", _EM.lgamma)

    def digamma_(self):
        return inplace_call(self, "digamma_", _EM.digamma)

    def polygamma_(self, n: int):
        return inplace_call(self, "polygamma_", lambda x: _EM.polygamma(n, x))

    def erfc_(self):
        return inplace_call(self, "erfc_", _EM.erfc)

    def erfinv_(self):
        return inplace_call(self, "erfinv_", _EM.erfinv)

    def exp2_(self):
        return inplace_call(self, "exp2_", _EM.exp2)

    def frac_(self):
        return inplace_call(self, "frac_", _EM.frac)

    def rad2deg_(self):
        return inplace_call(self, "rad2deg_", _EM.rad2deg)

    def deg2rad_(self):
        return inplace_call(self, "deg2rad_", _EM.deg2rad)

    def xlogy_(self, other):
        return inplace_call(self, "xlogy_", _EM.xlogy, other)

    # -- scans, scatters, views ----------------------------------------------------------------
    def cummax(self, dim: int):
        return _SC.cummax(self, dim)

    def cummin(self, dim: int):
        return _SC.cummin(self, dim)

    def scatter_reduce(self, dim: int, index, src, reduce: str, *, include_self: bool = True):
        return _SC.scatter_reduce(self, dim, index, src, reduce, include_self=include_self)

    def scatter_reduce_(self, dim: int, index, src, reduce: str, *, include_self: bool = True):
        return inplace_call(
            self, "scatter_reduce_", lambda x: _SC.scatter_reduce(x, dim, index, src, reduce, include_self=include_self)
        )

    def slice_scatter(self, src, dim: int = 0, start=None, end=None, step: int = 1):
        return _SC.slice_scatter(self, src, dim, start, end, step)

    def select_scatter(self, src, dim: int, index: int):
        return _SC.select_scatter(self, src, dim, index)

    def diagonal_scatter(self, src, offset: int = 0, dim1: int = 0, dim2: int = 1):
        return _SC.diagonal_scatter(self, src, offset, dim1, dim2)

    def as_strided(self, size, stride, storage_offset=None):
        return _SC.as_strided(self, size, stride, storage_offset)

    # -- products, differences, counts, quantiles ------------------------------------------------
    def kron(self, other):
        return _TE.kron(self, other)

    def trace(self):
        return _TE.trace(self)

    def cross(self, other, dim=None):
        return _TE.cross(self, other, dim)

    def diff(self, n: int = 1, dim: int = -1, prepend=None, append=None):
        return _TE.diff(self, n, dim, prepend, append)

    def histc(self, bins: int = 100, min: float = 0, max: float = 0):  # noqa: A002
        return _TE.histc(self, bins, min, max)

    def bincount(self, weights=None, minlength: int = 0):
        return _TE.bincount(self, weights, minlength)

    def quantile(self, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear"):
        return _DI.quantile(self, q, dim, keepdim, interpolation=interpolation)

    def nanquantile(self, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear"):
        return _DI.nanquantile(self, q, dim, keepdim, interpolation=interpolation)
