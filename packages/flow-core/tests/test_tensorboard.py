"""flow.utils.tensorboard.SummaryWriter: event files read back with TensorBoard's own reader, and the
summary protobufs compared with torch.utils.tensorboard's for the same inputs."""

import io
import os
import sys

import numpy as np
import pytest

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader  # noqa: E402

import flow  # noqa: E402
from flow.utils.tensorboard import SummaryWriter, _summary  # noqa: E402


def _read(path):
    acc = EventAccumulator(str(path), size_guidance={"histograms": 0, "images": 0, "scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def _events(path):
    files = [f for f in os.listdir(path) if f.startswith("events.out.tfevents")]
    assert len(files) == 1, files
    return list(EventFileLoader(os.path.join(path, files[0])).Load())


def _torch_summary():
    pytest.importorskip("torch")
    from torch.utils.tensorboard import summary

    return summary


class Net(flow.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = flow.nn.Linear(4, 3)
        self.fc2 = flow.nn.Linear(3, 2)

    def forward(self, x):
        return self.fc2(flow.relu(self.fc1(x)))


def test_scalars_from_tensors_arrays_and_numbers(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_scalar("loss", flow.tensor(1.5), 0)
        w.add_scalar("loss", np.float32(0.25), 1)
        w.add_scalar("loss", 3, 2)
        w.add_scalar("loss", flow.tensor([7.0]), np.int64(3))  # one element, and a NumPy step
        w.add_scalar("train/lr", 0.1, 5, walltime=123.0)
    acc = _read(tmp_path)
    assert sorted(acc.Tags()["scalars"]) == ["loss", "train/lr"]
    ev = acc.Scalars("loss")
    assert [e.step for e in ev] == [0, 1, 2, 3]
    assert [e.value for e in ev] == [1.5, 0.25, 3.0, 7.0]
    lr = acc.Scalars("train/lr")
    assert lr[0].step == 5 and lr[0].wall_time == 123.0 and lr[0].value == pytest.approx(0.1)


def test_scalar_proto_matches_torch():
    summary = _torch_summary()
    import torch

    for v in (1.5, -2, 0.1):
        assert _summary.scalar("x", flow.tensor(v)) == summary.scalar("x", torch.tensor(v))
    assert _summary.scalar("y", np.float64(3.25)) == summary.scalar("y", 3.25)


def test_add_scalars_writes_one_run_per_key(tmp_path):
    with SummaryWriter(tmp_path) as w:
        for step in range(3):
            w.add_scalars("run/loss", {"train": step * 1.0, "val": flow.tensor(step + 0.5)}, step)
    for key, offset in (("train", 0.0), ("val", 0.5)):
        acc = _read(tmp_path / f"run_loss_{key}")
        assert acc.Tags()["scalars"] == ["run/loss"]
        assert [(e.step, e.value) for e in acc.Scalars("run/loss")] == [(s, s + offset) for s in range(3)]


def test_histogram_buckets_and_counts(tmp_path):
    rng = np.random.default_rng(0)
    values = rng.standard_normal(1000).astype(np.float32)
    with SummaryWriter(tmp_path) as w:
        w.add_histogram("w", flow.tensor(values), 7)
        w.add_histogram("ten", np.arange(10.0), 8, bins=5)
    acc = _read(tmp_path)
    h = acc.Histograms("w")[0]
    assert h.step == 7
    hv = h.histogram_value
    assert hv.num == 1000 and sum(hv.bucket) == 1000
    assert hv.min == pytest.approx(values.min()) and hv.max == pytest.approx(values.max())
    assert hv.sum == pytest.approx(values.astype(np.float64).sum())
    assert hv.bucket_limit[-1] >= values.max() and hv.bucket[0] == 0
    ten = acc.Histograms("ten")[0].histogram_value
    # np.histogram's five bins of 0..9 (two values each), after TensorBoard's leading empty bin
    assert list(ten.bucket) == [0, 2, 2, 2, 2, 2]
    assert list(ten.bucket_limit) == pytest.approx([0.0, 1.8, 3.6, 5.4, 7.2, 9.0])


@pytest.mark.parametrize("bins,max_bins", [("tensorflow", None), (10, None), (64, 10), ("auto", None)])
def test_histogram_proto_matches_torch(bins, max_bins):
    summary = _torch_summary()
    import torch

    values = np.random.default_rng(1).standard_normal((20, 30))
    torch_bins = bins
    if bins == "tensorflow":
        torch_bins = _summary.default_bins()
        v, ref = 1e-12, []
        while v < 1e20:
            ref.append(v)
            v *= 1.1
        assert torch_bins == [-x for x in ref[::-1]] + [0] + ref  # torch's writer builds these edges
    ours = _summary.histogram("h", flow.tensor(values), bins, max_bins)
    theirs = summary.histogram("h", torch.tensor(values), torch_bins, max_bins)
    assert ours == theirs


def _png_pixels(image_value):
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(image_value.encoded_image_string)))


@pytest.mark.parametrize(
    "shape,fmt,size",
    [((3, 8, 5), "CHW", (8, 5)), ((6, 4, 3), "HWC", (6, 4)), ((7, 9), "HW", (7, 9)), ((1, 5, 2), "CHW", (5, 2))],
)
def test_image_sizes_and_layouts(tmp_path, shape, fmt, size):
    img = np.random.default_rng(2).random(shape).astype(np.float32)
    with SummaryWriter(tmp_path) as w:
        w.add_image("img", flow.tensor(img), 3, dataformats=fmt)
    ev = _read(tmp_path).Images("img")[0]
    assert ev.step == 3 and (ev.height, ev.width) == size


def test_image_pixels_match_torch():
    summary = _torch_summary()
    rng = np.random.default_rng(3)
    for img, fmt in ((rng.random((3, 4, 6)), "CHW"), ((rng.random((5, 2, 3)) * 255).astype(np.uint8), "HWC")):
        ours = _summary.image("i", img, fmt).value[0].image
        theirs = summary.image("i", img, dataformats=fmt).value[0].image
        assert (ours.height, ours.width, ours.colorspace) == (theirs.height, theirs.width, theirs.colorspace)
        np.testing.assert_array_equal(_png_pixels(ours), _png_pixels(theirs))


def test_add_images_tiles_a_batch(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_images("batch", np.zeros((10, 1, 4, 3), np.float32), 0)
    ev = _read(tmp_path).Images("batch")[0]
    assert (ev.height, ev.width) == (8, 24)  # 8 per row: 2 rows of 4, 8 columns of 3


def test_text(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_text("notes", "hello **world**", 4)
    acc = _read(tmp_path)
    ev = acc.Tensors("notes/text_summary")[0]
    assert ev.step == 4 and ev.tensor_proto.string_val == [b"hello **world**"]
    summary = _torch_summary()
    assert _summary.text("notes", "héllo") == summary.text("notes", "héllo")


def test_graph_of_a_module(tmp_path):
    net = Net()
    before = [p.detach().numpy().copy() for p in net.parameters()]
    with SummaryWriter(tmp_path) as w:
        w.add_graph(net, flow.randn(2, 4))
    g = _read(tmp_path).Graph()
    by_name = {n.name: n for n in g.node}
    assert {"input/input0", "Net/fc1/weight", "Net/fc1/bias", "Net/fc2/weight", "output/output0"} <= set(by_name)
    ops = [n for n in g.node if n.op in ("linear", "relu")]
    assert [n.op for n in ops] == ["linear", "relu", "linear"]
    assert all(n.name.startswith(p) for n, p in zip(ops, ("Net/fc1/", "Net/", "Net/fc2/")))
    first = ops[0]
    assert list(first.input) == ["input/input0", "Net/fc1/weight", "Net/fc1/bias"]
    assert [d.size for d in first.attr["_output_shapes"].list.shape[0].dim] == [2, 3]
    assert list(by_name["output/output0"].input) == [ops[2].name]
    for a, b in zip(before, net.parameters()):  # tracing changed nothing
        np.testing.assert_array_equal(a, b.detach().numpy())


def test_graph_of_an_nn_graph(tmp_path):
    net = Net()
    opt = flow.optim.SGD(net.parameters(), lr=0.1)

    class Step(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = net
            self.add_optimizer(opt)

        def build(self, x):
            loss = self.model(x).sum()
            loss.backward()
            return loss

    g = Step()
    x = flow.randn(2, 4)
    with SummaryWriter(tmp_path / "none") as w, pytest.raises(flow.errors.FlowError, match="not been compiled"):
        w.add_graph(g)
    before = net.fc1.weight.detach().numpy().copy()
    with SummaryWriter(tmp_path / "a") as w:
        w.add_graph(g, x)  # compiles the step, runs nothing
    np.testing.assert_array_equal(before, net.fc1.weight.detach().numpy())
    g(x)
    with SummaryWriter(tmp_path / "b") as w:
        w.add_graph(g)  # the step it last ran
    for run in ("a", "b"):
        nodes = _read(tmp_path / run).Graph().node
        names = {n.name for n in nodes}
        assert "input/input0" in names and "model/fc1/weight" in names
        assert any(n.op == "StateUpdate" and n.name == "update/model/fc1/weight" for n in nodes)
        inputs = {i.split(":")[0] for n in nodes for i in n.input}
        assert inputs <= names  # every edge starts at a node of the graph


def test_hparams(tmp_path):
    from tensorboard.plugins.hparams import plugin_data_pb2

    with SummaryWriter(tmp_path) as w:
        w.add_hparams(
            {"lr": 0.1, "bsize": 4, "opt": "adam", "skip": None}, {"hp/acc": flow.tensor(0.75)}, run_name="t1"
        )
    acc = _read(tmp_path / "t1")
    content = acc.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    hp = start.session_start_info.hparams
    assert hp["lr"].number_value == 0.1 and hp["bsize"].number_value == 4 and hp["opt"].string_value == "adam"
    assert "skip" not in hp
    exp = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    assert [i.name for i in exp.hparam_infos] == ["lr", "bsize", "opt"]
    assert [m.name.tag for m in exp.metric_infos] == ["hp/acc"]
    assert acc.Scalars("hp/acc")[0].value == 0.75


def test_hparams_protos_match_torch():
    summary = _torch_summary()
    args = ({"lr": 0.01, "flag": True, "opt": "sgd"}, {"m": 1.0}, {"opt": ["sgd", "adam"]})
    for ours, theirs in zip(_summary.hparams(*args), summary.hparams(*args)):
        assert ours == theirs


def test_purge_step_close_and_reopen(tmp_path):
    w = SummaryWriter(tmp_path, purge_step=5, filename_suffix=".flow")
    w.add_scalar("a", 1.0, 5)
    w.close()
    files = os.listdir(tmp_path)
    assert len(files) == 1 and files[0].endswith(".flow")
    events = _events(tmp_path)
    logs = [e for e in events if e.HasField("session_log")]
    assert len(logs) == 1 and logs[0].step == 5 and logs[0].session_log.status == logs[0].session_log.START
    w.add_scalar("a", 2.0, 6)  # a closed writer opens a new event file
    w.close()
    assert len(os.listdir(tmp_path)) == 2


def test_default_log_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with SummaryWriter(comment="_exp") as w:
        assert w.get_logdir().startswith("runs" + os.sep) and w.get_logdir().endswith("_exp")
    assert os.path.isdir(w.get_logdir())


def test_bad_input_raises(tmp_path):
    with SummaryWriter(tmp_path) as w:
        with pytest.raises(ValueError, match="one element"):
            w.add_scalar("x", np.ones(3))
        with pytest.raises(TypeError, match="tag"):
            w.add_scalar("", 1.0)
        with pytest.raises(TypeError, match="global_step"):
            w.add_scalar("x", 1.0, 1.5)
        with pytest.raises(TypeError, match="flow Tensor, a NumPy array or a Python number"):
            w.add_scalar("x", "1.0")
        with pytest.raises(ValueError, match="no elements"):
            w.add_histogram("h", np.array([]))
        with pytest.raises(ValueError, match="finite"):
            w.add_histogram("h", np.array([1.0, np.nan]))
        with pytest.raises(ValueError, match="bins"):
            w.add_histogram("h", np.ones(3), bins="nope")
        with pytest.raises(ValueError, match="dataformats 'CHW' needs a 3-d image"):
            w.add_image("i", np.ones((4, 4)))
        with pytest.raises(ValueError, match="1, 3 or 4 channels"):
            w.add_image("i", np.ones((2, 4, 4)))
        with pytest.raises(ValueError, match="dataformats"):
            w.add_image("i", np.ones((4, 4, 3)), dataformats="HWX")
        with pytest.raises(TypeError, match="text_string"):
            w.add_text("t", 3)
        with pytest.raises(ValueError, match="needs input_to_model"):
            w.add_graph(Net())
        with pytest.raises(TypeError, match="must be a flow.nn.Module"):
            w.add_graph(lambda x: x, flow.ones(1))
        with pytest.raises(TypeError, match="input_to_model"):
            w.add_graph(Net(), np.ones((2, 4)))
        with pytest.raises(TypeError, match="dicts"):
            w.add_hparams([("lr", 1)], {})
        with pytest.raises(TypeError, match="hparam_domain_discrete"):
            w.add_hparams({"lr": 0.1}, {}, {"lr": ["a"]})
    with pytest.raises(ValueError, match="max_queue"):
        SummaryWriter(tmp_path, max_queue=0)


def test_missing_tensorboard_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # import tensorboard now raises ImportError
    with pytest.raises(ImportError, match=r"flow-core\[tensorboard\]"):
        SummaryWriter(tmp_path)


def test_importing_flow_utils_does_not_import_tensorboard():
    import subprocess

    code = "import flow, flow.utils.tensorboard, sys; print('tensorboard' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
