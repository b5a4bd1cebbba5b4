"""Tensor methods that PyTorch puts on tensors from the nn family (softmax, log_softmax ...)."""

from __future__ import annotations


class NNMethods:
    __slots__ = ()
