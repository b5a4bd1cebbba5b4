"""Run under mpiexec: pipeline parallelism (flow_dist.pipeline) against one process on the whole batch.

- 2 ranks: the zoo GPT (tied lm_head, dropout 0, float64) in 2 stages, 4 micro-batches, GPipe and
  1F1B, 3 AdamW steps: the same losses and parameters as one process (1e-10); the tied embedding's
  two copies stay equal, with the gradient of the whole model;
- 4 ranks: 2 data-parallel replicas x 2 stages (1F1B and GPipe), the same check;
- errors raised before any message moves: a wrong stage index, a batch the micro-batches do not
  divide, the target missing on the last stage, inputs on a later stage.
Prints "pipeline ok" on rank 0."""

import numpy as np

import flow
from flow_dist import pipeline as pp
from flow_dist.comm.backend import get_backend
from flow_dist.pipeline import stage as stage_module
from flow_models.nlp.gpt import GPT, GPTConfig

flow.set_default_dtype(flow.float64)
rank, n = flow.env.get_rank(), flow.env.get_world_size()
CFG = dict(vocab_size=64, block_size=16, n_head=4, n_embd=32, dropout=0.0)
STEPS, BATCH = 3, 8
rng = np.random.default_rng(0)
IDX = rng.integers(0, 64, (STEPS, BATCH, 16))
TGT = rng.integers(0, 64, (STEPS, BATCH, 16))


def make_gpt(n_layer=2):
    flow.manual_seed(0)
    return GPT(GPTConfig(n_layer=n_layer, **CFG))


def lm_loss(logits, y):
    return flow.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def adamw(params):
    return flow.optim.AdamW(params, lr=3e-3, weight_decay=0.1)


def reference(n_layer):
    """One process, the whole batch: each step's loss, the parameters after, the last step's gradients."""
    gpt = make_gpt(n_layer)
    opt = adamw(gpt.parameters())
    losses = []
    for s in range(STEPS):
        opt.zero_grad()
        loss = gpt.loss(gpt(flow.tensor(IDX[s])), flow.tensor(TGT[s]))
        loss.backward()
        grads = {k: p.grad.numpy().copy() for k, p in gpt.named_parameters()}
        opt.step()
        losses.append(float(loss.detach().numpy()))
    return losses, {k: v.numpy().copy() for k, v in gpt.state_dict().items()}, grads


REFS = {}


def train_pipeline(schedule_cls, num_stages, n_micro, n_layer):
    mesh = pp.pipeline_mesh(num_stages)
    dp = len(mesh.dp_ranks)
    replica = mesh.group_ranks[0] // num_stages
    module = pp.gpt_stages(make_gpt(n_layer), num_stages)
    stage = pp.PipelineStage(module, mesh.stage_index, num_stages, group_ranks=mesh.group_ranks, dp_ranks=mesh.dp_ranks)
    sched = schedule_cls(stage, n_micro, lm_loss)
    opt = adamw(module.parameters())
    rows = slice(replica * BATCH // dp, (replica + 1) * BATCH // dp)  # this replica's share of the batch
    losses = []
    for s in range(STEPS):
        opt.zero_grad()
        mb_losses = []
        if stage.is_first:
            sched.step(flow.tensor(IDX[s, rows]))
        elif stage.is_last:
            sched.step(target=flow.tensor(TGT[s, rows]), losses=mb_losses)
        else:
            sched.step()
        if stage.is_last:
            losses.append(float(np.mean([float(x.numpy()) for x in mb_losses])))
        grads = {k: p.grad.numpy().copy() for k, p in module.named_parameters()}
        opt.step()
    return sched, module, losses, grads


def check(schedule_cls, num_stages, n_micro, n_layer=2):
    what = f"{schedule_cls.__name__}, {n // num_stages} replica(s) x {num_stages} stages, {n_micro} micro-batches"
    if n_layer not in REFS:
        REFS[n_layer] = reference(n_layer)
    ref_losses, ref_params, ref_grads = REFS[n_layer]
    sched, module, losses, grads = train_pipeline(schedule_cls, num_stages, n_micro, n_layer)
    stage = sched.stage
    if stage.is_last:
        # the replicas' mean of the losses is the whole batch's loss
        mean = (
            get_backend("cpu", stage.dp_ranks).all_reduce(np.array(losses), op="avg")
            if len(stage.dp_ranks) > 1
            else np.array(losses)
        )
        np.testing.assert_allclose(mean, ref_losses, rtol=1e-10, err_msg=what)
    names = dict(module.named_parameters())
    assert names, what
    for k, p in module.state_dict().items():
        np.testing.assert_allclose(p.numpy(), ref_params[k], rtol=1e-10, atol=1e-12, err_msg=f"{what}: {k}")
    for k, g in grads.items():
        ref = ref_grads["transformer.wte.weight" if k == "lm_head.weight" else k]
        np.testing.assert_allclose(g, ref, rtol=1e-10, atol=1e-12, err_msg=f"{what}: gradient of {k}")
    # the tied embedding: the last stage's lm_head.weight is the first stage's wte.weight
    p2p = get_backend("cpu", None)
    first, last = stage.group_ranks[0], stage.group_ranks[-1]
    if stage.is_first:
        p2p.send(module.transformer.wte.weight.detach().numpy(), last, tag=7)
        assert [k for k in names if "lm_head" in k] == [], names
    if stage.is_last:
        theirs = p2p.recv(np.empty(tuple(module.lm_head.weight.shape)), first, tag=7)
        np.testing.assert_array_equal(theirs, module.lm_head.weight.detach().numpy(), err_msg=what)
        assert stage.tied_parameters == [module.lm_head.weight]
        assert "transformer.wte.weight" not in names
    # activations held for their backward: all of them in GPipe, num_stages - stage_index in 1F1B
    held = n_micro if schedule_cls is pp.ScheduleGPipe else min(n_micro, num_stages - stage.stage_index)
    assert stage.max_in_flight == held, (what, stage.stage_index, stage.max_in_flight)
    t = sched.timing  # what the last step measured
    assert t["schedule_s"] > 0 and 0 <= t["bubble"] < 1, t


def raises(fn, *words):
    try:
        fn()
    except pp.PipelineError as e:
        assert all(w in str(e) for w in words), (str(e), words)
        assert isinstance(e, ValueError)
    else:
        raise AssertionError(f"no PipelineError (expected {words})")


class Head(flow.nn.Module):
    """Stage 0 of a two-stage model whose activation is a tuple: two float tensors and an int one."""

    def __init__(self):
        super().__init__()
        self.a, self.b = flow.nn.Linear(5, 6), flow.nn.Linear(5, 3)

    def forward(self, x):
        return self.a(x).tanh(), self.b(x), (x > 0).sum(dim=1)


class Tail(flow.nn.Module):
    def __init__(self):
        super().__init__()
        self.c = flow.nn.Linear(6, 3)

    def forward(self, h, skip, count):
        return self.c(h) * skip + count.to(h.dtype).unsqueeze(1)


def tuple_activations():
    """Several tensors between the stages: each float one gets its gradient back, the int one none."""
    flow.manual_seed(3)
    head, tail = Head(), Tail()
    x, y = flow.tensor(rng.standard_normal((8, 5))), flow.tensor(rng.standard_normal((8, 3)))
    mse = flow.nn.functional.mse_loss
    mse(tail(*head(x)), y).backward()
    ref = {k: p.grad.numpy().copy() for m in (head, tail) for k, p in m.named_parameters()}
    module = head if rank == 0 else tail
    for p in module.parameters():
        p.grad = None
    sched = pp.ScheduleGPipe(pp.PipelineStage(module, rank, 2), 4, mse)
    out = sched.step(x) if rank == 0 else sched.step(target=y)
    if rank == 1:
        np.testing.assert_allclose(out.detach().numpy(), tail(*head(x)).detach().numpy(), rtol=1e-12)
    for k, p in module.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), ref[k], rtol=1e-10, atol=1e-14, err_msg=k)


if n == 2:
    check(pp.ScheduleGPipe, 2, 4)
    check(pp.Schedule1F1B, 2, 4)
    check(pp.Schedule1F1B, 2, 1)  # a single micro-batch: no overlap, the same result
    tuple_activations()

    # -- errors: each raised on its own rank before anything is sent -------------------------------
    module = pp.gpt_stages(make_gpt(), 2)
    raises(lambda: pp.PipelineStage(module, 2, 2), "stage_index 2", "0..1")
    raises(lambda: pp.PipelineStage(module, 1 - rank, 2), f"this is rank {rank}")
    raises(lambda: pp.PipelineStage(module, rank, 2, group_ranks=[0, 1, 1]), "2 stages need 2 group_ranks")
    raises(lambda: pp.pipeline_mesh(3), "3 stage(s)", "the job has 2")
    stage = pp.PipelineStage(module, rank, 2)
    raises(lambda: pp.ScheduleGPipe(stage, 0, lm_loss), "n_microbatches")
    sched = pp.Schedule1F1B(stage, 3, lm_loss)
    if rank == 0:
        raises(lambda: sched.step(flow.tensor(IDX[0])), "batch of 8", "3 equal micro-batches")
        raises(lambda: sched.step(), "first stage needs the batch's inputs")
        raises(lambda: sched.step(flow.tensor(IDX[0]), target=flow.tensor(TGT[0])), "target= goes to the last stage")
    else:
        raises(lambda: sched.step(target=None), "last stage (stage 1) needs target=")
        raises(lambda: sched.step(flow.tensor(IDX[0]), target=flow.tensor(TGT[0])), "pass them on stage 0 only")
        raises(lambda: sched.step(target=flow.tensor(TGT[0]), losses=()), "losses must be a list")
        raises(lambda: pp.ScheduleGPipe(stage, 2), "needs a loss_fn")

    # stages stepped with different micro-batch counts: the receiving stage says so (the test then
    # completes the sender's step by hand, so that it does not wait for a gradient)
    flow.manual_seed(4)
    module = flow.nn.Linear(5, 4) if rank == 0 else flow.nn.Linear(4, 3)
    stage = pp.PipelineStage(module, rank, 2)
    if rank == 0:
        pp.ScheduleGPipe(stage, 1).step(flow.randn(8, 5))
    else:
        mse = flow.nn.functional.mse_loss
        raises(lambda: pp.ScheduleGPipe(stage, 2, mse).step(target=flow.randn(8, 3)), "runs 2 micro-batches", "runs 1")
        p2p = get_backend("cpu", None)
        p2p.recv(np.empty((8, 4)), 0, tag=stage_module._ACT_TAG)
        p2p.send(np.zeros((8, 4)), 0, tag=stage_module._GRAD_TAG)
elif n == 4:
    check(pp.Schedule1F1B, 2, 2)
    check(pp.ScheduleGPipe, 2, 2)
    check(pp.Schedule1F1B, 4, 4, n_layer=4)  # middle stages: activations in, gradients back

if rank == 0:
    print("pipeline ok", flush=True)
