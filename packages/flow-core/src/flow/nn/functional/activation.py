"""Activation functions, as ``torch.nn.functional``.

softmax / log_softmax / silu are fused ops (:mod:`flow.ops.nn_act`); gelu,
relu, sigmoid, tanh and softplus come from :mod:`flow.ops.unary`; the rest
are composites of flow ops (their gradients come from autograd). Functions
taking ``inplace=True`` write the result into ``input``.
"""

from __future__ import annotations

from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops.clamp_where import clamp, where
from flow.ops.composite import composite
from flow.ops.inplace import inplace_call
from flow.ops.nn_act import log_softmax, silu, softmax, softmin
from flow.ops.unary import expm1, sigmoid, softplus, tanh
from flow.ops.unary import relu as _relu

# gelu, sigmoid, tanh and softplus (flow.ops.unary) are exported by the package; relu and silu are redefined
# here with PyTorch's ``inplace`` argument
__all__ = [
    "softmax",
    "log_softmax",
    "softmin",
    "silu",
    "relu",
    "relu_",
    "leaky_relu",
    "leaky_relu_",
    "elu",
    "elu_",
    "selu",
    "selu_",
    "celu",
    "celu_",
    "hardtanh",
    "hardtanh_",
    "relu6",
    "hardswish",
    "hardsigmoid",
    "mish",
    "softsign",
    "tanhshrink",
    "glu",
    "logsigmoid",
    "prelu",
    "rrelu",
    "rrelu_",
    "threshold",
    "threshold_",
    "hardshrink",
    "softshrink",
    "gumbel_softmax",
]

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _check(op, x):
    from flow._tensor import Tensor

    if not isinstance(x, Tensor):
        raise OpTypeError(op, f"'input' must be a Tensor, got {type(x).__name__}")


def _float(op, x):
    _check(op, x)
    if not x.dtype.is_floating_point:
        raise OpTypeError(op, f"'input' must be a floating-point tensor, got {x.dtype}")


def _finish(input, fn, name, inplace):
    """``fn(input)``; with ``inplace=True`` written into ``input`` (``fn`` then sees a snapshot of
    ``input`` under autograd, so its saved values survive the write: see ``inplace_call``)."""
    if inplace:
        return inplace_call(input, name + "_", fn)
    return fn(input)


def relu(input, inplace: bool = False):
    """``max(x, 0)``."""
    _check("relu", input)
    return _finish(input, _relu, "relu", inplace)


def relu_(input):
    return relu(input, inplace=True)


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):
    """``x`` for ``x > 0``, else ``negative_slope * x``."""
    _float("leaky_relu", input)
    return _finish(input, lambda x: where(x > 0, x, x * float(negative_slope)), "leaky_relu", inplace)


def leaky_relu_(input, negative_slope: float = 0.01):
    return leaky_relu(input, negative_slope, inplace=True)


def _elu(input, alpha: float, scale: float = 1.0, input_scale: float = 1.0):
    neg = expm1(clamp(input, max=0.0) * input_scale) * alpha  # clamp: no overflow (and no NaN gradient)
    out = where(input > 0, input, neg)
    return out * scale if scale != 1.0 else out


def elu(input, alpha: float = 1.0, inplace: bool = False):
    """``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)``."""
    _float("elu", input)
    return _finish(input, lambda x: _elu(x, float(alpha)), "elu", inplace)


def elu_(input, alpha: float = 1.0):
    return elu(input, alpha, inplace=True)


def selu(input, inplace: bool = False):
    """``scale * elu(x, alpha)`` with the self-normalising constants."""
    _float("selu", input)
    return _finish(input, lambda x: _elu(x, _SELU_ALPHA, _SELU_SCALE), "selu", inplace)


def selu_(input):
    return selu(input, inplace=True)


def celu(input, alpha: float = 1.0, inplace: bool = False):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    _float("celu", input)
    if alpha == 0:
        raise OpError("celu", "'alpha' must not be 0")
    return _finish(input, lambda x: _elu(x, float(alpha), 1.0, 1.0 / float(alpha)), "celu", inplace)


def celu_(input, alpha: float = 1.0):
    return celu(input, alpha, inplace=True)


def _strict_clamp(x, lo: float, hi: float):
    """clamp with PyTorch's hardtanh gradient: zero at and beyond the bounds."""
    inside = (x > lo) & (x < hi)
    return where(inside, x, clamp(x, lo, hi).detach())


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    """``clamp(x, min_val, max_val)``."""
    _check("hardtanh", input)
    if min_val > max_val:
        raise OpError("hardtanh", f"'min_val' ({min_val}) must not be greater than 'max_val' ({max_val})")
    return _finish(input, lambda x: _strict_clamp(x, float(min_val), float(max_val)), "hardtanh", inplace)


def hardtanh_(input, min_val: float = -1.0, max_val: float = 1.0):
    return hardtanh(input, min_val, max_val, inplace=True)


def relu6(input, inplace: bool = False):
    """``min(max(x, 0), 6)``."""
    _check("relu6", input)
    return _finish(input, lambda x: _strict_clamp(x, 0.0, 6.0), "relu6", inplace)


def hardsigmoid(input, inplace: bool = False):
    """``relu6(x + 3) / 6``."""
    _float("hardsigmoid", input)
    return _finish(input, lambda x: _strict_clamp(x * (1.0 / 6.0) + 0.5, 0.0, 1.0), "hardsigmoid", inplace)


def hardswish(input, inplace: bool = False):
    """``x * relu6(x + 3) / 6``."""
    _float("hardswish", input)
    return _finish(input, _hardswish, "hardswish", inplace)


def _hardswish(x):
    mid = (x > -3.0) & (x < 3.0)  # PyTorch's gradient: 0 at -3, 1 at 3
    return where(mid, x * (x + 3.0) * (1.0 / 6.0), where(x >= 3.0, x, x * 0.0))


def mish(input, inplace: bool = False):
    """``x * tanh(softplus(x))``."""
    _float("mish", input)
    return _finish(input, lambda x: x * tanh(softplus(x)), "mish", inplace)


def softsign(input):
    """``x / (1 + |x|)``."""
    _float("softsign", input)
    return input / (input.abs() + 1.0)


def tanhshrink(input):
    """``x - tanh(x)``."""
    _float("tanhshrink", input)
    return input - tanh(input)


def logsigmoid(input):
    """``log(sigmoid(x))``, computed stably as ``-softplus(-x)``."""
    _float("logsigmoid", input)
    return -softplus(-input)


def threshold(input, threshold: float, value: float, inplace: bool = False):
    """``x`` where ``x > threshold``, else ``value``."""
    _check("threshold", input)
    return _finish(input, lambda x: where(x > threshold, x, value), "threshold", inplace)


def threshold_(input, threshold: float, value: float):
    return globals()["threshold"](input, threshold, value, inplace=True)


def hardshrink(input, lambd: float = 0.5):
    """``x`` where ``|x| > lambd``, else 0."""
    _float("hardshrink", input)
    return where(input.abs() > lambd, input, 0.0)


def softshrink(input, lambd: float = 0.5):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0."""
    _float("softshrink", input)
    if lambd < 0:
        raise OpError("softshrink", f"'lambd' must be non-negative, got {lambd}")
    return where(input > lambd, input - lambd, where(input < -lambd, input + lambd, 0.0))


def glu(input, dim: int = -1):
    """Gated linear unit: ``a * sigmoid(b)`` with ``a, b`` the two halves of ``input`` along ``dim``."""
    _float("glu", input)
    if input.ndim == 0:
        raise OpError("glu", "'input' must have at least 1 dim, got a 0-d tensor")
    d = M.wrap_dim("glu", dim, input.ndim)
    n = input.shape[d]
    if n % 2:
        raise OpError("glu", f"halving dimension must be even, but dimension {d} is size {n}")
    a, b = _halves(input, d)
    return a * sigmoid(b)


def _halves(x, d):
    """The two halves of ``x`` along ``d``: reshape to (..., 2, n, ...), move the 2-axis last and contract
    it with unit vectors (differentiable at any order without slicing ops)."""
    from flow.ops.linalg import matmul

    n = x.shape[d] // 2
    shape = tuple(x.shape)
    xs = x.reshape(shape[:d] + (2, n) + shape[d + 1 :])
    xl = xs.permute(*([i for i in range(xs.ndim) if i != d] + [d]))
    return matmul(xl, _unit(x, 0)), matmul(xl, _unit(x, 1))


def _unit(x, i):
    import numpy as np

    import flow

    v = np.zeros(2, x.dtype.np)
    v[i] = 1
    return flow.tensor(v, dtype=x.dtype, device=x.device)


@composite("prelu")
def prelu(input, weight):
    """``x`` for ``x > 0``, else ``weight * x`` with one weight or one per channel (dim 1)."""
    _float("prelu", input)
    _check("prelu", weight)
    n = weight.numel()
    c = input.shape[1] if input.ndim >= 2 else 1
    if n != 1 and n != c:
        raise OpError("prelu", f"'weight' must have 1 or {c} (channels) elements, got {n}")
    if n == 1:
        w = weight.reshape(())
    else:
        w = weight.reshape((c,) + (1,) * (input.ndim - 2))
    return where(input > 0, input, input * w)


def rrelu(input, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False, inplace: bool = False):
    """Randomised leaky ReLU: slopes drawn from U(lower, upper) in training, their mean otherwise."""
    _float("rrelu", input)
    if not training:
        return leaky_relu(input, (lower + upper) / 2, inplace)
    import flow
    from flow._random import host_rng

    a = host_rng(None).uniform(lower, upper, size=tuple(input.shape)).astype(input.dtype.np)
    slope = flow.tensor(a, dtype=input.dtype, device=input.device)
    return _finish(input, lambda x: where(x >= 0, x, x * slope), "rrelu", inplace)


def rrelu_(input, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False):
    return rrelu(input, lower, upper, training, inplace=True)


def gumbel_softmax(logits, tau: float = 1.0, hard: bool = False, eps: float = 1e-10, dim: int = -1):
    """Sample from the Gumbel-softmax distribution; ``hard=True`` returns one-hot samples with the soft
    samples' gradient (straight-through)."""
    import numpy as np

    import flow
    from flow._random import host_rng

    _float("gumbel_softmax", logits)
    g = -np.log(host_rng(None).exponential(1.0, size=tuple(logits.shape)))
    gumbels = flow.tensor(g.astype(logits.dtype.np), dtype=logits.dtype, device=logits.device)
    y = softmax((logits + gumbels) / float(tau), dim)
    if not hard:
        return y
    d = M.wrap_dim("gumbel_softmax", dim, max(logits.ndim, 1))
    ys = np.asarray(y.detach().numpy_host())
    idx = np.expand_dims(ys.argmax(axis=d), d) if ys.ndim else None
    onehot = np.zeros_like(ys)
    if ys.ndim:
        np.put_along_axis(onehot, idx, 1.0, axis=d)
    else:
        onehot[...] = 1.0
    y_hard = flow.tensor(onehot, dtype=y.dtype, device=y.device)
    return y_hard - y.detach() + y
