"""flow.onnx.export: models written as ONNX, checked by onnx.checker and run in onnxruntime."""

from __future__ import annotations

import io
import subprocess
import sys
import types

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import flow  # noqa: E402
import flow.nn.functional as F  # noqa: E402
import flow.plugins  # noqa: E402
from flow import nn  # noqa: E402
from flow.onnx import OnnxExportError  # noqa: E402
from flow.plugins import hookimpl  # noqa: E402


def _export(model, args, **kw):
    buf = io.BytesIO()
    mp = flow.onnx.export(model, args, buf, **kw)
    onnx.checker.check_model(mp)
    return mp, ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])


def _run(sess, *arrays):
    names = [i.name for i in sess.get_inputs()]
    return sess.run(None, dict(zip(names, (np.asarray(a) for a in arrays))))


def _flow_out(model, *args):
    with flow.no_grad():
        out = model(*args)
    return [o.numpy() for o in (out if isinstance(out, (tuple, list)) else (out,))]


def _check_same(model, args, **kw):
    mp, sess = _export(model, args, **kw)
    got = _run(sess, *(a.numpy() for a in args))
    ref = _flow_out(model, *args)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)
    return mp, sess


def _op_types(mp) -> set[str]:
    return {n.op_type for n in mp.graph.node}


# -- models ------------------------------------------------------------------------------
def test_mlp_exports_with_parameters_as_initializers_and_names():
    flow.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    mp, _ = _check_same(model, (flow.randn(4, 6),), input_names=["x"], output_names=["logits"])
    assert [i.name for i in mp.graph.input] == ["x"]
    assert [o.name for o in mp.graph.output] == ["logits"]
    inits = {t.name: t for t in mp.graph.initializer}
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(inits["0.weight"]), model[0].weight.detach().numpy())
    assert {"Gemm", "Relu"} <= _op_types(mp)
    assert mp.opset_import[0].version == 17


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, groups=2, bias=False)
        self.avg = nn.AvgPool2d(2)
        self.fc = nn.Linear(32, 5)

    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.conv(x))))
        x = self.avg(x + self.conv2(x))
        return self.fc(flow.flatten(x, 1))


def test_cnn_with_batch_norm_in_eval_and_a_dynamic_batch_axis():
    flow.manual_seed(0)
    model = ConvNet()
    model(flow.randn(4, 3, 16, 16))  # a training step moves the running statistics off 0 / 1
    model.train()
    x = flow.randn(2, 3, 16, 16)
    mp, sess = _export(model, (x,), input_names=["img"], dynamic_axes={"img": {0: "batch"}, "output_0": [0]})
    assert model.training and model.bn.training  # the training flags are restored
    model.eval()
    np.testing.assert_allclose(_run(sess, x.numpy())[0], _flow_out(model, x)[0], rtol=1e-4, atol=1e-4)
    dims = mp.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and [d.dim_value for d in dims[1:]] == [3, 16, 16]
    assert mp.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "output_0_dynamic_axes_1"
    assert {"Conv", "BatchNormalization", "MaxPool", "AveragePool", "Add"} <= _op_types(mp)
    x5 = flow.randn(5, 3, 16, 16)
    np.testing.assert_allclose(_run(sess, x5.numpy())[0], _flow_out(model, x5)[0], rtol=1e-4, atol=1e-4)


class TinyGPT(nn.Module):
    """Embedding, layer norm, a fused qkv projection split into heads, causal attention, gelu."""

    def __init__(self, vocab: int = 20, d: int = 16, heads: int = 2, block: int = 8) -> None:
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(block, d)
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(approximate="tanh"), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        b, t = idx.shape
        x = self.tok(idx) + self.pos(flow.arange(t))
        q, k, v = self.qkv(self.ln(x)).split(x.shape[-1], dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + y.transpose(1, 2).reshape(b, t, -1)
        x = x + self.mlp(F.gelu(x))
        return F.log_softmax(self.head(x), dim=-1)


def test_attention_model_exports_and_takes_another_batch_size():
    flow.manual_seed(0)
    model = TinyGPT()
    idx = flow.randint(0, 20, (2, 8))
    mp, sess = _check_same(model, (idx,), input_names=["idx"], dynamic_axes={"idx": {0: "batch"}})
    assert {"Gather", "LayerNormalization", "MatMul", "Softmax", "Split", "Transpose", "Where", "Erf"} <= _op_types(mp)
    idx3 = flow.randint(0, 20, (3, 8))
    np.testing.assert_allclose(_run(sess, idx3.numpy())[0], _flow_out(model, idx3)[0], rtol=1e-4, atol=1e-4)


class Misc(nn.Module):
    def forward(self, x, mask, idx):
        a = flow.where(x > 0.5, x, 0.25).clamp(-1.0, 0.75)
        b = flow.sigmoid(x) * F.silu(x) - flow.tanh(x) / 2
        c = (mask | (x < 0)).sum(-1, keepdim=True)  # bool sum: int64
        d = flow.cat([x[:, 1:3], x[:, None, ::2].reshape(x.shape[0], -1), x[1][None, :].expand(3, 6)], dim=1)
        e = flow.stack([x.mean(dim=1), x.amax(dim=1)], dim=1)
        f = x.index_select(1, idx).exp()
        q = x.reshape(3, 2, 3)
        g = F.scaled_dot_product_attention(q, q * 2, q - 1, attn_mask=mask[:, :4].reshape(3, 2, 2))
        return a + b, c, d, e, f, F.softmax(g, dim=-1), (x != 0.0) & ~mask


def test_elementwise_reduction_and_indexing_ops():
    flow.manual_seed(0)
    x = flow.randn(3, 6)
    mask = flow.rand(3, 6) > 0.5
    idx = flow.tensor([0, 5, 2])
    mp, _ = _check_same(Misc(), (x, mask, idx))
    assert len(mp.graph.output) == 7


def test_constant_folding_computes_parameter_only_subgraphs_at_export():
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("c", flow.randn(4))

        def forward(self, x):
            return x * (self.c * 2.0).exp()

    flow.manual_seed(0)
    model, x = Scaled(), flow.randn(2, 4)
    folded, _ = _check_same(model, (x,))
    plain, _ = _check_same(model, (x,), do_constant_folding=False)
    assert "Exp" not in _op_types(folded) and "Exp" in _op_types(plain)
    assert len(folded.graph.node) < len(plain.graph.node)


def test_export_params_false_makes_parameters_graph_inputs(tmp_path):
    flow.manual_seed(0)
    model = nn.Linear(3, 2)
    x = flow.randn(4, 3)
    path = tmp_path / "lin.onnx"
    mp = flow.onnx.export(model, x, str(path), export_params=False, input_names=["x"])
    assert not mp.graph.initializer
    assert [i.name for i in mp.graph.input] == ["x", "weight", "bias"]
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(
        None, {"x": x.numpy(), "weight": model.weight.detach().numpy(), "bias": model.bias.detach().numpy()}
    )[0]
    np.testing.assert_allclose(got, _flow_out(model, x)[0], rtol=1e-5, atol=1e-6)


def test_dropout_is_gone_in_the_exported_graph_and_verbose_prints_it(capsys):
    model = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    mp = flow.onnx.export(model, (flow.randn(2, 3),), io.BytesIO(), verbose=True)
    assert model.training
    _check_same(model.eval(), (flow.randn(2, 3),))
    assert "Gemm" in capsys.readouterr().out
    assert "Dropout" not in _op_types(mp) and "RandomUniformLike" not in _op_types(mp)


def test_opset_18_and_20_use_their_forms():
    model = nn.Sequential(nn.Linear(3, 4), nn.GELU())
    x = flow.randn(2, 3)
    assert "Gelu" in _op_types(_check_same(model, (x,), opset_version=20)[0])
    assert "Erf" in _op_types(_check_same(model, (x,), opset_version=18)[0])


# -- errors ------------------------------------------------------------------------------
class Cumsum(nn.Module):
    def forward(self, x):
        return flow.cumsum(x, 1)


def _cumsum_rule(node, ctx):
    axis = ctx.ints([node.attrs["dim"] % node.inputs[0].ndim], "axis")
    return [onnx.helper.make_node("CumSum", [ctx.name(node.inputs[0]), axis], [ctx.out(node)])]


def test_an_op_without_a_rule_is_named_and_a_plugin_can_add_the_rule():
    x = flow.randn(2, 3)
    with pytest.raises(
        OnnxExportError,
        match=r"op 'cumsum' \(called at test_onnx_export.py:\d+\).*register_rule\('onnx_export', 'cumsum'",
    ):
        flow.onnx.export(Cumsum(), (x,), io.BytesIO())
    plugin = types.SimpleNamespace()
    plugin.flow_register_rules = hookimpl(
        lambda registry: registry.register_rule("onnx_export", "cumsum", _cumsum_rule)
    )
    name = flow.plugins.register(plugin, name="tests.onnx_cumsum")
    try:
        assert flow.onnx.export_table().provider("cumsum") == name
        _check_same(Cumsum(), (x,))
    finally:
        flow.plugins.unregister(name)
    assert "cumsum" not in flow.onnx.export_table()


def test_bad_arguments_raise_clearly():
    model, x = nn.Linear(3, 2), flow.randn(2, 3)
    buf = io.BytesIO()
    with pytest.raises(TypeError, match="'model' must be a flow.nn.Module"):
        flow.onnx.export(lambda t: t, (x,), buf)
    with pytest.raises(TypeError, match=r"args\[1\] must be a Tensor"):
        flow.onnx.export(model, (x, 3), buf)
    with pytest.raises(TypeError, match="'f' must be a file path"):
        flow.onnx.export(model, (x,), 42)
    with pytest.raises(ValueError, match="opset_version 11 is not supported"):
        flow.onnx.export(model, (x,), buf, opset_version=11)
    with pytest.raises(ValueError, match="2 input_names given for 1 inputs"):
        flow.onnx.export(model, (x,), buf, input_names=["a", "b"])
    with pytest.raises(ValueError, match="dynamic_axes names 'y', which is neither"):
        flow.onnx.export(model, (x,), buf, dynamic_axes={"y": [0]})
    with pytest.raises(ValueError, match=r"axes \[2\] out of range"):
        flow.onnx.export(model, (x,), buf, input_names=["x"], dynamic_axes={"x": [2]})
    with pytest.raises(TypeError, match="must map int axes to str names"):
        flow.onnx.export(model, (x,), buf, input_names=["x"], dynamic_axes={"x": {0: 1}})
    assert buf.getvalue() == b""


def test_a_constant_that_depends_on_a_dynamic_axis_is_an_error():
    class Offsets(nn.Module):
        def forward(self, x):
            return x + flow.zeros(x.shape[0], 1)  # made from the traced size: a baked-in constant

    with pytest.raises(OnnxExportError, match="depends on a dynamic axis"):
        flow.onnx.export(Offsets(), (flow.randn(2, 3),), io.BytesIO(), input_names=["x"], dynamic_axes={"x": [0]})
    _check_same(Offsets(), (flow.randn(2, 3),))  # without dynamic axes it is just a constant


def test_dynamic_axes_that_must_be_equal_need_one_name():
    class Pair(nn.Module):
        def forward(self, a, b):
            return a + b

    a, b = flow.randn(2, 3), flow.randn(2, 3)
    with pytest.raises(OnnxExportError, match="fails when the dynamic axes change size.*same dim name"):
        flow.onnx.export(Pair(), (a, b), io.BytesIO(), input_names=["a", "b"], dynamic_axes={"a": [0], "b": [0]})
    mp, sess = _check_same(Pair(), (a, b), input_names=["a", "b"], dynamic_axes={"a": {0: "n"}, "b": {0: "n"}})
    a4, b4 = flow.randn(4, 3), flow.randn(4, 3)
    np.testing.assert_allclose(_run(sess, a4.numpy(), b4.numpy())[0], (a4 + b4).numpy(), rtol=1e-6)


def test_import_flow_does_not_import_onnx():
    code = "import sys, flow, flow.onnx; assert 'onnx' not in sys.modules and callable(flow.onnx.export)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_matches_torch_module_outputs_where_torch_is_installed():
    torch = pytest.importorskip("torch")
    flow.manual_seed(0)
    model = ConvNet().eval()
    tconv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
    tbn, tfc = torch.nn.BatchNorm2d(8).eval(), torch.nn.Linear(32, 5)
    tconv2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=2, bias=False)
    sd = {k: torch.from_numpy(v.detach().numpy().copy()) for k, v in model.state_dict().items()}
    for mod, prefix in ((tconv, "conv"), (tbn, "bn"), (tconv2, "conv2"), (tfc, "fc")):
        mod.load_state_dict({k[len(prefix) + 1 :]: v for k, v in sd.items() if k.startswith(prefix + ".")})
    x = flow.randn(2, 3, 16, 16)
    tx = torch.from_numpy(x.numpy())
    with torch.no_grad():
        h = torch.nn.functional.max_pool2d(torch.relu(tbn(tconv(tx))), 2)
        ref = tfc(torch.flatten(torch.nn.functional.avg_pool2d(h + tconv2(h), 2), 1)).numpy()
    _, sess = _export(model, (x,))
    np.testing.assert_allclose(_run(sess, x.numpy())[0], ref, rtol=1e-4, atol=1e-4)
