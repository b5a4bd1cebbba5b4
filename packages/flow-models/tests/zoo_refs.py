"""Reference state-dict layouts (names and shapes) of torchvision ResNets and Hugging Face GPT-2 / BERT.

Written from the reference implementations' module trees, independently of flow_models, so that
tests can check the zoo's names against them and write checkpoints the converters must read.
"""

from __future__ import annotations

import numpy as np


def _bn(prefix: str, c: int) -> dict:
    return {
        f"{prefix}.weight": (c,),
        f"{prefix}.bias": (c,),
        f"{prefix}.running_mean": (c,),
        f"{prefix}.running_var": (c,),
        f"{prefix}.num_batches_tracked": (),
    }


def torchvision_resnet_shapes(
    block: str = "basic",
    layers=(2, 2, 2, 2),
    num_classes: int = 1000,
    width: int = 64,
    in_channels: int = 3,
    stem_kernel: int = 7,
) -> dict:
    """torchvision.models.ResNet(...).state_dict() names -> shapes."""
    exp = 1 if block == "basic" else 4
    s = {"conv1.weight": (width, in_channels, stem_kernel, stem_kernel), **_bn("bn1", width)}
    cin = width
    for li, n in enumerate(layers):
        planes = width * 2**li
        for b in range(n):
            p = f"layer{li + 1}.{b}"
            if block == "basic":
                s[f"{p}.conv1.weight"] = (planes, cin, 3, 3)
                s.update(_bn(f"{p}.bn1", planes))
                s[f"{p}.conv2.weight"] = (planes, planes, 3, 3)
                s.update(_bn(f"{p}.bn2", planes))
            else:
                s[f"{p}.conv1.weight"] = (planes, cin, 1, 1)
                s.update(_bn(f"{p}.bn1", planes))
                s[f"{p}.conv2.weight"] = (planes, planes, 3, 3)
                s.update(_bn(f"{p}.bn2", planes))
                s[f"{p}.conv3.weight"] = (planes * exp, planes, 1, 1)
                s.update(_bn(f"{p}.bn3", planes * exp))
            if b == 0 and (li > 0 or cin != planes * exp):
                s[f"{p}.downsample.0.weight"] = (planes * exp, cin, 1, 1)
                s.update(_bn(f"{p}.downsample.1", planes * exp))
            cin = planes * exp
    s["fc.weight"] = (num_classes, cin)
    s["fc.bias"] = (num_classes,)
    return s


def hf_gpt2_shapes(
    vocab: int = 50257,
    n_positions: int = 1024,
    n_layer: int = 12,
    d: int = 768,
    prefix: str = "",
    buffers: bool = True,
    lm_head: bool = False,
) -> dict:
    """transformers.GPT2Model (prefix "") / GPT2LMHeadModel (prefix "transformer.") names -> shapes
    (Conv1D weights are (in, out))."""
    s = {f"{prefix}wte.weight": (vocab, d), f"{prefix}wpe.weight": (n_positions, d)}
    for i in range(n_layer):
        p = f"{prefix}h.{i}"
        s.update(
            {
                f"{p}.ln_1.weight": (d,),
                f"{p}.ln_1.bias": (d,),
                f"{p}.attn.c_attn.weight": (d, 3 * d),
                f"{p}.attn.c_attn.bias": (3 * d,),
                f"{p}.attn.c_proj.weight": (d, d),
                f"{p}.attn.c_proj.bias": (d,),
                f"{p}.ln_2.weight": (d,),
                f"{p}.ln_2.bias": (d,),
                f"{p}.mlp.c_fc.weight": (d, 4 * d),
                f"{p}.mlp.c_fc.bias": (4 * d,),
                f"{p}.mlp.c_proj.weight": (4 * d, d),
                f"{p}.mlp.c_proj.bias": (d,),
            }
        )
        if buffers:
            s[f"{p}.attn.bias"] = (1, 1, n_positions, n_positions)
    s[f"{prefix}ln_f.weight"] = (d,)
    s[f"{prefix}ln_f.bias"] = (d,)
    if lm_head:
        s["lm_head.weight"] = (vocab, d)
    return s


def hf_bert_shapes(
    vocab: int = 30522,
    hidden: int = 768,
    layers: int = 12,
    intermediate: int = 3072,
    max_positions: int = 512,
    type_vocab: int = 2,
    prefix: str = "bert.",
    pooler: bool = True,
    mlm: bool = False,
    nsp: bool = False,
    num_labels: int = 0,
    old_layer_norm: bool = False,
    position_ids: bool = False,
) -> dict:
    """transformers BertModel (prefix "") / BertForPreTraining etc. (prefix "bert.") names -> shapes."""
    w, b = ("gamma", "beta") if old_layer_norm else ("weight", "bias")
    h = hidden

    def ln(p):
        return {f"{p}.LayerNorm.{w}": (h,), f"{p}.LayerNorm.{b}": (h,)}

    def lin(p, o, i):
        return {f"{p}.weight": (o, i), f"{p}.bias": (o,)}

    e = f"{prefix}embeddings"
    s = {
        f"{e}.word_embeddings.weight": (vocab, h),
        f"{e}.position_embeddings.weight": (max_positions, h),
        f"{e}.token_type_embeddings.weight": (type_vocab, h),
        **ln(e),
    }
    if position_ids:
        s[f"{e}.position_ids"] = (1, max_positions)
    for i in range(layers):
        p = f"{prefix}encoder.layer.{i}"
        for n in ("query", "key", "value"):
            s.update(lin(f"{p}.attention.self.{n}", h, h))
        s.update(lin(f"{p}.attention.output.dense", h, h))
        s.update(ln(f"{p}.attention.output"))
        s.update(lin(f"{p}.intermediate.dense", intermediate, h))
        s.update(lin(f"{p}.output.dense", h, intermediate))
        s.update(ln(f"{p}.output"))
    if pooler:
        s.update(lin(f"{prefix}pooler.dense", h, h))
    if mlm:
        s.update(lin("cls.predictions.transform.dense", h, h))
        s.update(ln("cls.predictions.transform"))
        s["cls.predictions.bias"] = (vocab,)
        s["cls.predictions.decoder.weight"] = (vocab, h)
        s["cls.predictions.decoder.bias"] = (vocab,)
    if nsp:
        s.update(lin("cls.seq_relationship", 2, h))
    if num_labels:
        s.update(lin("classifier", num_labels, h))
    return s


def random_state(shapes: dict, seed: int = 0, tie: dict | None = None) -> dict:
    """Random float32 arrays for ``shapes``; BatchNorm statistics valid, causal-mask buffers lower-triangular,
    ``position_ids`` an arange; ``tie`` maps a name to another whose array it copies."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        if name.endswith("num_batches_tracked"):
            out[name] = np.array(7, dtype=np.int64)
        elif name.endswith("running_var"):
            out[name] = rng.uniform(0.5, 1.5, shape).astype(np.float32)
        elif name.endswith("attn.bias") and len(shape) == 4:
            out[name] = np.tril(np.ones(shape[-2:], dtype=bool)).reshape(shape)
        elif name.endswith("position_ids"):
            out[name] = np.arange(shape[-1], dtype=np.int64).reshape(shape)
        else:
            out[name] = (rng.standard_normal(shape) * 0.2).astype(np.float32)
    for name, src in (tie or {}).items():
        out[name] = out[src].copy()
    return out
