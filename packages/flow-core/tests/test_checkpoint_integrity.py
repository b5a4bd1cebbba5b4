"""flow.load on damaged and bad input: every bit flip, truncation, foreign files, crafted headers, misuse."""

from __future__ import annotations

import io
import json
import os
import time
import zlib

import numpy as np
import pytest
from test_serialization import _format1_file, assert_same, realistic_checkpoint

import flow
from flow.errors import FlowError, OpError, OpTypeError
from flow.serialization import CheckpointError, CheckpointFileNotFoundError, load, save


class NamedBytes(io.BytesIO):
    """An in-memory checkpoint with a file name, so errors can be checked for naming it."""

    def __init__(self, data: bytes, name: str) -> None:
        super().__init__(data)
        self.name = name


@pytest.fixture(scope="module")
def checkpoint():
    ck = realistic_checkpoint()
    buf = io.BytesIO()
    save(ck, buf)
    raw = buf.getvalue()
    return ck, raw, 8 + int.from_bytes(raw[:8], "little")


def flipped(raw: bytes, bit: int) -> bytes:
    b = bytearray(raw)
    b[bit // 8] ^= 1 << (bit % 8)
    return bytes(b)


def expect_named_error(data: bytes, name: str = "ck-flip.safetensors", **kw) -> CheckpointError:
    with pytest.raises(CheckpointError) as ei:
        load(NamedBytes(data, name), **kw)
    assert name in str(ei.value)
    return ei.value


def test_every_bit_flip_of_the_header_is_detected(checkpoint):
    ck, raw, data_start = checkpoint
    assert data_start > 2000  # a realistic header: structure, optimizer state, tensor table
    t0 = time.monotonic()
    messages = set()
    for bit in range(data_start * 8):
        messages.add(str(expect_named_error(flipped(raw, bit))).split(":")[1].strip()[:40])
    assert time.monotonic() - t0 < 30
    assert_same(ck, load(io.BytesIO(raw)))  # the undamaged bytes load


def test_bit_flips_of_the_tensor_data_are_detected(checkpoint):
    _, raw, data_start = checkpoint
    nbits = (len(raw) - data_start) * 8
    # every bit of the first and last 16 bytes, and 1200 spread evenly over the rest (each load decodes everything
    # up to the damaged tensor, ~1 ms)
    spread = np.linspace(0, nbits - 1, 1200, dtype=int).tolist()
    bits = set(range(16 * 8)) | set(range(nbits - 16 * 8, nbits)) | set(spread)
    for bit in sorted(bits):
        err = expect_named_error(flipped(raw, data_start * 8 + bit))
        assert "checksum" in str(err)


def test_without_verification_a_damaged_header_still_gives_only_checkpoint_errors(checkpoint):
    """verify=False skips the checksums; whatever the damage, the parsers answer with CheckpointError or a value."""
    _, raw, data_start = checkpoint
    loaded = 0
    for bit in range(0, data_start * 8, 13):
        try:
            load(NamedBytes(flipped(raw, bit), "ck.flow"), verify=False)
            loaded += 1
        except CheckpointError as e:
            assert "ck.flow" in str(e)
    assert loaded > 0  # flips inside strings and numbers parse; they are what the checksum is for


def test_truncation_at_any_point_is_detected(checkpoint, tmp_path):
    _, raw, data_start = checkpoint
    cuts = list(range(0, data_start + 16)) + list(range(data_start, len(raw), max(1, (len(raw) - data_start) // 200)))
    for cut in cuts:
        expect_named_error(raw[:cut], "cut.flow")
    (tmp_path / "cut.flow").write_bytes(raw[: len(raw) - 1])
    with pytest.raises(CheckpointError, match="cut.flow.*truncated"):
        load(tmp_path / "cut.flow")
    (tmp_path / "long.flow").write_bytes(raw + b"\0")
    with pytest.raises(CheckpointError, match="long.flow.*1 bytes after the last tensor"):
        load(tmp_path / "long.flow")


def test_a_stream_is_read_up_to_the_end_of_the_checkpoint(checkpoint):
    ck, raw, _ = checkpoint
    f = io.BytesIO(raw + raw)  # two checkpoints back to back, as torch.load allows
    assert_same(ck, load(f))
    assert_same(ck, load(f))


@pytest.mark.parametrize(
    "data,match",
    [
        (b"", "is empty"),
        (b"abc", "only 3 bytes long"),
        (b"PK\x03\x04" + b"\0" * 60, "zip archive"),
        (b"\x80\x04\x95" + b"\0" * 60, "a pickle"),
        (b"\x93NUMPY\x01\x00" + b"\0" * 60, "NumPy .npy"),
        (b'{"model": "not a checkpoint", "epoch": 3}', "header length"),
        (b"hello world, this is text and no checkpoint\n", "header length"),
        ((12).to_bytes(8, "little") + b"[1, 2, 3]   ", "no JSON header"),
        ((12).to_bytes(8, "little") + b"[1, 2, 3]}  ", "no JSON header"),
        ((8).to_bytes(8, "little") + b'{"a"\xff\xfe}  ', "not valid JSON"),
        ((8).to_bytes(8, "little") + b"12345678", "no JSON header"),
    ],
)
def test_files_that_are_not_checkpoints(tmp_path, data, match):
    (tmp_path / "x.bin").write_bytes(data)
    with pytest.raises(CheckpointError, match=match) as ei:
        load(tmp_path / "x.bin")
    assert "x.bin" in str(ei.value) and isinstance(ei.value, FlowError)


def _raw_file(path, header: dict, data: bytes = b"") -> None:
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


F32x2 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize(
    "header,data,match",
    [
        ({"w": {"dtype": "F32", "shape": [2]}}, b"\0" * 8, "exactly 'dtype', 'shape' and 'data_offsets'"),
        ({"w": {**F32x2, "extra": 1}}, b"\0" * 8, "exactly 'dtype'"),
        ({"w": "F32"}, b"", "exactly 'dtype'"),
        ({"w": {**F32x2, "dtype": "F8_E4M3"}}, b"\0" * 8, "dtype 'F8_E4M3', which flow cannot load"),
        ({"w": {**F32x2, "dtype": 3}}, b"\0" * 8, "dtype 3"),
        ({"w": {**F32x2, "shape": [-2]}}, b"\0" * 8, "non-negative ints"),
        ({"w": {**F32x2, "shape": [True, 2]}}, b"\0" * 8, "non-negative ints"),
        ({"w": {**F32x2, "shape": [3]}}, b"\0" * 8, "needs 12 bytes"),
        ({"w": {**F32x2, "data_offsets": [8, 0]}}, b"\0" * 8, "0 <= begin <= end"),
        ({"w": {**F32x2, "data_offsets": [0, 8.0]}}, b"\0" * 8, "0 <= begin <= end"),
        ({"w": {**F32x2, "data_offsets": [4, 12]}}, b"\0" * 12, "gap of 4 bytes"),
        ({"w": F32x2, "v": {**F32x2, "data_offsets": [4, 12]}}, b"\0" * 12, "overlaps"),
        ({"w": F32x2}, b"\0" * 4, "truncated"),
        ({"__metadata__": {"a": 1}, "w": F32x2}, b"\0" * 8, "map strings to strings"),
        ({"__metadata__": ["a"]}, b"", "map strings to strings"),
    ],
)
def test_malformed_safetensors_headers(tmp_path, header, data, match):
    _raw_file(tmp_path / "bad.safetensors", header, data)
    with pytest.raises(CheckpointError, match=match) as ei:
        load(tmp_path / "bad.safetensors")
    assert "bad.safetensors" in str(ei.value)


def test_duplicate_keys_and_deep_json_in_a_header(tmp_path):
    text = b'{"w":' + json.dumps(F32x2).encode() + b',"w":' + json.dumps(F32x2).encode() + b"}"
    (tmp_path / "dup.st").write_bytes(len(text).to_bytes(8, "little") + text + b"\0" * 8)
    with pytest.raises(CheckpointError, match="dup.st.*twice"):
        load(tmp_path / "dup.st")
    text = b'{"__metadata__":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    (tmp_path / "deep.st").write_bytes(len(text).to_bytes(8, "little") + text)
    with pytest.raises(CheckpointError, match="deep.st"):
        load(tmp_path / "deep.st")


def test_unsupported_bool_bytes_and_dtypes_of_plain_files(tmp_path):
    header = {
        "m": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]},
        "u": {"dtype": "U16", "shape": [1], "data_offsets": [3, 5]},
    }
    _raw_file(tmp_path / "b.st", {"m": header["m"]}, b"\x00\x01\x07")
    assert load(tmp_path / "b.st")["m"].tolist() == [False, True, True]  # any nonzero byte is True
    _raw_file(tmp_path / "u.st", header, b"\x00\x01\x00\x05\x00")
    with pytest.raises(CheckpointError, match="'u' has dtype uint16, which flow does not support"):
        load(tmp_path / "u.st")


# -- damaged structures (format 1 files have no header checksum, so the decoder itself must notice) -------------
W = np.ones(2, np.float32)
WNODE = {"$t": "w", "dtype": "float32", "device": "cpu", "crc": zlib.crc32(W.tobytes())}


@pytest.mark.parametrize(
    "structure,match",
    [
        ({"version": "1", "root": 1}, "format version is '1', expected a positive int"),
        ({"version": 1.0, "root": 1}, "format version is 1.0"),
        ({"version": True, "root": 1}, "format version is True"),
        ({"version": None, "root": 1}, "format version is None"),
        ({"version": 0, "root": 1}, "format version is 0"),
        ({"version": 99, "root": 1}, "format 99, newer than this flow's"),
        ({"root": 1}, "'version' and 'root'"),
        ({"version": 1, "root": 1, "extra": 2}, "'version' and 'root'"),
        ([1, 2], "'version' and 'root'"),
        ({"version": 1, "root": {"$q": 1}}, "unknown node"),
        ({"version": 1, "root": {"$t": "w", "$nd": "w"}}, "unknown node"),
        ({"version": 1, "root": {**WNODE, "requires_grcd": True}}, "unknown field 'requires_grcd'"),
        ({"version": 1, "root": {**WNODE, "crc": "12"}}, "field 'crc' of a '\\$t' node should be int"),
        ({"version": 1, "root": {**WNODE, "crc": True}}, "should be int"),
        ({"version": 1, "root": {**WNODE, "dtype": "float33"}}, "unknown dtype 'float33'"),
        ({"version": 1, "root": {**WNODE, "dtype": "int32"}}, "float32 in the data but int32 in the structure"),
        ({"version": 1, "root": {**WNODE, "$t": "v"}}, "names a tensor 'v' that the file does not hold"),
        ({"version": 1, "root": {**WNODE, "crc": 1}}, "does not match its checksum"),
        ({"version": 1, "root": {"$d": [["a"]]}}, "\\[key, value\\] pair"),
        ({"version": 1, "root": {"$d": "ab"}}, "should be list"),
        ({"version": 1, "root": {"$d": [], "type": "defaultdict"}}, "unknown dict type 'defaultdict'"),
        ({"version": 1, "root": {"$d": [[[1], 2]]}}, "unhashable"),
        ({"version": 1, "root": {"$set": [{"$d": []}]}}, "unhashable"),
        ({"version": 1, "root": {"$f": "1.5"}}, "not a non-finite float"),
        ({"version": 1, "root": {"$dtype": "complex"}}, "unknown dtype 'complex'"),
        ({"version": 1, "root": {"$device": "cuda:x"}}, "bad device"),
        ({"version": 1, "root": {"$gen": "w", "crc": zlib.crc32(W.tobytes())}}, "cannot take its saved state"),
        ({"version": 1, "root": [{"$set": 1}]}, "should be list"),
    ],
)
def test_damaged_structures(tmp_path, structure, match):
    import safetensors.numpy

    safetensors.numpy.save_file(
        {"w": W}, str(tmp_path / "s.flow"), metadata={"format": "flow", "flow.structure": json.dumps(structure)}
    )
    with pytest.raises(CheckpointError, match=match) as ei:
        load(tmp_path / "s.flow")
    assert "s.flow" in str(ei.value)


def test_structure_nested_too_deeply_to_be_a_checkpoint(tmp_path):
    for depth in (400, 200_000):  # past the save limit; past Python's recursion limit
        _format1_file(tmp_path / "deep.flow", {"w": W}, "[" * depth + "]" * depth)
        with pytest.raises(CheckpointError, match="deep.flow.*nested"):
            load(tmp_path / "deep.flow")


def test_a_format_2_file_needs_its_checksum(tmp_path):
    save({"w": flow.ones(2)}, tmp_path / "c.flow")
    raw = (tmp_path / "c.flow").read_bytes()
    damaged = raw.replace(b'"flow.checksum"', b'"flow.checksuM"')  # the checksum is no longer where it belongs
    (tmp_path / "d.flow").write_bytes(damaged)
    with pytest.raises(CheckpointError, match="d.flow.*checksum is missing or damaged"):
        load(tmp_path / "d.flow")
    assert load(tmp_path / "d.flow", verify=False)["w"].tolist() == [1.0, 1.0]
    renamed = raw.replace(b"flow.structure", b"flow.structurE")  # not silently a flat plain-safetensors dict
    (tmp_path / "r.flow").write_bytes(renamed)
    with pytest.raises(CheckpointError, match="r.flow"):
        load(tmp_path / "r.flow")
    with pytest.raises(CheckpointError, match="r.flow.*without its structure"):
        load(tmp_path / "r.flow", verify=False)


# -- paths, file objects and arguments -------------------------------------------------------------------------------
def test_missing_file_and_directories(tmp_path):
    with pytest.raises(FileNotFoundError) as ei:
        load(tmp_path / "nope.flow")
    assert isinstance(ei.value, CheckpointFileNotFoundError) and isinstance(ei.value, CheckpointError)
    assert ei.value.filename == str(tmp_path / "nope.flow") and ei.value.errno == 2
    with pytest.raises(IsADirectoryError) as ei:
        load(tmp_path)
    assert isinstance(ei.value, CheckpointError) and ei.value.filename == str(tmp_path)
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(NotADirectoryError) as ei:
        load(tmp_path / "file" / "ck.flow")
    assert isinstance(ei.value, CheckpointError)


def test_unreadable_file(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    save({"a": 1}, tmp_path / "a.flow")
    os.chmod(tmp_path / "a.flow", 0)
    with pytest.raises(PermissionError) as ei:
        load(tmp_path / "a.flow")
    assert isinstance(ei.value, CheckpointError) and ei.value.filename == str(tmp_path / "a.flow")


def test_file_objects_path_types_and_bad_f(tmp_path):
    save({"a": flow.ones(2)}, tmp_path / "a.flow")
    with open(tmp_path / "a.flow", "rb") as f:
        assert load(f)["a"].tolist() == [1.0, 1.0]
    assert load(os.fsencode(tmp_path / "a.flow"))["a"].tolist() == [1.0, 1.0]
    with open(tmp_path / "a.flow", "rb", buffering=0) as f:
        assert load(f)["a"].tolist() == [1.0, 1.0]
    with open(tmp_path / "a.flow", encoding="latin-1") as f, pytest.raises(OpTypeError, match="text mode.*'rb'"):
        load(f)

    class ReadOnly:  # only .read(), returning str
        def read(self, n):
            return "x" * n

    with pytest.raises(OpTypeError, match="text mode"):
        load(ReadOnly())
    for bad in (3, None, [str(tmp_path / "a.flow")]):
        with pytest.raises(OpTypeError, match="path or a readable binary file object"):
            load(bad)


def test_map_location_misuse(tmp_path):
    save({"a": flow.ones(2), "n": 1}, tmp_path / "a.flow")
    for bad in (3, 1.5, ["cpu"]):
        with pytest.raises(OpTypeError, match="map_location must be"):
            load(tmp_path / "a.flow", map_location=bad)
    with pytest.raises(OpTypeError, match="maps saved device names to devices"):
        load(tmp_path / "a.flow", map_location={"cpu": 0})
    with pytest.raises(OpError, match="'nosuchdevice', which no installed plugin provides"):
        load(tmp_path / "a.flow", map_location="nosuchdevice")
    with pytest.raises(OpError, match="map_location"):
        load(tmp_path / "a.flow", map_location="cpu:x")
    with pytest.raises(OpTypeError, match="map_location returned ndarray for tensor 'a'"):
        load(tmp_path / "a.flow", map_location=lambda t, loc: t.numpy())

    class Mine(Exception):
        pass

    def refuse(t, loc):
        raise Mine("no")

    with pytest.raises(Mine):  # the caller's own exception, not disguised as corruption
        load(tmp_path / "a.flow", map_location=refuse)


def test_a_device_that_is_not_installed(tmp_path):
    import safetensors.numpy

    root = {"$d": [["w", {**WNODE, "device": "nosuchdevice:0"}]]}
    safetensors.numpy.save_file(
        {"w": W},
        str(tmp_path / "g.flow"),
        metadata={"format": "flow", "flow.structure": json.dumps({"version": 1, "root": root})},
    )
    with pytest.raises(CheckpointError, match="cannot put tensor 'w' on nosuchdevice:0.*map_location='cpu'"):
        load(tmp_path / "g.flow")
    assert load(tmp_path / "g.flow", map_location="cpu")["w"].tolist() == [1.0, 1.0]
    assert load(tmp_path / "g.flow", map_location={"nosuchdevice:0": "cpu"})["w"].tolist() == [1.0, 1.0]


def test_verify_and_weights_only_types(tmp_path):
    save({"a": 1}, tmp_path / "a.flow")
    with pytest.raises(OpTypeError, match="verify must be a bool"):
        load(tmp_path / "a.flow", verify="yes")
    with pytest.raises(OpTypeError, match="weights_only must be a bool or None"):
        load(tmp_path / "a.flow", weights_only="yes")


def test_a_stream_claiming_more_than_it_holds_is_refused_before_allocating():
    header = {"w": {"dtype": "F64", "shape": [1 << 40], "data_offsets": [0, 8 << 40]}}  # 8 TiB
    text = json.dumps(header).encode()
    with pytest.raises(CheckpointError, match="big.st.*truncated"):
        load(NamedBytes(len(text).to_bytes(8, "little") + text + b"\0" * 64, "big.st"))


def test_checkpoint_errors_survive_pickling(tmp_path):
    import pickle

    for f in (tmp_path / "nope.flow", tmp_path):
        with pytest.raises(CheckpointError) as ei:
            load(f)
        back = pickle.loads(pickle.dumps(ei.value))
        assert type(back) is type(ei.value) and back.errno == ei.value.errno and str(back) == str(ei.value)
