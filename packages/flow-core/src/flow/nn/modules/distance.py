"""Distance layers and the remaining element-wise/normalising layers: CosineSimilarity, PairwiseDistance,
LogSigmoid, Softmax2d, LocalResponseNorm."""

from __future__ import annotations

import flow.nn.functional as F
from flow.nn.modules.module import Module

__all__ = ["CosineSimilarity", "PairwiseDistance", "LogSigmoid", "Softmax2d", "LocalResponseNorm"]


class CosineSimilarity(Module):
    """Cosine similarity of two inputs along ``dim`` (norms clamped to ``eps``)."""

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim = dim
        self.eps = eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """p-norm distance ``||x1 - x2 + eps||_p`` over the last dim."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.norm = p
        self.eps = eps
        self.keepdim = keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class LogSigmoid(Module):
    """``log(1 / (1 + exp(-x)))``, computed stably."""

    def forward(self, input):
        return F.logsigmoid(input)


class Softmax2d(Module):
    """Softmax over the channels of each spatial location of (N, C, H, W) or (C, H, W) inputs."""

    def forward(self, input):
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {input.ndim}D instead")
        return F.softmax(input, -3)


class LocalResponseNorm(Module):
    """Normalise each channel by the summed squares of its ``size`` neighbouring channels."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> None:
        super().__init__()
        self.size = size
        self.alpha = alpha
        self.beta = beta
        self.k = k

    def forward(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"
