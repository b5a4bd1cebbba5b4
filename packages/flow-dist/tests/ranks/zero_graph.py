"""Run under mpiexec: ZeRO in graph mode (graph.config.enable_zero) on global tensors.

An MLP (SGD with momentum; uneven row shards) and the zoo GPT (AdamW, tied lm_head, dropout 0),
float64, data parallel (parameters broadcast, batch split), 3 compiled steps, a 4th on half the
batch (a recompile, traced with the states already sharded) and a 5th eager one: with
enable_zero(stage=1) and (stage=2) the losses and parameters equal the same graph without ZeRO to
1e-10, with the reduce-scatters bucketed (the default size, a small one, and zero.bucket_size_mb=0:
one per parameter); the sharded parameters' optimizer states hold this rank's rows only (their
bytes are measured against the exact S(0) pieces); the step's gradient all-reduces of sharded
parameters became reduce-scatters (alone or in the expected number of buckets) followed by
all-gathers of the updated rows. Then 4 x Linear(512): stage 2's per-rank peak (memory plan and
allocator) is lower than stage 1's. Prints the state bytes and peaks per rank and "zero_graph ok"
on rank 0."""

import numpy as np

import flow
from flow_dist.layout import local_shape
from flow_dist.zero.graph_pass import ZeroStateLayout
from flow_models.nlp.gpt import GPT, GPTConfig

flow.set_default_dtype(flow.float64)
rank, n = flow.env.get_rank(), flow.env.get_world_size()
P = flow.placement("cpu", list(range(n)))
B, S0 = flow.sbp.broadcast, flow.sbp.split(0)
nn, F = flow.nn, flow.nn.functional
rng = np.random.default_rng(0)
MIN = 64  # shard_min_size: the MLP's biases and the GPT's LayerNorms stay whole


def train(make, batches, loss_fn, make_opt, stage, bucket_mb=None):
    flow.manual_seed(0)
    m = make()
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
    if stage:
        step.config.enable_zero(stage=stage, shard_min_size=MIN)
    if bucket_mb is not None:
        step.config.set_option("zero.bucket_size_mb", bucket_mb)
    losses = []
    for s in range(5):
        inputs, target = batches(s)
        if s == 3:  # half the batch: a new specialisation, traced with the states already laid out S(0)
            inputs, target = [x[: len(x) // 2] for x in inputs], target[: len(target) // 2]
        inputs = [x.to_global(P, B).to_global(sbp=S0 if x.ndim > 1 else B) for x in inputs]
        target = target.to_global(P, B).to_global(sbp=S0)
        if s < 4:
            loss = step(inputs, target)
        else:  # an eager step on the same global tensors and states
            opt.zero_grad()
            loss = loss_fn(m(*inputs), target)
            loss.backward()
            opt.step()
        losses.append(float(loss.detach().to_global(sbp=B).to_local().numpy()))
    return losses, [p.detach().to_local().numpy().copy() for p in m.parameters()], m, opt, step


def state_bytes(opt) -> int:
    """Bytes of per-element optimizer state this rank holds (the flat buffers of every bucket)."""
    return sum(
        int(buf.nbytes) for gi in range(len(opt.param_groups)) for b in opt._buckets(gi) for buf in b.states.values()
    )


def expected_bytes(m, n_states) -> int:
    total = 0
    for p in m.parameters():
        shape = tuple(p.shape)
        sharded = int(np.prod(shape)) >= MIN
        total += int(np.prod(local_shape(shape, P, (S0,), (rank,)) if sharded else shape))
    return total * n_states * 8


def collectives(step) -> dict:
    """The step's conversions by kind (``"P->S"``: a reduce-scatter ...), and ``"all-reduced"``: the
    gradients all-reduced, alone (P -> B) or in a gradient bucket."""
    kinds = {"all-reduced": 0}
    for nd in step.ir.nodes:
        if nd.name == "sbp_boxing":
            k = f"{nd.attrs['sbp'][0].kind}->{nd.attrs['to'].kind}"
            kinds[k] = kinds.get(k, 0) + 1
        if nd.name == "sbp_all_reduce_start":
            kinds["all-reduced"] += nd.tags["bucket_of"]
        if nd.name == "sbp_reduce_scatter_bucket":
            kinds["rs-buckets"] = kinds.get("rs-buckets", 0) + 1
            kinds["rs-bucketed"] = kinds.get("rs-bucketed", 0) + nd.tags["bucket_of"]
    kinds["all-reduced"] += kinds.get("P->B", 0)
    return kinds


def check(name, make, batches, loss_fn, make_opt, n_states, runs):
    """``runs``: ``(stage, zero.bucket_size_mb or None for the default, expected reduce-scatter buckets)``."""
    ref_losses, ref_params, m0, opt0, step0 = train(make, batches, loss_fn, make_opt, 0)
    assert state_bytes(opt0) == sum(p.numel() for p in m0.parameters()) * n_states * 8
    ref_kinds = collectives(step0)
    assert "P->S" not in ref_kinds and "S->B" not in ref_kinds, ref_kinds
    for stage, mb, n_buckets in runs:
        losses, params, m, opt, step = train(make, batches, loss_fn, make_opt, stage, mb)
        what = f"{name} stage {stage} bucket_size_mb {mb}"
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-10, err_msg=what)
        for a, b in zip(params, ref_params):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=what)
        # the sharded parameters' states are laid out S(0): 1/n of them on each rank
        got = state_bytes(opt)
        assert got == expected_bytes(m, n_states), (name, got, expected_bytes(m, n_states))
        sharded = [p for p in m.parameters() if p.numel() >= MIN]
        assert sharded and all(isinstance(flow.optim._flat.state_layout(p), ZeroStateLayout) for p in sharded)
        # collectives: each sharded gradient reduce-scattered (P -> S(0)) alone or in one of n_buckets
        # buckets, and an all-gather (S(0) -> B) per sharded parameter
        assert step.compiles == 2, step.compiles  # the latest IR: traced with the states laid out S(0)
        kinds = collectives(step)
        alone = len(sharded) if n_buckets == 0 else 0
        assert kinds.get("P->S", 0) == alone and kinds.get("S->B", 0) == len(sharded), (what, kinds)
        assert kinds.get("rs-buckets", 0) == n_buckets, (what, kinds)
        assert kinds.get("rs-bucketed", 0) == len(sharded) - alone, (what, kinds)
        assert kinds["all-reduced"] == ref_kinds["all-reduced"] - len(sharded), (kinds, ref_kinds)
        if rank == 0:
            ref = state_bytes(opt0)
            print(f"{what}: state bytes per rank {got} (without ZeRO {ref}); {kinds} ({ref_kinds})")


def mlp():
    return nn.Sequential(nn.Linear(20, 33), nn.Tanh(), nn.Linear(33, 3), nn.Tanh(), nn.Linear(3, 1))


XM = rng.standard_normal((5, 2 * n, 20))
YM = rng.standard_normal((5, 2 * n, 1))
check(
    "mlp",
    mlp,
    lambda s: ([flow.tensor(XM[s])], flow.tensor(YM[s])),
    F.mse_loss,
    lambda ps: flow.optim.SGD(ps, lr=0.1, momentum=0.9),
    1,
    # the two sharded weights (99 then 660 elements in backward): one bucket; two once it closes at 512 bytes; none
    [(1, None, 1), (2, None, 1), (2, 512 / 2**20, 2), (1, 0, 0), (2, 0, 0)],
)

cfg = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=4, n_embd=32, dropout=0.0)
XG = rng.integers(0, 64, (5, 2 * n, 16))
YG = rng.integers(0, 64, (5, 2 * n, 16))


def gpt_loss(logits, y):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


check(
    "gpt",
    lambda: GPT(cfg),
    lambda s: ([flow.tensor(XG[s])], flow.tensor(YG[s])),
    gpt_loss,
    lambda ps: flow.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    2,
    # 14 sharded parameters, 219 KiB of float64 gradients: one bucket, or one reduce-scatter each; 4 buckets
    # of at least 48 KiB at stage 2
    [(1, None, 1), (1, 0, 0), (2, 48 / 1024, 4)],
)


def peak_memory():
    """4 x Linear(512) (AdamW, the default bucket size): per-rank peak bytes of a compiled step, from its
    memory plan and from the allocator, without ZeRO, at stage 1 (the four 2 MiB weight gradients in one
    bucket) and at stage 2 (buckets of at most 1/n of them: 4 MiB at 2 ranks, 2 MiB at 4); both stages train
    like the step without ZeRO."""
    x, y = rng.standard_normal((2, 2 * n, 512)), rng.standard_normal((2, 2 * n, 512))
    out = {}
    for stage in (0, 1, 2):
        flow.manual_seed(0)
        m = nn.Sequential(*[nn.Linear(512, 512) for _ in range(4)])
        m.to_global(P, B)
        opt = flow.optim.AdamW(m.parameters(), lr=1e-3)

        class Step(nn.Graph):
            def __init__(self, m, opt):
                super().__init__()
                self.m = m
                self.add_optimizer(opt)

            def build(self, x, y):
                loss = F.mse_loss(self.m(x), y)
                loss.backward()
                return loss

        step = Step(m, opt)
        if stage:
            step.config.enable_zero(stage=stage, shard_min_size=1024)  # the biases stay whole
        losses = []
        for s in range(2):
            xs, ys = (flow.tensor(a[s]).to_global(P, B).to_global(sbp=S0) for a in (x, y))
            flow.cpu.reset_peak_memory_stats()
            base = flow.cpu.memory_allocated()
            losses.append(float(step(xs, ys).to_global(sbp=B).to_local().numpy()))
        alloc = flow.cpu.max_memory_allocated() - base  # of the second step: the first compiles
        params = [p.detach().to_local().numpy().copy() for p in m.parameters()]
        out[stage] = (losses, params, step.memory_report()["peak_bytes"], alloc, collectives(step))
    for stage in (1, 2):
        np.testing.assert_allclose(out[stage][0], out[0][0], rtol=1e-10, err_msg=f"4 x Linear(512) stage {stage}")
        for a, b in zip(out[stage][1], out[0][1]):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=f"4 x Linear(512) stage {stage}")
        assert out[stage][4].get("rs-buckets") == (1 if stage == 1 else min(n, 4)), out[stage][4]
    grad = 512 * 512 * 8  # one weight's whole gradient
    plan = {k: v[2] for k, v in out.items()}
    alloc = {k: v[3] for k, v in out.items()}
    # stage 1 holds the four whole gradients at its one reduce-scatter, stage 2 at most 4/n of them: measured
    # 3.0 MiB lower at 2 ranks and 1.5 at 4 by the plan; asserted with a margin
    assert plan[2] <= plan[1] - grad / 2 and plan[1] < plan[0], plan
    if flow.cpu.memory_stats():  # flow's allocator counts the blocks (none without the native extension)
        assert alloc[2] <= alloc[1] - grad / 2, alloc
    if rank == 0:
        print(f"4 x Linear(512) peak bytes per rank (without ZeRO, stage 1, stage 2): plan {plan}, allocator {alloc}")


peak_memory()
if rank == 0:
    print("zero_graph ok")
