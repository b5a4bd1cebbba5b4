"""Run under mpiexec (2 or 4 ranks): tensor parallelism of the zoo GPT against one process.

The GPT (tiny, dropout 0, float64) laid out with ``gpt_plan`` trains 3 AdamW steps, eagerly and
compiled (nn.Graph with the optimizer inside), with TP=2 on 2 ranks and DP=2 x TP=2 on 4 ranks
(placement [[0, 1], [2, 3]], data split on the first axis): the same losses and parameters as
one process on the whole batch (1e-10), the weights really split (local piece shapes), and the
collectives of a step as the Megatron plan has them; a checkpoint of one process loads into the
split model. Arguments: ``eager`` / ``graph`` (default both), ``--report`` (print the counts).
Prints "tensor_parallel ok" on rank 0."""

import sys

import numpy as np

import flow
from flow_dist.parallel import TensorParallelError, count_collectives, gpt_plan, tensor_parallel
from flow_dist.testing import sbp_check
from flow_models.nlp.gpt import GPT, GPTConfig

flow.set_default_dtype(flow.float64)
rank, n = flow.env.get_rank(), flow.env.get_world_size()
B, S0 = flow.sbp.broadcast, flow.sbp.split(0)
nn, F = flow.nn, flow.nn.functional
REPORT = "--report" in sys.argv
MODES = [m for m in ("eager", "graph") if m in sys.argv] or ["eager", "graph"]
CFG = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_embd=32, dropout=0.0)
rng = np.random.default_rng(0)
IDX = rng.integers(0, 64, (3, 8, 16))
TGT = rng.integers(0, 64, (3, 8, 16))


def make(mesh):
    flow.manual_seed(0)
    m = GPT(CFG)
    if mesh is not None:
        tensor_parallel(m, mesh, gpt_plan(m))
    return m, flow.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.1)


def batch(s, mesh):
    x, y = flow.tensor(IDX[s]), flow.tensor(TGT[s])
    if mesh is None:
        return x, y
    data = tuple(S0 if k < mesh.ndim - 1 else B for k in range(mesh.ndim))  # split on the DP axis
    whole = (B,) * mesh.ndim
    return x.to_global(mesh, whole).to_global(sbp=data), y.to_global(mesh, whole).to_global(sbp=data)


def train(mesh, graph):
    m, opt = make(mesh)

    def loss_of(x, y):
        return m.loss(m(x), y)

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = m
            self.add_optimizer(opt)

        def build(self, x, y):
            loss = loss_of(x, y)
            loss.backward()
            return loss

    step = Step() if graph else None
    losses, counted = [], []
    for s in range(3):
        x, y = batch(s, mesh)
        with count_collectives() as c:
            if graph:
                loss = step(x, y)
            else:
                opt.zero_grad()
                loss = loss_of(x, y)
                loss.backward()
                opt.step()
        counted.append(c)
        losses.append(float(loss.detach().numpy()))
    # the state dict: the logical values under one process's names and shapes (the fused c_attn too)
    return m, losses, {k: v.numpy() for k, v in m.state_dict().items()}, counted, step


ref_model, ref_losses, ref_params, _, _ = train(None, False)
meshes = [flow.placement("cpu", list(range(n)))] if n == 2 else [flow.placement("cpu", [[0, 1], [2, 3]])]
for mesh in meshes:
    for graph in [mode == "graph" for mode in MODES]:
        what = f"{mesh!r} {'graph' if graph else 'eager'}"
        m, losses, params, counted, step = train(mesh, graph)
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-10, err_msg=what)
        assert list(params) == list(ref_params), (list(params), list(ref_params))
        for name, a in params.items():
            np.testing.assert_allclose(a, ref_params[name], rtol=1e-10, atol=1e-12, err_msg=f"{what} {name}")
        # the weights are split on the TP axis (last), broadcast on the DP axis
        h0 = m.transformer.h[0]
        tp = mesh.ndim - 1
        assert h0.mlp.c_fc.weight.sbp[tp] == S0, h0.mlp.c_fc.weight.sbp
        assert tuple(h0.mlp.c_fc.weight.to_local().shape) == (4 * 32 // 2, 32)
        assert tuple(h0.mlp.c_proj.weight.to_local().shape) == (32, 4 * 32 // 2)
        assert tuple(h0.attn.c_proj.weight.to_local().shape) == (32, 32 // 2)
        assert tuple(h0.attn.c_attn.weight.to_local().shape) == (3, 32 // 2, 32)  # q, k, v: 2 heads of 4 each
        assert tuple(m.transformer.wte.weight.to_local().shape) == (64 // 2, 32)
        assert m.lm_head.weight is m.transformer.wte.weight
        assert tuple(h0.ln_1.weight.to_local().shape) == (32,) and h0.ln_1.weight.sbp == (B,) * mesh.ndim
        # a checkpoint of one process loads into the split model, and back
        fresh, _ = make(mesh)
        fresh.load_state_dict(ref_model.state_dict())
        for name, v in fresh.state_dict().items():
            np.testing.assert_array_equal(v.numpy(), ref_params[name], err_msg=f"{what} load {name}")
        # a step's collectives (the second: the first also boxes the optimizer's fresh states)
        c = counted[1]
        if REPORT and rank == 0:
            print(what, c, dict(c.on_axis), flush=True)
        # on the TP axis only all-reduces of activations (Megatron's 2 per block forward and 2
        # backward, the embedding's output and the output layer's input gradient: 10) and the
        # vocabulary-parallel loss's exchanges (2 forward, 1 backward); no weight moves
        on_tp = {
            kind: k for (axis, kind), k in c.on_axis.items() if axis == tp and kind in ("P->B", "P->S", "S->B", "S->S")
        }
        assert on_tp == {"P->B": 13}, (what, dict(c.on_axis))

# -- the vocabulary-parallel cross-entropy rule: every sample and signature, and logits split on the
# classes (mean / sum / none, ignored targets) against one process, with the gradient --------------
if "eager" in MODES:
    report = sbp_check(["cross_entropy", "cross_entropy_backward"], rtol=1e-10, atol=1e-12)
    assert report.ok, report.failures
    p1 = flow.placement("cpu", list(range(n)))
    logits = rng.standard_normal((12, 8 * n)) * 5
    target = rng.integers(0, 8 * n, 12)
    target[3] = -100
    for reduction in ("mean", "sum", "none"):
        ref = flow.tensor(logits, requires_grad=True)
        want = F.cross_entropy(ref, flow.tensor(target), reduction=reduction)
        want.sum().backward()
        x = flow.tensor(logits).to_global(p1, B).to_global(sbp=flow.sbp.split(1)).detach().requires_grad_()
        with count_collectives() as c:
            got = F.cross_entropy(x, flow.tensor(target).to_global(p1, B), reduction=reduction)
        assert got.sbp == (B,) and c.counts == {"P->B": 2}, (got.sbp, c)  # two N-vectors, not the logits
        got.sum().backward()
        assert x.grad.sbp == (flow.sbp.split(1),), x.grad.sbp
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12, err_msg=reduction)
        np.testing.assert_allclose(x.grad.numpy(), ref.grad.numpy(), rtol=1e-12, atol=1e-14, err_msg=reduction)

# -- a split that does not divide ------------------------------------------------------------------
if n == 2:
    for module, plan, match in [
        (nn.Sequential(nn.Linear(4, 5)), {"0": "colwise"}, "out_features of 5 over 2 ranks"),
        (nn.Sequential(nn.Linear(5, 4)), {"0": "rowwise"}, "in_features of 5 over 2 ranks"),
        (nn.Sequential(nn.Embedding(7, 4)), {"0": "vocab"}, "the vocabulary of 7 over 2 ranks"),
    ]:
        try:
            tensor_parallel(module, flow.placement("cpu", [0, 1]), plan)
        except TensorParallelError as e:
            assert match in str(e), str(e)
        else:
            raise AssertionError(f"{plan} was accepted")
    bad = GPT(GPTConfig(vocab_size=64, block_size=16, n_layer=1, n_head=3, n_embd=24))
    try:
        tensor_parallel(bad, flow.placement("cpu", [0, 1]), "gpt")
    except TensorParallelError as e:
        assert "n_head of 3 over 2 ranks" in str(e), str(e)
    else:
        raise AssertionError("3 heads over 2 ranks were accepted")

if rank == 0:
    print("tensor_parallel ok", flush=True)
