"""Tensor methods for views and data movement."""

from __future__ import annotations

import flow.ops.movement as _V


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
