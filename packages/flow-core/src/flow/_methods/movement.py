"""Tensor methods for views and data movement."""

from __future__ import annotations

import flow.ops.movement as _V
import flow.ops.shape_ops as _S
import flow.ops.views as _W
from flow.ops.inplace import apply_inplace


class MovementMethods:
    __slots__ = ()

    def reshape(self, *shape):
        return _V.reshape(self, *shape)

    def view(self, *shape):
        if len(shape) == 1 and not isinstance(shape[0], (int, tuple, list)):
            return self.to(shape[0])  # view(dtype)
        return _V.view(self, *shape)

    def view_as(self, other):
        return _V.view(self, *other.shape)

    def reshape_as(self, other):
        return _V.reshape(self, *other.shape)

    def permute(self, *dims):
        return _V.permute(self, *dims)

    def transpose(self, dim0: int, dim1: int):
        return _V.transpose(self, dim0, dim1)

    swapaxes = transpose

    def t(self):
        return _V.t(self)

    def expand(self, *sizes):
        return _V.expand(self, *sizes)

    def expand_as(self, other):
        return _V.expand_as(self, other)

    def unsqueeze(self, dim: int):
        return _V.unsqueeze(self, dim)

    def squeeze(self, dim=None):
        return _V.squeeze(self, dim)

    def flatten(self, start_dim: int = 0, end_dim: int = -1):
        return _V.flatten(self, start_dim, end_dim)

    # -- slicing views (flow.ops.views) -------------------------------------------------
    def select(self, dim: int, index: int):
        return _W.select(self, dim, index)

    def narrow(self, dim: int, start: int, length: int):
        return _W.narrow(self, dim, start, length)

    def split(self, split_size, dim: int = 0):
        return _W.split(self, split_size, dim)

    def chunk(self, chunks: int, dim: int = 0):
        return _W.chunk(self, chunks, dim)

    def tensor_split(self, indices_or_sections, dim: int = 0):
        return _W.tensor_split(self, indices_or_sections, dim)

    def unbind(self, dim: int = 0):
        return _W.unbind(self, dim)

    def movedim(self, source, destination):
        return _W.movedim(self, source, destination)

    moveaxis = movedim

    def swapdims(self, dim0: int, dim1: int):
        return _V.transpose(self, dim0, dim1)

    def unflatten(self, dim: int, sizes):
        return _W.unflatten(self, dim, sizes)

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1):
        return _W.diagonal(self, offset, dim1, dim2)

    # -- joining and rearranging (flow.ops.shape_ops) -----------------------------------
    def repeat(self, *sizes):
        return _S.repeat(self, *sizes)

    def tile(self, *dims):
        return _S.tile(self, dims[0] if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims)

    def repeat_interleave(self, repeats=None, dim=None, *, output_size=None):
        return _S.repeat_interleave(self, repeats, dim, output_size=output_size)

    def flip(self, *dims):
        return _S.flip(self, dims[0] if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims)

    def fliplr(self):
        return _S.fliplr(self)

    def flipud(self):
        return _S.flipud(self)

    def rot90(self, k: int = 1, dims=(0, 1)):
        return _S.rot90(self, k, dims)

    def roll(self, shifts, dims=None):
        return _S.roll(self, shifts, dims)

    def tril(self, diagonal: int = 0):
        return _S.tril(self, diagonal)

    def triu(self, diagonal: int = 0):
        return _S.triu(self, diagonal)

    def tril_(self, diagonal: int = 0):
        return apply_inplace(self, _S.tril(self, diagonal), "tril_")

    def triu_(self, diagonal: int = 0):
        return apply_inplace(self, _S.triu(self, diagonal), "triu_")

    def broadcast_to(self, size):
        return _S.broadcast_to(self, size)

    def diag(self, diagonal: int = 0):
        return _W.diag(self, diagonal)

    def diag_embed(self, offset: int = 0, dim1: int = -2, dim2: int = -1):
        return _W.diag_embed(self, offset, dim1, dim2)
