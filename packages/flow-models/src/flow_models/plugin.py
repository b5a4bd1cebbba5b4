"""The ``models`` entry point of flow-models (group ``flow.plugins``).

flow's plugin manager imports this module and runs its hooks:

- ``flow_add_hookspecs`` adds :mod:`flow_models.hookspecs`, whose hook
  ``flow_models_register(registry)`` lets any plugin add models and datasets to the zoo;
- ``flow_models_register`` is flow-models' own implementation of that hook: it registers the
  zoo's models (below) and the dataset readers of :mod:`flow_models.data`.

The model modules are imported the first time the zoo is used, not when flow loads its plugins.
"""

from __future__ import annotations

import importlib

from flow.plugins import hookimpl

# name -> (module, factory, config class, what it consumes (config -> DataSpec), family, defaults, what it is for)
MODELS: dict[str, tuple[str, str, str, str, str, dict, str]] = {
    "lenet": (
        "vision.lenet",
        "LeNet5",
        "LeNetConfig",
        "lenet_input",
        "vision",
        {},
        "LeNet-5 for 8x8 grey-scale digits (scikit-learn's digits); flow-train's default for --dataset digits.",
    ),
    "lenet-mnist": (
        "vision.lenet",
        "LeNet5",
        "LeNetConfig",
        "lenet_input",
        "vision",
        {"input_size": 28},
        "LeNet-5 for 28x28 grey-scale images (MNIST, Fashion-MNIST); 61,706 parameters.",
    ),
    "resnet18": (
        "vision.resnet",
        "ResNet",
        "ResNetConfig",
        "resnet_input",
        "vision",
        {"layers": (2, 2, 2, 2)},
        "ResNet-18 ImageNet classifier (torchvision names and weights); 11,689,512 parameters.",
    ),
    "resnet34": (
        "vision.resnet",
        "ResNet",
        "ResNetConfig",
        "resnet_input",
        "vision",
        {"layers": (3, 4, 6, 3)},
        "ResNet-34 ImageNet classifier (torchvision names and weights); 21,797,672 parameters.",
    ),
    "resnet50": (
        "vision.resnet",
        "ResNet",
        "ResNetConfig",
        "resnet_input",
        "vision",
        {"block": "bottleneck", "layers": (3, 4, 6, 3)},
        "ResNet-50 ImageNet classifier (torchvision names and weights); 25,557,032 parameters.",
    ),
    "resnet18-cifar": (
        "vision.resnet",
        "ResNet",
        "ResNetConfig",
        "resnet_input",
        "vision",
        {"layers": (2, 2, 2, 2), "stem": "cifar", "num_classes": 10},
        "ResNet-18 with the 3x3 CIFAR stem for 32x32 images (CIFAR-10 by default).",
    ),
    "vgg11": (
        "vision.vgg",
        "VGG",
        "VGGConfig",
        "vgg_input",
        "vision",
        {},
        "VGG-11 ImageNet classifier without BatchNorm (torchvision names); 132,863,336 parameters.",
    ),
    "vgg11-bn": (
        "vision.vgg",
        "VGG",
        "VGGConfig",
        "vgg_input",
        "vision",
        {"batch_norm": True},
        "VGG-11 with BatchNorm after every convolution (torchvision's vgg11_bn).",
    ),
    "mobilenet-v2": (
        "vision.mobilenet",
        "MobileNetV2",
        "MobileNetV2Config",
        "mobilenet_input",
        "vision",
        {},
        "MobileNetV2, a small ImageNet classifier for mobile devices; 3,504,872 parameters.",
    ),
    "vit-tiny": (
        "vision.vit",
        "VisionTransformer",
        "ViTConfig",
        "vit_input",
        "vision",
        {},
        "ViT-Tiny/16 at 224x224 (timm's vit_tiny_patch16_224); 5,717,416 parameters.",
    ),
    "vit-small": (
        "vision.vit",
        "VisionTransformer",
        "ViTConfig",
        "vit_input",
        "vision",
        {"embed_dim": 384, "num_heads": 6},
        "ViT-Small/16 at 224x224 (timm's vit_small_patch16_224); 22,050,664 parameters.",
    ),
    "gpt2": (
        "nlp.gpt",
        "GPT",
        "GPTConfig",
        "gpt_input",
        "nlp",
        {},
        "GPT-2 124M causal language model (HF names, tied embeddings); 124,439,808 parameters.",
    ),
    "gpt2-char": (
        "nlp.gpt",
        "GPT",
        "GPTConfig",
        "gpt_input",
        "nlp",
        {"vocab_size": 65, "block_size": 128, "n_layer": 4, "n_head": 4, "n_embd": 128, "dropout": 0.1},
        "A small GPT-2-style character-level language model (e.g. tiny Shakespeare) that trains on CPU.",
    ),
    "bert-base": (
        "nlp.bert",
        "build_bert",
        "BertConfig",
        "bert_input",
        "nlp",
        {},
        "BERT-base encoder with pooler (HF names); 109,482,240 parameters; head='mlm'/'cls' adds a head.",
    ),
    "bert-base-mlm": (
        "nlp.bert",
        "build_bert",
        "BertConfig",
        "bert_input",
        "nlp",
        {"head": "mlm"},
        "BERT-base with the masked-language-model head (tied to the word embeddings).",
    ),
    "bert-base-cls": (
        "nlp.bert",
        "build_bert",
        "BertConfig",
        "bert_input",
        "nlp",
        {"head": "cls"},
        "BERT-base with a sequence-classification head on the pooled [CLS] state (num_labels).",
    ),
    "bert-tiny": (
        "nlp.bert",
        "build_bert",
        "BertConfig",
        "bert_input",
        "nlp",
        {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 512},
        "A 2-layer, 128-wide BERT encoder (google/bert_uncased_L-2_H-128_A-2) for quick experiments.",
    ),
    "wide-deep": (
        "recsys.wide_deep",
        "WideDeep",
        "WideDeepConfig",
        "wide_deep_input",
        "recsys",
        {},
        "Wide & Deep click-through-rate model: a linear model plus an MLP over embeddings.",
    ),
    "dlrm": (
        "recsys.dlrm",
        "DLRM",
        "DLRMConfig",
        "dlrm_input",
        "recsys",
        {},
        "DLRM click-through-rate model, benchmark configuration: 13 dense features, 8 tables of 100,000 x 64.",
    ),
    "dlrm-small": (
        "recsys.dlrm",
        "DLRM",
        "DLRMConfig",
        "dlrm_input",
        "recsys",
        {"table_sizes": (1000,) * 8, "embedding_dim": 16, "bottom_mlp": (64, 16), "top_mlp": (64, 1)},
        "A small DLRM (8 tables of 1,000 x 16) for tests and CPU training.",
    ),
    "m5": (
        "speech.m5",
        "M5",
        "M5Config",
        "m5_input",
        "speech",
        {},
        "M5 raw-waveform CNN for keyword spotting (35 Speech Commands keywords, 16 kHz).",
    ),
    "crnn-ctc": (
        "speech.crnn",
        "CRNNCTC",
        "CRNNConfig",
        "crnn_input",
        "speech",
        {},
        "CNN front-end + bidirectional GRU acoustic model over log-mel frames, trained with CTC.",
    ),
}


@hookimpl
def flow_add_hookspecs(plugin_manager):
    from flow_models import hookspecs

    plugin_manager.add_hookspecs(hookspecs)


@hookimpl
def flow_models_register(registry):
    """Register the zoo's models, then the datasets of :mod:`flow_models.data` (when it is there)."""
    for name, (module, factory, config, consumes, family, defaults, doc) in MODELS.items():
        mod = importlib.import_module(f"flow_models.{module}")
        registry.register_model(
            name,
            getattr(mod, factory),
            getattr(mod, config),
            family,
            doc,
            defaults=defaults,
            consumes=getattr(mod, consumes),
        )
    try:
        data = importlib.import_module("flow_models.data")
    except ModuleNotFoundError as e:
        if e.name != "flow_models.data":
            raise
        return
    register_datasets = getattr(data, "register_datasets", None)
    if register_datasets is not None:
        register_datasets(registry)
