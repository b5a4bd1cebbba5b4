"""Resuming training from a checkpoint continues bit-identically to a run that was never interrupted.

A full training checkpoint — model, optimizer and LR scheduler state dicts, flow's RNG state
(``flow.get_rng_state``), the state of the generator driving the DataLoader's shuffling
(``Generator.get_state``, taken at the start of the epoch) and the position in the run (epoch,
batch, step) — is written with ``flow.save`` in the middle of an epoch. A fresh model, optimizer,
scheduler and DataLoader (built from a different seed, and with flow's generator reseeded, so that
nothing carries over by accident) load it with ``flow.load`` and train to the end. Every loss after
the checkpoint and every final parameter and buffer must equal those of the uninterrupted run
exactly (``==`` on float32, no tolerance).

The model has dropout, so the RNG state matters; the loader shuffles, so the sampler's generator
matters; one variant adds random augmentation in the dataset and two loader workers (each seeded
from the epoch's base seed).
"""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow import nn
from flow.utils.data import DataLoader, Dataset

N_SAMPLES, BATCH, IN, CLASSES = 44, 8, 10, 3
BATCHES_PER_EPOCH = -(-N_SAMPLES // BATCH)  # 6, the last one short
TOTAL_STEPS = 16  # 2 epochs and 4 batches
SAVE_AT = 9  # after the 3rd batch of the 2nd epoch: mid-epoch


class NoisyData(Dataset):
    """Fixed features and labels; with ``augment``, Gaussian noise drawn from flow's generator per sample."""

    def __init__(self, augment: bool) -> None:
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((N_SAMPLES, IN), dtype=np.float32)
        self.y = rng.integers(0, CLASSES, N_SAMPLES)
        self.augment = augment

    def __len__(self) -> int:
        return N_SAMPLES

    def __getitem__(self, i):
        x = flow.from_numpy(self.x[i].copy())
        if self.augment:
            x = x + 0.1 * flow.randn(IN)
        return x, int(self.y[i])


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(IN, 32),
        nn.ReLU(),
        nn.Dropout(0.3),
        nn.Linear(32, 32),
        nn.LayerNorm(32),
        nn.GELU(),
        nn.Dropout(0.2),
        nn.Linear(32, CLASSES),
    )


def make_optimizer(kind: str, model: nn.Module):
    if kind == "sgd":
        opt = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
        sched = flow.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
    else:
        opt = flow.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.98), weight_decay=0.05)
        sched = flow.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-2, total_steps=TOTAL_STEPS)
    return opt, sched


def train(kind: str, workers: int, augment: bool, *, seed: int, save_to=None, resume_from=None):
    """Train to TOTAL_STEPS; return ``(losses by step, final state dict)``.

    ``save_to``: write a checkpoint after step SAVE_AT. ``resume_from``: start from that checkpoint
    (the model, optimizer, scheduler and loader are built fresh from ``seed`` first, as a new process would).
    """
    flow.manual_seed(seed)
    model = make_model()
    opt, sched = make_optimizer(kind, model)
    gen = flow.Generator().manual_seed(seed + 1)
    loader = DataLoader(NoisyData(augment), batch_size=BATCH, shuffle=True, generator=gen, num_workers=workers)
    losses: dict[int, float] = {}
    step, epoch, skip, rng_state = 0, 0, 0, None
    epoch_gen_state = gen.get_state()
    if resume_from is not None:
        ckpt = flow.load(resume_from)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        sched.load_state_dict(ckpt["scheduler"])
        step, epoch, skip = ckpt["step"], ckpt["epoch"], ckpt["batch"]
        gen.set_state(ckpt["loader_generator_at_epoch_start"])
        rng_state = ckpt["rng_state"]
        if skip == len(loader):  # saved at the end of an epoch: the next one starts afresh
            epoch, skip = epoch + 1, 0
            gen.set_state(ckpt["loader_generator"])
        if skip == 0:
            flow.set_rng_state(rng_state)
    model.train()
    while step < TOTAL_STEPS:
        epoch_gen_state = gen.get_state()
        for i, (x, y) in enumerate(loader):
            if i < skip:  # batches trained on before the checkpoint: drawn again so the loader is where it was
                if i == skip - 1:
                    flow.set_rng_state(rng_state)
                continue
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            losses[step] = loss.item()
            if save_to is not None and step == SAVE_AT:
                flow.save(
                    {
                        "model": model.state_dict(),
                        "optimizer": opt.state_dict(),
                        "scheduler": sched.state_dict(),
                        "rng_state": flow.get_rng_state(),
                        "loader_generator": gen.get_state(),
                        "loader_generator_at_epoch_start": epoch_gen_state,
                        "epoch": epoch,
                        "batch": i + 1,
                        "step": step,
                    },
                    save_to,
                )
            if step == TOTAL_STEPS:
                break
        skip = 0
        epoch += 1
    final = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    return losses, final


CASES = [
    pytest.param("sgd", 0, False, id="sgd-momentum-steplr"),
    pytest.param("adamw", 0, False, id="adamw-onecycle"),
    pytest.param("adamw", 2, True, id="adamw-onecycle-2workers-augment"),
]


@pytest.mark.parametrize("kind, workers, augment", CASES)
def test_resume_is_bit_identical(tmp_path, kind, workers, augment):
    ckpt = tmp_path / "ckpt.safetensors"
    full_losses, full_final = train(kind, workers, augment, seed=0, save_to=ckpt)
    assert ckpt.is_file()
    assert sorted(full_losses) == list(range(1, TOTAL_STEPS + 1))

    flow.manual_seed(12345)  # whatever flow's generator holds now must not matter
    resumed_losses, resumed_final = train(kind, workers, augment, seed=777, resume_from=ckpt)

    assert sorted(resumed_losses) == list(range(SAVE_AT + 1, TOTAL_STEPS + 1))
    for s, loss in resumed_losses.items():
        assert loss == full_losses[s], f"step {s}: resumed loss {loss!r} != uninterrupted {full_losses[s]!r}"
    assert sorted(resumed_final) == sorted(full_final)
    for k, v in full_final.items():
        assert resumed_final[k].dtype == v.dtype
        assert np.array_equal(resumed_final[k], v), f"'{k}' differs from the uninterrupted run"


@pytest.mark.parametrize("piece", ["rng_state", "loader_generator_at_epoch_start"])
def test_resume_needs_every_piece(tmp_path, piece):
    """The check above has teeth: a checkpoint with another generator state in place of flow's RNG state
    (dropout masks) or of the loader's generator (the shuffled order) resumes into a different run."""
    ckpt = tmp_path / "ckpt.safetensors"
    full_losses, _ = train("sgd", 0, False, seed=0, save_to=ckpt)
    data = flow.load(ckpt)
    data[piece] = flow.Generator().manual_seed(99).get_state()
    flow.save(data, tmp_path / "changed.safetensors")
    losses, _ = train("sgd", 0, False, seed=777, resume_from=tmp_path / "changed.safetensors")
    assert any(losses[s] != full_losses[s] for s in losses)


def test_checkpoint_round_trips_optimizer_and_scheduler_state(tmp_path):
    """What the checkpoint holds survives flow.save / flow.load unchanged (optimizer state values, lrs, steps)."""
    ckpt = tmp_path / "ckpt.safetensors"
    train("adamw", 0, False, seed=0, save_to=ckpt)
    data = flow.load(ckpt)
    assert data["step"] == SAVE_AT and data["batch"] == SAVE_AT - BATCHES_PER_EPOCH and data["epoch"] == 1
    flow.manual_seed(0)
    model = make_model()
    opt, sched = make_optimizer("adamw", model)
    opt.load_state_dict(data["optimizer"])
    sched.load_state_dict(data["scheduler"])
    again = opt.state_dict()
    assert again["param_groups"] == data["optimizer"]["param_groups"]
    for pid, st in data["optimizer"]["state"].items():
        for name, value in st.items():
            got = again["state"][pid][name]
            if isinstance(value, flow.Tensor):
                assert np.array_equal(got.numpy(), value.numpy()), (pid, name)
            else:
                assert got == value, (pid, name)
    assert sched.get_last_lr() == data["scheduler"]["_last_lr"]
    assert sched.last_epoch == SAVE_AT
