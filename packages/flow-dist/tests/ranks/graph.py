"""Run under mpiexec: graph mode (nn.Graph) on global tensors, against one process on the whole batch.

- data parallel (parameters broadcast, batch split) training of the benchmark MLP (SGD with
  momentum, Adam) and GPT (AdamW), the optimizer inside the compiled step: the same losses and
  parameters as one process, eager, on the full batch (float64, 1e-10);
- at 4 ranks, a 2x2 placement: data parallel on one axis, column- then row-parallel linear on
  the other, compiled, with its gradients;
- the graph's values show their SBP, the conversions are sbp_boxing nodes, a new layout of an
  input compiles a new specialisation, and a tensor of another placement is refused.
Prints "graph ok" on rank 0."""

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


def train(make, batches, loss_fn, make_opt, glob, steps=3, config=None):
    flow.manual_seed(0)
    m = make()
    if glob:
        m.to_global(P, B)
    opt = make_opt(m.parameters())

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = m
            self.add_optimizer(opt)

        def build(self, inputs, target):
            loss = loss_fn(self.m(*inputs), target)
            loss.backward()
            return loss

    step = Step()
    if config is not None:
        config(step.config)
    losses = []
    for s in range(steps):
        inputs, target = batches(s)
        if glob:  # every input split along the batch, except the positions (broadcast)
            inputs = [x.to_global(P, B).to_global(sbp=S0 if x.ndim > 1 else B) for x in inputs]
            target = target.to_global(P, B).to_global(sbp=S0)
            loss = step(inputs, target)
            assert loss.is_global and loss.sbp[0].is_partial(), loss  # a mean over split rows: partial sums
        else:  # the reference: one process, eager
            opt.zero_grad()
            loss = loss_fn(m(*inputs), target)
            loss.backward()
            opt.step()
        losses.append(float(loss.detach().numpy()))
    return (losses, [p.detach().numpy() for p in m.parameters()]), step


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


mlp = lambda: make_mlp(nn, F)  # noqa: E731
for name, make_opt in [
    ("sgd", lambda p: flow.optim.SGD(p, lr=0.1, momentum=0.9)),
    ("adam", lambda p: flow.optim.Adam(p, lr=1e-3)),
]:
    ref, _ = train(mlp, mlp_batches, F.cross_entropy, make_opt, False)
    got, graph = train(mlp, mlp_batches, F.cross_entropy, make_opt, True)
    same(ref, got, f"mlp {name}")
    assert graph.compiles == 1, graph.compiles
    if name == "sgd":
        ref_sgd = ref

# the graph's values carry their layout; the conversions are collective nodes
text = str(graph.ir)
want = "{placement=cpu" + str(list(range(n))).replace(" ", "") + ", sbp=(S(0),)} = input input0"
assert want in text, text
counts = graph.ir.op_counts()
# the count of targets is all-reduced in forward and backward; the 6 gradients in one bucket
assert counts.get("sbp_boxing") == 2, counts
assert counts.get("sbp_all_reduce_start") == 1 and counts.get("sbp_all_reduce_wait") == 1, counts
assert all(nd.attrs["sbp"] == (flow.sbp.partial_sum,) for nd in graph.ir.nodes if nd.name == "sbp_boxing")

# gradient buckets: smaller buckets start during backward; without the pass, one all-reduce each
sgd = lambda p: flow.optim.SGD(p, lr=0.1, momentum=0.9)  # noqa: E731
small, graph = train(
    mlp, mlp_batches, F.cross_entropy, sgd, True, config=lambda c: c.set_option("gradient_buckets.bucket_size_mb", 1)
)
same(ref_sgd, small, "mlp, 1 MB buckets")
starts = [i for i, nd in enumerate(graph.ir.nodes) if nd.name == "sbp_all_reduce_start"]
# a bucket closes once it holds 1 MB: [fc3.weight, fc3.bias, fc2.weight], [fc2.bias, fc1.weight], [fc1.bias]
assert len(starts) == 3, graph.ir.op_counts()
backward = [i for i, nd in enumerate(graph.ir.nodes) if nd.tags.get("phase") == "backward" and nd.name == "matmul"]
assert starts[0] < backward[-1], (starts, backward)  # the first bucket is in flight during backward
off, graph = train(mlp, mlp_batches, F.cross_entropy, sgd, True, config=lambda c: c.disable_pass("gradient_buckets"))
same(ref_sgd, off, "mlp, no buckets")
assert graph.ir.op_counts().get("sbp_boxing") == 8 and "sbp_all_reduce_start" not in graph.ir.op_counts()

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
    same(train(gpt, gpt_batches, gpt_loss, adamw, False)[0], train(gpt, gpt_batches, gpt_loss, adamw, True)[0], "gpt")

# -- 2-d placement: data parallel x tensor parallel, compiled --------------------------------------
if n == 4:
    mesh = flow.placement("cpu", [[0, 1], [2, 3]])
    flow.manual_seed(1)
    fc1, fc2 = nn.Linear(6, 8), nn.Linear(8, 5)
    x = flow.randn(4, 6)
    ref = fc2(fc1(x).relu())
    ref.sum().backward()
    ref_grads = [p.grad.numpy().copy() for p in (fc1.weight, fc1.bias, fc2.weight, fc2.bias)]
    fc1.to_global(mesh, lambda name, t: [B, S0])  # column parallel: output features split
    fc2.to_global(mesh, lambda name, t: [B, S1] if name == "weight" else [B, B])  # row parallel

    class TP(nn.Graph):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = fc1, fc2

        def build(self, x):
            out = self.fc2(self.fc1(x).relu())
            out.sum().backward()
            return out, self.fc1.weight.grad, self.fc2.weight.grad

    tp = TP()
    xg = x.to_global(mesh, [B, B]).to_global(sbp=[S0, B])
    out, g1, g2 = tp(xg)
    assert out.sbp[0] == S0 and out.sbp[1].is_partial(), out.sbp  # row parallel leaves partial sums
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-10)
    assert g1.sbp == fc1.weight.sbp and g2.sbp == fc2.weight.sbp, (g1.sbp, g2.sbp)
    np.testing.assert_allclose(g1.numpy(), ref_grads[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g2.numpy(), ref_grads[2], rtol=1e-10, atol=1e-12)

# -- specialisation and bad input -----------------------------------------------------------------
lin = nn.Linear(3, 2)
lin.to_global(P, B)


class Fwd(nn.Graph):
    def __init__(self):
        super().__init__()
        self.lin = lin

    def build(self, x):
        return self.lin(x)


fwd = Fwd()
whole = flow.randn(2 * n, 3)
xb = whole.to_global(P, B)
for layout in (S0, B, S0):
    y = fwd(xb.to_global(sbp=layout))
    assert y.sbp == (layout,), y.sbp
    np.testing.assert_allclose(y.numpy(), lin(xb).detach().numpy(), rtol=1e-12)
assert fwd.compiles == 2, fwd.compiles  # one specialisation per layout of the input
if n > 1:
    other = flow.placement("cpu", list(reversed(range(n))))
    try:
        fwd(whole.to_global(other, B))
    except Exception as e:
        assert "different placements" in str(e), str(e)
    else:
        raise AssertionError("a tensor of another placement was accepted")
if rank == 0:
    print("graph ok", flush=True)
