"""Tensor methods of global tensors (placement, SBP), provided by flow-dist through flow.provided.

A tensor is global when its data is an array whose ``is_global`` is true (flow-dist's global
array kind); everything else is local. The conversions are flow-dist's: without it they raise
FeatureNotInstalledError naming the package.
"""

from __future__ import annotations

import numpy as np

from flow import provided
from flow.errors import FlowError


class GlobalMethods:
    __slots__ = ()

    @property
    def is_global(self) -> bool:
        """Whether this tensor is global (a logical tensor over a placement of ranks)."""
        d = self._data
        return d.__class__ is not np.ndarray and getattr(d, "is_global", False) is True

    @property
    def is_local(self) -> bool:
        return not self.is_global

    @property
    def placement(self):
        """The placement of a global tensor (a local tensor has none: error)."""
        if not self.is_global:
            raise FlowError("placement: this is a local tensor; only global tensors (to_global) have a placement")
        return self._data.placement

    @property
    def sbp(self) -> tuple:
        """The SBP of a global tensor, one per placement axis (a local tensor has none: error)."""
        if not self.is_global:
            raise FlowError("sbp: this is a local tensor; only global tensors (to_global) have an sbp")
        return self._data.sbp

    def to_global(self, placement=None, sbp=None, **kwargs):
        """A global tensor: a local tensor becomes the local piece of one; a global one is converted
        (boxing) to ``placement`` and ``sbp``."""
        return provided.require("Tensor.to_global", "Tensor.to_global")(self, placement, sbp, **kwargs)

    def to_local(self, **kwargs):
        """The local piece of a global tensor on this rank."""
        return provided.require("Tensor.to_local", "Tensor.to_local")(self, **kwargs)
