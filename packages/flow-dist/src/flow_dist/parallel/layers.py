"""Layers for tensor parallelism: a fused q, k, v projection split by heads, and the gradient
all-reduce of a column-parallel input.

A fused ``c_attn`` (q, k, v concatenated on the output features, ``(3 C, C)``) split ``S(0)`` in
contiguous pieces gives rank 0 all of q and half of k: the pieces do not line up with the heads,
and every op after it needs communication. :class:`QKVParallelLinear` keeps the same values as a
``(3, C, C)`` weight split on its second dim (and a ``(3, C)`` bias), so each rank holds the same
heads of q, k and v; its state dict still holds ``(3 C, C)`` / ``(3 C,)``, so checkpoints stay
interchangeable with the unsplit model. :class:`GPTAttentionParallel` is the style that puts one
into the zoo GPT's attention and runs it head parallel.
"""

from __future__ import annotations

import types

from flow import array_kinds, nn
from flow.autograd import Function
from flow_dist import boxing
from flow_dist.parallel.tensor_parallel import ParallelStyle, TensorParallelError, _divisible
from flow_dist.sbp import PartialSum, broadcast, split

__all__ = ["QKVParallelLinear", "GPTAttentionParallel", "replicate_grad"]


class _ReplicateGrad(Function):
    """Identity forward; the gradient converted to broadcast on ``axis`` (Megatron's ``f``: the
    all-reduce of a column-parallel layer's input gradient, so the residual stream's gradients stay
    whole instead of flowing on as partial sums through every layer norm)."""

    @staticmethod
    def forward(ctx, x, axis):
        ctx.axis = axis.value if hasattr(axis, "value") else axis
        return array_kinds.wrap(x._data.with_local(x._data.local), x.device, dtype=x.dtype)

    @staticmethod
    def backward(ctx, g):
        d = g._data
        if not getattr(d, "is_global", False) or d.sbp[ctx.axis].__class__ is not PartialSum:
            return g, None
        nd = tuple(broadcast if k == ctx.axis else s for k, s in enumerate(d.sbp))
        return array_kinds.wrap(boxing.box(d, nd), g.device, dtype=g.dtype), None


def replicate_grad(x, axis: int):
    """``x`` unchanged, its gradient all-reduced on placement ``axis`` where it is a partial sum."""
    from flow_dist.convert import Arg

    if not getattr(x._data, "is_global", False) or not x.requires_grad:
        return x
    return _ReplicateGrad.apply(x, Arg(axis))


class QKVParallelLinear(nn.Module):
    """``chunks`` linear maps fused in one weight, stored ``(chunks, out, in)`` (split on dim 1 for
    tensor parallelism, so each rank holds the same rows of every chunk); ``forward(x)`` returns the
    ``chunks`` outputs. The state dict holds the fused ``(chunks * out, in)`` weight of the
    ``nn.Linear`` it was made from (:meth:`from_linear`)."""

    def __init__(self, in_features: int, out_features: int, chunks: int = 3, bias: bool = True) -> None:
        super().__init__()
        if out_features % chunks:
            raise TensorParallelError(f"QKVParallelLinear: out_features {out_features} is not a multiple of {chunks}")
        self.in_features, self.out_features, self.chunks = in_features, out_features, chunks
        import flow

        self.weight = nn.Parameter(flow.empty(chunks, out_features // chunks, in_features))
        self.bias = nn.Parameter(flow.zeros(chunks, out_features // chunks)) if bias else None

    @classmethod
    def from_linear(cls, linear: nn.Linear, chunks: int = 3) -> QKVParallelLinear:
        """The same map as ``linear`` (its values, reshaped)."""
        import flow

        m = cls(linear.in_features, linear.out_features, chunks, bias=linear.bias is not None)
        with flow.no_grad():
            m.weight.copy_(linear.weight.detach().reshape(m.weight.shape))
            if m.bias is not None:
                m.bias.copy_(linear.bias.detach().reshape(m.bias.shape))
        return m

    def forward(self, x):
        import flow.nn.functional as F

        ws = self.weight.unbind(0)
        bs = self.bias.unbind(0) if self.bias is not None else (None,) * self.chunks
        return tuple(F.linear(x, w, b) for w, b in zip(ws, bs))

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        w = self.weight if keep_vars else self.weight.detach()
        destination[prefix + "weight"] = w.reshape(self.out_features, self.in_features)
        if self.bias is not None:
            b = self.bias if keep_vars else self.bias.detach()
            destination[prefix + "bias"] = b.reshape(self.out_features)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        fused = dict(state_dict)
        for name, p in (("weight", self.weight), ("bias", self.bias)):
            key = prefix + name
            if p is not None and key in fused and tuple(fused[key].shape) != tuple(p.shape):
                fused[key] = fused[key].reshape(p.shape)
        super()._load_from_state_dict(fused, prefix, local_metadata, strict, missing, unexpected, errors)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, chunks={self.chunks}"


def _head_parallel_forward(self, x):
    """The zoo GPT's attention with q, k and v from :class:`QKVParallelLinear`: each is split on its
    features, i.e. by heads, and stays so through the attention; ``c_proj`` (row parallel) then
    takes the heads' outputs split as they are."""
    import flow.nn.functional as F

    B, T, C = x.shape
    q, k, v = (t.reshape(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in self.c_attn(x))
    y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
    return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(B, T, C)))


class GPTAttentionParallel(ParallelStyle):
    """Head parallel attention for the zoo GPT's ``CausalSelfAttention``: its fused ``c_attn`` becomes
    a :class:`QKVParallelLinear` split by heads (the same values; checkpoints unchanged) and the
    module runs on its heads; pair it with ``"rowwise"`` on ``attn.c_proj``."""

    name = "gpt_attention"
    input_layout = broadcast

    def check(self, path: str, module: nn.Module) -> None:
        if not (hasattr(module, "c_attn") and hasattr(module, "c_proj") and hasattr(module, "n_head")):
            raise TensorParallelError(
                f"tensor_parallel: style 'gpt_attention' fits the zoo GPT's attention (c_attn, c_proj, n_head), but "
                f"{path!r} is a {type(module).__name__}"
            )

    def layouts(self, path: str, module: nn.Module, n: int) -> dict:
        _divisible(path, "n_head", module.n_head, n, self.name)
        if not isinstance(module.c_attn, QKVParallelLinear):
            module.c_attn = QKVParallelLinear.from_linear(module.c_attn, 3)
            module.forward = types.MethodType(_head_parallel_forward, module)
        return {"c_attn.weight": split(1), "c_attn.bias": split(1)}
