"""The global array kind: what a global tensor's ``_data`` is (see :mod:`flow.array_kinds`).

A :class:`GlobalArray` holds the logical shape and dtype, the placement, the SBP (one per placement
axis) and this rank's local piece, a NumPy array. Ops on tensors holding one go to
:func:`flow_dist.handler.global_handler`. Reading the logical value (``numpy()``, printing) is a
collective: every rank of the placement must do it, as in OneFlow.
"""

from __future__ import annotations

import numpy as np

from flow_dist import boxing, env
from flow_dist.convert import convert
from flow_dist.errors import GlobalTensorError
from flow_dist.layout import local_shape, local_slice
from flow_dist.placement import Placement
from flow_dist.sbp import PartialSum, broadcast, short

__all__ = ["GlobalArray", "GlobalTensorError"]


class GlobalArray:
    """A logical array over a placement: ``shape``/``dtype`` are the logical ones, ``local`` this rank's piece."""

    is_global = True
    __slots__ = ("shape", "dtype", "ndim", "size", "placement", "sbp", "local", "coord")

    def __init__(self, local: np.ndarray, placement: Placement, nd_sbp: tuple, shape: tuple, coord=None) -> None:
        self.local = local
        self.placement = placement
        self.sbp = nd_sbp
        self.shape = shape
        self.ndim = len(shape)
        self.dtype = local.dtype
        n = 1
        for s in shape:
            n *= s
        self.size = n
        self.coord = placement.rank_index(env.get_rank()) if coord is None else coord

    # -- layout ------------------------------------------------------------------------------
    def expected_local_shape(self, nd_sbp: tuple | None = None) -> tuple:
        return local_shape(self.shape, self.placement, self.sbp if nd_sbp is None else nd_sbp, self.coord)

    def with_local(self, local: np.ndarray, nd_sbp: tuple | None = None, shape: tuple | None = None) -> GlobalArray:
        return GlobalArray(
            local,
            self.placement,
            self.sbp if nd_sbp is None else nd_sbp,
            self.shape if shape is None else shape,
            self.coord,
        )

    def piece_of(self, host: np.ndarray, nd_sbp: tuple | None = None) -> np.ndarray:
        """This rank's piece of the logical value ``host`` in layout ``nd_sbp`` (default: this one's).
        A partial-sum axis keeps the value on the axis's first rank and zeros on the others."""
        nd = self.sbp if nd_sbp is None else nd_sbp
        host = np.broadcast_to(np.asarray(host, dtype=self.dtype), self.shape)
        piece = np.array(host[local_slice(self.shape, self.placement, nd, self.coord)], copy=True)
        for axis, s in enumerate(nd):
            if s.__class__ is PartialSum and self.coord[axis] != 0:
                piece[...] = 0
                break
        return piece

    # -- the array protocol of flow.array_kinds -----------------------------------------------
    def __array__(self, dtype=None, copy=None):
        whole = np.asarray(boxing.box(self, tuple(broadcast for _ in self.sbp)).local)
        return whole if dtype is None else whole.astype(dtype)

    def repr_extras(self) -> list:
        return [
            f"placement={self.placement!r}",
            "sbp=(" + ", ".join(repr(s) for s in self.sbp) + ("," if len(self.sbp) == 1 else "") + ")",
        ]

    def copy(self) -> GlobalArray:
        return self.with_local(self.local.copy())

    def like(self, host: np.ndarray) -> GlobalArray:
        """A backward seed laid out like this tensor; a partial-sum axis becomes broadcast, since the
        gradient of a sum of partials reaches every partial whole."""
        nd = tuple(broadcast if s.__class__ is PartialSum else s for s in self.sbp)
        return self.with_local(self.piece_of(host, nd), nd)

    @property
    def storage(self) -> np.ndarray:
        """This rank's piece (what optimizer states are shaped like; see flow.array_kinds)."""
        return self.local

    def with_storage(self, array: np.ndarray) -> GlobalArray:
        return self.with_local(array)

    def layout(self) -> dict:
        """What a compiled graph specialises on besides the piece (see flow.array_kinds); its values
        of global tensors show these (``print(graph)``)."""
        return {"placement": self.placement, "sbp": self.sbp}

    def grad_for(self, g):
        """A gradient as this (leaf) tensor's ``.grad`` holds it: laid out like the tensor, so a
        broadcast parameter's partial gradient is all-reduced here, once, when it is accumulated."""
        d = g._data
        if d.__class__ is GlobalArray and (d.sbp != self.sbp or d.placement != self.placement):
            return convert(g, self.sbp, self.placement)
        return g

    def __setitem__(self, key, value) -> None:
        if key is not Ellipsis and key != slice(None):
            raise GlobalTensorError(
                "a global tensor's data can only be assigned whole (a[...] = b); index through tensor ops instead"
            )
        if isinstance(value, GlobalArray):
            self.local[...] = boxing.box(value, self.sbp, self.placement).local
        else:
            self.local[...] = self.piece_of(value)

    def __iadd__(self, other):
        if isinstance(other, GlobalArray):
            self.local += boxing.box(other, self.sbp, self.placement).local
        else:
            self.local += self.piece_of(other)
        return self

    def __repr__(self) -> str:
        return (
            f"GlobalArray(shape={self.shape}, dtype={self.dtype}, placement={self.placement!r}, "
            f"sbp=({', '.join(short(s) for s in self.sbp)}), local shape={self.local.shape})"
        )
