"""Sharded checkpoints (flow.distributed.checkpoint, flow_dist.dcp): the format, the errors and
atomic saves in one process; saving at 4 ranks and loading at 2, 4 (another layout, a 2-d
placement) and 1, and a rank crashing mid-save, through ranks/dcp.py."""

from __future__ import annotations

import importlib.util
import json
import os
import zlib

import numpy as np
import pytest
from _ranks import RANKS, needs_mpi, run_ranks

import flow
import flow.distributed.checkpoint as dcp
from flow_dist.dcp import CheckpointError
from flow_dist.dcp.format import owned_chunks


def _model(seed: int = 0, lr: float = 1e-2):
    flow.manual_seed(seed)
    m = flow.nn.Sequential(flow.nn.Linear(4, 3), flow.nn.ReLU(), flow.nn.Linear(3, 2)).double()
    opt = flow.optim.AdamW(m.parameters(), lr=lr)
    m(flow.randn(5, 4, dtype=flow.float64)).pow(2).sum().backward()
    opt.step()
    return m, opt


def _state(seed: int = 0, lr: float = 1e-2) -> tuple:
    m, opt = _model(seed, lr)
    msd, osd = dcp.get_state_dict(m, opt)
    return {"model": msd, "optim": osd, "meta": {"epoch": seed, "tag": "run", "hist": [1.5, None]}}, m, opt


def _values(m, opt) -> dict:
    out = {f"m.{k}": v.detach().numpy().copy() for k, v in m.state_dict().items()}
    for i, st in opt.state_dict()["state"].items():
        out.update({f"o.{i}.{k}": v.detach().numpy().copy() for k, v in st.items()})
    return out


# -- one process ------------------------------------------------------------------------------


def test_round_trip_restores_model_optimizer_and_values(tmp_path):
    state, m, opt = _state(0)
    want = _values(m, opt)
    dcp.save(state, checkpoint_id=tmp_path / "ck")
    state2, m2, opt2 = _state(7, lr=0.5)
    assert not np.array_equal(m2[0].weight.detach().numpy(), want["m.0.weight"])
    dcp.load(state2, checkpoint_id=str(tmp_path / "ck"))
    dcp.set_state_dict(m2, opt2, model_state_dict=state2["model"], optim_state_dict=state2["optim"])
    got = _values(m2, opt2)
    assert sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    assert state2["meta"] == {"epoch": 0, "tag": "run", "hist": [1.5, None]}
    assert opt2.param_groups[0]["lr"] == 1e-2 and opt2.param_groups[0]["betas"] == (0.9, 0.999)
    # the optimizer goes on exactly as the saved one
    for mm, oo in ((m, opt), (m2, opt2)):
        oo.zero_grad()
        mm(flow.ones(2, 4, dtype=flow.float64)).sum().backward()
        oo.step()
    np.testing.assert_array_equal(m2[2].weight.detach().numpy(), m[2].weight.detach().numpy())


def test_format_shards_metadata_and_checksums(tmp_path):
    x = flow.arange(12, dtype=flow.float32).reshape(3, 4)
    dcp.save({"x": x, "n": 3, "b": flow.tensor([True, False])}, checkpoint_id=tmp_path / "ck")
    assert sorted(os.listdir(tmp_path)) == ["ck"]  # nothing left next to it
    assert sorted(os.listdir(tmp_path / "ck")) == [".metadata", "__0_0.safetensors"]
    meta = json.loads((tmp_path / "ck" / ".metadata").read_text())
    assert meta["format"] == "flow-dcp" and meta["version"] == 1 and meta["world_size"] == 1
    assert meta["values"] == {"n": 3}
    e = meta["tensors"]["x"]
    assert e["shape"] == [3, 4] and e["dtype"] == "float32"
    (c,) = e["chunks"]
    assert (c["file"], c["offsets"], c["lengths"]) == ("__0_0.safetensors", [0, 0], [3, 4])
    assert c["crc32"] == zlib.crc32(np.arange(12, dtype=np.float32).tobytes())
    assert meta["tensors"]["b"]["dtype"] == "bool"
    assert meta["files"]["__0_0.safetensors"] == os.path.getsize(tmp_path / "ck" / "__0_0.safetensors")
    from safetensors.numpy import load_file

    np.testing.assert_array_equal(load_file(str(tmp_path / "ck" / "__0_0.safetensors"))["x/0"], x.numpy())


def test_chunks_are_owned_by_the_first_rank_that_holds_them():
    p1 = flow.placement("cpu", [0, 1, 2, 3])
    p2 = flow.placement("cpu", [[0, 1], [2, 3]])
    S0, S1, B = flow.sbp.split(0), flow.sbp.split(1), flow.sbp.broadcast
    got = owned_chunks((5, 6), p1, (S0,))  # uneven: 2, 1, 1, 1 rows
    assert got == [([0, 0], [2, 6], 0), ([2, 0], [1, 6], 1), ([3, 0], [1, 6], 2), ([4, 0], [1, 6], 3)]
    assert owned_chunks((5, 6), p1, (B,)) == [([0, 0], [5, 6], 0)]  # broadcast: written once
    assert owned_chunks((5, 6), p2, (S0, B)) == [([0, 0], [3, 6], 0), ([3, 0], [2, 6], 2)]
    assert owned_chunks((4, 6), p2, (S0, S1)) == [
        ([0, 0], [2, 3], 0),
        ([0, 3], [2, 3], 1),
        ([2, 0], [2, 3], 2),
        ([2, 3], [2, 3], 3),
    ]
    # 3 rows split in 2 and each half in 2 again: one rank holds none, and writes nothing
    assert [c[2] for c in owned_chunks((3,), p2, (S0, S0))] == [0, 1, 2]
    assert owned_chunks((), p1, (B,)) == [([], [], 0)]


def test_missing_and_unexpected_keys_are_listed(tmp_path):
    dcp.save({"a": flow.ones(2), "b": flow.ones(3), "lr": 0.1}, checkpoint_id=tmp_path / "ck")
    with pytest.raises(CheckpointError, match=r"missing from the checkpoint: 'c'.*not in the state dict: 'b', 'lr'"):
        dcp.load({"a": flow.zeros(2), "c": flow.zeros(1)}, checkpoint_id=tmp_path / "ck")
    with pytest.raises(CheckpointError, match=r"not in the state dict: 'b'"):
        dcp.load({"a": flow.zeros(2), "lr": 1.0}, checkpoint_id=tmp_path / "ck")
    sd = {"a": flow.zeros(2)}
    dcp.load(sd, checkpoint_id=tmp_path / "ck", strict=False)  # a partial load when asked for
    np.testing.assert_array_equal(sd["a"].numpy(), np.ones(2))


def test_shape_dtype_and_kind_mismatches_name_the_key(tmp_path):
    dcp.save({"w": flow.ones(2, 3), "step": 4}, checkpoint_id=tmp_path / "ck")
    with pytest.raises(CheckpointError, match=r"shape mismatch for 'w': saved \(2, 3\).*\(3, 2\)"):
        dcp.load({"w": flow.zeros(3, 2), "step": 0}, checkpoint_id=tmp_path / "ck")
    with pytest.raises(CheckpointError, match=r"dtype mismatch for 'w': saved float32.*float64"):
        dcp.load({"w": flow.zeros(2, 3, dtype=flow.float64), "step": 0}, checkpoint_id=tmp_path / "ck")
    w = flow.zeros(2, 3)
    with pytest.raises(CheckpointError, match=r"'step' is saved as a value but the state dict holds a Tensor"):
        dcp.load({"w": w, "step": flow.zeros(())}, checkpoint_id=tmp_path / "ck")
    np.testing.assert_array_equal(w.numpy(), np.zeros((2, 3)))  # checked before anything was written


def test_a_corrupt_chunk_is_caught_by_its_checksum(tmp_path):
    dcp.save({"w": flow.arange(64, dtype=flow.float64)}, checkpoint_id=tmp_path / "ck")
    f = tmp_path / "ck" / "__0_0.safetensors"
    data = bytearray(f.read_bytes())
    data[-3] ^= 0xFF  # a bit flip in the tensor bytes (the file keeps its size)
    f.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"chunk 'w/0' of 'w' in __0_0.safetensors is corrupt \(checksum\)"):
        dcp.load({"w": flow.zeros(64, dtype=flow.float64)}, checkpoint_id=tmp_path / "ck")
    f.write_bytes(bytes(data[:-8]))  # truncated
    with pytest.raises(CheckpointError, match=r"shard file __0_0.safetensors .* wrong size"):
        dcp.load({"w": flow.zeros(64, dtype=flow.float64)}, checkpoint_id=tmp_path / "ck")


def test_incomplete_or_absent_checkpoints_are_refused(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint directory"):
        dcp.load({}, checkpoint_id=tmp_path / "nothing")
    (tmp_path / "half").mkdir()
    with pytest.raises(CheckpointError, match=r"not a complete checkpoint \(no .metadata"):
        dcp.load({}, checkpoint_id=tmp_path / "half")


def test_the_checkpoint_moved_aside_by_an_unfinished_swap_still_loads(tmp_path):
    # a save moves the old checkpoint aside, then renames the new one in: stopped in between, the
    # path is empty and the old one is complete at .<name>.tmp-<token>.old
    state, m, opt = _state(0)
    want = _values(m, opt)
    dcp.save(state, checkpoint_id=tmp_path / "ck")
    (tmp_path / "ck").rename(tmp_path / ".ck.tmp-1f.old")
    (tmp_path / ".ck.tmp-20").mkdir()  # the new one's unfinished directory: no .metadata, ignored
    state2, m2, opt2 = _state(7)
    with pytest.warns(UserWarning, match="loading the previous one"):
        dcp.load(state2, checkpoint_id=tmp_path / "ck")
    dcp.set_state_dict(m2, opt2, model_state_dict=state2["model"], optim_state_dict=state2["optim"])
    got = _values(m2, opt2)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    dcp.save(state2, checkpoint_id=tmp_path / "ck")  # the next save puts one in place and clears the rest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_bad_arguments(tmp_path):
    with pytest.raises(TypeError, match=r"'x.f' is a builtin_function_or_method, which a checkpoint cannot hold"):
        dcp.save({"x": {"f": print}}, checkpoint_id=tmp_path / "ck")
    with pytest.raises(TypeError, match="state_dict must be a dict"):
        dcp.save([flow.ones(1)], checkpoint_id=tmp_path / "ck")
    with pytest.raises(ValueError, match="same key 'a.b'"):
        dcp.save({"a.b": 1, "a": {"b": 2}}, checkpoint_id=tmp_path / "ck")
    with pytest.raises(ValueError, match="give checkpoint_id"):
        dcp.save({"a": 1})
    with pytest.raises(NotImplementedError, match="storage_writer"):
        dcp.save({"a": 1}, checkpoint_id=tmp_path / "ck", storage_writer=object())
    with pytest.raises(NotImplementedError, match="process_group"):
        dcp.load({"a": 1}, checkpoint_id=tmp_path / "ck", process_group=object())
    assert not (tmp_path / "ck").exists()


def test_a_crash_mid_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    dcp.save({"w": flow.ones(4), "v": flow.ones(2)}, checkpoint_id=tmp_path / "ck")
    monkeypatch.setenv("FLOW_DCP_FAIL_AT", "0:1")
    with pytest.raises(CheckpointError, match="FLOW_DCP_FAIL_AT: rank 0 crashes after 1 chunks"):
        dcp.save({"w": flow.zeros(4), "v": flow.zeros(2)}, checkpoint_id=tmp_path / "ck")
    (left,) = [p for p in os.listdir(tmp_path) if p != "ck"]
    assert left.startswith(".ck.tmp-")
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        dcp.load({"w": flow.zeros(4), "v": flow.zeros(2)}, checkpoint_id=tmp_path / left)
    sd = {"w": flow.zeros(4), "v": flow.zeros(2)}
    dcp.load(sd, checkpoint_id=tmp_path / "ck")
    np.testing.assert_array_equal(sd["w"].numpy(), np.ones(4))
    monkeypatch.delenv("FLOW_DCP_FAIL_AT")
    dcp.save({"w": flow.full((4,), 2.0), "v": flow.ones(2)}, checkpoint_id=tmp_path / "ck")
    assert os.listdir(tmp_path) == ["ck"]  # the next save clears what the crash left


def test_a_write_error_is_raised_and_leaves_nothing_behind(tmp_path, monkeypatch):
    import safetensors.numpy

    dcp.save({"w": flow.ones(3)}, checkpoint_id=tmp_path / "ck")

    def broken(tensors):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safetensors.numpy, "save", broken)
    with pytest.raises(
        CheckpointError, match=r"failed \(rank 0: OSError: .*No space left.*previous checkpoint is kept"
    ):
        dcp.save({"w": flow.zeros(3)}, checkpoint_id=tmp_path / "ck")
    assert os.listdir(tmp_path) == ["ck"]
    sd = {"w": flow.zeros(3)}
    dcp.load(sd, checkpoint_id=tmp_path / "ck")
    np.testing.assert_array_equal(sd["w"].numpy(), np.ones(3))
    monkeypatch.undo()
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match="exists and is not a checkpoint directory"):
        dcp.save({"w": flow.zeros(3)}, checkpoint_id=tmp_path / "file")
    assert sorted(os.listdir(tmp_path)) == ["ck", "file"]


def test_without_the_implementation_the_error_names_it(monkeypatch):
    from flow import provided

    real = provided.get
    monkeypatch.setattr(
        provided, "get", lambda name, default=None: None if "checkpoint" in name else real(name, default)
    )
    with pytest.raises(flow.errors.FeatureNotInstalledError, match="flow.distributed.checkpoint.save"):
        dcp.save({}, checkpoint_id="x")


def test_torch_dcp_flattens_optimizer_state_to_the_same_keys():
    # the flat keys follow torch.distributed.checkpoint's (dotted paths; param groups by index)
    torch = pytest.importorskip("torch")
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict

    from flow_dist.dcp._flatten import flatten

    sd = {"m": {"w": flow.ones(2)}, "o": {"state": {"w": {"exp_avg": flow.ones(2)}}, "param_groups": [{"lr": 0.1}]}}
    tsd = {"m": {"w": torch.ones(2)}, "o": {"state": {"w": {"exp_avg": torch.ones(2)}}, "param_groups": [{"lr": 0.1}]}}
    flat, _ = flatten_state_dict(tsd)
    assert [leaf.key for leaf in flatten(sd, "t")] == list(flat)


# -- several ranks ----------------------------------------------------------------------------


def _rank_script():
    spec = importlib.util.spec_from_file_location("dcp_ranks", RANKS / "dcp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load_in_one_process(path, ref_path):
    # the rank script's "load" layout at world size 1: every global tensor is whole on rank 0
    ranks = _rank_script()
    state, model, opt = ranks.build("load", seed=1, lr=0.5)
    dcp.load(state, checkpoint_id=path)
    dcp.set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    msd, osd = dcp.get_state_dict(model, opt)
    got = ranks.logical({"model": msd, "optim": osd, "extra": state["extra"]})
    ref = np.load(ref_path)
    assert sorted(got) == sorted(ref.files)
    for k, v in got.items():
        np.testing.assert_array_equal(v, ref[k], err_msg=k)


@pytest.fixture(scope="module")
def saved_at_4(tmp_path_factory):
    d = tmp_path_factory.mktemp("dcp")
    path, ref = str(d / "ck"), str(d / "ref.npz")
    assert "dcp save ok" in run_ranks("dcp.py", 4, "save", path, ref, timeout=120).stdout
    return path, ref


@needs_mpi()
def test_saved_at_4_ranks_loads_at_2_4_and_1_into_other_layouts(saved_at_4):
    path, ref = saved_at_4
    assert "dcp load ok" in run_ranks("dcp.py", 2, "load", path, ref, timeout=120).stdout  # S(0) <-> S(1)
    assert "dcp load ok" in run_ranks("dcp.py", 4, "load", path, ref, timeout=120).stdout  # 2-d (S(1), S(0))
    _load_in_one_process(path, ref)


@needs_mpi()
def test_a_rank_crashing_mid_save_aborts_the_job_and_keeps_the_checkpoint(saved_at_4):
    path, ref = saved_at_4
    p = run_ranks("dcp.py", 2, "crash", path, timeout=120, env={"FLOW_DCP_FAIL_AT": "1:1"}, check=False)
    assert p.returncode != 0, p.stdout
    assert "crashes after 1 chunks" in p.stdout + p.stderr
    assert "should not get here" not in p.stdout
    parent = os.path.dirname(path)
    left = [e for e in os.listdir(parent) if e.startswith(".ck.tmp-")]
    assert left and all(not os.path.exists(os.path.join(parent, e, ".metadata")) for e in left)
    _load_in_one_process(path, ref)  # the previous checkpoint, whole
