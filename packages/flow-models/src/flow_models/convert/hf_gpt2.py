"""Hugging Face GPT-2 state dicts (safetensors) into the zoo's :class:`~flow_models.nlp.gpt.GPT`.

HF's GPT-2 uses ``Conv1D`` layers whose weights are stored ``(in_features, out_features)``,
the transpose of ``nn.Linear``: ``attn.c_attn``, ``attn.c_proj``, ``mlp.c_fc`` and ``mlp.c_proj``
weights are transposed here. Keys may carry the ``transformer.`` prefix (``GPT2LMHeadModel``) or
not (``GPT2Model``, the hub's ``model.safetensors``); the causal-mask buffers (``attn.bias``,
``attn.masked_bias``) are skipped and ``lm_head.weight``, tied to ``wte``, is checked equal.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from flow_models.convert.common import ConversionError, LoadResult, Mapped, load_mapped, read_state_dict

__all__ = ["hf_gpt2_state_dict", "load_hf_gpt2", "gpt2_config_from_state_dict", "gpt2_from_hf"]

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
_BUFFERS = re.compile(r"(^|\.)h\.\d+\.attn\.(bias|masked_bias)$")


def hf_gpt2_state_dict(source) -> tuple[dict[str, Mapped], dict[str, str]]:
    """``(model key -> Mapped, skipped checkpoint key -> reason)`` for an HF GPT-2 checkpoint."""
    sd = read_state_dict(source)
    mapped: dict[str, Mapped] = {}
    skipped: dict[str, str] = {}
    for key, arr in sd.items():
        if _BUFFERS.search(key):
            skipped[key] = "HF's causal-mask buffer"
            continue
        name = key[len("transformer.") :] if key.startswith("transformer.") else key
        if name == "lm_head.weight":
            mapped["lm_head.weight"] = Mapped(key, arr, tuple(arr.shape))
            continue
        if name.endswith(CONV1D):
            if arr.ndim != 2:
                raise ConversionError(f"HF GPT-2: Conv1D weight '{key}' should be 2-D, has shape {tuple(arr.shape)}")
            mapped["transformer." + name] = Mapped(
                key, np.ascontiguousarray(arr.T), tuple(arr.shape), "HF Conv1D (in, out), transposed"
            )
        else:
            mapped["transformer." + name] = Mapped(key, arr, tuple(arr.shape))
    return mapped, skipped


def load_hf_gpt2(model, source, strict: bool = True) -> LoadResult:
    """Load an HF GPT-2 state dict (safetensors path or mapping) into the zoo ``GPT`` ``model`` in place."""
    mapped, skipped = hf_gpt2_state_dict(source)
    if not model.config.tie_weights and "lm_head.weight" not in mapped and "transformer.wte.weight" in mapped:
        # HF always ties the output layer to wte; an untied zoo model gets a copy
        wte = mapped["transformer.wte.weight"]
        mapped["lm_head.weight"] = Mapped(wte.source, wte.array.copy(), wte.source_shape, "tied in HF")
    return load_mapped(model, mapped, what="HF GPT-2", skipped=skipped, strict=strict)


def gpt2_config_from_state_dict(source, **overrides):
    """A :class:`~flow_models.nlp.gpt.GPTConfig` matching an HF GPT-2 checkpoint (``n_head = n_embd // 64``,
    as in every GPT-2 size, unless overridden)."""
    from flow_models.nlp.gpt import GPTConfig

    mapped, _ = hf_gpt2_state_dict(source)
    try:
        wte, wpe = mapped["transformer.wte.weight"].array, mapped["transformer.wpe.weight"].array
    except KeyError as e:
        raise ConversionError(f"not an HF GPT-2 state dict: no {e.args[0].split('.', 1)[1]!r}") from None
    layers = {int(m.group(1)) for k in mapped if (m := re.match(r"transformer\.h\.(\d+)\.", k))}
    n_embd = int(wte.shape[1])
    cfg = GPTConfig(
        vocab_size=int(wte.shape[0]),
        block_size=int(wpe.shape[0]),
        n_layer=len(layers),
        n_head=max(1, n_embd // 64),
        n_embd=n_embd,
        bias="transformer.h.0.attn.c_attn.bias" in mapped or not layers,
    )
    return dataclasses.replace(cfg, **overrides)


def gpt2_from_hf(source, **overrides):
    """A zoo GPT built to the checkpoint's size, with its weights loaded."""
    from flow_models.nlp.gpt import GPT

    sd = read_state_dict(source)
    model = GPT(gpt2_config_from_state_dict(sd, **overrides))
    load_hf_gpt2(model, sd)
    return model
