"""NLP models: a GPT-2-style decoder and a BERT-style encoder (masked-LM and classification heads)."""

from flow_models.nlp.bert import BertConfig, BertForMaskedLM, BertForSequenceClassification, BertModel, build_bert
from flow_models.nlp.gpt import GPT, GPTConfig

__all__ = [
    "BertConfig",
    "BertForMaskedLM",
    "BertForSequenceClassification",
    "BertModel",
    "build_bert",
    "GPT",
    "GPTConfig",
]
