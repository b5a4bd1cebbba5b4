"""flow.save / flow.load: safetensors + JSON structure, atomic writes, corruption, foreign files."""

from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter, OrderedDict

import numpy as np
import pytest

import flow
import flow.serialization as ser
from flow.errors import FlowError
from flow.serialization import CheckpointError, load, save


def nested():
    w = flow.randn(3, 4)
    return {
        "model": {"fc.weight": w, "fc.bias": flow.zeros(4), "bn.num_batches": flow.tensor(7)},
        "tied": w,
        "half": flow.ones(2, dtype=flow.float16),
        "bf16": flow.tensor([1.5, -2.25], dtype=flow.bfloat16),
        "mask": flow.tensor([True, False]),
        "ints": flow.tensor([1, 2, 3], dtype=flow.int32),
        "scalar": flow.tensor(3.0),
        "empty": flow.zeros(0, 5),
        "noncontig": flow.tensor(np.arange(12.0).reshape(3, 4).T.copy().T),
        "epoch": 3, "lr": 1e-3, "best": math.inf, "nan": math.nan, "name": "run", "flag": False, "none": None,
        "list": [1, "a", [2.0, None], (3, 4)], "tuple": (flow.ones(1), 2),
        8: "int key", (1, 2): "tuple key", "np": np.arange(4, dtype=np.int16), "npscalar": np.float32(2.5),
        "counter": Counter([3, 3, 5]), "ordered": OrderedDict([("b", 1), ("a", 2)]),
        "dtype": flow.bfloat16, "device": flow.device("cpu"),
    }


def assert_same(a, b):
    if isinstance(a, flow.Tensor):
        assert isinstance(b, flow.Tensor) and a.dtype is b.dtype and tuple(a.shape) == tuple(b.shape)
        np.testing.assert_array_equal(a.detach().numpy().astype(np.float64) if a.dtype is flow.bfloat16
                                      else a.detach().numpy(),
                                      b.detach().numpy().astype(np.float64) if b.dtype is flow.bfloat16
                                      else b.detach().numpy())
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b and type(a) is type(b) or (isinstance(a, np.generic) and a == b)


def test_round_trip(tmp_path):
    obj = nested()
    save(obj, tmp_path / "ck.flow")
    back = load(tmp_path / "ck.flow")
    assert_same({k: v for k, v in obj.items() if k != "npscalar"}, {k: v for k, v in back.items() if k != "npscalar"})
    assert back["npscalar"] == 2.5
    assert back["tied"] is back["model"]["fc.weight"]  # one tensor object saved once, loaded once
    back["tied"]._data[0, 0] = 42.0  # loaded tensors own writable memory
    assert back["model"]["fc.weight"].tolist()[0][0] == 42.0


def test_file_objects_and_top_level_values(tmp_path):
    for obj in [flow.arange(5), [1, 2], 3.5, "x", None, {"a": {"b": {"c": flow.ones(2, 2)}}}]:
        buf = io.BytesIO()
        save(obj, buf)
        buf.seek(0)
        assert_same(obj, load(buf))
        save(obj, str(tmp_path / "o.flow"))
        assert_same(obj, load(str(tmp_path / "o.flow")))


def test_is_a_safetensors_file_with_structure_metadata(tmp_path):
    from safetensors import safe_open

    save({"model": {"w": flow.ones(2, 3)}, "step": 5}, tmp_path / "ck.flow")
    with safe_open(tmp_path / "ck.flow", framework="np") as f:
        assert list(f.keys()) == ["model.w"]
        meta = f.metadata()
    structure = json.loads(meta["flow.structure"])
    assert structure["version"] == 1
    raw = (tmp_path / "ck.flow").read_bytes()
    assert b"\x80\x04" not in raw[:8] and b"pickle" not in raw  # no pickle anywhere


def test_generator_state(tmp_path):
    g = flow.Generator().manual_seed(1234)
    flow.randn(5, generator=g)
    save({"gen": g, "state": g.get_state()}, tmp_path / "g.flow")
    expected = flow.randn(4, generator=g).tolist()
    back = load(tmp_path / "g.flow")
    assert flow.randn(4, generator=back["gen"]).tolist() == expected
    assert back["gen"].initial_seed() == 1234
    g2 = flow.Generator()
    g2.set_state(back["state"])
    assert back["state"].dtype is flow.uint8
    assert flow.randn(4, generator=g2).tolist() == expected


def test_requires_grad_and_map_location(tmp_path):
    p = flow.randn(3, requires_grad=True)
    save({"p": p}, tmp_path / "p.flow")
    back = load(tmp_path / "p.flow", map_location="cpu")
    assert back["p"].requires_grad and back["p"].is_leaf
    seen = []
    back = load(tmp_path / "p.flow", map_location=lambda t, loc: seen.append(loc) or t)
    assert seen == ["cpu"]
    if not hasattr(flow.nn, "Parameter"):
        return
    param = flow.nn.Parameter(flow.ones(2))
    save({"a": param, "b": param}, tmp_path / "param.flow")
    back = load(tmp_path / "param.flow")
    assert type(back["a"]) is flow.nn.Parameter and back["a"] is back["b"] and back["a"].requires_grad
    assert load(tmp_path / "p.flow", map_location={"cpu": "cpu"})["p"].device.type == "cpu"


def test_unsupported_objects_are_rejected_without_pickle(tmp_path):
    with pytest.raises(CheckpointError, match=r"function.*'a.b'"):
        save({"a": {"b": lambda: 0}}, tmp_path / "x.flow")
    with pytest.raises(CheckpointError, match="object"):
        save([object()], tmp_path / "x.flow")
    assert not (tmp_path / "x.flow").exists()
    assert os.listdir(tmp_path) == []  # no temporary file left behind


def test_optimizer_and_scheduler_state(tmp_path):
    import flow.optim

    ps = [flow.randn(3, requires_grad=True), flow.randn(2, 2, requires_grad=True)]
    opt = flow.optim.AdamW(ps, lr=0.1)
    sched = flow.optim.lr_scheduler.MultiStepLR(opt, [2, 4])
    for _ in range(3):
        for p in ps:
            p.grad = flow.ones_like(p)
        opt.step()
        sched.step()
    save({"opt": opt.state_dict(), "sched": sched.state_dict()}, tmp_path / "o.flow")
    back = load(tmp_path / "o.flow")
    assert_same(opt.state_dict(), back["opt"])
    assert back["opt"]["param_groups"][0]["betas"] == (0.9, 0.999)
    assert back["sched"]["milestones"] == Counter([2, 4])


# -- atomicity ------------------------------------------------------------------------------------------------
def test_failure_mid_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    target = tmp_path / "ck.flow"
    save({"v": flow.ones(1000), "epoch": 1}, target)
    before = target.read_bytes()

    def broken(path, arrays, metadata):
        with open(path, "wb") as f:
            f.write(b"\x00" * 4096)  # half a file ...
        raise OSError(28, "No space left on device")  # ... then the disk fills up

    monkeypatch.setattr(ser, "_write_payload", broken)
    with pytest.raises(OSError, match="No space"):
        save({"v": flow.zeros(1000), "epoch": 2}, target)
    assert target.read_bytes() == before
    assert load(target)["epoch"] == 1
    assert os.listdir(tmp_path) == ["ck.flow"]  # the temporary file was removed

    def interrupted(path, arrays, metadata):
        raise KeyboardInterrupt

    monkeypatch.setattr(ser, "_write_payload", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save({"epoch": 3}, target)
    assert load(target)["epoch"] == 1


def test_fsync_and_replace_order(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    save({"a": flow.ones(3)}, tmp_path / "a.flow")
    assert events == ["fsync", "replace", "fsync"]  # file synced, moved into place, directory synced
    assert (tmp_path / "a.flow").stat().st_mode & 0o777 == 0o666 & ~ser._umask()  # as open() would create it


def test_kill_during_save_keeps_the_previous_checkpoint(tmp_path):
    target = tmp_path / "big.flow"
    save({"epoch": 1, "w": flow.ones(10)}, target)
    script = textwrap.dedent(f"""
        import numpy as np, flow
        from flow.serialization import save
        big = {{"epoch": 2, "w": [flow.from_numpy(np.full(8_000_000, i, np.float32)) for i in range(4)]}}
        print("ready", flush=True)
        while True:
            save(big, {str(target)!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait until a temporary file is being written
            tmps = [n for n in os.listdir(tmp_path) if n.startswith(".")]
            try:
                if tmps and os.path.getsize(tmp_path / tmps[0]) > 0:
                    break
            except FileNotFoundError:  # renamed meanwhile
                pass
            time.sleep(0.001)
        else:
            pytest.fail("the save never started")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    back = load(target)  # the old checkpoint, or a complete new one: never a torn file
    assert back["epoch"] in (1, 2)
    if back["epoch"] == 1:
        assert back["w"].tolist() == [1.0] * 10
    else:
        assert [float(t._data[0]) for t in back["w"]] == list(range(4))


# -- corruption ------------------------------------------------------------------------------------------------
def test_corrupt_and_truncated_files(tmp_path):
    good = tmp_path / "good.flow"
    save({"w": flow.arange(1000, dtype=flow.float32), "meta": {"epoch": 1}}, good)
    raw = good.read_bytes()
    cases = {
        "truncated.flow": raw[: len(raw) // 2],
        "header_only.flow": raw[:20],
        "garbage.flow": b"this is not a checkpoint at all",
        "empty.flow": b"",
    }
    flipped = bytearray(raw)
    flipped[-10] ^= 0xFF
    cases["bitflip.flow"] = bytes(flipped)
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(CheckpointError) as ei:
            load(tmp_path / name)
        assert isinstance(ei.value, FlowError)
        assert name in str(ei.value)
    assert "checksum" in str(pytest.raises(CheckpointError, load, tmp_path / "bitflip.flow").value)
    assert load(tmp_path / "bitflip.flow", verify=False)["meta"] == {"epoch": 1}
    # a damaged structure header
    import safetensors.numpy

    safetensors.numpy.save_file({"w": np.ones(2)}, str(tmp_path / "badjson.flow"),
                                metadata={"flow.structure": "{not json"})
    with pytest.raises(CheckpointError, match="structure"):
        load(tmp_path / "badjson.flow")
    safetensors.numpy.save_file({"w": np.ones(2)}, str(tmp_path / "missing.flow"),
                                metadata={"flow.structure": json.dumps({"version": 1, "root": {"$t": "nope"}})})
    with pytest.raises(CheckpointError, match="'nope'"):
        load(tmp_path / "missing.flow")
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "does-not-exist.flow")


# -- foreign safetensors files ---------------------------------------------------------------------------------
def test_plain_safetensors_from_numpy(tmp_path):
    import ml_dtypes
    import safetensors.numpy

    arrays = {"a.weight": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, 2], np.int64),
              "c": np.ones(3, ml_dtypes.bfloat16)}
    safetensors.numpy.save_file(arrays, str(tmp_path / "np.safetensors"))
    back = load(tmp_path / "np.safetensors")
    assert set(back) == set(arrays)
    assert back["a.weight"].tolist() == arrays["a.weight"].tolist() and back["b"].dtype is flow.int64
    assert back["c"].dtype is flow.bfloat16


def test_plain_safetensors_from_torch(tmp_path):
    torch = pytest.importorskip("torch")
    import safetensors.torch

    tensors = {"layer.weight": torch.randn(4, 3), "layer.bias": torch.randn(4).to(torch.bfloat16),
               "steps": torch.tensor(5), "half": torch.ones(2, dtype=torch.float16)}
    safetensors.torch.save_file(tensors, str(tmp_path / "torch.safetensors"))
    back = load(tmp_path / "torch.safetensors")
    assert set(back) == set(tensors)
    np.testing.assert_array_equal(back["layer.weight"].numpy(), tensors["layer.weight"].numpy())
    np.testing.assert_array_equal(back["layer.bias"].numpy().astype(np.float32),
                                  tensors["layer.bias"].float().numpy())
    assert back["steps"].dtype is flow.int64 and back["steps"].item() == 5
    assert back["half"].dtype is flow.float16
    with open(tmp_path / "torch.safetensors", "rb") as f:
        assert set(load(f)) == set(tensors)
