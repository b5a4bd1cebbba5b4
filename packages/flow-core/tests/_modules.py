"""Small modules shared by the Module and container tests, written with primitives only."""

from __future__ import annotations

import flow
import flow.nn as nn


class Affine(nn.Module):
    """A linear layer written with primitives only, so these tests do not depend on nn.functional."""

    def __init__(self, i: int, o: int, bias: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(flow.randn(o, i))
        self.bias = nn.Parameter(flow.zeros(o)) if bias else None
        self.register_buffer("calls", flow.zeros(()))
        self.register_buffer("scratch", flow.ones(2), persistent=False)

    def forward(self, x):
        y = x @ self.weight.t()
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return f"{self.weight.shape[1]}, {self.weight.shape[0]}"


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = Affine(3, 4)
        self.b = Affine(4, 2, bias=False)
        self.blocks = nn.ModuleList([Affine(2, 2), Affine(2, 2)])

    def forward(self, x):
        x = self.b(self.a(x))
        for blk in self.blocks:
            x = blk(x)
        return x
