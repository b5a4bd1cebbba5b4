"""Activation layers: thin modules over ``flow.nn.functional``."""

from __future__ import annotations

import flow.nn.functional as F
from flow import _creation as C
from flow.nn.modules.module import Module
from flow.nn.parameter import Parameter

__all__ = [
    "ReLU",
    "ReLU6",
    "LeakyReLU",
    "PReLU",
    "ELU",
    "SELU",
    "CELU",
    "GELU",
    "SiLU",
    "Mish",
    "Sigmoid",
    "Tanh",
    "Hardtanh",
    "Hardswish",
    "Hardsigmoid",
    "Softplus",
    "Softsign",
    "Tanhshrink",
    "Threshold",
    "GLU",
    "Softmax",
    "LogSoftmax",
    "Softmin",
]


class _Inplace(Module):
    """An activation with an ``inplace`` flag (the in-place variant is only asked for when set)."""

    _fn = None

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        fn = type(self)._fn
        return fn(input, inplace=True) if self.inplace else fn(input)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ReLU(_Inplace):
    """``max(0, x)``."""

    _fn = staticmethod(lambda x, **kw: F.relu(x, **kw))


class ReLU6(_Inplace):
    """``min(max(0, x), 6)``."""

    _fn = staticmethod(lambda x, **kw: F.relu6(x, **kw))


class SELU(_Inplace):
    _fn = staticmethod(lambda x, **kw: F.selu(x, **kw))


class SiLU(_Inplace):
    """``x * sigmoid(x)`` (also called swish)."""

    _fn = staticmethod(lambda x, **kw: F.silu(x, **kw))


class Mish(_Inplace):
    """``x * tanh(softplus(x))``."""

    _fn = staticmethod(lambda x, **kw: F.mish(x, **kw))


class Hardswish(_Inplace):
    _fn = staticmethod(lambda x, **kw: F.hardswish(x, **kw))


class Hardsigmoid(_Inplace):
    _fn = staticmethod(lambda x, **kw: F.hardsigmoid(x, **kw))


class LeakyReLU(Module):
    """``x`` for x >= 0, ``negative_slope * x`` otherwise."""

    def __init__(self, negative_slope: float = 1e-2, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, input):
        if self.inplace:
            return F.leaky_relu(input, self.negative_slope, inplace=True)
        return F.leaky_relu(input, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(Module):
    """``x`` for x > 0, ``alpha * (exp(x) - 1)`` otherwise."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input):
        return F.elu(input, self.alpha, inplace=True) if self.inplace else F.elu(input, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class CELU(ELU):
    def forward(self, input):
        return F.celu(input, self.alpha, inplace=True) if self.inplace else F.celu(input, self.alpha)


class PReLU(Module):
    """Leaky ReLU with a learned slope (one, or one per channel: ``num_parameters=C``)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None) -> None:
        super().__init__()
        self.num_parameters = num_parameters
        self.init = init
        self.weight = Parameter(C.full((num_parameters,), float(init), device=device, dtype=dtype))

    def reset_parameters(self) -> None:
        from flow.nn import init

        init.constant_(self.weight, self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class GELU(Module):
    """Gaussian error linear unit; ``approximate='tanh'`` uses the tanh approximation."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Sigmoid(Module):
    def forward(self, input):
        return F.sigmoid(input)


class Tanh(Module):
    def forward(self, input):
        return F.tanh(input)


class Softsign(Module):
    """``x / (1 + |x|)``."""

    def forward(self, input):
        return F.softsign(input)


class Tanhshrink(Module):
    """``x - tanh(x)``."""

    def forward(self, input):
        return F.tanhshrink(input)


class Hardtanh(Module):
    """Clamp into ``[min_val, max_val]``."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        if max_val <= min_val:
            raise ValueError(f"Hardtanh: max_val ({max_val}) must be greater than min_val ({min_val})")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input):
        if self.inplace:
            return F.hardtanh(input, self.min_val, self.max_val, inplace=True)
        return F.hardtanh(input, self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")


class Softplus(Module):
    """``log(1 + exp(beta * x)) / beta``, linear above ``threshold``."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Threshold(Module):
    """``x`` where x > threshold, else ``value``."""

    def __init__(self, threshold: float, value: float, inplace: bool = False) -> None:
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input):
        if self.inplace:
            return F.threshold(input, self.threshold, self.value, inplace=True)
        return F.threshold(input, self.threshold, self.value)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}" + (", inplace=True" if self.inplace else "")


class GLU(Module):
    """Gated linear unit: split ``dim`` in halves a, b and return ``a * sigmoid(b)``."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class _SoftmaxBase(Module):
    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def _dim(self, input) -> int:
        # torch's legacy rule when dim is None: 0 for 0-, 1- and 3-d inputs, else 1
        if self.dim is not None:
            return self.dim
        return 0 if input.ndim in (0, 1, 3) else 1

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmax(_SoftmaxBase):
    """``exp(x) / sum(exp(x))`` along ``dim``."""

    def forward(self, input):
        return F.softmax(input, self._dim(input))


class LogSoftmax(_SoftmaxBase):
    def forward(self, input):
        return F.log_softmax(input, self._dim(input))


class Softmin(_SoftmaxBase):
    def forward(self, input):
        return F.softmin(input, self._dim(input))
