"""flow.save / flow.load: round trips, the safetensors + JSON structure format, old and foreign files.

Save failures and atomicity: test_checkpoint_save.py; corruption and bad input: test_checkpoint_integrity.py.
"""

from __future__ import annotations

import io
import json
import math
import os
from collections import Counter, OrderedDict

import numpy as np
import pytest

import flow
import flow.serialization as ser
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
        "epoch": 3,
        "lr": 1e-3,
        "best": math.inf,
        "nan": math.nan,
        "name": "run",
        "flag": False,
        "none": None,
        "list": [1, "a", [2.0, None], (3, 4)],
        "tuple": (flow.ones(1), 2),
        8: "int key",
        (1, 2): "tuple key",
        "np": np.arange(4, dtype=np.int16),
        "npscalar": np.float32(2.5),
        "counter": Counter([3, 3, 5]),
        "ordered": OrderedDict([("b", 1), ("a", 2)]),
        "dtype": flow.bfloat16,
        "device": flow.device("cpu"),
    }


def assert_same(a, b):
    if isinstance(a, flow.Tensor):
        assert isinstance(b, flow.Tensor) and a.dtype is b.dtype and tuple(a.shape) == tuple(b.shape)
        np.testing.assert_array_equal(
            a.detach().numpy().astype(np.float64) if a.dtype is flow.bfloat16 else a.detach().numpy(),
            b.detach().numpy().astype(np.float64) if b.dtype is flow.bfloat16 else b.detach().numpy(),
        )
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
    assert structure["version"] == 2
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


# -- foreign safetensors files ---------------------------------------------------------------------------------
def test_plain_safetensors_from_numpy(tmp_path):
    import ml_dtypes
    import safetensors.numpy

    arrays = {
        "a.weight": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": np.array([1, 2], np.int64),
        "c": np.ones(3, ml_dtypes.bfloat16),
    }
    safetensors.numpy.save_file(arrays, str(tmp_path / "np.safetensors"))
    back = load(tmp_path / "np.safetensors")
    assert set(back) == set(arrays)
    assert back["a.weight"].tolist() == arrays["a.weight"].tolist() and back["b"].dtype is flow.int64
    assert back["c"].dtype is flow.bfloat16


def test_plain_safetensors_from_torch(tmp_path):
    torch = pytest.importorskip("torch")
    import safetensors.torch

    tensors = {
        "layer.weight": torch.randn(4, 3),
        "layer.bias": torch.randn(4).to(torch.bfloat16),
        "steps": torch.tensor(5),
        "half": torch.ones(2, dtype=torch.float16),
    }
    safetensors.torch.save_file(tensors, str(tmp_path / "torch.safetensors"))
    back = load(tmp_path / "torch.safetensors")
    assert set(back) == set(tensors)
    np.testing.assert_array_equal(back["layer.weight"].numpy(), tensors["layer.weight"].numpy())
    np.testing.assert_array_equal(back["layer.bias"].numpy().astype(np.float32), tensors["layer.bias"].float().numpy())
    assert back["steps"].dtype is flow.int64 and back["steps"].item() == 5
    assert back["half"].dtype is flow.float16
    with open(tmp_path / "torch.safetensors", "rb") as f:
        assert set(load(f)) == set(tensors)


def realistic_checkpoint() -> dict:
    """What a training loop saves: model and optimizer state, scheduler, RNG, position, settings."""
    import flow.nn as nn
    import flow.optim

    flow.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 3))
    opt = flow.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    sched = flow.optim.lr_scheduler.MultiStepLR(opt, [2, 4], gamma=0.5)
    for _ in range(2):
        loss = model(flow.randn(8, 6)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "rng": flow.get_rng_state(),
        "epoch": 7,
        "step_in_epoch": 123,
        "global_step": 9_000_123,
        "best": {"loss": 0.4375, "acc": 97.25, "at": [6, 120]},
        "lr": 3e-4,
        "inf": math.inf,
        "config": {
            "model": "mlp",
            "batch_size": 64,
            "layers": [6, 5, 3],
            "dropout": None,
            "amp": False,
            "tags": ("baseline", "seed0"),
            "name": 'run \u00e9 "quoted" \\ 1',
        },
    }


def test_realistic_checkpoint_round_trip(tmp_path):
    ck = realistic_checkpoint()
    save(ck, tmp_path / "ck.safetensors")
    assert_same(ck, load(tmp_path / "ck.safetensors"))


def test_readable_by_safetensors_and_torch(tmp_path):
    from safetensors import safe_open

    arrays = {d.name: np.arange(6).reshape(2, 3).astype(d.np) for d in flow._dtype.ALL_DTYPES}
    arrays["scalar"], arrays["empty"] = np.full((), 2.5), np.zeros((0, 3), np.float32)
    save({k: flow.from_numpy(v) for k, v in arrays.items()}, tmp_path / "all.safetensors", metadata={"who": "me"})
    with safe_open(str(tmp_path / "all.safetensors"), framework="np") as f:
        assert set(f.keys()) == set(arrays) and f.metadata()["who"] == "me"
        for k, v in arrays.items():
            got = f.get_tensor(k)
            assert got.dtype == v.dtype and got.shape == v.shape
            np.testing.assert_array_equal(got.astype(np.float64), v.astype(np.float64))
    torch = pytest.importorskip("torch")
    import safetensors.torch

    back = safetensors.torch.load_file(str(tmp_path / "all.safetensors"))
    assert back["float32"].dtype is torch.float32 and back["bfloat16"].dtype is torch.bfloat16
    assert back["int64"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert back["bool"].tolist() == [[False, True, True], [True] * 3]


def test_header_layout_is_aligned_and_checksummed(tmp_path):
    save(
        {"a": flow.ones(3, dtype=flow.int8), "b": flow.ones(5, dtype=flow.float64), "c": flow.ones(2)},
        tmp_path / "x.flow",
    )
    raw = (tmp_path / "x.flow").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    assert n % 8 == 0 and raw[8:].startswith(b'{"__metadata__":{"flow.checksum":"')
    header = json.loads(raw[8 : 8 + n])
    for entry in header.values():
        if "dtype" in entry:
            itemsize = {"I8": 1, "F64": 8, "F32": 4}[entry["dtype"]]
            assert entry["data_offsets"][0] % itemsize == 0  # every tensor starts aligned, as safetensors writes


def test_plain_safetensors_every_dtype_and_shape_like_safetensors(tmp_path):
    import ml_dtypes
    import safetensors.numpy

    rng = np.random.default_rng(1)
    arrays = {
        "f64": rng.standard_normal((2, 3)),
        "f32": rng.standard_normal(7).astype(np.float32),
        "f16": rng.standard_normal((1, 1, 2)).astype(np.float16),
        "bf16": rng.standard_normal(4).astype(ml_dtypes.bfloat16),
        "i64": np.array(-5),
        "i32": np.arange(-3, 3, dtype=np.int32),
        "i16": np.array([1, -2], np.int16),
        "i8": np.array([-1], np.int8),
        "u8": np.arange(256, dtype=np.uint8),
        "b": np.array([True, False, True]),
        "empty": np.zeros((3, 0)),
    }
    safetensors.numpy.save_file(arrays, str(tmp_path / "p.safetensors"))
    ref = safetensors.numpy.load_file(str(tmp_path / "p.safetensors"))
    back = load(tmp_path / "p.safetensors")
    assert set(back) == set(ref)
    for k, v in ref.items():
        assert back[k].numpy().dtype == v.dtype and back[k].numpy().shape == v.shape
        np.testing.assert_array_equal(back[k].numpy(), v)


def _format1_file(path, tensors: dict, root) -> None:
    """A checkpoint as flow wrote it before the header checksum (format 1, through safetensors).

    ``root`` is the structure's root node, or its JSON text."""
    import safetensors.numpy

    text = root if isinstance(root, str) else json.dumps(root, separators=(",", ":"))
    structure = '{"version":1,"root":' + text + "}"
    safetensors.numpy.save_file(tensors, str(path), metadata={"format": "flow", "flow.structure": structure})


def test_format_1_checkpoints_still_load(tmp_path):
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    crc = ser.container.crc(w)
    root = {
        "$d": [
            ["w", {"$t": "w", "dtype": "float32", "device": "cpu", "crc": crc, "requires_grad": True}],
            ["tied", {"$t": "w"}],
            ["epoch", 3],
            ["t", {"$tu": [1, {"$f": "inf"}]}],
        ]
    }
    _format1_file(tmp_path / "v1.flow", {"w": w}, root)
    back = load(tmp_path / "v1.flow")
    assert back["w"].tolist() == w.tolist() and back["w"].requires_grad and back["tied"] is back["w"]
    assert back["epoch"] == 3 and back["t"] == (1, math.inf)
    raw = bytearray((tmp_path / "v1.flow").read_bytes())
    raw[-3] ^= 0x10  # the tensor data is still checked
    (tmp_path / "v1bad.flow").write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="v1bad.flow.*checksum"):
        load(tmp_path / "v1bad.flow")


def test_map_location_to_another_device_and_back(tmp_path, meta_device):
    save({"w": flow.ones(2, 3), "n": 1}, tmp_path / "w.flow")
    back = load(tmp_path / "w.flow", map_location=meta_device)
    assert back["w"].device == meta_device and tuple(back["w"].shape) == (2, 3)
    back = load(tmp_path / "w.flow", map_location={"cpu": "meta"})
    assert back["w"].device == meta_device
    assert load(tmp_path / "w.flow", map_location=flow.device("cpu"))["w"].tolist() == [[1.0] * 3] * 2


def test_weights_only_changes_nothing(tmp_path):
    ck = {"w": flow.randn(3), "gen": flow.Generator().manual_seed(3), "cfg": {"a": (1, 2)}, "s": {1, 2}}
    save(ck, tmp_path / "c.flow")
    for wo in (None, True, False):
        back = load(tmp_path / "c.flow", weights_only=wo)
        assert back["w"].tolist() == ck["w"].tolist() and back["cfg"] == {"a": (1, 2)} and back["s"] == {1, 2}


def test_numpy_arrays_of_either_byte_order(tmp_path):
    arrays = {"le": np.arange(5, dtype="<i4"), "be": np.arange(5, dtype=">f8"), "strided": np.arange(10.0)[::3]}
    save(arrays, tmp_path / "np.flow")
    back = load(tmp_path / "np.flow")
    for k, v in arrays.items():
        assert back[k].dtype.isnative and back[k].tolist() == v.tolist()
    with pytest.raises(CheckpointError, match="dtype <U1 at 'a'"):
        save({"a": np.array(["x"])}, tmp_path / "bad.flow")
