"""Every zoo model but the recurrent / CTC one exports to ONNX and runs in onnxruntime like in flow."""

from __future__ import annotations

import io

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import flow  # noqa: E402
import flow_models  # noqa: E402
from flow.onnx import OnnxExportError  # noqa: E402


def _images(c: int, s: int):
    return lambda n: (flow.randn(n, c, s, s),)


def _tokens(vocab: int, t: int):
    return lambda n: (flow.randint(0, vocab, (n, t)),)


# name -> (config overrides, inputs for a batch of n, whether a dynamic batch axis exports)
CASES = {
    "lenet": ({}, _images(1, 8), True),
    "lenet-mnist": ({}, _images(1, 28), True),
    "resnet18": ({"stem": "cifar", "num_classes": 10, "width": 8}, _images(3, 32), True),
    "resnet34": ({"layers": (1, 1, 1, 1), "width": 8, "num_classes": 10}, _images(3, 32), True),
    "resnet50": ({"layers": (1, 1, 1, 1), "width": 8, "num_classes": 10}, _images(3, 64), True),
    "resnet18-cifar": ({"width": 8}, _images(3, 32), True),
    "vgg11": ({"hidden": 32, "pool_size": 1, "num_classes": 10}, _images(3, 32), True),
    "vgg11-bn": ({"hidden": 32, "pool_size": 2, "num_classes": 10}, _images(3, 32), True),
    "mobilenet-v2": ({"width_mult": 0.25, "num_classes": 10}, _images(3, 32), True),
    "vit-tiny": ({"image_size": 32, "patch_size": 8, "depth": 2, "num_classes": 10}, _images(3, 32), True),
    "vit-small": (
        {"image_size": 16, "patch_size": 4, "depth": 1, "embed_dim": 48, "num_classes": 10},
        _images(3, 16),
        True,
    ),
    "gpt2": ({"vocab_size": 50, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 32}, _tokens(50, 12), True),
    "gpt2-char": ({"n_layer": 1, "n_embd": 32, "n_head": 2}, _tokens(65, 16), True),
    # BERT makes its default token_type_ids with the traced input's shape: a constant of the batch size
    "bert-base-mlm": (
        {
            "vocab_size": 60,
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 64,
        },
        lambda n: (flow.randint(1, 60, (n, 10)), flow.ones(n, 10, dtype=flow.int64)),
        False,
    ),
    "bert-base-cls": (
        {
            "vocab_size": 60,
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 64,
        },
        _tokens(60, 10),
        False,
    ),
    "bert-tiny": ({"head": "cls", "vocab_size": 60, "num_hidden_layers": 1}, _tokens(60, 10), False),
    "wide-deep": (
        {"table_sizes": (50, 20, 30), "embedding_dim": 8, "hidden": (16, 8)},
        lambda n: (flow.randn(n, 13), flow.randint(0, 20, (n, 3))),
        True,
    ),
    "dlrm": (
        {"table_sizes": (50, 20, 30), "embedding_dim": 8, "bottom_mlp": (16, 8), "top_mlp": (16, 1)},
        lambda n: (flow.randn(n, 13), flow.randint(0, 20, (n, 3, 2))),
        True,
    ),
    "dlrm-small": ({}, lambda n: (flow.randn(n, 13), flow.randint(0, 1000, (n, 8))), True),
    "m5": ({"num_classes": 10}, lambda n: (flow.randn(n, 1, 8000),), True),
}
# recurrent models trace one node set per time step and CTC decoding is not a forward op
NOT_EXPORTED = {"crnn-ctc", "bert-base"}  # bert-base: the bare encoder, covered by the bert heads


def test_every_zoo_model_is_covered():
    assert set(CASES) | NOT_EXPORTED >= set(flow_models.list_models()) - {"tiny-mlp"}


def _outputs(model, args):
    with flow.no_grad():
        out = model(*args)
    return [o.numpy() for o in (out if isinstance(out, (tuple, list)) else (out,))]


@pytest.mark.parametrize("name", sorted(CASES))
def test_zoo_model_exports_and_matches_flow(name):
    overrides, make_inputs, dynamic = CASES[name]
    flow.manual_seed(0)
    model = flow_models.create(name, **overrides).eval()
    args = make_inputs(2)
    names = [f"in{i}" for i in range(len(args))]
    axes = {n: {0: "batch"} for n in names} if dynamic else None
    buf = io.BytesIO()
    mp = flow.onnx.export(model, args, buf, input_names=names, dynamic_axes=axes)
    onnx.checker.check_model(mp)
    sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    batches = (2, 3) if dynamic else (2,)
    for n in batches:
        xs = args if n == 2 else make_inputs(n)
        got = sess.run(None, {k: x.numpy() for k, x in zip(names, xs)})
        ref = _outputs(model, xs)
        assert len(got) == len(ref)
        for g, r in zip(got, ref):
            assert g.shape == r.shape
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)
    if not dynamic:
        with pytest.raises(OnnxExportError, match="depends on a dynamic axis"):
            flow.onnx.export(
                model, args, io.BytesIO(), input_names=names, dynamic_axes={k: {0: "batch"} for k in names}
            )
