"""BERT-style bidirectional Transformer encoder (Devlin et al., 2019) with Hugging Face's module names.

``BertModel`` is the encoder with its pooler (``embeddings``, ``encoder.layer.0.attention.self.query``,
``pooler.dense``; bert-base: 109,482,240 parameters, as HF's ``BertModel``);
``BertForMaskedLM`` adds the masked-language-model head (``cls.predictions``, output tied to the
word embeddings) and ``BertForSequenceClassification`` a classifier over the pooled ``[CLS]`` state.
HF checkpoints load through :func:`flow_models.convert.load_hf_bert`.
"""

from __future__ import annotations

from dataclasses import dataclass

import flow
import flow.nn.functional as F
from flow import nn
from flow_models.dataspec import DataSpec
from flow_models.registry import ZooModel

__all__ = ["BertConfig", "BertModel", "BertForMaskedLM", "BertForSequenceClassification", "build_bert", "bert_input"]


@dataclass
class BertConfig:
    """BERT hyper-parameters (defaults: bert-base-uncased). ``head`` picks the model:
    ``"none"`` (encoder + pooler), ``"mlm"`` (masked LM) or ``"cls"`` (sequence classification)."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    head: str = "none"
    num_labels: int = 2
    add_pooling_layer: bool | None = None  # None: yes for "none" and "cls", no for "mlm" (as HF)


class BertEmbeddings(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids=None):
        T = input_ids.shape[1]
        if T > self.position_embeddings.num_embeddings:
            raise ValueError(
                f"BERT: sequence of length {T} is longer than max_position_embeddings "
                f"{self.position_embeddings.num_embeddings}"
            )
        pos = flow.arange(T, dtype=flow.int64, device=input_ids.device)
        if token_type_ids is None:
            token_type_ids = flow.zeros_like(input_ids)
        x = self.word_embeddings(input_ids) + self.position_embeddings(pos) + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        if cfg.hidden_size % cfg.num_attention_heads:
            raise ValueError(
                f"BertConfig.hidden_size {cfg.hidden_size} is not divisible by "
                f"num_attention_heads {cfg.num_attention_heads}"
            )
        self.num_heads = cfg.num_attention_heads
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout_p = cfg.attention_probs_dropout_prob

    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = (
            lin(x).reshape(B, T, self.num_heads, C // self.num_heads).transpose(1, 2)
            for lin in (self.query, self.key, self.value)
        )
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout_p if self.training else 0.0)
        return y.transpose(1, 2).reshape(B, T, C)


class BertSelfOutput(nn.Module):
    """``LayerNorm(x + dropout(dense(h)))``: the residual branch after attention or the feed-forward layer."""

    def __init__(self, cfg: BertConfig, d_in: int) -> None:
        super().__init__()
        self.dense = nn.Linear(d_in, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, h, x):
        return self.LayerNorm(x + self.dropout(self.dense(h)))


class BertAttention(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(cfg)
        self.output = BertSelfOutput(cfg, cfg.hidden_size)

    def forward(self, x, mask=None):
        return self.output(self.self(x, mask), x)


class BertIntermediate(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x):
        return F.gelu(self.dense(x))


class BertLayer(nn.Module):
    """Post-norm encoder layer: attention, then the feed-forward network, each with residual and LayerNorm."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(cfg)
        self.intermediate = BertIntermediate(cfg)
        self.output = BertSelfOutput(cfg, cfg.intermediate_size)

    def forward(self, x, mask=None):
        x = self.attention(x, mask)
        return self.output(self.intermediate(x), x)


class BertEncoder(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(cfg) for _ in range(cfg.num_hidden_layers)])

    def forward(self, x, mask=None):
        for layer in self.layer:
            x = layer(x, mask)
        return x


class BertPooler(nn.Module):
    """``tanh(dense(h[:, 0]))``: the ``[CLS]`` token's state, transformed."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, x):
        return self.activation(self.dense(x[:, 0]))


def _init_bert(module: nn.Module, std: float) -> None:
    for m in module.modules():  # HF's BertPreTrainedModel._init_weights
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, std)
            if m.padding_idx is not None:
                with flow.no_grad():
                    m.weight[m.padding_idx] = 0.0


class BertModel(ZooModel):
    """BERT encoder: ``(input_ids, attention_mask, token_type_ids)`` -> ``(sequence_output, pooled_output)``.

    ``attention_mask`` ``(B, T)`` is 1 for tokens to attend to and 0 for padding.
    ``pooled_output`` is None without a pooler.
    """

    def __init__(self, config: BertConfig | None = None, add_pooling_layer: bool = True) -> None:
        super().__init__()
        cfg = self.config = config or BertConfig()
        self.embeddings = BertEmbeddings(cfg)
        self.encoder = BertEncoder(cfg)
        self.pooler = BertPooler(cfg) if add_pooling_layer else None
        _init_bert(self, cfg.initializer_range)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        mask = None
        if attention_mask is not None:
            mask = (attention_mask != 0).reshape(attention_mask.shape[0], 1, 1, attention_mask.shape[1])
        h = self.encoder(self.embeddings(input_ids, token_type_ids), mask)
        return h, (self.pooler(h) if self.pooler is not None else None)


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x):
        return self.LayerNorm(F.gelu(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.transform = BertPredictionHeadTransform(cfg)
        self.decoder = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.bias = nn.Parameter(flow.zeros(cfg.vocab_size))

    def forward(self, x):
        return self.decoder(self.transform(x)) + self.bias


class BertOnlyMLMHead(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(cfg)

    def forward(self, x):
        return self.predictions(x)


class BertForMaskedLM(ZooModel):
    """BERT with the masked-language-model head: token ids -> vocabulary logits ``(B, T, vocab_size)``.

    ``loss(logits, labels)``: cross-entropy over positions whose label is not ``-100``.
    """

    def __init__(self, config: BertConfig | None = None) -> None:
        super().__init__()
        cfg = self.config = config or BertConfig(head="mlm")
        pool = cfg.add_pooling_layer if cfg.add_pooling_layer is not None else False
        self.bert = BertModel(cfg, add_pooling_layer=pool)
        self.cls = BertOnlyMLMHead(cfg)
        _init_bert(self.cls, cfg.initializer_range)
        self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        h, _ = self.bert(input_ids, attention_mask, token_type_ids)
        return self.cls(h)

    def loss(self, logits, labels):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)


class BertForSequenceClassification(ZooModel):
    """BERT with a linear classifier on the pooled ``[CLS]`` state: token ids -> ``(B, num_labels)`` logits."""

    def __init__(self, config: BertConfig | None = None) -> None:
        super().__init__()
        cfg = self.config = config or BertConfig(head="cls")
        self.bert = BertModel(cfg, add_pooling_layer=True)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.classifier = nn.Linear(cfg.hidden_size, cfg.num_labels)
        _init_bert(self.classifier, cfg.initializer_range)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        _, pooled = self.bert(input_ids, attention_mask, token_type_ids)
        return self.classifier(self.dropout(pooled))


def build_bert(config: BertConfig) -> ZooModel:
    """The BERT model ``config.head`` asks for."""
    if config.head == "none":
        pool = True if config.add_pooling_layer is None else config.add_pooling_layer
        return BertModel(config, add_pooling_layer=pool)
    if config.head == "mlm":
        return BertForMaskedLM(config)
    if config.head == "cls":
        if config.add_pooling_layer is False:
            raise ValueError("BertConfig(head='cls') classifies the pooled state: add_pooling_layer cannot be False")
        return BertForSequenceClassification(config)
    raise ValueError(f"BertConfig.head must be 'none', 'mlm' or 'cls', got {config.head!r}")


def bert_input(config: BertConfig) -> DataSpec:
    """What a BERT takes: token ids; the task is its head's: ``masked-lm`` (``head="mlm"``, which sees the
    whole window, so it cannot learn next-token prediction), ``classification`` of a window (``"cls"``)
    or ``embedding`` (no head: hidden states, nothing to train against)."""
    task = {"mlm": "masked-lm", "cls": "classification", "none": "embedding"}.get(config.head)
    if task is None:
        raise ValueError(f"BertConfig.head must be 'none', 'mlm' or 'cls', got {config.head!r}")
    return DataSpec(task, "tokens", (None,))
