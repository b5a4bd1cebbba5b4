"""The model zoo: the registry and its plugin hook, every model's parameter count, forward and backward."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
from zoo_refs import hf_bert_shapes, hf_gpt2_shapes, torchvision_resnet_shapes

import flow
import flow.plugins
import flow_models
from flow.errors import PluginError
from flow.plugins import hookimpl
from flow_models import registry as zoo

FAMILIES = {
    "vision": {
        "lenet",
        "lenet-mnist",
        "resnet18",
        "resnet34",
        "resnet50",
        "resnet18-cifar",
        "vgg11",
        "vgg11-bn",
        "mobilenet-v2",
        "vit-tiny",
        "vit-small",
    },
    "nlp": {"gpt2", "gpt2-char", "bert-base", "bert-base-mlm", "bert-base-cls", "bert-tiny"},
    "recsys": {"wide-deep", "dlrm", "dlrm-small"},
    "speech": {"m5", "crnn-ctc"},
}


# -- the registry -----------------------------------------------------------------------------------
def test_every_zoo_model_is_registered_by_the_models_plugin():
    names = flow_models.list_models()
    for family, expected in FAMILIES.items():
        assert expected <= set(flow_models.list_models(family)), family
    for name in set().union(*FAMILIES.values()):
        assert name in names
        entry = flow_models.model_info(name)
        assert entry.plugin == "models"
        assert dataclasses.is_dataclass(entry.config_cls)
        assert len(entry.doc) > 20, name


def test_get_config_returns_a_fresh_dataclass_with_the_variant_defaults():
    cfg = flow_models.get_config("resnet50")
    assert (cfg.block, tuple(cfg.layers)) == ("bottleneck", (3, 4, 6, 3))
    cfg.num_classes = 3
    assert flow_models.get_config("resnet50").num_classes == 1000
    assert flow_models.get_config("resnet18", stem="cifar").stem == "cifar"
    lenet = flow_models.get_config("lenet")
    assert (lenet.input_size, lenet.in_channels, lenet.num_classes) == (8, 1, 10)  # flow-train's digits default


def test_create_applies_overrides_and_rejects_unknown_keys():
    model = flow_models.create("lenet", num_classes=4, activation="relu")
    assert model.config.num_classes == 4 and model.config.activation == "relu"
    assert tuple(model(flow.randn(2, 1, 8, 8)).shape) == (2, 4)
    with pytest.raises(flow_models.ConfigError) as e:
        flow_models.create("lenet", num_clases=4)
    msg = str(e.value)
    assert "num_clases" in msg and "lenet" in msg and "num_classes" in msg and "input_size" in msg
    assert isinstance(e.value, TypeError)
    with pytest.raises(flow_models.ConfigError, match="num_clases"):
        flow_models.get_config("lenet", num_clases=4)


def test_create_takes_a_config_object():
    cfg = flow_models.get_config("lenet", input_size=28)
    assert flow_models.create("lenet", cfg).num_parameters() == 61_706
    with pytest.raises(flow_models.ConfigError, match="LeNetConfig"):
        flow_models.create("lenet", flow_models.get_config("m5"))


def test_unknown_names_suggest_close_ones():
    with pytest.raises(flow_models.UnknownNameError) as e:
        flow_models.create("resnet19")
    assert "resnet18" in str(e.value) and isinstance(e.value, LookupError)
    with pytest.raises(flow_models.UnknownNameError, match="no dataset named"):
        flow_models.get_dataset("no-such-dataset")


@dataclasses.dataclass
class ToyConfig:
    width: int = 4


class Toy(flow_models.ZooModel):
    """A one-layer toy model from a third-party zoo."""

    def __init__(self, config: ToyConfig) -> None:
        super().__init__()
        self.config = config
        self.lin = flow.nn.Linear(3, config.width)

    def forward(self, x):
        return self.lin(x)


def _third_party(register):
    class Plugin:
        @hookimpl
        def flow_models_register(self, registry):
            register(registry)

    return Plugin()


def test_a_third_party_plugin_adds_models_and_datasets_through_the_hook():
    def register(registry):
        registry.register_model(
            "toy", Toy, ToyConfig, family="toys", doc="A toy model for the registry test.", defaults={"width": 5}
        )
        registry.register_dataset("toy-data", lambda n=3: list(range(n)), family="toys", doc="Three numbers.")

    flow.plugins.register(_third_party(register), name="toy_zoo")
    try:
        assert flow_models.list_models("toys") == ["toy"]
        assert flow_models.list_datasets("toys") == ["toy-data"]
        assert flow_models.model_info("toy").plugin == "toy_zoo"
        model = flow_models.create("toy", width=6)
        assert model.num_parameters() == 3 * 6 + 6
        assert flow_models.get_dataset("toy-data", n=2) == [0, 1]
        assert "resnet18" in flow_models.list_models()  # the zoo's own models stay
        flow.plugins.check_pending()  # the hook is declared (by flow-models' plugin)
        assert "toy_zoo" in {i.name for i in flow.plugins.list_plugins()}
    finally:
        flow.plugins.unregister("toy_zoo")
    assert "toy" not in flow_models.list_models()
    assert "toy-data" not in flow_models.list_datasets()


def test_a_duplicate_name_names_the_plugin_that_registered_it_and_rolls_back():
    def register(registry):
        registry.register_model("toy2", Toy, ToyConfig, family="toys", doc="Registered before the clash.")
        registry.register_model("resnet18", Toy, ToyConfig, family="toys", doc="Clashes with the zoo's resnet18.")

    flow.plugins.register(_third_party(register), name="clashing_zoo")
    try:
        with pytest.raises(PluginError) as e:
            flow_models.list_models()
        assert "clashing_zoo" in str(e.value) and "resnet18" in str(e.value) and "'models'" in str(e.value)
    finally:
        flow.plugins.unregister("clashing_zoo")
    names = flow_models.list_models()
    assert "toy2" not in names and flow_models.model_info("resnet18").plugin == "models"


def test_override_replaces_a_model_and_unregistering_gives_it_back():
    def register(registry):
        registry.register_model("lenet", Toy, ToyConfig, family="vision", doc="A replacement lenet.", override=True)

    flow.plugins.register(_third_party(register), name="override_zoo")
    try:
        assert isinstance(flow_models.create("lenet"), Toy)
    finally:
        flow.plugins.unregister("override_zoo")
    assert flow_models.model_info("lenet").plugin == "models"
    assert not isinstance(flow_models.create("lenet"), Toy)


@pytest.mark.parametrize("env", [{"FLOW_PLUGINS": "flow-core"}, {"FLOW_DISABLE_PLUGIN_AUTOLOAD": "1"}])
def test_the_zoo_works_when_flow_skipped_its_plugin(env):
    code = (
        "import flow_models, flow.plugins; "
        "info = {i.name: i for i in flow.plugins.list_plugins()}['models']; "
        "print(info.loaded, flow_models.model_info('resnet18').plugin, "
        "flow_models.create('lenet').num_parameters())"
    )
    run_env = {k: v for k, v in os.environ.items() if k not in ("FLOW_PLUGINS", "FLOW_DISABLE_PLUGIN_AUTOLOAD")}
    proc = subprocess.run(
        [sys.executable, "-c", code], env={**run_env, **env}, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "models", "21386"]


def test_registration_checks_config_class_and_doc():
    reg = zoo.ZooRegistry()
    with pytest.raises(zoo.ZooError, match="dataclass"):
        reg.register_model("x", Toy, dict, family="toys", doc="doc")
    with pytest.raises(zoo.ZooError, match="doc"):
        reg.register_model("x", lambda cfg: None, ToyConfig, family="toys", doc="")
    with pytest.raises(flow_models.ConfigError, match="depth"):
        reg.register_model("x", Toy, ToyConfig, family="toys", doc="doc", defaults={"depth": 2})


def test_the_hook_module_documents_the_hook():
    from flow_models import hookspecs

    doc = hookspecs.flow_models_register.__doc__
    assert "register_model" in doc and "register_dataset" in doc
    pm = flow.plugins.get_plugin_manager()
    flow_models.list_models()
    assert pm.hook.flow_models_register.has_spec()


# -- parameter counts ------------------------------------------------------------------------------
def lenet_count(in_ch: int, size: int, classes: int) -> int:
    """LeNet-5 by hand: conv 5x5 (6), pool, conv 5x5 (16), pool, 120, 84, classes."""
    after1 = size // 2
    pad2 = 0 if after1 >= 10 else 2
    after2 = (after1 + 2 * pad2 - 4) // 2
    conv = (in_ch * 25 + 1) * 6 + (6 * 25 + 1) * 16
    return conv + (16 * after2 * after2 + 1) * 120 + (120 + 1) * 84 + (84 + 1) * classes


def test_lenet_counts_by_hand():
    assert lenet_count(1, 28, 10) == 61_706  # the classic figure for MNIST
    assert flow_models.create("lenet-mnist").num_parameters() == lenet_count(1, 28, 10)
    assert flow_models.create("lenet").num_parameters() == lenet_count(1, 8, 10) == 21_386
    assert flow_models.create("lenet", in_channels=3, input_size=32).num_parameters() == lenet_count(3, 32, 10)


# the reference counts: torchvision, timm, Hugging Face (with tied embeddings), the DLRM benchmark config
REFERENCE_COUNTS = {
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "mobilenet-v2": 3_504_872,
    "vit-tiny": 5_717_416,
    "vit-small": 22_050_664,
    "dlrm": 8 * 100_000 * 64
    + (13 * 512 + 512)
    + (512 * 256 + 256)
    + (256 * 64 + 64)
    + ((64 + 36) * 512 + 512)
    + (512 * 256 + 256)
    + (256 + 1),
}


@pytest.mark.parametrize("name", sorted(REFERENCE_COUNTS))
def test_parameter_count_matches_the_reference(name):
    model = flow_models.create(name)
    assert model.num_parameters() == REFERENCE_COUNTS[name]
    if name.startswith("resnet"):  # torchvision's names and shapes, so its state dicts map
        block = "bottleneck" if name == "resnet50" else "basic"
        ref = torchvision_resnet_shapes(block, model.config.layers)
        assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == ref


def test_vgg11_count():
    # torchvision vgg11 (no BN): 132,863,336
    assert flow_models.create("vgg11").num_parameters() == 132_863_336


def test_gpt2_124m_builds_with_hf_names():
    model = flow_models.create("gpt2")
    assert model.num_parameters() == 124_439_808
    assert model.lm_head.weight is model.transformer.wte.weight
    ref = hf_gpt2_shapes(prefix="transformer.", buffers=False, lm_head=True)
    conv1d = ("c_attn.weight", "c_proj.weight", "c_fc.weight")
    got = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert set(got) == set(ref)
    for k, shape in ref.items():
        assert got[k] == (shape[::-1] if k.endswith(conv1d) else shape), k


def test_bert_base_counts_and_hf_names():
    # HF: BertModel 109,482,240; BertForMaskedLM 109,514,298; BertForSequenceClassification (2) 109,483,778
    encoder = flow_models.create("bert-base")
    assert encoder.num_parameters() == 109_482_240
    assert {k: tuple(v.shape) for k, v in encoder.state_dict().items()} == hf_bert_shapes(prefix="")
    mlm = flow_models.create("bert-base-mlm", num_hidden_layers=1)
    ref = hf_bert_shapes(layers=1, pooler=False, mlm=True)
    ref.pop("cls.predictions.decoder.bias")
    assert {k: tuple(v.shape) for k, v in mlm.state_dict().items()} == ref
    per_layer = 7_087_872
    assert mlm.num_parameters() + 11 * per_layer == 109_514_298
    cls = flow_models.create("bert-base-cls", num_hidden_layers=1)
    assert cls.num_parameters() + 11 * per_layer == 109_483_778


# where the reference libraries are installed, compare with them directly (nothing is downloaded)
LIBRARY_REFERENCES = {
    "resnet18": ("torchvision", lambda m: m.models.resnet18(weights=None)),
    "resnet50": ("torchvision", lambda m: m.models.resnet50(weights=None)),
    "vgg11": ("torchvision", lambda m: m.models.vgg11(weights=None)),
    "mobilenet-v2": ("torchvision", lambda m: m.models.mobilenet_v2(weights=None)),
    "vit-tiny": ("timm", lambda m: m.create_model("vit_tiny_patch16_224", pretrained=False)),
    "gpt2": ("transformers", lambda m: m.GPT2LMHeadModel(m.GPT2Config())),
    "bert-base": ("transformers", lambda m: m.BertModel(m.BertConfig())),
}


@pytest.mark.parametrize("name", sorted(LIBRARY_REFERENCES))
def test_names_and_count_match_the_reference_library(name):
    lib, build = LIBRARY_REFERENCES[name]
    ref = build(pytest.importorskip(lib))
    model = flow_models.create(name)
    assert model.num_parameters() == sum(p.numel() for p in ref.parameters())
    if lib != "transformers":  # HF GPT-2's Conv1D and buffers differ by design; the converters handle them
        ref_sd = {k: tuple(v.shape) for k, v in ref.state_dict().items()}
        assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == ref_sd


def test_bert_encoder_forward_and_backward():
    model = flow_models.create("bert-tiny", vocab_size=60, num_hidden_layers=1)
    ids = flow.randint(1, 60, (2, 7))
    mask = flow.tensor([[1] * 7, [1] * 4 + [0] * 3])
    states, pooled = model(ids, mask, flow.zeros(2, 7, dtype=flow.int64))
    assert tuple(states.shape) == (2, 7, 128) and tuple(pooled.shape) == (2, 128)
    (states.sum() + pooled.sum()).backward()
    assert all(p.grad is not None for p in model.parameters())


# -- every model runs forward and backward on a small batch ----------------------------------------
def _images(n, c, s):
    return lambda: (flow.randn(n, c, s, s),), lambda: flow.randint(0, 10, (n,))


SMALL = {
    "lenet": ({}, *_images(4, 1, 8), (4, 10)),
    "lenet-mnist": ({}, *_images(2, 1, 28), (2, 10)),
    "resnet18": ({"stem": "cifar", "num_classes": 10}, *_images(2, 3, 32), (2, 10)),
    "resnet34": ({"layers": (1, 1, 1, 1), "width": 8, "num_classes": 10}, *_images(2, 3, 32), (2, 10)),
    "resnet50": ({"layers": (1, 1, 1, 1), "width": 8, "num_classes": 10}, *_images(2, 3, 64), (2, 10)),
    "resnet18-cifar": ({"width": 8}, *_images(2, 3, 32), (2, 10)),
    "vgg11": ({"hidden": 32, "pool_size": 1, "num_classes": 10}, *_images(2, 3, 32), (2, 10)),
    "vgg11-bn": ({"hidden": 32, "pool_size": 2, "num_classes": 10}, *_images(2, 3, 32), (2, 10)),
    "mobilenet-v2": ({"width_mult": 0.25, "num_classes": 10}, *_images(2, 3, 32), (2, 10)),
    "vit-tiny": ({"image_size": 32, "patch_size": 8, "depth": 2, "num_classes": 10}, *_images(2, 3, 32), (2, 10)),
    "vit-small": (
        {"image_size": 16, "patch_size": 4, "depth": 1, "embed_dim": 48, "num_classes": 10},
        *_images(2, 3, 16),
        (2, 10),
    ),
    "gpt2": (
        {"vocab_size": 50, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 32},
        lambda: (flow.randint(0, 50, (2, 12)),),
        lambda: flow.randint(0, 50, (2, 12)),
        (2, 12, 50),
    ),
    "gpt2-char": (
        {"n_layer": 1, "n_embd": 32, "n_head": 2},
        lambda: (flow.randint(0, 65, (2, 16)),),
        lambda: flow.randint(0, 65, (2, 16)),
        (2, 16, 65),
    ),
    "bert-base-mlm": (
        {
            "vocab_size": 60,
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 64,
        },
        lambda: (flow.randint(1, 60, (2, 10)), flow.ones(2, 10, dtype=flow.int64)),
        lambda: flow.where(
            flow.rand(2, 10) < 0.3, flow.randint(0, 60, (2, 10)), flow.full((2, 10), -100, dtype=flow.int64)
        ),
        (2, 10, 60),
    ),
    "bert-base-cls": (
        {
            "vocab_size": 60,
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "num_labels": 3,
        },
        lambda: (flow.randint(1, 60, (2, 10)),),
        lambda: flow.randint(0, 3, (2,)),
        (2, 3),
    ),
    "bert-tiny": (
        {"head": "cls", "vocab_size": 60, "num_hidden_layers": 1},
        lambda: (flow.randint(1, 60, (2, 10)),),
        lambda: flow.randint(0, 2, (2,)),
        (2, 2),
    ),
    "wide-deep": (
        {"table_sizes": (50, 20, 30), "embedding_dim": 8, "hidden": (16, 8)},
        lambda: (flow.randn(4, 13), flow.randint(0, 20, (4, 3))),
        lambda: flow.randint(0, 2, (4,)),
        (4, 1),
    ),
    "dlrm": (
        {"table_sizes": (50, 20, 30), "embedding_dim": 8, "bottom_mlp": (16, 8), "top_mlp": (16, 1)},
        lambda: (flow.randn(4, 13), flow.randint(0, 20, (4, 3, 2))),
        lambda: flow.randint(0, 2, (4,)),
        (4, 1),
    ),
    "dlrm-small": (
        {},
        lambda: (flow.randn(4, 13), flow.randint(0, 1000, (4, 8))),
        lambda: flow.randint(0, 2, (4,)),
        (4, 1),
    ),
    "m5": ({"num_classes": 10}, lambda: (flow.randn(2, 1, 8000),), lambda: flow.randint(0, 10, (2,)), (2, 10)),
    "crnn-ctc": (
        {"n_features": 16, "conv_channels": (16, 16), "rnn_hidden": 16, "rnn_layers": 2},
        lambda: (flow.randn(2, 16, 40),),
        lambda: flow.randint(1, 29, (2, 4)),
        (2, 10, 29),
    ),
}


def test_every_model_has_a_small_case():
    big_only = {"bert-base"}  # the bare encoder returns (states, pooled): test_bert_encoder_forward_and_backward
    assert set(SMALL) | big_only == set().union(*FAMILIES.values())


@pytest.mark.parametrize("name", sorted(SMALL))
def test_forward_and_backward(name):
    flow.manual_seed(0)
    overrides, inputs, target, out_shape = SMALL[name]
    model = flow_models.create(name, **overrides)
    assert model.__doc__ and type(model).__doc__.strip()
    assert isinstance(model.num_parameters(), int) and model.num_parameters() > 0
    out = model(*inputs())
    assert tuple(out.shape) == out_shape
    loss = model.loss(out, target())
    assert loss.ndim == 0 and np.isfinite(loss.item())
    loss.backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, f"{name}: no gradient for {pname}"
        assert tuple(p.grad.shape) == tuple(p.shape)
        assert np.isfinite(p.grad.numpy()).all(), f"{name}: non-finite gradient for {pname}"


def test_lenet_takes_flat_and_channel_less_digits():
    model = flow_models.create("lenet")
    x = flow.randn(3, 1, 8, 8)
    want = model(x).detach().numpy()
    np.testing.assert_allclose(model(x.reshape(3, 64)).detach().numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(model(x.reshape(3, 8, 8)).detach().numpy(), want, rtol=1e-6)


def test_lenet_trains_on_a_tiny_batch():
    flow.manual_seed(0)
    model = flow_models.create("lenet", activation="relu")
    opt = flow.optim.Adam(model.parameters(), lr=1e-2)
    x, y = flow.randn(16, 1, 8, 8), flow.randint(0, 10, (16,))
    first = None
    for _ in range(40):
        opt.zero_grad()
        loss = model.loss(model(x), y)
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < 0.5 * first


def test_gpt_generate():
    flow.manual_seed(0)
    model = flow_models.create("gpt2-char", n_layer=1, n_embd=32, n_head=2, block_size=8)
    idx = flow.randint(0, 65, (2, 3))
    greedy = model.generate(idx, 10, temperature=0)
    assert tuple(greedy.shape) == (2, 13) and greedy.dtype == flow.int64
    np.testing.assert_array_equal(greedy[:, :3].numpy(), idx.numpy())
    # top_k=1 sampling is greedy decoding; the context is cropped to block_size past 8 tokens
    np.testing.assert_array_equal(model.generate(idx, 10, temperature=0.7, top_k=1).numpy(), greedy.numpy())
    a = model.generate(idx, 5, temperature=1.0, top_k=5, generator=flow.Generator().manual_seed(3))
    b = model.generate(idx, 5, temperature=1.0, top_k=5, generator=flow.Generator().manual_seed(3))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert model.training  # generate restores the mode
    with pytest.raises(ValueError, match="block_size"):
        model(flow.randint(0, 65, (1, 9)))


def test_dlrm_dot_interaction_matches_numpy():
    flow.manual_seed(0)
    model = flow_models.create("dlrm", table_sizes=(10, 10, 10), embedding_dim=4, bottom_mlp=(4,), top_mlp=(1,))
    dense, sparse = flow.randn(2, 13), flow.randint(0, 10, (2, 3))
    x = model.bot_l(dense)
    embs = [t(sparse[:, i : i + 1]) for i, t in enumerate(model.emb_l)]
    got = model.interact(x, embs).detach().numpy()
    feats = np.stack([x.detach().numpy()] + [e.detach().numpy() for e in embs], axis=1)
    z = feats @ feats.transpose(0, 2, 1)
    want = [np.concatenate([feats[b, 0], [z[b, i, j] for i in range(4) for j in range(i)]]) for b in range(2)]
    np.testing.assert_allclose(got, np.stack(want), rtol=1e-5, atol=1e-6)
    # ids given per table as (indices, offsets) bags give the same as a (B, tables) id tensor
    per_table = [(sparse[:, i].contiguous(), flow.tensor([0, 1])) for i in range(3)]
    np.testing.assert_allclose(
        model(dense, per_table).detach().numpy(), model(dense, sparse).detach().numpy(), rtol=1e-6
    )


def test_crnn_ctc_lengths_and_greedy_decode():
    model = flow_models.create("crnn-ctc", n_features=8, conv_channels=(8, 8), rnn_hidden=8, rnn_layers=1).eval()
    assert model.output_lengths(40) == 10 and model.output_lengths(37) == 10
    np.testing.assert_array_equal(model.output_lengths(flow.tensor([40, 21])).numpy(), [10, 6])
    scores = flow.tensor([[[0.0, 5, 0], [0, 5, 0], [5, 0, 0], [0, 5, 0], [0, 0, 5]]])
    log_probs = flow.nn.functional.log_softmax(scores, dim=-1)
    assert model.greedy_decode(log_probs) == [[1, 1, 2]]
    assert model.greedy_decode(log_probs, lengths=[2]) == [[1]]
    out = model(flow.randn(2, 8, 40))
    loss = model.loss(out, flow.tensor([1, 2, 3, 4, 5]), flow.tensor([10, 8]), flow.tensor([3, 2]))
    assert np.isfinite(loss.item())


def test_m5_scales_with_the_sample_rate_and_pads_short_waveforms():
    m16 = flow_models.create("m5")
    assert (m16.conv1.kernel_size, m16.conv1.stride) == ((80,), (16,))
    m8 = flow_models.create("m5", sample_rate=8000, num_classes=6)
    assert (m8.conv1.kernel_size, m8.conv1.stride) == ((40,), (8,))
    assert tuple(m8(flow.randn(2, 4000)).shape) == (2, 6)
    assert tuple(m16(flow.randn(2, 1, 100)).shape) == (2, 35)  # padded up to min_samples
    m16.eval()
    x = flow.randn(1, 1, 300)
    padded = flow.nn.functional.pad(x, (0, m16.min_samples - 300))
    np.testing.assert_allclose(m16(x).detach().numpy(), m16(padded).detach().numpy(), rtol=1e-6)


def test_models_are_zoo_models_with_num_parameters():
    for name in ("resnet18-cifar", "m5", "wide-deep"):
        model = flow_models.create(name)
        assert isinstance(model, flow_models.ZooModel)
        assert model.num_parameters() == sum(int(np.prod(p.shape)) for p in model.parameters())
        assert model.num_parameters(trainable_only=True) == model.num_parameters()
