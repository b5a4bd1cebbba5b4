"""Hugging Face BERT state dicts (safetensors) into the zoo's BERT models.

The zoo's BERT has HF's module names, so most keys map one to one. Handled here: the ``bert.``
prefix (present in ``BertForMaskedLM`` / ``BertForPreTraining`` / ``BertForSequenceClassification``
checkpoints, absent in ``BertModel``'s) is added or removed to fit the target model; old
TF-converted checkpoints' ``LayerNorm.gamma`` / ``LayerNorm.beta`` become ``weight`` / ``bias``;
the ``position_ids`` buffer and heads the target does not have (next-sentence prediction, the
MLM head for an encoder, the pooler for an MLM model) are skipped; the MLM decoder, tied to the
word embeddings, is checked equal. A classifier head missing from the checkpoint is left as
initialised (``LoadResult.missing``), as when fine-tuning from a pre-trained encoder.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from flow_models.convert.common import ConversionError, LoadResult, Mapped, load_mapped, read_state_dict

__all__ = ["hf_bert_state_dict", "load_hf_bert", "bert_config_from_state_dict", "bert_from_hf"]


def _rename(key: str) -> str:
    key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", key)
    return re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key)


def hf_bert_state_dict(source, model) -> tuple[dict[str, Mapped], dict[str, str]]:
    """``(model key -> Mapped, skipped checkpoint key -> reason)`` of an HF BERT checkpoint for ``model``."""
    sd = read_state_dict(source)
    target = set(model.state_dict())
    enc = "bert." if hasattr(model, "bert") else ""
    has_mlm = any(k.startswith("cls.predictions.") for k in target)
    mapped: dict[str, Mapped] = {}
    skipped: dict[str, str] = {}
    for key, arr in sd.items():
        name = _rename(key)
        name = name[len("bert.") :] if name.startswith("bert.") else name
        entry = Mapped(key, arr, tuple(arr.shape))
        if name.endswith("position_ids"):
            skipped[key] = "HF's position-ids buffer"
        elif name.startswith("cls.seq_relationship."):
            skipped[key] = "next-sentence-prediction head"
        elif name.startswith("cls."):
            if not has_mlm:
                skipped[key] = "masked-LM head (the model has none)"
            elif name == "cls.predictions.decoder.bias":
                skipped[key] = "same as cls.predictions.bias"
            else:
                mapped[name] = entry
        elif name.startswith("classifier."):
            if name in target:
                mapped[name] = entry
            else:
                skipped[key] = "classification head (the model has none)"
        elif name.startswith("pooler.") and enc + name not in target:
            skipped[key] = "pooler (the model has none)"
        else:
            mapped[enc + name] = entry
    dec_bias = next((k for k in sd if _rename(k) == "cls.predictions.decoder.bias"), None)
    if has_mlm and dec_bias is not None:
        if "cls.predictions.bias" not in mapped:
            mapped["cls.predictions.bias"] = Mapped(dec_bias, sd[dec_bias], tuple(sd[dec_bias].shape))
            skipped.pop(dec_bias, None)
        elif not np.array_equal(mapped["cls.predictions.bias"].array, sd[dec_bias]):
            raise ConversionError(
                f"HF BERT: '{dec_bias}' and '{mapped['cls.predictions.bias'].source}' differ; "
                "the zoo's MLM head has one output bias"
            )
    return mapped, skipped


def load_hf_bert(model, source, strict: bool = True) -> LoadResult:
    """Load an HF BERT state dict (safetensors path or mapping) into a zoo BERT ``model`` in place."""
    mapped, skipped = hf_bert_state_dict(source, model)
    return load_mapped(
        model,
        mapped,
        what="HF BERT",
        skipped=skipped,
        strict=strict,
        allow_missing=("*num_batches_tracked", "classifier.*"),
    )


def bert_config_from_state_dict(source, **overrides):
    """A :class:`~flow_models.nlp.bert.BertConfig` matching an HF BERT checkpoint's sizes
    (``num_attention_heads = hidden_size // 64`` unless overridden; ``head`` defaults to ``"none"``)."""
    from flow_models.nlp.bert import BertConfig

    sd = {(_rename(k)[5:] if k.startswith("bert.") else _rename(k)): v for k, v in read_state_dict(source).items()}
    try:
        words = sd["embeddings.word_embeddings.weight"]
        pos = sd["embeddings.position_embeddings.weight"]
        types = sd["embeddings.token_type_embeddings.weight"]
        inter = sd["encoder.layer.0.intermediate.dense.weight"]
    except KeyError as e:
        raise ConversionError(f"not an HF BERT state dict: no {e.args[0]!r}") from None
    layers = {int(m.group(1)) for k in sd if (m := re.match(r"encoder\.layer\.(\d+)\.", k))}
    hidden = int(words.shape[1])
    cfg = BertConfig(
        vocab_size=int(words.shape[0]),
        hidden_size=hidden,
        num_hidden_layers=len(layers),
        num_attention_heads=max(1, hidden // 64),
        intermediate_size=int(inter.shape[0]),
        max_position_embeddings=int(pos.shape[0]),
        type_vocab_size=int(types.shape[0]),
    )
    if "classifier.weight" in sd:
        cfg.num_labels = int(sd["classifier.weight"].shape[0])
    return dataclasses.replace(cfg, **overrides)


def bert_from_hf(source, head: str = "none", **overrides):
    """A zoo BERT (``head`` = ``"none"``, ``"mlm"`` or ``"cls"``) built to the checkpoint's size, weights loaded."""
    from flow_models.nlp.bert import build_bert

    sd = read_state_dict(source)
    model = build_bert(bert_config_from_state_dict(sd, head=head, **overrides))
    load_hf_bert(model, sd)
    return model
