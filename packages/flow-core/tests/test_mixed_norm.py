"""Mixed-precision normalisation: bfloat16 / float16 activations with float32 parameters.

batch_norm, group_norm and layer_norm take a low-precision input with float32 weight, bias and
running statistics and return the input's dtype (PyTorch's "mixed type" normalisation); the
composites apply their parameters through the ``cast_like`` op, which a traced graph keeps, so the
activation stays low after a batch norm in graph mode too. The CPU's low-precision kernel adapter
gives every output the dtype the op's meta rule gives (float32 parameter gradients included).
"""

from __future__ import annotations

import numpy as np
import pytest

import flow
import flow.nn as nn
import flow.nn.functional as F
from flow import _dtype as D
from flow.backends.cpu import native
from flow.errors import FlowError, OpTypeError
from flow.ops.conversion import cast_like
from flow.registry import REGISTRY
from flow.testing import checks as C
from flow.testing import error_inputs as E

LOW = [D.bfloat16, D.float16]
_TORCH_DT = {"bfloat16": "bfloat16", "float16": "float16"}
needs_native = pytest.mark.skipif(not native.HAVE_NATIVE, reason="flow._C not built")


def _rng(seed=0):
    return np.random.default_rng(seed)


def _np(t) -> np.ndarray:
    return t.detach().float().numpy().astype(np.float64)


def _rel(got, want) -> float:
    want = np.asarray(want, np.float64)
    return float(np.abs(np.asarray(got, np.float64) - want).max() / max(np.abs(want).max(), 1e-12))


# -- the cast_like op ------------------------------------------------------------------------------------


@pytest.mark.parametrize("src,dst", [("float32", "bfloat16"), ("bfloat16", "float32"), ("float32", "float16")])
def test_cast_like_converts_to_the_dtype_of_other(src, dst):
    x = flow.tensor(_rng().standard_normal((3, 4)).astype(np.float32)).to(getattr(flow, src))
    other = flow.zeros(7, 2).to(getattr(flow, dst))  # shape and values of other play no part
    y = cast_like(x, other)
    assert y.dtype is other.dtype and tuple(y.shape) == (3, 4) and y.device is x.device
    np.testing.assert_array_equal(y.numpy(), x.to(other.dtype).numpy())
    assert x.type_as(other).dtype is other.dtype


def test_cast_like_gradient_is_converted_back_and_other_gets_none():
    x = flow.tensor(_rng(1).standard_normal((2, 5)).astype(np.float32)).requires_grad_()
    other = flow.ones(3).bfloat16().requires_grad_()
    y = cast_like(x, other)
    assert y.dtype is flow.bfloat16 and y.requires_grad
    (y * flow.arange(10).reshape(2, 5).bfloat16()).sum().backward()
    assert x.grad.dtype is flow.float32
    np.testing.assert_array_equal(x.grad.numpy(), np.arange(10, dtype=np.float32).reshape(2, 5))
    assert other.grad is None
    # other's history is not the result's: only x makes it require grad (as type_as in PyTorch)
    assert not cast_like(flow.ones(2), other).requires_grad


def test_cast_like_is_a_no_op_for_the_same_dtype():
    x = flow.randn(4, 3)
    assert cast_like(x, flow.zeros(1)) is x
    assert x.type_as(flow.zeros(2, 2)) is x
    # called as an op (as a traced graph records it) it makes a new buffer, never an alias
    y = flow.ops.call("cast_like", x, flow.zeros(1))
    assert y.dtype is x.dtype and not np.shares_memory(y.numpy(), x.numpy())
    np.testing.assert_array_equal(y.numpy(), x.numpy())


def test_cast_like_rejects_a_non_tensor_other():
    x = flow.randn(2)
    for bad in (3, "float32", None, np.zeros(2, np.float32)):
        with pytest.raises(OpTypeError, match="'other' must be a Tensor"):
            cast_like(x, bad)
    with pytest.raises(OpTypeError, match="'other' must be a Tensor"):
        flow.ops.call("cast_like", x, 3)
    with pytest.raises(OpTypeError, match="'x' must be a Tensor"):
        cast_like(1.0, x)


def test_cast_like_passes_opcheck():
    report = flow.testing.opcheck("cast_like")
    assert report["samples"] >= 5 and report["errors_checked"] >= 2 and report["grad_checked"] >= 1


# -- eager: dtypes, values and gradients against PyTorch ---------------------------------------------------


def _leaves(shape, c, low, seed=0, mean=0.5):
    rng = _rng(seed)
    x = (rng.standard_normal(shape) + mean).astype(np.float32)
    w = (rng.standard_normal(c) * 0.5 + 1).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    fx = flow.tensor(x).to(low)
    return fx, w, b, g


def _flow_run(fn, fx, w, b, g):
    x = fx.detach().requires_grad_()
    fw, fb = flow.tensor(w).requires_grad_(), flow.tensor(b).requires_grad_()
    y = fn(x, fw, fb)
    (y * flow.tensor(g).to(y.dtype)).float().sum().backward()
    return y, x, fw, fb


def _torch_run(torch, fn, fx, w, b, g):
    x = torch.tensor(_np(fx)).to(getattr(torch, _TORCH_DT[fx.dtype.name])).requires_grad_()
    tw, tb = torch.tensor(w).requires_grad_(), torch.tensor(b).requires_grad_()
    y = fn(x, tw, tb)
    (y * torch.tensor(g).to(y.dtype)).float().sum().backward()
    return y, x, tw, tb


def _compare(ours, theirs, tol):
    y, x, w, b = ours
    ty, tx, tw, tb = theirs
    assert y.dtype.name == str(ty.dtype).replace("torch.", "")
    assert x.grad.dtype is x.dtype and w.grad.dtype is flow.float32 and b.grad.dtype is flow.float32
    for name, got, want in (
        ("output", y, ty),
        ("grad input", x.grad, tx.grad),
        ("grad weight", w.grad, tw.grad),
        ("grad bias", b.grad, tb.grad),
    ):
        err = _rel(_np(got), want.detach().double().numpy())
        assert err < tol, f"{name}: relative error {err:.2e}"


@pytest.mark.parametrize("low", LOW, ids=str)
def test_batch_norm_training_against_torch(low):
    torch = pytest.importorskip("torch")
    fx, w, b, g = _leaves((8, 4, 5, 5), 4, low, seed=1)
    rm, rv = flow.zeros(4), flow.ones(4)
    trm, trv = torch.zeros(4), torch.ones(4)
    ours = _flow_run(lambda x, w, b: F.batch_norm(x, rm, rv, w, b, True, 0.3), fx, w, b, g)
    theirs = _torch_run(
        torch, lambda x, w, b: torch.nn.functional.batch_norm(x, trm, trv, w, b, True, 0.3), fx, w, b, g
    )
    assert ours[0].dtype is low
    _compare(ours, theirs, 2.5e-2)
    # the running statistics stay float32 and are updated in float32 from the batch's
    assert rm.dtype is flow.float32 and rv.dtype is flow.float32
    np.testing.assert_allclose(rm.numpy(), trm.numpy(), rtol=1e-2, atol=2e-3)
    np.testing.assert_allclose(rv.numpy(), trv.numpy(), rtol=1e-2, atol=2e-3)


@pytest.mark.parametrize("low", LOW, ids=str)
def test_batch_norm_eval_against_torch(low):
    torch = pytest.importorskip("torch")
    fx, w, b, g = _leaves((6, 3, 4), 3, low, seed=2, mean=2.0)
    rm = _rng(3).standard_normal(3).astype(np.float32) + 2
    rv = _rng(4).uniform(0.5, 2.0, 3).astype(np.float32)
    frm, frv = flow.tensor(rm), flow.tensor(rv)
    ours = _flow_run(lambda x, w, b: F.batch_norm(x, frm, frv, w, b, False), fx, w, b, g)
    theirs = _torch_run(
        torch,
        lambda x, w, b: torch.nn.functional.batch_norm(x, torch.tensor(rm), torch.tensor(rv), w, b, False),
        fx,
        w,
        b,
        g,
    )
    _compare(ours, theirs, 2e-2)
    np.testing.assert_array_equal(frm.numpy(), rm)  # eval leaves them alone


@pytest.mark.parametrize("low", LOW, ids=str)
def test_group_norm_against_torch(low):
    torch = pytest.importorskip("torch")
    fx, w, b, g = _leaves((3, 6, 4, 4), 6, low, seed=5)
    ours = _flow_run(lambda x, w, b: F.group_norm(x, 3, w, b), fx, w, b, g)
    theirs = _torch_run(torch, lambda x, w, b: torch.nn.functional.group_norm(x, 3, w, b), fx, w, b, g)
    _compare(ours, theirs, 2e-2)


@pytest.mark.parametrize("low", LOW, ids=str)
def test_layer_norm_against_torch(low):
    torch = pytest.importorskip("torch")
    fx, w, b, g = _leaves((4, 3, 16), 16, low, seed=6)
    ours = _flow_run(lambda x, w, b: F.layer_norm(x, (16,), w, b), fx, w, b, g)
    theirs = _torch_run(torch, lambda x, w, b: torch.nn.functional.layer_norm(x, (16,), w, b), fx, w, b, g)
    _compare(ours, theirs, 1e-2)


@needs_native
@pytest.mark.parametrize("low", LOW, ids=str)
def test_mixed_norms_close_to_float32_on_the_rounded_input(low):
    """Without PyTorch: against the float32 computation on the same (rounded) input."""
    fx, w, b, g = _leaves((8, 4, 3, 3), 4, low, seed=7)
    fns = {
        "batch_norm": lambda x, w, b: F.batch_norm(x, None, None, w, b, True),
        "group_norm": lambda x, w, b: F.group_norm(x, 2, w, b),
        "layer_norm": lambda x, w, b: (
            F.layer_norm(x.reshape(8, 36), (36,)).reshape(8, 4, 3, 3) * cast_like(w.reshape(4, 1, 1), x)
            + cast_like(b.reshape(4, 1, 1), x)
        ),
    }
    for name, fn in fns.items():
        y, x, fw, fb = _flow_run(fn, fx, w, b, g)
        assert y.dtype is low and x.grad.dtype is low and fw.grad.dtype is flow.float32, name
        ry, rx, rw, rb = _flow_run(fn, fx.float(), w, b, g.astype(low.np).astype(np.float32))
        for what, got, want in (
            ("y", y, ry),
            ("dx", x.grad, rx.grad),
            ("dw", fw.grad, rw.grad),
            ("db", fb.grad, rb.grad),
        ):
            err = _rel(_np(got), _np(want))
            assert err < 2.5e-2, f"{name} {what}: relative error {err:.2e}"


@pytest.mark.parametrize("low", LOW, ids=str)
def test_layer_norm_op_gives_float32_parameter_gradients(low):
    x = flow.randn(5, 8).to(low).requires_grad_()
    w, b = flow.randn(8).requires_grad_(), flow.randn(8).requires_grad_()
    y = F.layer_norm(x, (8,), w, b)
    assert y.dtype is low
    y.float().sum().backward()
    assert x.grad.dtype is low and w.grad.dtype is flow.float32 and b.grad.dtype is flow.float32
    # the fused backward op's own outputs, with the meta rule's dtypes
    dx, dw, db = flow.ops.call("layer_norm_backward", x.detach(), x.detach(), w.detach(), normalized_shape=(8,))
    assert (dx.dtype, dw.dtype, db.dtype) == (low, flow.float32, flow.float32)
    # a float32 bias without a weight: its gradient is float32 too
    b2 = flow.randn(8).requires_grad_()
    F.layer_norm(x.detach(), (8,), None, b2).float().sum().backward()
    assert b2.grad.dtype is flow.float32
    np.testing.assert_allclose(b2.grad.numpy(), np.full(8, 5.0), rtol=1e-2)


def test_layer_norm_mixed_second_order():
    x = flow.randn(3, 6).bfloat16().requires_grad_()
    w = flow.randn(6).requires_grad_()
    y = F.layer_norm(x, (6,), w)
    (gx,) = flow.autograd.grad(y.float().pow(2).sum(), [x], create_graph=True)
    assert gx.dtype is flow.bfloat16
    gx.float().sum().backward()
    assert w.grad is not None and w.grad.dtype is flow.float32
    assert np.isfinite(w.grad.numpy()).all()


def test_modules_with_float32_parameters_on_low_precision_activations():
    x = flow.randn(4, 6, 5, 5).bfloat16()
    bn, gn, ln = nn.BatchNorm2d(6), nn.GroupNorm(3, 6), nn.LayerNorm((5,))
    assert bn(x).dtype is flow.bfloat16 and bn.running_mean.dtype is flow.float32
    assert bn.num_batches_tracked.item() == 1
    bn.eval()
    assert bn(x).dtype is flow.bfloat16
    assert gn(x).dtype is flow.bfloat16 and ln(x).dtype is flow.bfloat16


# -- what stays rejected ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x_dt,p_dt",
    [("float32", "float64"), ("float32", "bfloat16"), ("bfloat16", "float16"), ("float16", "float64")],
)
def test_other_parameter_dtype_mismatches_are_rejected(x_dt, p_dt):
    x = flow.randn(4, 3, 5).to(getattr(flow, x_dt))
    p = flow.ones(3).to(getattr(flow, p_dt))
    q = flow.ones(5).to(getattr(flow, p_dt))
    match = f"'weight' must have the input's dtype {x.dtype}"
    with pytest.raises(OpTypeError, match=match):
        F.batch_norm(x, None, None, p, None, True)
    with pytest.raises(OpTypeError, match=match):
        F.group_norm(x, 3, p)
    with pytest.raises(OpTypeError, match=match):
        F.layer_norm(x, (5,), q)
    with pytest.raises(OpTypeError, match=f"'bias' must have the input's dtype {x.dtype}"):
        F.batch_norm(x, None, None, None, p, True)
    with pytest.raises(OpTypeError, match=f"'bias' must have the input's dtype {x.dtype}"):
        F.layer_norm(x, (5,), None, q)


def test_integer_running_statistics_are_rejected():
    with pytest.raises(OpTypeError, match="'running_mean' must be a floating-point tensor"):
        F.batch_norm(flow.randn(4, 3), flow.zeros(3, dtype=flow.int64), flow.ones(3), training=True)


# -- the CPU adapter: output dtypes are the meta rule's, for every op that takes mixed dtypes -----------------


def _float_slots(args) -> list:
    slots = []
    for i, a in enumerate(args):
        if isinstance(a, flow.Tensor):
            if a.dtype.is_floating_point:
                slots.append((i, None))
        elif isinstance(a, (list, tuple)) and a and all(isinstance(e, flow.Tensor) for e in a):
            slots += [(i, j) for j, e in enumerate(a) if e.dtype.is_floating_point]
    return slots


def _with_dtypes(args, dts: dict) -> tuple:
    out = []
    for i, a in enumerate(args):
        if isinstance(a, flow.Tensor):
            out.append(a.detach().to(dts[(i, None)]) if (i, None) in dts else a)
        elif isinstance(a, (list, tuple)) and a and all(isinstance(e, flow.Tensor) for e in a):
            out.append(type(a)(e.detach().to(dts[(i, j)]) if (i, j) in dts else e for j, e in enumerate(a)))
        else:
            out.append(a)
    return tuple(out)


@needs_native
def test_every_op_taking_mixed_dtypes_gives_the_meta_dtypes():
    """Each op's samples with one floating input low and the rest float32 (and the other way round):
    where the meta rule accepts the mix, every output has the meta rule's dtype."""
    checked: dict = {}
    wrong = []
    for name, op in sorted(REGISTRY.ops.items()):
        if op.samples is None:
            continue
        samples, _ = E.split(list(op.samples()))
        for si, s in enumerate(samples):
            slots = _float_slots(s.args)
            if len(slots) < 2:
                continue
            for low in LOW:
                for k in slots:
                    for dts in (
                        {p: (low if p == k else D.float32) for p in slots},
                        {p: (D.float32 if p == k else low) for p in slots},
                    ):
                        args = _with_dtypes(s.args, dts)
                        try:
                            metas = C._meta_outputs(op, args, s.kwargs)
                        except FlowError:  # the op does not take this mix
                            continue
                        out = flow.ops.call(name, *args, **s.kwargs)
                        outs = out if isinstance(out, tuple) else (out,)
                        for j, (o, m) in enumerate(zip(outs, metas)):
                            if m is not None and o is not None and o.dtype != m.dtype:
                                wrong.append(f"{name} sample {si} {low} slot {k}: output {j} {o.dtype}, meta {m.dtype}")
                        checked[name] = checked.get(name, 0) + 1
    assert not wrong, "\n".join(wrong[:20])
    # the class this covers: ops with float32 parameters, flags or states next to low activations
    assert {"cast_like", "layer_norm", "layer_norm_backward", "ctc_loss_backward", "sgd_update"} <= set(checked)


@needs_native
def test_adapter_hands_back_float32_inputs_as_they_are():
    # an in-place update of a float32 state next to bfloat16 operands: the state itself comes back
    from flow.backends.cpu import lowp

    def f32_kernel(a, s, inplace=False):
        s += a.sum()
        return a * 2, s

    run = lowp.upcast_kernel(f32_kernel, f32_kernel, lowp.BF16)
    a = np.ones(3, lowp.BF16)
    s = np.zeros(1, np.float32)
    y, s2 = run(a, s, inplace=True)
    assert s2 is s and s[0] == 3.0 and y.dtype == lowp.BF16


# -- graph mode ---------------------------------------------------------------------------------------------


class _ConvBnNet(nn.Module):
    def __init__(self, low=None) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 4 * 4, 5)
        if low is not None:  # the convolution and the linear in low precision, the batch norm float32
            self.conv.to(low)
            self.fc.to(low)
        self.low = low

    def forward(self, x):
        if self.low is not None:
            x = x.to(self.low)
        h = flow.relu(self.bn(self.conv(x)))
        return self.fc(h.reshape(h.shape[0], -1)), h


def _graph_of(model, opt=None, amp=False):
    class G(nn.Graph):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            if opt is not None:
                self.add_optimizer(opt)
            if amp:
                self.config.enable_amp(True, dtype=flow.bfloat16)

        def build(self, x):
            out, h = self.model(x)
            if opt is not None:
                out.float().sum().backward()
            return out, h

    return G()


def _forward_dtypes(ir, name):
    return [
        o.dtype for n in ir.nodes if n.name == name and n.tags.get("phase", "forward") == "forward" for o in n.outputs
    ]


def test_graph_keeps_bfloat16_after_batch_norm_with_float32_parameters():
    flow.manual_seed(0)
    model = _ConvBnNet(flow.bfloat16)
    opt = flow.optim.SGD(model.parameters(), lr=0.1)
    g = _graph_of(model, opt)
    x = flow.randn(2, 3, 4, 4)
    out, h = g(x)
    assert h.dtype is flow.bfloat16 and out.dtype is flow.bfloat16
    assert model.bn.weight.dtype is flow.float32 and model.bn.running_mean.dtype is flow.float32
    assert _forward_dtypes(g._latest.ir, "relu") == [flow.bfloat16]
    # the same step eagerly (fresh statistics) gives the same batch-norm output
    flow.manual_seed(0)
    ref = _ConvBnNet(flow.bfloat16)
    ref.load_state_dict(
        {k: v for k, v in model.state_dict().items() if "running" not in k and "tracked" not in k}, strict=False
    )
    assert ref(x)[1].dtype is flow.bfloat16
    assert model.bn.running_mean.abs().sum().item() > 0  # updated in the graph, in float32


def test_float32_graph_has_no_cast_like_left():
    model = _ConvBnNet()
    g = _graph_of(model)
    out, h = g(flow.randn(2, 3, 4, 4))
    assert h.dtype is flow.float32
    assert not [n for n in g._latest.ir.nodes if n.name == "cast_like"]  # simplify removed the no-ops
    g2 = _graph_of(_ConvBnNet())
    g2.config.disable_pass("simplify")
    g2(flow.randn(2, 3, 4, 4))
    assert [n for n in g2._latest.ir.nodes if n.name == "cast_like"]  # what simplify had to remove


def test_amp_graph_keeps_bfloat16_after_batch_norm():
    pytest.importorskip("flow_amp")
    flow.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
    opt = flow.optim.SGD(model.parameters(), lr=0.1)

    class G(nn.Graph):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.add_optimizer(opt)
            self.config.enable_amp(True, dtype=flow.bfloat16)

        def build(self, x):
            y = self.model(x)
            y.float().mean().backward()
            return y

    g = G()
    y = g(flow.randn(4, 3, 6, 6))
    assert y.dtype is flow.bfloat16
    ir = g._latest.ir
    assert _forward_dtypes(ir, "conv2d") == [flow.bfloat16]
    assert _forward_dtypes(ir, "relu") == [flow.bfloat16]  # the batch norm's output, after the affine
    casts = [n for n in ir.nodes if n.name == "cast_like"]
    assert casts and all(n.outputs[0].dtype is flow.bfloat16 for n in casts)
    assert model[1].weight.dtype is flow.float32 and model[1].running_var.dtype is flow.float32
