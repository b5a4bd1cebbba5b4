"""Run under mpiexec: the fused batch norm on global tensors, against one process on the whole tensor.

- BatchNorm2d on an input split on the batch (synchronised statistics), on the channels, and
  broadcast: outputs, running statistics after 2 training steps, an evaluation step, and the
  gradients of the input, weight and bias (float64, 1e-10);
- a small CNN with BatchNorm2d trained data parallel for 3 steps, eagerly and in nn.Graph: the
  same losses, parameters and running statistics as one process eagerly on the whole batch;
- at 4 ranks, a 2x2 placement splitting the batch on one axis and the channels on the other;
- no op falls back to broadcast (warnings are errors) and the batch split runs no gather.
Prints "batch norm ok" on rank 0."""

import re
import warnings

import numpy as np

import flow
from flow_dist.errors import GlobalTensorError
from flow_dist.handler import warned_ops

warnings.simplefilter("error")  # a missing SBP rule warns: it must not happen here
flow.set_default_dtype(flow.float64)
rank, n = flow.env.get_rank(), flow.env.get_world_size()
P = flow.placement("cpu", list(range(n)))
B, S0, S1 = flow.sbp.broadcast, flow.sbp.split(0), flow.sbp.split(1)
nn, F = flow.nn, flow.nn.functional
rng = np.random.default_rng(0)
TOL = dict(rtol=1e-10, atol=1e-10)


def close(got, want, what):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), err_msg=what, **TOL)


def bn_steps(placement, sbp, xs, seed):
    """Two training steps and one evaluation step of BatchNorm2d, each with a backward; the logical
    values of everything compared (the module's parameters, its buffers and the inputs made global
    when ``placement`` is given)."""
    r = np.random.default_rng(seed)
    bn = nn.BatchNorm2d(xs[0].shape[1], momentum=0.3)
    with flow.no_grad():  # not the default 1 / 0, so that a dropped weight or bias shows
        bn.weight.copy_(flow.tensor(r.standard_normal(tuple(bn.weight.shape))))
        bn.bias.copy_(flow.tensor(r.standard_normal(tuple(bn.bias.shape))))
    if placement is not None:
        bn.to_global(placement, [B] * placement.ndim)
    seen = []
    for k, x in enumerate(xs):
        bn.train(k < 2)
        x = flow.tensor(x)
        if placement is not None:
            x = x.to_global(placement, [B] * placement.ndim).to_global(sbp=sbp)
        x.requires_grad_(True)
        y = bn(x)
        if placement is not None:
            assert y.sbp == x.sbp, (y.sbp, x.sbp)  # normalised where the pieces are
        seed = flow.tensor(np.cos(np.arange(y.numel()).reshape(tuple(y.shape))))
        if placement is not None:
            seed = seed.to_global(placement, [B] * placement.ndim).to_global(sbp=y.sbp)
        (y * seed).sum().backward()
        seen.append([y.detach().numpy(), x.grad.numpy(), bn.weight.grad.numpy(), bn.bias.grad.numpy()])
        seen[-1] += [bn.running_mean.numpy(), bn.running_var.numpy(), bn.num_batches_tracked.numpy()]
        bn.zero_grad()
    return seen


names = ["output", "input grad", "weight grad", "bias grad", "running_mean", "running_var", "num_batches_tracked"]
XS = [rng.standard_normal((2 * n + 1, 3, 4, 5)) * 3 + 2 for _ in range(3)]  # uneven pieces of the batch
XC = [rng.standard_normal((4, 2 * n + 1, 3, 3)) for _ in range(3)]  # uneven pieces of the channels
for label, xs, sbp in (
    ("batch split", XS, S0),
    ("channel split", XC, S1),
    ("broadcast", XS, B),
    ("H split", XS, flow.sbp.split(2)),
):
    ref = bn_steps(None, None, xs, 1)
    got = bn_steps(P, sbp, xs, 1)
    for step, (r, g) in enumerate(zip(ref, got)):
        for name, a, b in zip(names, g, r):
            close(a, b, f"BatchNorm2d, {label}, step {step}: {name}")

# the single-process reference is the fused op, not a composite: both paths give the same numbers
y = F.batch_norm(flow.tensor(XS[0]), None, None, training=True)
mean = XS[0].mean(axis=(0, 2, 3), keepdims=True)
close(y.numpy(), (XS[0] - mean) / np.sqrt(XS[0].var(axis=(0, 2, 3), keepdims=True) + 1e-5), "batch norm formula")

# -- a small CNN, data parallel: eager and compiled against one process -------------------------------------------
CX = rng.standard_normal((3, 2 * n, 3, 6, 6))
CY = rng.integers(0, 5, (3, 2 * n))


def make_cnn():
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Conv2d(4, 4, 3, padding=1, bias=False),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 5),
    )


def train_cnn(glob: bool, graph: bool):
    flow.manual_seed(0)
    m = make_cnn()
    if glob:
        m.to_global(P, B)
    opt = flow.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = m
            self.add_optimizer(opt)

        def build(self, x, y):
            loss = F.cross_entropy(self.m(x), y)
            loss.backward()
            return loss

    step = Step() if graph else None
    losses = []
    for s in range(3):
        x, y = flow.tensor(CX[s]), flow.tensor(CY[s])
        if glob:
            x, y = x.to_global(P, B).to_global(sbp=S0), y.to_global(P, B).to_global(sbp=S0)
        if graph:
            loss = step(x, y)
        else:
            opt.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
        losses.append(float(loss.detach().numpy()))
    state = [t.detach().numpy() for t in m.state_dict().values()]
    return losses, state, step


ref_losses, ref_state, _ = train_cnn(False, False)
for graph in (False, True):
    losses, state, step = train_cnn(True, graph)
    what = "CNN, " + ("nn.Graph" if graph else "eager")
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-10, err_msg=what)
    assert len(state) == len(ref_state)
    for a, b in zip(state, ref_state):
        close(a, b, what + ": parameters and running statistics")
    if graph:
        assert step.compiles == 1, step.compiles
        counts = step.ir.op_counts()
        # the synchronised statistics are the local function's ops, in the graph with their collectives:
        # per BatchNorm2d two all-reduces forward (sum, squared deviations), one backward (both sums), and
        # the loss's count of targets forward and backward; the batch itself is never gathered
        assert "batch_norm" not in counts and "batch_norm_backward" not in counts, counts
        assert counts.get("sbp_boxing") == 2 * 3 + 2, counts
        boxes = [nd for nd in step.ir.nodes if nd.name == "sbp_boxing"]
        assert all(nd.attrs["sbp"] == (flow.sbp.partial_sum,) for nd in boxes), counts

# -- 2-d placement: the batch split on one axis, the channels on the other ------------------------------------------
if n == 4:
    mesh = flow.placement("cpu", [[0, 1], [2, 3]])
    X2 = [rng.standard_normal((5, 5, 3, 2)) for _ in range(3)]
    ref = bn_steps(None, None, X2, 2)
    got = bn_steps(mesh, [S0, S1], X2, 2)
    for step, (r, g) in enumerate(zip(ref, got)):
        for name, a, b in zip(names, g, r):
            close(a, b, f"BatchNorm2d, 2x2 (S(0), S(1)), step {step}: {name}")

# -- bad input: the op's own errors, on the logical shapes ----------------------------------------------------------
xg = flow.tensor(XS[0]).to_global(P, B).to_global(sbp=S0)
for args, kw, err, match in (
    ((xg, None, None, flow.ones(4).to_global(P, B)), {}, flow.errors.OpError, "'weight' must have 3 elements"),
    ((xg, None, None, flow.ones(3)), {}, GlobalTensorError, "local tensor of shape \\(3,\\)"),
    ((xg, None, None), {"training": True, "eps": -1.0}, flow.errors.OpError, "'eps' must be non-negative"),
):
    try:
        F.batch_norm(*args, **kw)
    except err as e:
        assert re.search(match, str(e)), str(e)
    else:
        raise AssertionError(f"accepted: {match}")

assert not {"batch_norm", "batch_norm_backward"} & warned_ops(), warned_ops()
if rank == 0:
    print("batch norm ok", flush=True)
