"""Run under mpiexec: pipeline parallelism in graph mode (flow_dist.pipeline.graph) against one process.

The zoo GPT (tied lm_head, dropout 0, float64) in an nn.Graph whose block is this rank's stage
(gpt_stages, ``block.to(flow.nn.graph.GraphModule).set_stage(s, placement)``), 4 micro-batches
(``set_gradient_accumulation_steps``), 1F1B, 3 AdamW steps: the same losses and parameters as the
same nn.Graph on the whole model in one process and as eager training (1e-10). At 2 ranks: 2
stages; at 4: 2 data-parallel replicas x 2 stages. Then the errors of a badly placed stage.
Prints "pipeline graph ok" on rank 0."""

import numpy as np

import flow
from flow_dist import pipeline as pp
from flow_dist.pipeline.graph import GraphPipelineStage, graph_stage
from flow_models.nlp.gpt import GPT, GPTConfig

flow.set_default_dtype(flow.float64)
rank, n = flow.env.get_rank(), flow.env.get_world_size()
CFG = dict(n_layer=2, vocab_size=64, block_size=16, n_head=4, n_embd=32, dropout=0.0)
STEPS, BATCH, MICRO, STAGES = 3, 8, 4, 2
rng = np.random.default_rng(0)
IDX = rng.integers(0, 64, (STEPS, BATCH, 16))
TGT = rng.integers(0, 64, (STEPS, BATCH, 16))


def make_gpt():
    flow.manual_seed(0)
    return GPT(GPTConfig(**CFG))


def lm_loss(logits, y):
    return flow.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def adamw(params):
    return flow.optim.AdamW(params, lr=3e-3, weight_decay=0.1)


class TrainGraph(flow.nn.Graph):
    def __init__(self, model, opt, stage=None, placement=None):
        super().__init__()
        self.model = model
        if stage is not None:
            self.model.to(flow.nn.graph.GraphModule).set_stage(stage, placement)
        self.add_optimizer(opt)
        self.config.set_gradient_accumulation_steps(MICRO)

    def build(self, x, y):
        loss = lm_loss(self.model(x), y)
        loss.backward()
        return loss


def one_process():
    """The whole model in this process: nn.Graph's compiled step and eager training, on the whole batch."""
    gpt, eager = make_gpt(), make_gpt()
    g = TrainGraph(gpt, adamw(gpt.parameters()))
    opt = adamw(eager.parameters())
    losses = []
    for s in range(STEPS):
        loss = g(flow.tensor(IDX[s]), flow.tensor(TGT[s]))
        opt.zero_grad()
        eager_loss = lm_loss(eager(flow.tensor(IDX[s])), flow.tensor(TGT[s]))
        eager_loss.backward()
        opt.step()
        np.testing.assert_allclose(loss.numpy(), eager_loss.detach().numpy(), rtol=1e-10)
        losses.append(float(loss.numpy()))
    for (k, p), q in zip(gpt.named_parameters(), eager.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-10, atol=1e-12, err_msg=k)
    return losses, {k: v.numpy().copy() for k, v in gpt.state_dict().items()}


ref_losses, ref_params = one_process()

mesh = pp.pipeline_mesh(STAGES)
dp = len(mesh.dp_ranks)
replica = mesh.group_ranks[0] // STAGES
module = pp.gpt_stages(make_gpt(), STAGES)
g = TrainGraph(module, adamw(module.parameters()), mesh.stage_index, flow.placement("cpu", ranks=list(mesh.dp_ranks)))
rows = slice(replica * BATCH // dp, (replica + 1) * BATCH // dp)  # this replica's share of the batch
losses = []
for s in range(STEPS):
    out = g(flow.tensor(IDX[s, rows]), flow.tensor(TGT[s, rows]))
    if mesh.stage_index == STAGES - 1:
        losses.append(float(out.numpy()))
    else:
        assert out is None
st = graph_stage(g)
assert isinstance(st, GraphPipelineStage) and st.split.compiles == 1, st.split.compiles
assert st.max_in_flight == min(MICRO, STAGES - mesh.stage_index), st.max_in_flight
if st.is_last:
    mean = np.array(losses)
    if dp > 1:
        mean = st._dp_comm.all_reduce(mean, op="avg")
    np.testing.assert_allclose(mean, ref_losses, rtol=1e-10)
for k, p in module.state_dict().items():
    np.testing.assert_allclose(p.numpy(), ref_params[k], rtol=1e-10, atol=1e-12, err_msg=k)


def raises(fn, *words):
    try:
        fn()
    except pp.PipelineError as e:
        assert all(w in str(e) for w in words), (str(e), words)
    else:
        raise AssertionError(f"no PipelineError (expected {words})")


# errors raised before any message moves: a stage on ranks that run another stage in
# pipeline_mesh's layout, a placement without this rank, a stage without placement
m2 = pp.gpt_stages(make_gpt(), STAGES)
here = flow.placement("cpu", ranks=list(mesh.dp_ranks))
swapped = TrainGraph(m2, adamw(m2.parameters()), STAGES - 1 - mesh.stage_index, here)
raises(lambda: swapped(flow.tensor(IDX[0, rows]), flow.tensor(TGT[0, rows])), "runs on ranks")
away = TrainGraph(m2, adamw(m2.parameters()), mesh.stage_index, flow.placement("cpu", ranks=[(rank + 1) % n]))
raises(lambda: away(flow.tensor(IDX[0, rows]), flow.tensor(TGT[0, rows])), "exactly one top-level block")
nop = TrainGraph(m2, adamw(m2.parameters()))
nop.model.config.stage_id = mesh.stage_index
raises(lambda: nop(flow.tensor(IDX[0, rows]), flow.tensor(TGT[0, rows])), "no placement")
if rank == 0:
    print("pipeline graph ok", flush=True)
