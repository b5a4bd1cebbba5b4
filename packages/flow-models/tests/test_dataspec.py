"""What models consume and datasets produce: the declarations are true, and flow-train checks a pair first."""

from __future__ import annotations

import numpy as np
import pytest
from test_data_readers import criteo_line, write_cifar, write_images, write_mnist, write_speech_commands

import flow
import flow_models
from flow_models import registry as zoo
from flow_models.dataspec import DataSpec, fitted_model_args, mismatch, sample_mismatch
from flow_models.train import build
from flow_models.train.build import fit_fields
from flow_models.train.cli import main
from flow_models.train.config import TrainError, resolve_config
from flow_models.train.preflight import preflight


# -- datasets: each declaration against the samples its reader returns ----------------------------------
def _text(p):
    (p / "t.txt").write_text("the quick brown fox jumps over the lazy dog. " * 30)
    return {"path": p / "t.txt", "block_size": 12}


def _criteo(p):
    (p / "c.tsv").write_text("\n".join(criteo_line(i % 2, [i] * 13, ["0a0b0c0d"] * 26) for i in range(20)))
    return {"path": p / "c.tsv", "table_sizes": 50}


DATASET_CASES = {
    "digits": lambda p: {},
    "mnist": lambda p: (write_mnist(p / "m"), {"root": p / "m"})[1],
    "fashion-mnist": lambda p: (write_mnist(p / "f"), {"root": p / "f"})[1],
    "cifar10": lambda p: (write_cifar(p / "c"), {"root": p / "c"})[1],
    "image-folder": lambda p: (write_images(p / "i"), {"root": p / "i", "mode": "L", "size": 7})[1],
    "cpython-docs": lambda p: {"block_size": 16, "max_chars": 20_000},
    "text-file": _text,
    "synthetic-recsys": lambda p: {"samples": 600, "table_size": 40},
    "criteo": _criteo,
    "synthetic-speech": lambda p: {"per_class": 6, "duration": 0.25},
    "synthetic-speech-ctc": lambda p: {"utterances": 30},
    "speech-commands": lambda p: (
        write_speech_commands(p / "s", with_lists=True),
        {"root": p / "s", "sample_rate": 8000, "length": 3000},
    )[1],
}


def test_every_model_and_dataset_of_the_zoo_declares_what_it_takes_or_gives():
    own = {n for n in flow_models.list_models() if zoo.model_info(n).plugin == zoo.BUILTIN_PLUGIN}
    assert own and all(isinstance(zoo.model_info(n).input_spec(), DataSpec) for n in own)
    assert set(DATASET_CASES) == {
        n for n in flow_models.list_datasets() if zoo.dataset_info(n).plugin == zoo.BUILTIN_PLUGIN
    }


@pytest.mark.parametrize("name", sorted(DATASET_CASES))
def test_a_dataset_declaration_matches_its_samples(tmp_path, name):
    kwargs = DATASET_CASES[name](tmp_path)
    entry = zoo.dataset_info(name)
    spec = entry.output_spec(**kwargs)
    splits = entry.factory(**kwargs)
    assert spec.task == splits.task
    for part in (splits.train, splits.test):
        assert sample_mismatch(spec, part[0]) is None, (spec, [getattr(a, "shape", a) for a in part[0]])
    for key, value in fitted_model_args(spec).items():  # what the model is fitted with before loading
        assert splits.model_args[key] == value, key


def test_the_ctc_set_as_waveforms_declares_waveforms():
    spec = zoo.dataset_info("synthetic-speech-ctc").output_spec(features="wave")
    splits = flow_models.get_dataset("synthetic-speech-ctc", utterances=20, features="wave")
    assert spec.kinds == ("waveform",) and sample_mismatch(spec, splits.train[0]) is None
    assert splits.model_args["n_features"] == fitted_model_args(spec)["n_features"] == 1
    with pytest.raises(ValueError, match="features must be"):
        zoo.dataset_info("synthetic-speech-ctc").output_spec(features="mel")


# -- models: a batch shaped by the declaration goes through, with the output the task expects ---------
SMALL = {  # one variant per config class, shrunk so the test stays fast
    "lenet": {},
    "lenet-mnist": {},
    "resnet18": {"width": 8},
    "resnet50": {"width": 8},
    "resnet18-cifar": {"width": 8},
    "vgg11": {"hidden": 16},
    "mobilenet-v2": {"width_mult": 0.25},
    "vit-tiny": {"image_size": 32, "depth": 1, "embed_dim": 32, "num_heads": 2},
    "gpt2-char": {"n_layer": 1, "n_embd": 32, "n_head": 2},
    "gpt2": {"n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 100, "block_size": 32},
    "bert-tiny": {"vocab_size": 100},
    "bert-base-mlm": {
        "vocab_size": 100,
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 64,
    },
    "bert-base-cls": {
        "vocab_size": 100,
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 64,
    },
    "wide-deep": {"table_sizes": (10, 10, 10), "num_dense": 4},
    "dlrm-small": {"table_sizes": (10, 10, 10), "num_dense": 4},
    "m5": {"num_classes": 5},
    "crnn-ctc": {"n_features": 20, "conv_channels": (8, 8), "rnn_hidden": 8, "rnn_layers": 1},
}
FREE_SIZE = {"image": 20, "tokens": 8, "waveform": 900, "features": 30}


def _batch(spec: DataSpec, cfg, n: int = 2):
    kind = spec.kinds[0]
    sizes = [
        s if s is not None else max(FREE_SIZE[kind], (spec.min_shape or [0] * 3)[k] or 0)
        for k, s in enumerate(spec.shape)
    ]
    if kind == "tokens":
        return (flow.tensor(np.random.default_rng(0).integers(0, 50, (n, *sizes))),)
    if kind == "tabular":
        return (flow.randn(n, sizes[0]), flow.tensor(np.ones((n, sizes[1]), np.int64)))
    return (flow.randn(n, *sizes),)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_a_model_takes_what_it_declares(name):
    entry = zoo.model_info(name)
    cfg = entry.make_config(None, SMALL[name])
    spec = entry.input_spec(cfg)
    model = zoo.create(name, cfg)
    model.eval()
    with flow.no_grad():
        out = model(*_batch(spec, cfg))
    out = out[0] if isinstance(out, (tuple, list)) else out
    if spec.task == "classification":
        classes = getattr(cfg, "num_classes", None) or cfg.num_labels
        assert tuple(out.shape) == (2, classes)
    elif spec.task in ("lm", "masked-lm"):
        assert tuple(out.shape) == (2, FREE_SIZE["tokens"], cfg.vocab_size)
    elif spec.task == "recsys":
        assert out.numel() == 2
    elif spec.task == "ctc":
        assert out.shape[0] == 2 and out.shape[-1] == cfg.vocab_size
    else:  # embedding: hidden states, nothing flow-train could train against
        assert spec.task == "embedding" and out.shape[0] == 2


def test_vgg_minimum_size_is_real():
    cfg = zoo.model_info("vgg11").make_config(None, {"hidden": 8, "in_channels": 1})
    assert zoo.model_info("vgg11").input_spec(cfg).min_shape == (None, 32, 32)
    with pytest.raises(Exception):  # one pixel less and the last pooling has no output
        flow_models.create("vgg11", cfg)(flow.randn(1, 1, 31, 31))


# -- the pair check ---------------------------------------------------------------------------------------
@pytest.fixture
def nothing_is_built(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the pair was checked only after loading data / building the model")

    monkeypatch.setattr(build, "load_data", refuse)
    monkeypatch.setattr(build, "build_model", refuse)


@pytest.mark.parametrize(
    "model,dataset,why",
    [
        ("gpt2-char", "digits", "the dataset is for classification, the model for lm"),
        ("lenet", "cpython-docs", "the dataset is for lm, the model for classification"),
        ("m5", "digits", "the dataset gives image, the model takes waveform"),
        ("crnn-ctc", "synthetic-speech", "the dataset is for classification, the model for ctc"),
        ("vgg11", "digits", "H is 8, below the model's minimum of 32"),
        ("vit-tiny", "digits", "image_size 8 is not a multiple of patch_size 16"),
        ("bert-base-mlm", "cpython-docs", "the dataset is for lm, the model for masked-lm"),
        ("dlrm-small", "digits", "the dataset is for classification, the model for recsys"),
    ],
)
def test_a_model_that_cannot_consume_the_dataset_is_a_one_line_error_naming_both(
    tmp_path, capsys, nothing_is_built, model, dataset, why
):
    code = main([model, "--dataset", dataset, "--output", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"model '{model}' cannot train on dataset '{dataset}'" in err[0] and why in err[0], err[0]


def test_the_error_lists_the_datasets_the_model_can_train_on(tmp_path, capsys, nothing_is_built):
    main(["lenet", "--dataset", "cpython-docs", "--output", str(tmp_path)])
    line = capsys.readouterr().err
    assert "datasets 'lenet' can train on: cifar10, digits, fashion-mnist, image-folder, mnist" in line


def test_fitting_and_overrides_are_part_of_the_check(tmp_path, nothing_is_built):
    cfg = resolve_config("lenet", "vision", {}, {"output": str(tmp_path)})
    plan = preflight(cfg)  # lenet is fitted to digits' 1 x 8 x 8
    assert plan.model_spec.shape == (1, 8, 8) == plan.data_spec.shape
    cfg = resolve_config("lenet", "vision", {}, {"output": str(tmp_path), "model_args": {"input_size": 28}})
    with pytest.raises(TrainError, match="H is 8, not 28"):  # --model-arg wins over the fitting
        preflight(cfg)
    cfg = resolve_config("dlrm-small", "recsys", {}, {"output": str(tmp_path), "model_args": {"table_sizes": [10, 10]}})
    with pytest.raises(TrainError, match="sparse is 26, not 2"):
        preflight(cfg)
    cfg = resolve_config("resnet18", "vision", {}, {"output": str(tmp_path)})
    assert preflight(cfg).model_config.in_channels == 1  # ResNet fitted to grey images


def test_registration_checks_declarations():
    reg = zoo.ZooRegistry()
    cfg_cls = zoo.model_info("lenet").config_cls
    with pytest.raises(zoo.ZooError, match="consumes must be a DataSpec"):
        reg.register_model("x", lambda c: None, cfg_cls, "toys", "doc", consumes="image")
    with pytest.raises(zoo.ZooError, match="produces must be a DataSpec"):
        reg.register_dataset("d", lambda: None, "toys", "doc", produces=3)
    reg.register_model("y", lambda c: None, cfg_cls, "toys", "doc", consumes=lambda c: "image")
    with pytest.raises(zoo.ZooError, match="returned str, not a DataSpec"):
        reg._models["y"].input_spec()
    with pytest.raises(ValueError, match="input kind must be one of"):
        DataSpec("classification", "video", (1,))
    with pytest.raises(ValueError, match="dimensions"):
        DataSpec("classification", "image", (1, 8))


def test_an_undeclared_dataset_is_still_held_to_the_model_task(tmp_path):
    """A plugin's dataset without a declaration: the task is checked once loaded, before the model is built."""
    reg = zoo.registry()
    reg.register_dataset("undeclared-digits", lambda: flow_models.get_dataset("digits"), "vision", "Digits, again.")
    try:
        with pytest.raises(TrainError, match="the dataset is for classification, the model for lm"):
            from flow_models.train.loop import Trainer

            Trainer(resolve_config("gpt2-char", "nlp", {}, {"dataset": "undeclared-digits", "output": str(tmp_path)}))
    finally:
        del reg._datasets["undeclared-digits"]


def test_mismatch_and_describe():
    image = DataSpec("classification", "image", (3, 32, 32))
    assert mismatch(image, DataSpec("classification", "image", (3, None, None), min_shape=(None, 32, 32))) is None
    assert mismatch(image, DataSpec("classification", "image", (1, None, None))) == "C is 3, not 1"
    assert DataSpec("ctc", ("features", "waveform"), (20, None)).describe() == "ctc of features or waveform (20, T)"
    assert DataSpec("lm", "tokens").describe() == "lm of tokens (T,)"
    assert fit_fields(["in_channels", "input_size"], {"image_size": 8, "in_channels": 1}) == {
        "input_size": 8,
        "in_channels": 1,
    }
