"""Linear maps, as ``torch.nn.functional``: ``linear`` and ``bilinear``."""

from __future__ import annotations

from flow.errors import OpError, OpTypeError
from flow.ops.linalg import linear2d, matmul

__all__ = ["linear", "bilinear"]


def _tensor(op, name, v):
    from flow._tensor import Tensor

    if not isinstance(v, Tensor):
        raise OpTypeError(op, f"'{name}' must be a Tensor, got {type(v).__name__}")


def linear(input, weight, bias=None):
    """``input @ weight.T + bias`` with ``weight`` of shape (out_features, in_features)."""
    _tensor("linear", "input", input)
    _tensor("linear", "weight", weight)
    if weight.ndim not in (1, 2):
        raise OpError(
            "linear", f"'weight' must be 1-d or 2-d (out_features, in_features), got shape {tuple(weight.shape)}"
        )
    k = weight.shape[-1]
    if input.ndim == 0 or input.shape[-1] != k:
        raise OpError("linear", f"'input' last dim must be in_features={k}, got shape {tuple(input.shape)}")
    # dtypes are the op's meta rule's to check (after interceptors such as autocast cast them)
    if bias is not None:
        _tensor("linear", "bias", bias)
        want = (weight.shape[0],) if weight.ndim == 2 else ()
        if tuple(bias.shape) != want and bias.numel() != (want[0] if want else 1):
            raise OpError("linear", f"'bias' must have shape {want}, got {tuple(bias.shape)}")
    if weight.ndim == 2 and (bias is None or tuple(bias.shape) == want):
        # leading dims folded into one: a single (N, in) x (in, out) product instead of a batched one,
        # and the weight's gradient is one product too (no per-batch products summed afterwards)
        if input.ndim == 2:
            return linear2d(input, weight, bias)
        lead = tuple(input.shape[:-1])
        out = linear2d(input.reshape(-1, k), weight, bias)
        return out.reshape(lead + (weight.shape[0],))
    out = matmul(input, weight.t() if weight.ndim == 2 else weight)
    if bias is not None:
        out = out + bias
    return out


def bilinear(input1, input2, weight, bias=None):
    """``y_k = x1 @ weight[k] @ x2 + bias[k]`` with ``weight`` of shape (out, in1, in2)."""
    for name, v in (("input1", input1), ("input2", input2), ("weight", weight)):
        _tensor("bilinear", name, v)
    if weight.ndim != 3:
        raise OpError("bilinear", f"'weight' must be 3-d (out, in1, in2), got shape {tuple(weight.shape)}")
    o, i1, i2 = weight.shape
    if input1.ndim == 0 or input1.shape[-1] != i1 or input2.ndim == 0 or input2.shape[-1] != i2:
        raise OpError(
            "bilinear",
            f"input features must be ({i1}, {i2}) for weight {tuple(weight.shape)}, got "
            f"{tuple(input1.shape)} and {tuple(input2.shape)}",
        )
    if tuple(input1.shape[:-1]) != tuple(input2.shape[:-1]):
        raise OpError("bilinear", f"input batch dims must match, got {tuple(input1.shape)} and {tuple(input2.shape)}")
    lead = tuple(input1.shape[:-1])
    # (..., in1) @ (in1, out * in2) -> (..., out, in2), then contract with x2
    w = weight.permute(1, 0, 2).reshape(i1, o * i2)
    t = matmul(input1, w).reshape(lead + (o, i2))
    out = (t * input2.unsqueeze(-2)).sum(-1)
    if bias is not None:
        out = out + bias
    return out
