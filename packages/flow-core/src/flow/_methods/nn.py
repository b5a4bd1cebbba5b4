"""Tensor methods that PyTorch puts on tensors from the nn family (softmax, log_softmax ...)."""

from __future__ import annotations


class NNMethods:
    __slots__ = ()

    def softmax(self, dim=None, dtype=None):
        from flow.ops.nn_act import softmax

        return softmax(self, dim, dtype=dtype)

    def log_softmax(self, dim=None, dtype=None):
        from flow.ops.nn_act import log_softmax

        return log_softmax(self, dim, dtype=dtype)
