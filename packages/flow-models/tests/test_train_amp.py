"""flow-train --amp bf16|fp16: accuracy against float32, dynamic loss scaling, checkpoints, the missing plugin.

The runs are shortened versions of the README's (fixed seeds, so each comparison is deterministic):
LeNet on digits for 6 epochs (about 95% test accuracy), the character GPT with 2 layers of 64 for
120 steps, fp16 runs of 100 steps with a short growth interval so that the loss scale both grows
and backs off within the run.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math

import numpy as np
import pytest

import flow
from flow_models.data import load_cpython_docs
from flow_models.train import Trainer
from flow_models.train.cli import main
from flow_models.train.config import load_config_file, resolve_config
from flow_models.train.metrics import unigram_entropy
from flow_models.train.options import SETTINGS

needs_flow_amp = pytest.mark.skipif(importlib.util.find_spec("flow_amp") is None, reason="needs flow-amp")

LENET = ["lenet", "--dataset", "digits", "--epochs", "6", "--seed", "0"]
GPT = [
    "gpt2-char",
    "--dataset",
    "cpython-docs",
    "--max-steps",
    "120",
    "--model-arg",
    "n_layer=2",
    "--model-arg",
    "n_embd=64",
    "--model-arg",
    "block_size=64",
]
SMALL_GPT = {"n_layer": 2, "n_embd": 64, "block_size": 64}


def train(tmp_path, *args: str, name: str = "run") -> dict:
    """Run flow-train in this process; returns summary.json of the run."""
    out = tmp_path / name
    assert main([*args, "--output", str(out), "--no-progress"]) == 0
    return json.loads((out / "summary.json").read_text())


def records(run_dir, kind: str = "train") -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def assert_float32_master_weights(checkpoint_path) -> dict:
    """Every floating tensor of the model and optimizer state in the checkpoint is float32."""
    state = flow.load(str(checkpoint_path))
    tensors = list(state["model"].values())
    for group in state["optimizer"]["state"].values():
        tensors += [v for v in group.values() if isinstance(v, flow.Tensor)]
    floating = [t for t in tensors if t.dtype.is_floating_point]
    assert floating and all(t.dtype == flow.float32 for t in floating), {t.dtype for t in floating}
    return state


# -- the setting ------------------------------------------------------------------------------------------
def test_amp_is_a_setting_with_none_as_default_and_off_as_its_synonym(tmp_path, capsys):
    setting = SETTINGS["amp"]
    assert [setting.convert(v) for v in ("bf16", "fp16", "none", "off")] == ["bf16", "fp16", "none", "none"]
    assert resolve_config("lenet", "vision", {}, {}).amp == "none"
    (tmp_path / "c.yaml").write_text("amp: fp16\n")
    (tmp_path / "off.toml").write_text('amp = "off"\n')
    assert load_config_file(str(tmp_path / "c.yaml")) == {"amp": "fp16"}
    assert load_config_file(str(tmp_path / "off.toml")) == {"amp": "none"}
    assert main(["lenet", "--amp", "fp32", "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--amp" in err[0] and "one of bf16, fp16, none; off means none, got fp32" in err[0]


def test_amp_without_flow_amp_is_one_line_naming_the_package(tmp_path, capsys, monkeypatch):
    """As if flow-amp were not installed: flow's registry provides no ``flow.amp`` and no distribution
    of that name exists. The error comes before any data is read."""
    from flow import provided

    real_get, real_version = provided.get, importlib.metadata.version

    def get(name, default=None):
        return default if name in ("amp", "autocast") else real_get(name, default)

    def version(dist):
        if dist == "flow-amp":
            raise importlib.metadata.PackageNotFoundError(dist)
        return real_version(dist)

    monkeypatch.setattr(provided, "get", get)
    monkeypatch.setattr(importlib.metadata, "version", version)
    with monkeypatch.context() as m:
        m.setattr("flow_models.train.build.load_data", lambda *a, **k: pytest.fail("data was read"))
        for mode in ("--eager", "--graph"):
            assert main(["lenet", "--amp", "bf16", mode, "--output", str(tmp_path / "run")]) == 2
            out, err = capsys.readouterr()
            lines = err.strip().splitlines()
            assert len(lines) == 1 and "Traceback" not in out + err, err
            assert lines[0].startswith("flow-train: error: --amp needs the 'flow-amp' package"), lines[0]
            assert "pip install flow-amp" in lines[0]
    assert not (tmp_path / "run").exists()
    # float32 runs never ask for it
    assert main(["lenet", "--amp", "off", "--max-steps", "1", "--output", str(tmp_path / "f32"), "--no-progress"]) == 0


@needs_flow_amp
def test_graph_amp_without_the_graph_pass_says_so(tmp_path, capsys, monkeypatch):
    from flow.registry import REGISTRY

    monkeypatch.delitem(REGISTRY.passes._passes, "amp")
    assert main(["lenet", "--graph", "--amp", "bf16", "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'amp' graph pass" in err[0] and "--eager" in err[0], err


# -- accuracy against float32 -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lenet_fp32(tmp_path_factory) -> dict:
    return train(tmp_path_factory.mktemp("lenet"), *LENET, name="fp32")


@needs_flow_amp
@pytest.mark.parametrize("mode", ["--eager", "--graph"])
def test_lenet_bf16_within_half_a_point_of_fp32(tmp_path, lenet_fp32, mode):
    summary = train(tmp_path, *LENET, "--amp", "bf16", mode, name="bf16")
    fp32, bf16 = lenet_fp32["test"]["accuracy"], summary["test"]["accuracy"]
    print(f"lenet/digits 6 epochs {mode}: fp32 {100 * fp32:.2f}%, bf16 {100 * bf16:.2f}%")
    assert fp32 > 0.9 and bf16 > 0.9
    assert abs(bf16 - fp32) <= 0.005
    # the run did compute in bfloat16 (a float32 run with the same seed gives the same loss to the bit)
    assert summary["test"]["loss"] != lenet_fp32["test"]["loss"]
    assert summary["amp"] == "bf16" and lenet_fp32["amp"] == "none"
    state = assert_float32_master_weights(tmp_path / "bf16" / "checkpoint.safetensors")
    assert state["config"]["amp"] == "bf16" and state["grad_scaler"] == {}  # bf16 needs no loss scaling


@needs_flow_amp
def test_char_gpt_bf16_test_loss_within_2_percent_of_fp32(tmp_path):
    h = unigram_entropy(load_cpython_docs().train.ids)
    fp32 = train(tmp_path, *GPT, name="fp32")["test"]["loss"]
    bf16 = train(tmp_path, *GPT, "--amp", "bf16", name="bf16")["test"]["loss"]
    print(f"char-gpt 120 steps: test loss fp32 {fp32:.4f}, bf16 {bf16:.4f} ({100 * (bf16 / fp32 - 1):+.2f}%)")
    assert fp32 < h - 0.5 and bf16 < h - 0.5  # both learned far more than character frequencies
    assert abs(bf16 - fp32) <= 0.02 * fp32 and bf16 != fp32  # close, but computed in bfloat16


# -- fp16 with dynamic loss scaling -----------------------------------------------------------------------
@needs_flow_amp
@pytest.mark.parametrize(
    "model,graph",
    [("dlrm-small", False), ("dlrm-small", True), ("gpt2-char", False)],
    ids=["mlp-eager", "mlp-graph", "gpt-eager"],
)
def test_fp16_with_dynamic_loss_scaling_trains_without_divergence(tmp_path, model, graph):
    """dlrm-small (MLPs over dense features and embeddings) and the character GPT in float16: every loss
    finite, the loss falls, and the loss scale both grows (after 10 clean steps) and backs off (on
    overflowing gradients, whose steps are skipped) during the run."""
    from flow_models import registry as zoo

    flags = {"amp": "fp16", "graph": graph, "max_steps": 100, "log_every": 1, "progress": False}
    flags["output"] = str(tmp_path / "run")
    if model == "gpt2-char":
        flags["model_args"] = SMALL_GPT
    trainer = Trainer(resolve_config(model, zoo.model_info(model).family, {}, flags), log=lambda *a: None)
    trainer.amp.scaler.set_growth_interval(10)  # the default (2,000) would not grow within 100 steps
    summary = trainer.run()
    steps = records(tmp_path / "run")
    losses = [r["loss"] for r in steps]
    scales = [r["loss_scale"] for r in steps]
    assert len(steps) == 100 and all(math.isfinite(v) for v in losses)
    assert np.mean(losses[-10:]) < 0.8 * np.mean(losses[:10])
    assert all(s > 0 and math.isfinite(s) for s in scales)
    grew = sum(b > a for a, b in zip(scales, scales[1:]))
    backed_off = sum(b < a for a, b in zip(scales, scales[1:]))
    print(
        f"{model} fp16 graph={graph}: loss {losses[0]:.3f} -> {losses[-1]:.3f}, "
        f"scale grew {grew}x, backed off {backed_off}x"
    )
    assert grew >= 1 and backed_off >= 1
    metric = summary["test"][trainer.task.metric]
    assert math.isfinite(metric)
    state = assert_float32_master_weights(tmp_path / "run" / "checkpoint.safetensors")
    assert state["grad_scaler"]["scale"] == scales[-1] and state["grad_scaler"]["growth_interval"] == 10


@needs_flow_amp
def test_fp16_resume_continues_with_the_saved_loss_scale(tmp_path):
    """The loss scale backs off within the first 30 of these 90 steps; a run stopped at step 30 and
    resumed must go on from the scale it had (recorded in metrics.jsonl), not from the initial one."""
    common = ["lenet", "--epochs", "2", "--log-every", "1", "--amp", "fp16"]
    straight = train(tmp_path, *common, name="straight")
    train(tmp_path, *common, "--max-steps", "30", name="resumed")
    ckpt = tmp_path / "resumed" / "checkpoint.safetensors"
    saved = flow.load(str(ckpt))["grad_scaler"]
    assert saved["scale"] < 2.0**16  # it backed off before the stop
    resumed = train(tmp_path, "--resume", str(ckpt), name="resumed")
    assert resumed["steps"] == straight["steps"] == 90 and resumed["amp"] == "fp16"
    assert resumed["test"] == straight["test"]

    def trace(name):
        return [(r["step"], r["loss"], r["loss_scale"]) for r in records(tmp_path / name)]

    assert trace("resumed") == trace("straight")
    a = assert_float32_master_weights(tmp_path / "straight" / "checkpoint.safetensors")["model"]
    b = assert_float32_master_weights(ckpt)["model"]
    assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)
