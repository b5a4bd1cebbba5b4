"""Attention and transformer layers: MultiheadAttention, Transformer{Encoder,Decoder}[Layer], Transformer.

Parameter names and layouts follow PyTorch (the packed ``in_proj_weight`` of shape (3E, E) holding
q, k, v projections in that order), so state dicts are interchangeable.
"""

from __future__ import annotations

import copy
import math

import flow.nn.functional as F
from flow import _creation as C
from flow import _dtype as D
from flow._tensor import Tensor
from flow.nn import init
from flow.nn.modules.container import ModuleList
from flow.nn.modules.dropout import Dropout
from flow.nn.modules.linear import Linear
from flow.nn.modules.module import Module
from flow.nn.modules.normalization import LayerNorm
from flow.nn.parameter import Parameter

__all__ = [
    "MultiheadAttention",
    "TransformerEncoderLayer",
    "TransformerEncoder",
    "TransformerDecoderLayer",
    "TransformerDecoder",
    "Transformer",
]


class NonDynamicallyQuantizableLinear(Linear):
    """The output projection of MultiheadAttention (named as in torch so reprs match)."""


def _float_mask(mask: Tensor | None, dtype, name: str) -> Tensor | None:
    """A mask as an additive float tensor: bool True (masked out) becomes -inf, floats are kept."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        raise TypeError(f"MultiheadAttention: {name} must be a Tensor, got {type(mask).__name__}")
    if mask.dtype is D.bool:
        from flow import where

        return where(
            mask,
            C.full((), float("-inf"), dtype=dtype, device=mask.device),
            C.zeros((), dtype=dtype, device=mask.device),
        )
    if not mask.dtype.is_floating_point:
        raise TypeError(f"MultiheadAttention: only bool and floating types of {name} are supported, got {mask.dtype}")
    return mask.to(dtype)


class MultiheadAttention(Module):
    """Multi-head attention as in "Attention Is All You Need" (torch's semantics and parameter layout).

    Inputs are (L, N, E), or (N, L, E) with ``batch_first``, or unbatched (L, E). ``attn_mask``
    (L, S) or (N*num_heads, L, S) and ``key_padding_mask`` (N, S) are bool (True = not allowed) or
    additive float masks. Returns ``(output, weights)``; weights are (N, L, S) averaged over heads
    (``average_attn_weights=False``: (N, num_heads, L, S)) or None with ``need_weights=False``.

    >>> mha = flow.nn.MultiheadAttention(16, 4, batch_first=True)
    >>> x = flow.randn(2, 5, 16)
    >>> out, w = mha(x, x, x)
    >>> out.shape, w.shape
    (flow.Size([2, 5, 16]), flow.Size([2, 5, 5]))
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                f"num_heads={num_heads} instead"
            )
        if embed_dim % num_heads != 0:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        self.add_zero_attn = add_zero_attn
        kw = {"device": device, "dtype": dtype}
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(C.empty(3 * embed_dim, embed_dim, **kw))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = Parameter(C.empty(embed_dim, embed_dim, **kw))
            self.k_proj_weight = Parameter(C.empty(embed_dim, self.kdim, **kw))
            self.v_proj_weight = Parameter(C.empty(embed_dim, self.vdim, **kw))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(C.empty(3 * embed_dim, **kw))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, **kw)
        if add_bias_kv:
            self.bias_k = Parameter(C.empty(1, 1, embed_dim, **kw))
            self.bias_v = Parameter(C.empty(1, 1, embed_dim, **kw))
        else:
            self.bias_k = self.bias_v = None
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_normal_(self.bias_v)

    def _in_projection(self, query: Tensor, key: Tensor, value: Tensor) -> tuple:
        b = self.in_proj_bias
        b_q, b_k, b_v = b.chunk(3) if b is not None else (None, None, None)
        if not self._qkv_same_embed_dim:
            return (
                F.linear(query, self.q_proj_weight, b_q),
                F.linear(key, self.k_proj_weight, b_k),
                F.linear(value, self.v_proj_weight, b_v),
            )
        if query is key and key is value:  # self-attention: one matmul for q, k and v
            return F.linear(query, self.in_proj_weight, b).chunk(3, -1)
        w_q, w_k, w_v = self.in_proj_weight.chunk(3)
        return F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple:
        batched = query.ndim == 3
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ValueError(
                f"MultiheadAttention: query, key and value must all be 2-D (unbatched) or 3-D, got "
                f"{query.ndim}-D, {key.ndim}-D and {value.ndim}-D"
            )
        if query.shape[-1] != self.embed_dim:
            raise ValueError(
                f"MultiheadAttention: was expecting embedding dimension of {self.embed_dim}, but got {query.shape[-1]}"
            )
        if not batched:
            query, key, value = (t if t is None else t.unsqueeze(1) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            # (N, L, E) -> (L, N, E), keeping the self-attention identity q is k is v
            if key is value:
                if query is key:
                    query = key = value = query.transpose(0, 1)
                else:
                    query, key = query.transpose(0, 1), key.transpose(0, 1)
                    value = key
            else:
                query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        out, weights = self._attention(
            query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal
        )
        if not batched:
            return out.squeeze(1), (weights.squeeze(0) if weights is not None else None)
        if self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

    def _attention(self, query, key, value, key_padding_mask, need_weights, attn_mask, average, is_causal):
        L, N, E = tuple(query.shape)
        H, hd = self.num_heads, self.head_dim
        dtype = query.dtype
        q, k, v = self._in_projection(query, key, value)
        attn_mask = _float_mask(attn_mask, dtype, "attn_mask")
        key_padding_mask = _float_mask(key_padding_mask, dtype, "key_padding_mask")
        if attn_mask is None and is_causal:
            attn_mask = Transformer.generate_square_subsequent_mask(L, device=query.device, dtype=dtype)
        if self.bias_k is not None:
            from flow import cat

            k = cat([k, self.bias_k.expand(1, N, E)], 0)
            v = cat([v, self.bias_v.expand(1, N, E)], 0)
            attn_mask = F.pad(attn_mask, (0, 1)) if attn_mask is not None else None
            key_padding_mask = F.pad(key_padding_mask, (0, 1)) if key_padding_mask is not None else None
        if self.add_zero_attn:
            from flow import cat

            k = cat([k, C.zeros(1, N, E, dtype=dtype, device=k.device)], 0)
            v = cat([v, C.zeros(1, N, E, dtype=dtype, device=v.device)], 0)
            attn_mask = F.pad(attn_mask, (0, 1)) if attn_mask is not None else None
            key_padding_mask = F.pad(key_padding_mask, (0, 1)) if key_padding_mask is not None else None
        S = k.shape[0]
        # (L, N, E) -> (N, H, L, hd)
        q = q.reshape(L, N, H, hd).permute(1, 2, 0, 3)
        k = k.reshape(S, N, H, hd).permute(1, 2, 0, 3)
        v = v.reshape(S, N, H, hd).permute(1, 2, 0, 3)
        mask = None
        if attn_mask is not None:
            if attn_mask.ndim == 2:
                if tuple(attn_mask.shape) != (L, S):
                    raise RuntimeError(
                        f"The shape of the 2D attn_mask is {tuple(attn_mask.shape)}, but should be {(L, S)}."
                    )
                mask = attn_mask
            elif attn_mask.ndim == 3:
                if tuple(attn_mask.shape) != (N * H, L, S):
                    raise RuntimeError(
                        f"The shape of the 3D attn_mask is {tuple(attn_mask.shape)}, but should be {(N * H, L, S)}."
                    )
                mask = attn_mask.reshape(N, H, L, S)
            else:
                raise RuntimeError(f"attn_mask's dimension {attn_mask.ndim} is not supported")
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (N, S):
                raise RuntimeError(
                    f"expecting key_padding_mask shape of {(N, S)}, but got {tuple(key_padding_mask.shape)}"
                )
            kpm = key_padding_mask.reshape(N, 1, 1, S)
            mask = kpm if mask is None else mask + kpm
        p = self.dropout if self.training else 0.0
        sdpa = getattr(F, "scaled_dot_product_attention", None)
        if not need_weights and sdpa is not None:
            o, weights = sdpa(q, k, v, attn_mask=mask, dropout_p=p), None
        else:
            scores = (q * (1.0 / math.sqrt(hd))) @ k.transpose(-2, -1)
            if mask is not None:
                scores = scores + mask
            weights = F.softmax(scores, -1)
            if p > 0:
                weights = F.dropout(weights, p, True)
            o = weights @ v
            if average:
                weights = weights.mean(1)
        out = self.out_proj(o.permute(2, 0, 1, 3).reshape(L, N, E))
        return out, (weights if need_weights else None)


def _activation(activation):
    if isinstance(activation, str):
        if activation == "relu":
            return F.relu
        if activation == "gelu":
            return F.gelu
        raise RuntimeError(f"activation should be relu/gelu, not {activation}")
    return activation


class TransformerEncoderLayer(Module):
    """Self-attention then a feed-forward block, each with residual, dropout and LayerNorm (post-norm, or
    pre-norm with ``norm_first=True``).

    >>> layer = flow.nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, batch_first=True)
    >>> layer(flow.randn(2, 5, 16)).shape
    flow.Size([2, 5, 16])
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _activation(activation)

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(
            x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False, is_causal=is_causal
        )[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerDecoderLayer(Module):
    """Self-attention, cross-attention over ``memory``, then feed-forward; each with residual and LayerNorm."""

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=batch_first, bias=bias, **kw)
        self.multihead_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, batch_first=batch_first, bias=bias, **kw
        )
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation(activation)

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(
            x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False, is_causal=is_causal
        )[0]
        return self.dropout1(x)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(
            x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False, is_causal=is_causal
        )[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))


def _clones(module: Module, n: int) -> ModuleList:
    return ModuleList([copy.deepcopy(module) for _ in range(n)])


class TransformerEncoder(Module):
    """A stack of ``num_layers`` copies of ``encoder_layer`` (each with its own parameters), then ``norm``."""

    def __init__(
        self,
        encoder_layer: TransformerEncoderLayer,
        num_layers: int,
        norm: Module | None = None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ) -> None:
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(
        self,
        src: Tensor,
        mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool | None = None,
    ) -> Tensor:
        out = src
        for layer in self.layers:
            out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return self.norm(out) if self.norm is not None else out


class TransformerDecoder(Module):
    """A stack of ``num_layers`` copies of ``decoder_layer``, then ``norm``."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: Module | None = None) -> None:
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        out = tgt
        for layer in self.layers:
            out = layer(
                out,
                memory,
                tgt_mask=tgt_mask,
                memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=bool(tgt_is_causal),
                memory_is_causal=memory_is_causal,
            )
        return self.norm(out) if self.norm is not None else out


class Transformer(Module):
    """The encoder-decoder transformer of "Attention Is All You Need" (torch's constructor and forward)."""

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        custom_encoder=None,
        custom_decoder=None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        common = dict(
            dim_feedforward=dim_feedforward,
            dropout=dropout,
            activation=activation,
            layer_norm_eps=layer_norm_eps,
            batch_first=batch_first,
            norm_first=norm_first,
            bias=bias,
            **kw,
        )
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(
                TransformerEncoderLayer(d_model, nhead, **common),
                num_encoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw),
            )
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(
                TransformerDecoderLayer(d_model, nhead, **common),
                num_decoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw),
            )
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask=None,
        tgt_mask=None,
        memory_mask=None,
        src_key_padding_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        src_is_causal: bool | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
        """A (sz, sz) float mask with -inf above the diagonal and 0 elsewhere (causal attention)."""
        import numpy as np

        dt = D.as_dtype(dtype) if dtype is not None else D.get_default_dtype()
        m = np.triu(np.full((sz, sz), -np.inf), 1).astype(dt.np)
        return C.tensor(m, dtype=dt, device=device)
