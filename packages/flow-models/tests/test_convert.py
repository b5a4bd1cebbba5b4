"""Weight converters: torchvision ResNet and HF GPT-2 / BERT safetensors files written by the tests themselves."""

from __future__ import annotations

import numpy as np
import pytest
import safetensors.numpy
from zoo_refs import hf_bert_shapes, hf_gpt2_shapes, random_state, torchvision_resnet_shapes

import flow
import flow_models
from flow_models.convert import (
    ConversionError,
    bert_config_from_state_dict,
    bert_from_hf,
    gpt2_config_from_state_dict,
    gpt2_from_hf,
    load_hf_bert,
    load_hf_gpt2,
    load_torchvision_resnet,
    resnet_config_from_state_dict,
    resnet_from_torchvision,
)


def write(tmp_path, state: dict, name: str = "ckpt.safetensors") -> str:
    path = str(tmp_path / name)
    safetensors.numpy.save_file(state, path)
    return path


def sd_numpy(model) -> dict:
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


# -- torchvision ResNet ---------------------------------------------------------------------------
SMALL_BASIC = dict(block="basic", layers=(1, 1, 1, 1), num_classes=10, width=8)
SMALL_BOTTLENECK = dict(block="bottleneck", layers=(1, 2, 1, 1), num_classes=7, width=4)


@pytest.mark.parametrize("arch", [SMALL_BASIC, SMALL_BOTTLENECK], ids=["basic", "bottleneck"])
@pytest.mark.parametrize("stem", ["imagenet", "cifar"])
def test_resnet_loads_torchvision_names(tmp_path, arch, stem):
    shapes = torchvision_resnet_shapes(**arch, stem_kernel=7 if stem == "imagenet" else 3)
    ref = random_state(shapes, seed=1)
    path = write(tmp_path, ref)
    model = flow_models.create("resnet18", stem=stem, **arch)
    assert set(model.state_dict()) == set(shapes)
    result = load_torchvision_resnet(model, path)
    assert sorted(result.loaded) == sorted(shapes) and not result.skipped
    got = sd_numpy(model)
    for k, v in ref.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)


def test_resnet_from_torchvision_infers_the_architecture(tmp_path):
    ref = random_state(torchvision_resnet_shapes(**SMALL_BOTTLENECK, stem_kernel=3), seed=2)
    path = write(tmp_path, ref)
    cfg = resnet_config_from_state_dict(path)
    assert (cfg.block, tuple(cfg.layers), cfg.num_classes, cfg.width, cfg.stem) == (
        "bottleneck",
        (1, 2, 1, 1),
        7,
        4,
        "cifar",
    )
    model = resnet_from_torchvision(path)
    np.testing.assert_array_equal(model.fc.weight.detach().numpy(), ref["fc.weight"])
    # wrapped checkpoints (DataParallel's "module." prefix) load too
    wrapped = write(tmp_path, {"module." + k: v for k, v in ref.items()}, "wrapped.safetensors")
    load_torchvision_resnet(model, wrapped)


def test_resnet_shape_mismatch_names_key_and_both_shapes(tmp_path):
    ref = random_state(torchvision_resnet_shapes(**{**SMALL_BASIC, "num_classes": 1000}), seed=3)
    model = flow_models.create("resnet18", **SMALL_BASIC)
    with pytest.raises(ConversionError) as e:
        load_torchvision_resnet(model, write(tmp_path, ref))
    msg = str(e.value)
    assert "'fc.weight'" in msg and "(1000, 64)" in msg and "(10, 64)" in msg
    assert "'fc.bias'" in msg and "(1000,)" in msg and "(10,)" in msg


def test_resnet_missing_and_unexpected_keys(tmp_path):
    ref = random_state(torchvision_resnet_shapes(**SMALL_BASIC), seed=4)
    model = flow_models.create("resnet18", **SMALL_BASIC)
    broken = dict(ref)
    del broken["layer1.0.bn1.running_var"]
    with pytest.raises(ConversionError, match=r"layer1\.0\.bn1\.running_var"):
        load_torchvision_resnet(model, broken)
    extra = {**ref, "layer9.0.conv1.weight": np.zeros((1,), np.float32)}
    with pytest.raises(ConversionError, match=r"layer9\.0\.conv1\.weight"):
        load_torchvision_resnet(model, extra)
    result = load_torchvision_resnet(model, extra, strict=False)
    assert "layer9.0.conv1.weight" in result.skipped
    # old checkpoints without num_batches_tracked load
    load_torchvision_resnet(model, {k: v for k, v in ref.items() if not k.endswith("num_batches_tracked")})


def test_missing_and_corrupt_files(tmp_path):
    model = flow_models.create("resnet18", **SMALL_BASIC)
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        load_torchvision_resnet(model, str(tmp_path / "nope.safetensors"))
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x00not a safetensors file")
    with pytest.raises(ConversionError, match="bad.safetensors"):
        load_torchvision_resnet(model, str(bad))


# -- Hugging Face GPT-2 -----------------------------------------------------------------------------
TINY_GPT = dict(vocab=97, n_positions=16, n_layer=2, d=32)


def tiny_gpt(**kw):
    return flow_models.create("gpt2", vocab_size=97, block_size=16, n_layer=2, n_embd=32, n_head=2, **kw)


@pytest.mark.parametrize("layout", ["GPT2Model", "GPT2LMHeadModel"])
def test_gpt2_loads_hf_names_and_transposes_conv1d(tmp_path, layout):
    lm = layout == "GPT2LMHeadModel"
    shapes = hf_gpt2_shapes(**TINY_GPT, prefix="transformer." if lm else "", lm_head=lm)
    ref = random_state(shapes, seed=5, tie={"lm_head.weight": "transformer.wte.weight"} if lm else None)
    model = tiny_gpt()
    result = load_hf_gpt2(model, write(tmp_path, ref))
    p = "transformer." if lm else ""
    got = sd_numpy(model)
    for i in range(2):
        for w in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            np.testing.assert_array_equal(got[f"transformer.h.{i}.{w}.weight"], ref[f"{p}h.{i}.{w}.weight"].T)
            np.testing.assert_array_equal(got[f"transformer.h.{i}.{w}.bias"], ref[f"{p}h.{i}.{w}.bias"])
        assert result.skipped[f"{p}h.{i}.attn.bias"] == "HF's causal-mask buffer"
    np.testing.assert_array_equal(got["transformer.wte.weight"], ref[f"{p}wte.weight"])
    np.testing.assert_array_equal(got["lm_head.weight"], ref[f"{p}wte.weight"])  # tied
    np.testing.assert_array_equal(got["transformer.ln_f.bias"], ref[f"{p}ln_f.bias"])
    assert model.lm_head.weight is model.transformer.wte.weight


def test_gpt2_conv1d_shape_mismatch_names_key_and_shapes(tmp_path):
    ref = random_state(hf_gpt2_shapes(**TINY_GPT), seed=6)
    ref["h.1.attn.c_attn.weight"] = np.zeros((32, 64), np.float32)
    with pytest.raises(ConversionError) as e:
        load_hf_gpt2(tiny_gpt(), write(tmp_path, ref))
    msg = str(e.value)
    assert "'h.1.attn.c_attn.weight'" in msg and "(32, 64)" in msg and "'transformer.h.1.attn.c_attn.weight'" in msg
    assert "(96, 32)" in msg and "transposed" in msg


def test_gpt2_untied_lm_head_that_differs_is_an_error(tmp_path):
    shapes = hf_gpt2_shapes(**TINY_GPT, prefix="transformer.", lm_head=True)
    ref = random_state(shapes, seed=7)  # lm_head.weight random, not wte
    with pytest.raises(ConversionError, match="ties"):
        load_hf_gpt2(tiny_gpt(), write(tmp_path, ref))
    untied = tiny_gpt(tie_weights=False)
    load_hf_gpt2(untied, write(tmp_path, ref))
    np.testing.assert_array_equal(untied.lm_head.weight.detach().numpy(), ref["lm_head.weight"])


def test_gpt2_from_hf_builds_the_checkpoint_size(tmp_path):
    ref = random_state(hf_gpt2_shapes(vocab=50, n_positions=12, n_layer=3, d=128), seed=8)
    path = write(tmp_path, ref)
    cfg = gpt2_config_from_state_dict(path)
    assert (cfg.vocab_size, cfg.block_size, cfg.n_layer, cfg.n_embd, cfg.n_head) == (50, 12, 3, 128, 2)
    model = gpt2_from_hf(path, dropout=0.0)
    out = model(flow.tensor([[1, 2, 3]]))
    assert tuple(out.shape) == (1, 3, 50)


# -- Hugging Face BERT --------------------------------------------------------------------------------
TINY_BERT = dict(vocab=101, hidden=32, layers=2, intermediate=64, max_positions=24)


def tiny_bert(head="none", **kw):
    return flow_models.create(
        "bert-base",
        vocab_size=101,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=24,
        head=head,
        **kw,
    )


def test_bert_pretraining_checkpoint_into_every_head(tmp_path):
    shapes = hf_bert_shapes(**TINY_BERT, mlm=True, nsp=True, position_ids=True)
    ref = random_state(
        shapes,
        seed=9,
        tie={
            "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
            "cls.predictions.decoder.bias": "cls.predictions.bias",
        },
    )
    path = write(tmp_path, ref)

    encoder = tiny_bert()
    r = load_hf_bert(encoder, path)
    got = sd_numpy(encoder)
    assert set(got) == {k[5:] for k in shapes if k.startswith("bert.") and not k.endswith("position_ids")}
    for k in got:
        np.testing.assert_array_equal(got[k], ref["bert." + k], err_msg=k)
    assert r.skipped["cls.seq_relationship.weight"] == "next-sentence-prediction head"
    assert "cls.predictions.bias" in r.skipped

    mlm = tiny_bert("mlm")
    r = load_hf_bert(mlm, path)
    got = sd_numpy(mlm)
    np.testing.assert_array_equal(got["cls.predictions.bias"], ref["cls.predictions.bias"])
    np.testing.assert_array_equal(
        got["cls.predictions.transform.LayerNorm.weight"], ref["cls.predictions.transform.LayerNorm.weight"]
    )
    np.testing.assert_array_equal(got["cls.predictions.decoder.weight"], ref["bert.embeddings.word_embeddings.weight"])
    assert "bert.pooler.dense.weight" in r.skipped  # HF's BertForMaskedLM has no pooler either

    cls = tiny_bert("cls", num_labels=3)
    before = cls.classifier.weight.detach().numpy().copy()
    r = load_hf_bert(cls, path)
    assert sorted(r.missing) == ["classifier.bias", "classifier.weight"]
    np.testing.assert_array_equal(cls.classifier.weight.detach().numpy(), before)
    np.testing.assert_array_equal(cls.bert.pooler.dense.weight.detach().numpy(), ref["bert.pooler.dense.weight"])


def test_bert_model_checkpoint_without_prefix_and_old_layer_norm_names(tmp_path):
    shapes = hf_bert_shapes(**TINY_BERT, prefix="", old_layer_norm=True, num_labels=3)
    ref = random_state(shapes, seed=10)
    path = write(tmp_path, ref)
    cls = tiny_bert("cls", num_labels=3)
    r = load_hf_bert(cls, path)
    assert not r.missing
    np.testing.assert_array_equal(
        cls.bert.embeddings.LayerNorm.weight.detach().numpy(), ref["embeddings.LayerNorm.gamma"]
    )
    np.testing.assert_array_equal(
        cls.bert.encoder.layer[1].output.LayerNorm.bias.detach().numpy(), ref["encoder.layer.1.output.LayerNorm.beta"]
    )
    np.testing.assert_array_equal(cls.classifier.weight.detach().numpy(), ref["classifier.weight"])
    cfg = bert_config_from_state_dict(path)
    assert (
        cfg.vocab_size,
        cfg.hidden_size,
        cfg.num_hidden_layers,
        cfg.intermediate_size,
        cfg.max_position_embeddings,
        cfg.num_labels,
    ) == (101, 32, 2, 64, 24, 3)
    model = bert_from_hf(path, head="cls", num_attention_heads=2)
    assert model.config.num_labels == 3


def test_bert_shape_mismatch_names_key_and_shapes(tmp_path):
    ref = random_state(hf_bert_shapes(**TINY_BERT), seed=11)
    ref["bert.encoder.layer.0.intermediate.dense.weight"] = np.zeros((65, 32), np.float32)
    with pytest.raises(ConversionError) as e:
        load_hf_bert(tiny_bert(), write(tmp_path, ref))
    msg = str(e.value)
    assert "'bert.encoder.layer.0.intermediate.dense.weight'" in msg and "(65, 32)" in msg and "(64, 32)" in msg


# -- forward passes against PyTorch re-implementations (when torch is installed) ---------------------
def _torch_refs():
    pytest.importorskip("torch")
    import zoo_torch_refs

    return zoo_torch_refs


@pytest.mark.parametrize("block,layers,stem_kernel", [("basic", (1, 1, 1, 1), 7), ("bottleneck", (1, 1, 2, 1), 3)])
def test_resnet_matches_torch_after_conversion(tmp_path, block, layers, stem_kernel):
    refs = _torch_refs()
    import torch

    tblock = refs.BasicBlock if block == "basic" else refs.Bottleneck
    tmodel = refs.randomize_(refs.ResNet(tblock, layers, num_classes=5, width=8, stem_kernel=stem_kernel), 12).eval()
    path = write(tmp_path, refs.numpy_state(tmodel))
    model = resnet_from_torchvision(path).eval()
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        want = tmodel(torch.from_numpy(x)).numpy()
    got = model(flow.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_gpt2_matches_torch_after_conversion(tmp_path):
    refs = _torch_refs()
    import torch

    tmodel = refs.randomize_(refs.GPT2Model(vocab=97, n_pos=16, n_layer=2, d=32, n_head=4), 13).eval()
    path = write(tmp_path, refs.numpy_state(tmodel))  # HF GPT2Model names, Conv1D layout, mask buffers
    model = gpt2_from_hf(path, n_head=4).eval()
    idx = np.random.default_rng(1).integers(0, 97, (2, 11))
    with torch.no_grad():
        want = tmodel(torch.from_numpy(idx)).numpy()
    got = model(flow.from_numpy(idx)).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_bert_matches_torch_after_conversion(tmp_path):
    refs = _torch_refs()
    import torch

    tmodel = refs.randomize_(
        refs.BertForPreTraining(vocab=101, h=32, layers=2, n_head=4, inter=64, max_pos=24), 14
    ).eval()
    path = write(tmp_path, tmodel.hf_state())
    ids = np.random.default_rng(2).integers(0, 101, (2, 9))
    mask = np.ones((2, 9), np.int64)
    mask[1, 6:] = 0
    types = np.zeros((2, 9), np.int64)
    types[:, 5:] = 1
    t_in = [torch.from_numpy(a) for a in (ids, mask, types)]
    f_in = [flow.from_numpy(a) for a in (ids, mask, types)]
    with torch.no_grad():
        want_h, want_pooled = (t.numpy() for t in tmodel.bert(*t_in))
        want_mlm = tmodel(*t_in).numpy()
    encoder = bert_from_hf(path, num_attention_heads=4).eval()
    got_h, got_pooled = encoder(*f_in)
    keep = mask.astype(bool)  # padded positions' states are not defined the same way everywhere
    np.testing.assert_allclose(got_h.detach().numpy()[keep], want_h[keep], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_pooled.detach().numpy(), want_pooled, rtol=1e-4, atol=1e-4)
    mlm = bert_from_hf(path, head="mlm", num_attention_heads=4).eval()
    np.testing.assert_allclose(mlm(*f_in).detach().numpy()[keep], want_mlm[keep], rtol=1e-4, atol=1e-3)
