"""The ``out=`` forms of conv2d's CPU kernels (flow.backends.cpu.conv) and graph memory planning of conv outputs.

The out= kernels must give exactly what the plain kernels give (same code, only the destination differs) on
every path (native one-call, the Python chunk loop, the NumPy reference), match PyTorch, reject an ``out``
that does not fit, and let a compiled ResNet step keep its convolution outputs in the arena while training
as eager does.
"""

from __future__ import annotations

import numpy as np
import pytest

import flow
import flow.nn as nn
import flow.nn.functional as F
from flow.backends.cpu import conv, native
from flow.errors import OpError, OpTypeError
from flow.graph.pass_tables import out_kernel

CONV_OPS = ("conv2d", "conv2d_backward_input", "conv2d_backward_weight")

# (N, C, H, W), (O, C / groups, kh, kw), stride, padding (top, bottom, left, right), dilation, groups, dtype
CASES = [
    ((1, 4, 9, 8), (6, 4, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, np.float32),  # batch 1
    ((3, 4, 11, 9), (6, 4, 3, 2), (2, 1), (0, 1, 2, 0), (1, 2), 1, np.float64),  # asymmetric, dilated
    ((2, 4, 20, 20), (5, 4, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, np.float32),  # per-image GEMMs (P >= 256)
    ((2, 4, 7, 7), (6, 4, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, np.float64),  # 1x1: the image is its columns
    ((1, 3, 10, 9), (4, 3, 2, 3), (3, 2), (0, -1, 1, 0), (2, 1), 1, np.float64),  # a negative side crops
    ((2, 4, 9, 9), (6, 2, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 2, np.float32),  # grouped
    ((3, 4, 8, 8), (4, 1, 3, 3), (1, 1), (1, 1, 1, 1), (2, 2), 4, np.float64),  # depthwise
]


def _ids(c):
    x, w, s, p, d, g, dt = c
    return f"x{'x'.join(map(str, x))}-k{w[2]}{w[3]}-s{s[0]}{s[1]}-p{''.join(map(str, p))}-g{g}-{np.dtype(dt).name}"


def _rand(shape, seed, dtype):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _garbage(shape, dtype):
    """An out buffer full of NaN: a kernel that adds into it or leaves part of it unwritten shows."""
    return np.full(shape, np.nan, dtype=dtype)


@pytest.fixture(params=["native", "loop", "reference"])
def path(request, monkeypatch):
    """Which implementation runs: the one-call native kernels, the Python chunk loop, the NumPy reference."""
    if request.param == "reference":
        monkeypatch.setenv("FLOW_CONV_REFERENCE", "1")
    else:
        if not native.HAVE_NATIVE:
            pytest.skip(f"flow._C not built: {native.NATIVE_ERROR}")
        if request.param == "native" and not conv._fused():
            pytest.skip("no BLAS bound: the one-call kernels are not available")
        if request.param == "loop":
            monkeypatch.setattr(conv, "_fused", lambda: False)
    return request.param


def _problem(case, seed=0):
    xs, ws, stride, pad, dil, groups, dt = case
    x, w, b = _rand(xs, seed, dt), _rand(ws, seed + 1, dt), _rand((ws[0],), seed + 2, dt)
    y = conv.conv2d_forward(x, w, b, stride, pad, dil, groups)
    g = _rand(y.shape, seed + 3, dt)
    attrs = dict(stride=stride, padding=pad, dilation=dil, groups=groups)
    return x, w, b, g, y, attrs


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_out_kernels_write_what_the_plain_kernels_return(case, path):
    x, w, b, g, y, at = _problem(case)
    dt = x.dtype
    for bias in (b, None):
        out = _garbage(y.shape, dt)
        r = conv.conv2d_out(x, w, bias, out=out, **at)
        assert r is out
        np.testing.assert_array_equal(out, conv.conv2d_forward(x, w, bias, *at.values()))
    out = _garbage(x.shape, dt)
    assert conv.conv2d_backward_input_out(g, w, input_size=x.shape[2:], out=out, **at) is out
    np.testing.assert_array_equal(out, conv.conv2d_backward_input(g, w, x.shape[2:], *at.values()))
    out = _garbage(w.shape, dt)
    assert conv.conv2d_backward_weight_out(g, x, weight_size=w.shape[2:], out=out, **at) is out
    np.testing.assert_array_equal(out, conv.conv2d_backward_weight(g, x, w.shape[2:], *at.values()))


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_out_kernels_match_torch(case, path):
    torch = pytest.importorskip("torch")
    x, w, b, g, _, at = _problem(case, seed=5)
    pt, pb, pl, pr = at["padding"]
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ty = torch.nn.functional.conv2d(
        torch.nn.functional.pad(tx, (pl, pr, pt, pb)), tw, tb, at["stride"], 0, at["dilation"], at["groups"]
    )
    ty.backward(torch.tensor(g))
    tol = dict(rtol=1e-4, atol=1e-4) if x.dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    y = conv.conv2d_out(x, w, b, out=_garbage(g.shape, x.dtype), **at)
    np.testing.assert_allclose(y, ty.detach().numpy(), **tol)
    dx = conv.conv2d_backward_input_out(g, w, input_size=x.shape[2:], out=_garbage(x.shape, x.dtype), **at)
    np.testing.assert_allclose(dx, tx.grad.numpy(), **tol)
    dw = conv.conv2d_backward_weight_out(g, x, weight_size=w.shape[2:], out=_garbage(w.shape, x.dtype), **at)
    np.testing.assert_allclose(dw, tw.grad.numpy(), **tol)


def test_empty_batch_gives_zero_gradients():
    x, w = np.zeros((0, 3, 6, 6), np.float32), _rand((4, 3, 3, 3), 0, np.float32)
    g = np.zeros((0, 4, 4, 4), np.float32)
    at = dict(stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1)
    dw = conv.conv2d_backward_weight_out(g, x, weight_size=(3, 3), out=_garbage(w.shape, np.float32), **at)
    np.testing.assert_array_equal(dw, 0)
    assert conv.conv2d_out(x, w, None, out=np.empty((0, 4, 4, 4), np.float32), **at).shape == (0, 4, 4, 4)


def test_float16_out_matches_eager_dispatch():
    x, w, b = (_rand(s, k, np.float16) for k, s in enumerate([(2, 3, 8, 8), (4, 3, 3, 3), (4,)]))
    eager = F.conv2d(flow.tensor(x), flow.tensor(w), flow.tensor(b), padding=1).numpy()
    out = _garbage(eager.shape, np.float16)
    conv.conv2d_out(x, w, b, stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1, out=out)
    np.testing.assert_array_equal(out, eager)


_AT = dict(stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)


@pytest.mark.parametrize(
    "make_out, err, match",
    [
        (lambda: np.empty((2, 4, 6, 5), np.float32), OpError, r"'out' has shape \(2, 4, 6, 5\) but the result"),
        (lambda: np.empty((2, 4, 6, 6), np.float64), OpTypeError, "'out' has dtype float64 but the result"),
        (lambda: np.empty((2, 4, 6, 12), np.float32)[..., ::2], OpError, "'out' must be C-contiguous"),
        (lambda: np.empty((2, 4, 6, 6), np.float32).transpose(0, 1, 3, 2), OpError, "C-contiguous"),
        (lambda: [[0.0]], OpTypeError, "'out' must be a NumPy array, got list"),
    ],
)
def test_bad_out_is_rejected(make_out, err, match):
    x, w = _rand((2, 3, 6, 6), 0, np.float32), _rand((4, 3, 3, 3), 1, np.float32)
    with pytest.raises(err, match=match):
        conv.conv2d_out(x, w, None, out=make_out(), **_AT)


def test_bad_out_of_the_gradients_is_rejected():
    x, w, g = _rand((2, 3, 6, 6), 0, np.float32), _rand((4, 3, 3, 3), 1, np.float32), _rand((2, 4, 6, 6), 2, np.float32)
    ro = np.empty(x.shape, np.float32)
    ro.flags.writeable = False
    with pytest.raises(OpError, match="conv2d_backward_input: 'out' is read-only"):
        conv.conv2d_backward_input_out(g, w, input_size=(6, 6), out=ro, **_AT)
    with pytest.raises(OpError, match=r"conv2d_backward_input: 'out' has shape \(2, 4, 6, 6\)"):
        conv.conv2d_backward_input_out(g, w, input_size=(6, 6), out=np.empty(g.shape, np.float32), **_AT)
    with pytest.raises(OpError, match=r"conv2d_backward_weight: 'out' has shape \(4, 3, 2, 3\)"):
        conv.conv2d_backward_weight_out(g, x, weight_size=(3, 3), out=np.empty((4, 3, 2, 3), np.float32), **_AT)
    with pytest.raises(OpTypeError, match="conv2d_backward_weight: 'out' has dtype float64"):
        conv.conv2d_backward_weight_out(g, x, weight_size=(3, 3), out=np.empty(w.shape), **_AT)
    buf = np.empty(x.size + g.size, np.float32)
    xa, out = buf[: x.size].reshape(x.shape), buf[100 : 100 + g.size].reshape(g.shape)
    xa[...] = x
    with pytest.raises(OpError, match="conv2d: 'out' overlaps an input"):
        conv.conv2d_out(xa, w, None, out=out, **_AT)


def test_out_variants_are_registered_for_the_cpu_kernels():
    from flow.registry import REGISTRY

    for op in CONV_OPS:
        for dt in (flow.float32, flow.float64):
            assert out_kernel(REGISTRY.ops[op], "cpu", dt) is conv.OUT_VARIANTS[op]


# -- graph memory planning -----------------------------------------------------------------------------
class _Block(nn.Module):
    """conv-bn-relu x2 with the identity added before the last relu (a ResNet basic block)."""

    def __init__(self, c: int):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + x)


def _block_net():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), _Block(8), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)
    )


def _resnet18():
    models = pytest.importorskip("flow_models")
    return models.create("resnet18", stem="cifar", num_classes=10)


def _train(make, compiled: bool, B: int, S: int, steps: int = 3, autotune: bool = False):
    flow.manual_seed(0)
    m = make()
    opt = flow.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    rng = np.random.default_rng(1)
    data = [
        (flow.tensor(rng.standard_normal((B, 3, S, S)).astype(np.float32)), flow.tensor(rng.integers(0, 10, B)))
        for _ in range(steps)
    ]
    if compiled:

        class Step(nn.Graph):
            def __init__(self):
                super().__init__()
                self.m = m
                self.add_optimizer(opt)

            def build(self, x, y):
                loss = F.cross_entropy(self.m(x), y)
                loss.backward()
                return loss

        g = Step()
        # conv2d and its input gradient have a second (Winograd) kernel: autotuned, the step runs whichever
        # is faster, both with out=; pinned, dispatch's GEMM kernel (and eager's exact results).
        g.config.enable_autotune(autotune)
        losses = [g(x, y).item() for x, y in data]
    else:
        g, losses = None, []
        for x, y in data:
            opt.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses, [p.detach().numpy().copy() for p in m.parameters()], g


def _conv_values_in_arena(g) -> dict:
    """op -> how many of its outputs sit in the step's arena."""
    plan = g.plan
    counts = dict.fromkeys(CONV_OPS, 0)
    for st in plan.steps:
        if st.node.name in counts:
            counts[st.node.name] += sum(1 for s in st.outs if s in plan.memory.slots)
    return counts


@pytest.mark.parametrize("autotune", [False, True])
@pytest.mark.parametrize("model, B, S", [("block", 4, 12), ("resnet18", 4, 32)])
def test_compiled_resnet_step_plans_conv_outputs_and_trains_as_eager(model, B, S, autotune):
    if not native.HAVE_NATIVE:
        pytest.skip(f"flow._C not built: {native.NATIVE_ERROR}")
    make = _block_net if model == "block" else _resnet18
    # Winograd rounds differently from the GEMM (docs/cpu.md: relative error ~1e-6 at float32), and
    # training at this learning rate amplifies that over steps: tuned, compare one step
    steps = 1 if autotune else 3
    ref_losses, ref_params, _ = _train(make, False, B, S, steps)
    losses, params, g = _train(make, True, B, S, steps, autotune=autotune)
    rep = g.memory_report()
    assert rep["planned"] and rep["arena_bytes"] > 0
    counts = _conv_values_in_arena(g)
    assert all(counts[op] > 0 for op in CONV_OPS), counts
    if autotune:  # the tuned steps really had a choice, and kept their outputs in the arena
        plan = g.plan
        tuned = [st for st in plan.steps if st.candidates and st.node.name in CONV_OPS]
        assert tuned and all(st.out_kernel is not None for st in tuned)
        assert any(s in plan.memory.slots for st in tuned for s in st.outs)
    tol = 1e-5 if autotune else 1e-6
    np.testing.assert_allclose(losses, ref_losses, rtol=tol, atol=tol)
    for a, b in zip(params, ref_params):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
