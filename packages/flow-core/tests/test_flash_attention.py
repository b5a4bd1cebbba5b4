"""The fused attention op (``flash_attention``) and F.scaled_dot_product_attention's use of it.

Forward and gradients against the composite (``flow.backends.cpu.attention.flash_sdp(False)``) and
PyTorch: causal and not, L != S both ways, L = 1, sizes that are not multiples of the kernel's tiles
(64 queries x 128 keys), E = 8..128, batch * heads = 1..16. Tolerances: float64 1e-10 (in practice
~1e-14); float32 rtol 1e-5 / atol 2e-5 (the blocked online softmax sums in another order than the
composite's). Then: results independent of the thread count, higher-order gradients, where the
composite stays (masks, dropout, low precision), errors, and the zoo GPT training the same in eager
and graph mode with either kernel.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import flow
import flow.nn.functional as F
from flow.backends.cpu import native
from flow.backends.cpu.attention import enable_flash_sdp, flash_sdp, flash_sdp_enabled
from flow.errors import OpError, OpTypeError
from flow.ops import nn_attention

needs_native = pytest.mark.skipif(not native.HAVE_NATIVE, reason="flow._C is not built")

# (leading dims, L, S, E, Ev): tile edges, L != S both ways, one query, B*H from 1 to 16
CASES = [
    ((1, 1), 1, 1, 8, 8),
    ((2, 3), 1, 37, 16, 16),
    ((1, 2), 65, 65, 32, 32),
    ((2, 2), 130, 70, 8, 24),
    ((1, 1), 70, 257, 64, 64),
    ((4, 4), 33, 129, 128, 128),
    ((3,), 200, 200, 24, 40),
]
TOL = {"float64": dict(rtol=1e-10, atol=1e-10), "float32": dict(rtol=1e-5, atol=2e-5)}


class Spy:
    """Counts the fused op's CPU forward calls (the composite never makes one)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        real = nn_attention._native

        def counting():
            self.calls += 1
            return real()

        monkeypatch.setattr(nn_attention, "_native", counting)


@pytest.fixture
def spy(monkeypatch):
    return Spy(monkeypatch)


def _inputs(lead, L, S, E, Ev, dtype, seed=0):
    rng = np.random.default_rng(seed)
    arrs = [rng.standard_normal(lead + shp) for shp in ((L, E), (S, E), (S, Ev))]
    return [flow.tensor(a, dtype=dtype, requires_grad=True) for a in arrs], arrs


def _run(ts, causal, flash, scale=None):
    with flash_sdp(flash):
        out = F.scaled_dot_product_attention(*ts, is_causal=causal, scale=scale)
    g = flow.tensor(np.cos(np.arange(out.numel())).reshape(tuple(out.shape)), dtype=out.dtype)
    grads = flow.autograd.grad(out, ts, grad_outputs=[g])
    return [t.detach().numpy() for t in (out, *grads)]


@needs_native
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0] + c[1:])))
def test_forward_and_gradients_match_the_composite(case, causal, dtype, spy):
    ts, _ = _inputs(*case, getattr(flow, dtype))
    fused = _run(ts, causal, True)
    assert spy.calls > 0
    composite = _run(ts, causal, False)
    for a, b, what in zip(fused, composite, ("out", "dq", "dk", "dv")):
        np.testing.assert_allclose(a, b, **TOL[dtype], err_msg=what)


@needs_native
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", CASES[1:5], ids=lambda c: "x".join(map(str, c[0] + c[1:])))
def test_forward_and_gradients_match_torch(case, causal):
    torch = pytest.importorskip("torch")
    ts, arrs = _inputs(*case, flow.float64)
    fused = _run(ts, causal, True, scale=0.3)
    tt = [torch.tensor(a, requires_grad=True) for a in arrs]
    out = torch.nn.functional.scaled_dot_product_attention(*tt, is_causal=causal, scale=0.3)
    g = torch.tensor(np.cos(np.arange(out.numel())).reshape(out.shape))
    want = [out.detach().numpy()] + [x.numpy() for x in torch.autograd.grad(out, tt, grad_outputs=g)]
    for a, b, what in zip(fused, want, ("out", "dq", "dk", "dv")):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10, err_msg=what)


@needs_native
def test_log_sum_exp_output_and_its_gradient_match_torch():
    torch = pytest.importorskip("torch")
    ts, arrs = _inputs((2, 2), 70, 90, 16, 16, flow.float64, seed=3)
    out, lse = nn_attention.flash_attention(*ts, is_causal=True, scale=0.25)
    got = flow.autograd.grad((lse * lse).sum() + out.sum(), ts)
    tt = [torch.tensor(a, requires_grad=True) for a in arrs]
    s = (tt[0] @ tt[1].transpose(-1, -2) * 0.25).masked_fill(~torch.ones(70, 90, dtype=bool).tril(), -torch.inf)
    tlse = torch.logsumexp(s, -1)
    tout = torch.softmax(s, -1) @ tt[2]
    want = torch.autograd.grad((tlse * tlse).sum() + tout.sum(), tt)
    np.testing.assert_allclose(lse.detach().numpy(), tlse.detach().numpy(), rtol=1e-10, atol=1e-10)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-10)


@needs_native
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_results_do_not_depend_on_the_thread_count(dtype):
    ts, _ = _inputs((4, 4), 150, 150, 32, 32, getattr(flow, dtype), seed=1)
    prev = flow.get_num_threads()
    try:
        flow.set_num_threads(1)
        one = _run(ts, True, True)
        flow.set_num_threads(4)
        four = _run(ts, True, True)
    finally:
        flow.set_num_threads(prev)
    for a, b in zip(one, four):
        np.testing.assert_array_equal(a, b)


@needs_native
def test_second_order_gradients_through_the_fused_op(spy):
    ts, _ = _inputs((1, 2), 5, 7, 4, 3, flow.float64, seed=2)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    assert flow.testing.gradgradcheck(f, ts)
    assert spy.calls > 0
    # and the same second derivative as the composite's
    res = []
    for en in (True, False):
        with flash_sdp(en):
            (gq,) = flow.autograd.grad((f(*ts) ** 2).sum(), [ts[0]], create_graph=True)
            res.append([g.numpy() for g in flow.autograd.grad((gq * gq).sum(), ts)])
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


@needs_native
@pytest.mark.parametrize(
    "kw",
    [
        {"attn_mask": "bool"},
        {"dropout_p": 0.5},
        {"dtype": "bfloat16"},
        {"kv_heads": 1},
    ],
    ids=["mask", "dropout", "bfloat16", "broadcast-batch"],
)
def test_the_composite_runs_where_the_fused_op_does_not_apply(kw, spy):
    dt = getattr(flow, kw.get("dtype", "float32"))
    q = flow.randn(2, 3, 5, 4).to(dt)
    k = flow.randn(2, kw.get("kv_heads", 3), 6, 4).to(dt)
    v = flow.randn(2, kw.get("kv_heads", 3), 6, 4).to(dt)
    mask = flow.rand(5, 6) > 0.3 if "attn_mask" in kw else None
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=kw.get("dropout_p", 0.0))
    assert tuple(out.shape) == (2, 3, 5, 4) and spy.calls == 0


@needs_native
def test_grouped_query_attention_uses_the_fused_op_after_the_repeat(spy):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    arrs = [rng.standard_normal(s) for s in ((2, 4, 9, 8), (2, 2, 11, 8), (2, 2, 11, 8))]
    out = F.scaled_dot_product_attention(*(flow.tensor(a) for a in arrs), is_causal=True, enable_gqa=True)
    want = torch.nn.functional.scaled_dot_product_attention(
        *(torch.tensor(a) for a in arrs), is_causal=True, enable_gqa=True
    )
    assert spy.calls > 0
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-10, atol=1e-10)


def test_bad_inputs_raise_errors_naming_what_is_wrong():
    q, k = flow.randn(2, 3, 4), flow.randn(2, 5, 4)
    with pytest.raises(OpError, match="the same leading dims"):
        nn_attention.flash_attention(q, k[:1], k[:1])
    with pytest.raises(OpError, match="at least one position"):
        nn_attention.flash_attention(q, k[:, :0], k[:, :0])
    with pytest.raises(OpTypeError, match="the same dtype"):
        nn_attention.flash_attention(q, k.double(), k)
    with pytest.raises(OpTypeError, match="'key' must be a Tensor"):
        nn_attention.flash_attention(q, np.zeros((2, 5, 4)), k)
    with pytest.raises(TypeError, match="expects a bool"):
        enable_flash_sdp(1)


@needs_native
def test_native_kernel_rejects_bad_arrays():
    c = native._C
    q = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match="C-contiguous"):
        c.flash_attention_forward(q.transpose(0, 2, 1), q, q, False, 1.0)
    with pytest.raises(TypeError, match="dtype mismatch"):
        c.flash_attention_forward(q, q.astype(np.float64), q, False, 1.0)
    with pytest.raises(ValueError, match="'lse' has the wrong shape"):
        c.flash_attention_backward(q, q, q, q, q, q, None, False, 1.0)


def test_the_switch_and_its_environment_variable():
    assert flash_sdp_enabled()
    with flash_sdp(False):
        assert not flash_sdp_enabled()
    assert flash_sdp_enabled()
    env = dict(os.environ, FLOW_CPU_FLASH_ATTENTION="0")
    code = "from flow.backends.cpu.attention import flash_sdp_enabled as f; print(f())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _gpt():
    zoo = pytest.importorskip("flow_models.nlp.gpt", reason="the zoo (flow-models) is not installed")
    flow.manual_seed(0)
    cfg = zoo.GPTConfig(vocab_size=50, block_size=80, n_layer=2, n_head=2, n_embd=32, dropout=0.0)
    return zoo.GPT(cfg)


def _train(flash: bool, graph: bool, steps: int = 3) -> list:
    model = _gpt()
    opt = flow.optim.AdamW(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    data = [flow.tensor(rng.integers(0, 50, (2, 81))) for _ in range(steps)]
    if graph:

        class Step(flow.nn.Graph):
            def __init__(self):
                super().__init__()
                self.m = model
                self.add_optimizer(opt)

            def build(self, x, y):
                loss = self.m.loss(self.m(x), y)
                loss.backward()
                return loss

        step = Step()
    losses = []
    with flash_sdp(flash):
        for d in data:
            x, y = d[:, :-1], d[:, 1:]
            if graph:
                losses.append(step(x, y).item())
            else:
                loss = model.loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
    return losses


@needs_native
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_the_zoo_gpt_trains_the_same_with_either_kernel(graph, spy):
    fused = _train(True, graph)
    assert spy.calls > 0
    composite = _train(False, graph)
    np.testing.assert_allclose(fused, composite, rtol=1e-5)
    assert fused[-1] < fused[0]
