"""flow.load of PyTorch ``torch.save`` checkpoints (the zip format), the safe-globals allow-list, and
whole-module saving.

Tests that write checkpoints with torch skip where torch is absent; the hand-built archives below
(the same records and pickle opcodes torch writes) test the reader without torch.
"""

from __future__ import annotations

import io
import math
import struct
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import flow
import flow.serialization as ser
from flow.errors import OpTypeError
from flow.serialization import CheckpointError


class Point:
    """A plain-data class a checkpoint may hold once allow-listed."""

    def __init__(self, x, y):
        self.x, self.y = x, y


class Net(flow.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = flow.nn.Linear(4, 3)
        self.act = flow.nn.ReLU()
        self.head = flow.nn.Linear(3, 2)
        self.scale = 2.5

    def forward(self, x):
        return self.head(self.act(self.fc(x))) * self.scale


@pytest.fixture(autouse=True)
def _fresh_allow_list():
    ser.clear_safe_globals()
    yield
    ser.clear_safe_globals()


def _torch():
    return pytest.importorskip("torch")


def _tsave(obj) -> io.BytesIO:
    torch = _torch()
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


def assert_matches(ours, theirs):
    """``ours`` (loaded by flow) holds the values, dtypes and shapes of ``theirs`` (torch's)."""
    torch = _torch()
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, flow.Tensor), type(ours)
        assert ours.dtype.name == str(theirs.dtype).removeprefix("torch."), (ours.dtype, theirs.dtype)
        assert tuple(ours.shape) == tuple(theirs.shape)
        assert ours.requires_grad == theirs.requires_grad
        assert isinstance(ours, flow.nn.Parameter) == isinstance(theirs, torch.nn.Parameter)
        want = theirs.detach().float().numpy() if theirs.dtype == torch.bfloat16 else theirs.detach().numpy()
        got = ours.detach().float().numpy() if ours.dtype == flow.bfloat16 else ours.detach().numpy()
        np.testing.assert_array_equal(got, want)
    elif isinstance(theirs, dict):
        assert type(ours) is type(theirs) and list(ours) == list(theirs)
        for k in theirs:
            assert_matches(ours[k], theirs[k])
    elif isinstance(theirs, (list, tuple)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            assert_matches(a, b)
    elif isinstance(theirs, float) and math.isnan(theirs):
        assert math.isnan(ours)
    else:
        assert type(ours) is type(theirs) and ours == theirs


# -- checkpoints written by torch ---------------------------------------------------------------------------
def test_cnn_state_dict_loads_into_a_flow_model_with_the_same_outputs():
    torch = _torch()
    torch.manual_seed(0)

    def cnn(nn):
        return nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 5 * 5, 3)
        )

    tm = cnn(torch.nn)
    tm(torch.randn(6, 3, 5, 5))  # running statistics and num_batches_tracked move off their defaults
    tm.eval()
    sd = tm.state_dict()
    loaded = flow.load(_tsave(sd))
    assert_matches(loaded, sd)
    assert loaded._metadata == sd._metadata  # the state dict's version records come along
    fm = cnn(flow.nn)
    fm.load_state_dict(loaded)
    fm.eval()
    x = torch.randn(2, 3, 5, 5)
    want = tm(x).detach().numpy()
    np.testing.assert_allclose(fm(flow.tensor(x.numpy())).detach().numpy(), want, rtol=1e-5, atol=1e-5)


def test_lstm_state_dict_loads_into_flow_lstm():
    torch = _torch()
    torch.manual_seed(1)
    tm = torch.nn.LSTM(3, 5, num_layers=2, batch_first=True)
    sd = tm.state_dict()
    loaded = flow.load(_tsave(sd))
    assert_matches(loaded, sd)
    fm = flow.nn.LSTM(3, 5, num_layers=2, batch_first=True)
    fm.load_state_dict(loaded)
    x = torch.randn(2, 4, 3)
    np.testing.assert_allclose(fm(flow.tensor(x.numpy()))[0].detach().numpy(), tm(x)[0].detach().numpy(), atol=1e-5)


def test_transformer_layer_state_dict():
    torch = _torch()
    tm = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True)
    sd = tm.state_dict()
    loaded = flow.load(_tsave(sd))
    assert_matches(loaded, sd)
    assert "self_attn.in_proj_weight" in loaded and loaded["self_attn.in_proj_weight"].shape == (24, 8)


def test_optimizer_state_dict():
    torch = _torch()
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.8, 0.99))
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    sd = opt.state_dict()
    loaded = flow.load(_tsave(sd))
    assert_matches(loaded, sd)
    assert loaded["param_groups"][0]["betas"] == (0.8, 0.99) and loaded["param_groups"][0]["params"] == [0, 1]
    assert set(loaded["state"]) == {0, 1} and float(loaded["state"][0]["step"]) == 1.0


def test_views_strides_offsets_and_shared_storage():
    torch = _torch()
    base = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    obj = {
        "base": base,
        "t": base.t(),
        "row": base[2],
        "cols": base[:, 1::2],
        "strided": base.as_strided((2, 2), (7, 1), 3),
        "scalar_view": base[3, 5],
        "empty": base[:0],
        "expanded": torch.tensor([1.0, 2.0]).expand(3, 2),
    }
    obj["again"] = obj["row"]
    loaded = flow.load(_tsave(obj))
    assert_matches(loaded, obj)
    assert loaded["again"] is loaded["row"]  # one tensor object stays one object
    for k in ("t", "cols", "strided"):
        assert loaded[k].is_contiguous()


@pytest.mark.parametrize(
    "dtype", ["float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool"]
)
def test_dtypes(dtype):
    torch = _torch()
    t = (torch.arange(-3, 9).reshape(3, 4) * 1.5).to(getattr(torch, dtype))
    obj = {"t": t, "view": t[:, 1:3], "dtype": t.dtype}
    loaded = flow.load(_tsave(obj))
    assert_matches({k: v for k, v in loaded.items() if k != "dtype"}, {"t": t, "view": obj["view"]})
    assert loaded["dtype"] is getattr(flow, dtype)


def test_nested_containers_scalars_parameters_and_sizes():
    torch = _torch()
    obj = {
        "layers": [{"w": torch.nn.Parameter(torch.randn(2, 2))}, (torch.ones(1), None)],
        "frozen": torch.nn.Parameter(torch.zeros(3), requires_grad=False),
        "grad": torch.ones(2, requires_grad=True),
        "od": OrderedDict([("b", 1), ("a", 2)]),
        "numbers": [1, -2.5, math.inf, math.nan, True, "text", b"\x00\xffbytes", 3 + 4j],
        "set": {1, 2, 3},
        "shape": torch.Size([2, 3]),
        1: "an int key",
    }
    loaded = flow.load(_tsave(obj))
    shape = loaded.pop("shape")
    assert isinstance(shape, flow.Size) and shape == (2, 3)
    assert loaded.pop("set") == {1, 2, 3}
    assert_matches(loaded, {k: v for k, v in obj.items() if k not in ("shape", "set")})
    assert loaded["layers"][0]["w"].requires_grad and not loaded["frozen"].requires_grad


def test_device_map_location_and_file_paths(tmp_path):
    torch = _torch()
    path = tmp_path / "model.pt"
    torch.save({"w": torch.ones(2), "dev": torch.device("cpu")}, path)
    assert flow.load(path)["dev"] == flow.device("cpu")
    assert flow.load(str(path), map_location="cpu")["w"].device == flow.device("cpu")
    seen = []
    out = flow.load(path, map_location=lambda t, saved: seen.append(saved) or t * 2)
    assert seen == ["cpu"] and out["w"].tolist() == [2.0, 2.0]
    with open(path, "rb") as f:
        assert flow.load(f)["w"].tolist() == [1.0, 1.0]


def test_unsupported_dtype_is_named():
    torch = _torch()
    with pytest.raises(CheckpointError, match="complex64.*does not support"):
        flow.load(_tsave({"c": torch.ones(2, dtype=torch.complex64)}))


def test_whole_torch_module_is_refused_with_a_hint():
    torch = _torch()
    with pytest.raises(CheckpointError, match=r"torch\.nn\.modules\.linear\.Linear.*state_dict\(\)"):
        flow.load(_tsave(torch.nn.Linear(2, 2)))


def test_custom_class_needs_allow_listing():
    buf = _tsave({"p": Point(1, [2, 3])})
    with pytest.raises(CheckpointError, match=rf"'{__name__}\.Point'.*add_safe_globals"):
        flow.load(buf)
    ser.add_safe_globals([Point])
    buf.seek(0)
    p = flow.load(buf)["p"]
    assert type(p) is Point and (p.x, p.y) == (1, [2, 3])


def test_corrupt_torch_files_give_clear_errors(tmp_path):
    torch = _torch()
    raw = _tsave({"w": torch.arange(100.0)}).getvalue()
    (tmp_path / "cut.pt").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(CheckpointError, match="cut.pt.*zip archive.*truncated or corrupt"):
        flow.load(tmp_path / "cut.pt")
    data_at = raw.index(np.arange(100.0, dtype=np.float32).tobytes())
    bad = bytearray(raw)
    bad[data_at + 17] ^= 0x40
    (tmp_path / "flip.pt").write_bytes(bytes(bad))
    with pytest.raises(CheckpointError, match="flip.pt.*corrupt.*data/0.*cannot be read"):
        flow.load(tmp_path / "flip.pt")


# -- hand-built archives: the reader without torch ----------------------------------------------------------
def _g(module: str, name: str) -> bytes:
    return b"c" + f"{module}\n{name}\n".encode()


def _s(text: str) -> bytes:
    data = text.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def _i(n: int) -> bytes:
    return b"J" + struct.pack("<i", n)


def _tup(items) -> bytes:
    return b"(" + b"".join(_i(v) for v in items) + b"t"


def _tensor(key, storage, numel, offset, size, stride, rebuild="_rebuild_tensor_v2", location="cpu") -> bytes:
    pid = b"(" + _s("storage") + _g("torch", storage) + _s(key) + _s(location) + _i(numel) + b"tQ"
    hooks = _g("collections", "OrderedDict") + b")R"
    return _g("torch._utils", rebuild) + b"(" + pid + _i(offset) + _tup(size) + _tup(stride) + b"\x89" + hooks + b"tR"


def _pickle(items: dict) -> bytes:
    """A protocol-2 pickle of a dict whose values are already opcodes, as torch writes it."""
    body = b"".join(_s(k) + v for k, v in items.items())
    return b"\x80\x02}(" + body + b"u."


def _archive(pkl: bytes, storages: dict, byteorder: bytes | None = b"little", prefix: str = "ckpt") -> io.BytesIO:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"{prefix}/data.pkl", pkl)
        if byteorder is not None:
            z.writestr(f"{prefix}/byteorder", byteorder)
        for key, data in storages.items():
            z.writestr(f"{prefix}/data/{key}", data)
        z.writestr(f"{prefix}/version", b"3\n")
    buf.seek(0)
    return buf


def _hand_made(byteorder: str = "little") -> io.BytesIO:
    order = "<" if byteorder == "little" else ">"
    floats = np.arange(12, dtype=f"{order}f4").tobytes()
    longs = np.array([5, -7], dtype=f"{order}i8").tobytes()
    pkl = _pickle(
        {
            "w": _tensor("0", "FloatStorage", 12, 0, (3, 4), (4, 1)),
            "wt": _tensor("0", "FloatStorage", 12, 1, (3, 2), (1, 3)),  # a strided view at an offset
            "n": _tensor("1", "LongStorage", 2, 0, (2,), (1,)),
            "h": _tensor("2", "HalfStorage", 3, 0, (3,), (1,)),
            "epoch": _i(3),
            "name": _s("run"),
        }
    )
    halves = np.array([0.5, -1.0, 2.0], dtype=f"{order}f2").tobytes()
    return _archive(pkl, {"0": floats, "1": longs, "2": halves}, byteorder.encode())


@pytest.mark.parametrize("byteorder", ["little", "big"])
def test_hand_made_archive_without_torch(byteorder):
    out = flow.load(_hand_made(byteorder))
    full = np.arange(12, dtype=np.float32)
    np.testing.assert_array_equal(out["w"].numpy(), full.reshape(3, 4))
    np.testing.assert_array_equal(out["wt"].numpy(), np.lib.stride_tricks.as_strided(full[1:], (3, 2), (4, 12)))
    assert out["n"].dtype == flow.int64 and out["n"].tolist() == [5, -7]
    assert out["h"].dtype == flow.float16 and out["h"].tolist() == [0.5, -1.0, 2.0]
    assert (out["epoch"], out["name"]) == (3, "run")


def test_hand_made_archive_is_what_torch_reads():
    # the fixture is a real torch checkpoint: torch's own restricted loader agrees with flow on it
    torch = _torch()
    theirs = torch.load(_hand_made(), weights_only=True)
    assert_matches(flow.load(_hand_made()), theirs)


def test_saved_device_and_map_location_without_torch():
    pkl = _pickle({"w": _tensor("0", "FloatStorage", 2, 0, (2,), (1,), location="cuda:0")})
    data = {"0": np.array([1.0, 2.0], np.float32).tobytes()}
    for ml in ("cpu", {"cuda:0": "cpu"}, flow.device("cpu")):
        w = flow.load(_archive(pkl, data), map_location=ml)["w"]
        assert w.device == flow.device("cpu") and w.tolist() == [1.0, 2.0]
    seen = []
    flow.load(_archive(pkl, data), map_location=lambda t, saved: seen.append(saved) or t)
    assert seen == ["cuda:0"]


def test_old_archives_without_byteorder_and_parameters():
    param = _g("torch._utils", "_rebuild_parameter") + b"(" + _tensor("0", "FloatStorage", 2, 0, (2,), (1,))
    param += b"\x88" + _g("collections", "OrderedDict") + b")RtR"
    frozen = _g("torch._utils", "_rebuild_parameter") + b"(" + _tensor("1", "BoolStorage", 1, 0, (), ())
    frozen += b"\x89" + _g("collections", "OrderedDict") + b")RtR"
    storages = {"0": np.array([1.5, 2.5], np.float32).tobytes(), "1": b"\x01"}
    out = flow.load(_archive(_pickle({"p": param, "mask": frozen}), storages, byteorder=None, prefix="archive"))
    assert isinstance(out["p"], flow.nn.Parameter) and out["p"].requires_grad and out["p"].tolist() == [1.5, 2.5]
    assert isinstance(out["mask"], flow.nn.Parameter) and not out["mask"].requires_grad and out["mask"].item()


@pytest.mark.parametrize(
    "module,name",
    [("posix", "system"), ("os", "system"), ("builtins", "eval"), ("__builtin__", "exec"), ("subprocess", "run")],
)
def test_code_in_the_pickle_is_refused_without_running(tmp_path, module, name):
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').close()" if name in ("eval", "exec") else f"touch {marker}"
    call = _g(module, name) + b"(" + _s(code) + b"tR"
    pkl = _pickle({"w": _tensor("0", "FloatStorage", 1, 0, (1,), (1,)), "x": call})
    shown = "builtins" if module == "__builtin__" else module
    with pytest.raises(CheckpointError, match=rf"'{shown}\.{name}', which is not allowed.*add_safe_globals"):
        flow.load(_archive(pkl, {"0": b"\0\0\0\0"}))
    assert not marker.exists()


def test_state_of_flow_objects_cannot_be_changed():
    # BUILD on flow's dtype object would change flow.float32 for the whole process
    pkl = b"\x80\x02" + _g("torch", "float32") + b"}" + _s("name") + _s("hacked") + b"sb."
    with pytest.raises(CheckpointError, match="sets the state of a flow"):
        flow.load(_archive(pkl, {}))
    assert flow.float32.name == "float32"


def test_allow_listed_class_without_torch():
    pkl = b"\x80\x02" + _g(__name__, "Point") + b"(" + _i(1) + _i(2) + b"tR."
    with pytest.raises(CheckpointError, match="Point"):
        flow.load(_archive(pkl, {}))
    with ser.safe_globals([Point]):
        p = flow.load(_archive(pkl, {}))
    assert type(p) is Point and (p.x, p.y) == (1, 2)
    assert ser.get_safe_globals() == []


@pytest.mark.parametrize(
    "pkl,storages,match",
    [
        (_pickle({"w": _tensor("0", "FloatStorage", 4, 0, (4,), (1,))}), {"0": b"\0" * 8}, "8 bytes, expected 16"),
        (_pickle({"w": _tensor("9", "FloatStorage", 1, 0, (1,), (1,))}), {}, "'ckpt/data/9' is missing"),
        (_pickle({"w": _tensor("0", "FloatStorage", 2, 1, (2,), (1,))}), {"0": b"\0" * 8}, "reaches element 2"),
        (_pickle({"w": _tensor("0", "FloatStorage", 2, -1, (2,), (1,))}), {"0": b"\0" * 8}, "bad geometry"),
        (_pickle({"w": _i(1)})[:-3], {}, "data.pkl cannot be read"),
        (b"\x80\x02" + _s("storage") + b"Q.", {}, "unknown persistent id"),
        (_pickle({"w": _tensor("0", "ComplexFloatStorage", 1, 0, (1,), (1,))}), {}, "ComplexFloatStorage"),
    ],
)
def test_corrupt_hand_made_archives(pkl, storages, match):
    with pytest.raises(CheckpointError, match=match):
        flow.load(_archive(pkl, storages))


def test_zip_that_is_not_a_checkpoint(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("notes.txt", "hello")
    (tmp_path / "x.zip").write_bytes(buf.getvalue())
    with pytest.raises(CheckpointError, match="x.zip.*not a torch.save checkpoint"):
        flow.load(tmp_path / "x.zip")


class _Stream(io.RawIOBase):
    """A readable, non-seekable stream (a pipe or socket)."""

    def __init__(self, data: bytes) -> None:
        self.src = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        return self.src.readinto(b)


def test_non_seekable_streams_and_flow_checkpoints_still_load():
    out = flow.load(_Stream(_hand_made().getvalue()))
    assert out["n"].tolist() == [5, -7]
    buf = io.BytesIO()
    flow.save({"a": flow.arange(3.0), "e": 1}, buf)
    assert flow.load(_Stream(buf.getvalue()))["a"].tolist() == [0.0, 1.0, 2.0]
    buf.seek(0)
    assert flow.load(buf)["e"] == 1


# -- the allow-list API and whole-module saving -------------------------------------------------------------
def test_safe_globals_api():
    ser.add_safe_globals([Point, (Net, "somewhere.Net")])
    ser.add_safe_globals([Point])  # no duplicates
    assert ser.get_safe_globals() == [Point, (Net, "somewhere.Net")]
    ser.clear_safe_globals()
    assert ser.get_safe_globals() == []
    with pytest.raises(OpTypeError, match="list of classes"):
        ser.add_safe_globals(Point)
    with pytest.raises(OpTypeError, match="classes or functions"):
        ser.add_safe_globals([Point, 3])
    assert ser.get_safe_globals() == []  # a bad entry adds nothing


def test_saving_a_module_asks_for_its_state_dict(tmp_path):
    with pytest.raises(CheckpointError, match=r"whole module .*Net.*state_dict\(\).*add_safe_globals"):
        flow.save(Net(), tmp_path / "m.safetensors")
    ser.add_safe_globals([Net])
    with pytest.raises(CheckpointError, match=r"flow\.nn\.modules\..*Linear at '_modules\.fc'"):
        flow.save(Net(), tmp_path / "m.safetensors")  # every module class inside must be allowed too
    assert not (tmp_path / "m.safetensors").exists()


def test_allow_listed_module_round_trip(tmp_path):
    ser.add_safe_globals([Net, flow.nn.Linear, flow.nn.ReLU])
    net = Net()
    net.head.weight = flow.nn.Parameter(net.head.weight.detach().clone())
    net.eval()
    path = tmp_path / "m.safetensors"
    flow.save({"model": net, "epoch": 4}, path)
    out = flow.load(path)
    got = out["model"]
    assert type(got) is Net and type(got.fc) is flow.nn.Linear and out["epoch"] == 4
    assert not got.training and got.scale == 2.5
    x = flow.randn(5, 4)
    np.testing.assert_array_equal(got(x).detach().numpy(), net(x).detach().numpy())
    assert [n for n, _ in got.named_parameters()] == [n for n, _ in net.named_parameters()]
    assert isinstance(got.fc.weight, flow.nn.Parameter) and got.fc.weight.requires_grad
    ser.clear_safe_globals()
    with pytest.raises(CheckpointError, match=r"whole module of class .*Net', which is not allow-listed"):
        flow.load(path)


def test_module_with_a_hook_cannot_be_saved(tmp_path):
    ser.add_safe_globals([flow.nn.Linear])
    m = flow.nn.Linear(2, 2)
    m.register_forward_hook(lambda mod, i, o: None)
    with pytest.raises(CheckpointError, match="cannot save an object of type builtins.function"):
        flow.save(m, tmp_path / "m.safetensors")
