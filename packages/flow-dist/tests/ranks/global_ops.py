"""Run under mpiexec: global tensors in use, against one process on the whole tensors.

- data parallel (parameters broadcast, batch split) training of the benchmark MLP (SGD with
  momentum, Adam) and GPT (AdamW) gives the same losses and parameters (float64, 1e-10);
- at 4 ranks, a 2x2 placement: data parallel on one axis, tensor parallel on the other
  (column-parallel then row-parallel linear, Megatron style);
- printing, factories, to_local, and bad input (mixed placements, local among global, bad SBP).
Prints "global ops ok" on rank 0."""

import os
import sys
import warnings

import numpy as np

import flow

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "benchmarks"))
from models import make_gpt, make_mlp  # noqa: E402

flow.set_default_dtype(flow.float64)
rank, n = flow.env.get_rank(), flow.env.get_world_size()
P = flow.placement("cpu", list(range(n)))
B, S0, S1 = flow.sbp.broadcast, flow.sbp.split(0), flow.sbp.split(1)
nn, F = flow.nn, flow.nn.functional
rng = np.random.default_rng(0)


def train(make, batches, loss_fn, make_opt, glob, steps=3):
    flow.manual_seed(0)
    m = make()
    if glob:
        m.to_global(P, B)
    opt = make_opt(m.parameters())
    losses = []
    for s in range(steps):
        inputs, target = batches(s)
        if glob:  # every input split along the batch, except the positions (broadcast)
            inputs = [x.to_global(P, B).to_global(sbp=S0 if x.ndim > 1 else B) for x in inputs]
            target = target.to_global(P, B).to_global(sbp=S0)
        opt.zero_grad()
        loss = loss_fn(m(*inputs), target)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach().numpy()))
    return losses, [p.detach().numpy() for p in m.parameters()]


def same(a, b, what):
    la, pa = a
    lb, pb = b
    np.testing.assert_allclose(la, lb, rtol=1e-10, err_msg=what)
    for x, y in zip(pa, pb):
        np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-12, err_msg=what)


X = rng.standard_normal((3, 4 * n, 784))
Y = rng.integers(0, 10, (3, 4 * n))


def mlp_batches(s):
    return [flow.tensor(X[s])], flow.tensor(Y[s])


for name, make_opt in [
    ("sgd", lambda p: flow.optim.SGD(p, lr=0.1, momentum=0.9)),
    ("adam", lambda p: flow.optim.Adam(p, lr=1e-3)),
]:
    mlp = lambda: make_mlp(nn, F)  # noqa: E731
    same(
        train(mlp, mlp_batches, F.cross_entropy, make_opt, False),
        train(mlp, mlp_batches, F.cross_entropy, make_opt, True),
        f"mlp {name}",
    )

IDX = rng.integers(0, 64, (3, 2 * n, 16))
TGT = rng.integers(0, 64, (3, 2 * n * 16))


def gpt_batches(s):
    return [flow.tensor(IDX[s]), flow.tensor(np.arange(16))], flow.tensor(TGT[s])


def gpt_loss(logits, y):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y)


gpt = lambda: make_gpt(nn, F, vocab=64, d_model=32, n_heads=2, n_layers=2, seq_len=16, dropout=0.0)  # noqa: E731
adamw = lambda p: flow.optim.AdamW(p, lr=3e-3, weight_decay=0.1)  # noqa: E731
with warnings.catch_warnings():
    warnings.simplefilter("error")  # every op of the GPT's step has an SBP rule
    same(train(gpt, gpt_batches, gpt_loss, adamw, False), train(gpt, gpt_batches, gpt_loss, adamw, True), "gpt")

# -- 2-d placement: data parallel x tensor parallel ----------------------------------------------
if n == 4:
    mesh = flow.placement("cpu", [[0, 1], [2, 3]])
    flow.manual_seed(1)
    fc1, fc2 = nn.Linear(6, 8), nn.Linear(8, 5)
    x = flow.randn(4, 6)
    ref = fc2(fc1(x).relu())
    ref.sum().backward()
    ref_grads = [p.grad.numpy().copy() for p in (fc1.weight, fc1.bias, fc2.weight, fc2.bias)]
    for p in (fc1.weight, fc1.bias, fc2.weight, fc2.bias):
        p.grad = None
    fc1.to_global(mesh, lambda name, t: [B, S0])  # column parallel: output features split
    fc2.to_global(mesh, lambda name, t: [B, S1] if name == "weight" else [B, B])  # row parallel
    xg = x.to_global(mesh, [B, B]).to_global(sbp=[S0, B])  # batch split on the first axis
    h = fc1(xg).relu()
    assert h.sbp == (S0, S1), h.sbp  # no communication: the features stay split
    out = fc2(h)
    assert out.sbp[1].is_partial(), out.sbp  # row parallel leaves partial sums on the model axis
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-10)
    out.sum().backward()
    for p, r in zip((fc1.weight, fc1.bias, fc2.weight, fc2.bias), ref_grads):
        assert p.grad.sbp == p.sbp
        np.testing.assert_allclose(p.grad.numpy(), r, rtol=1e-10, atol=1e-12)

# -- printing, factories, to_local ------------------------------------------------------------------
flow.manual_seed(5)
whole = flow.randn(5, 3)
flow.manual_seed(5)
g = flow.randn(5, 3, placement=P, sbp=S0)
np.testing.assert_array_equal(g.numpy(), whole.numpy())
piece = np.array_split(whole.numpy(), n)[rank]
np.testing.assert_array_equal(g.to_local().numpy(), piece)
text = repr(g)
assert 'placement=flow.placement(type="cpu"' in text and "sbp=(flow.sbp.split(dim=0),)" in text, text
assert flow.zeros_like(g).sbp == (S0,) and flow.ones(2, placement=P, sbp=B).to_local().tolist() == [1.0, 1.0]

# -- bad input ------------------------------------------------------------------------------------
from flow_dist.global_array import GlobalTensorError  # noqa: E402
from flow_dist.placement import PlacementError  # noqa: E402
from flow_dist.sbp import SbpError  # noqa: E402


def raises(exc, match, fn):
    try:
        fn()
    except exc as e:
        assert match in str(e), (match, str(e))
        return
    raise AssertionError(f"expected {exc.__name__} ({match})")


raises(PlacementError, "out of range for a job", lambda: flow.ones(2).to_global(flow.placement("cpu", [0, n]), B))
raises(SbpError, "out of range for a 2-d", lambda: flow.ones(2, 2).to_global(P, flow.sbp.split(2)))
raises(SbpError, "0-d and cannot be split", lambda: flow.tensor(1.0).to_global(P, S0))
raises(SbpError, "for a 1-d placement", lambda: flow.ones(2).to_global(P, [B, B]))
raises(GlobalTensorError, "a local tensor", lambda: g + flow.ones(5, 3))
if n > 1:
    other = flow.placement("cpu", list(reversed(range(n))))
    raises(GlobalTensorError, "different placements", lambda: g + flow.ones(5, 3, placement=other, sbp=B))
# -- an op without an SBP rule runs on broadcast inputs, warning once; no fitting signature explains --
from flow.plugins import hookimpl  # noqa: E402
from flow.registry import schema  # noqa: E402


class RulelessOps:
    @hookimpl
    def flow_register_ops(self, registry):
        registry.register_op(
            schema("test_cumulative_max", ["x"]),
            meta=lambda x: flow.ops.meta.TensorMeta(x.shape, x.dtype, x.device),
            no_error_samples="test op",
        )
        registry.register_op(
            schema("test_split_only", ["x"]),
            meta=lambda x: flow.ops.meta.TensorMeta(x.shape, x.dtype, x.device),
            no_error_samples="test op",
        )

    @hookimpl
    def flow_register_kernels(self, registry):
        registry.register_kernel("test_cumulative_max", "cpu", lambda x: np.maximum.accumulate(x, axis=0))
        registry.register_kernel("test_split_only", "cpu", lambda x: x * 2)

    @hookimpl
    def flow_register_rules(self, registry):
        # a rule (with strings, as an op package writes it) whose only signature needs a dim 5
        registry.register_rule("sbp", "test_split_only", lambda ctx: [(("S(5)",), ("S(5)",))])


flow.plugins.register(RulelessOps(), name="tests.ruleless")
whole = np.arange(12.0).reshape(6, 2)[::-1].copy()
xg = flow.tensor(whole).to_global(P, B).to_global(sbp=S0)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    y = flow.ops.call("test_cumulative_max", xg)
    flow.ops.call("test_cumulative_max", xg)
msgs = [str(w.message) for w in caught if "test_cumulative_max" in str(w.message)]
assert len(msgs) == 1 and "has no SBP rule" in msgs[0], msgs  # once per op
assert y.sbp == (B,)
np.testing.assert_array_equal(y.numpy(), np.maximum.accumulate(whole, axis=0))
from flow_dist.explain import NoSignatureError  # noqa: E402

raises(NoSignatureError, "no SBP signature fits", lambda: flow.ops.call("test_split_only", xg))
try:
    flow.ops.call("test_split_only", xg)
except NoSignatureError as e:
    assert "(S(0))" in str(e) and "(S(5)) -> (S(5)): cannot run: input 0 has no dim 5 to split" in str(e), str(e)
if rank == 0:
    print("global ops ok", flush=True)
