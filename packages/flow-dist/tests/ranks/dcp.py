"""Sharded checkpoints on several ranks (flow.distributed.checkpoint); run under mpiexec.

    dcp.py save DIR REF      an MLP (float64) laid out one way, one AdamW step, saved to DIR; rank 0
                             writes the logical values to REF (.npz) and prints "dcp save ok"
    dcp.py load DIR REF      the MLP laid out another way (S(0) <-> S(1), uneven pieces, a 2-d
                             placement at 4 ranks, a partial-sum target), its AdamW state made by a
                             step of its own, then loaded from DIR: every value must equal REF
                             exactly; prints "dcp load ok"
    dcp.py crash DIR         saves other values over DIR with FLOW_DCP_FAIL_AT set: the job dies

``build`` and ``logical`` are also used by the test for a load into one process.
"""

from __future__ import annotations

import sys

import numpy as np

import flow
import flow.distributed.checkpoint as dcp


def build(layout: str, seed: int = 0, lr: float = 1e-2):
    """``(state, model, opt)``: the MLP with an AdamW step done, in layout ``"save"``, ``"load"``
    or ``"local"``, plus two extra global tensors (a partial sum and a grid)."""
    n = flow.env.get_world_size()
    flow.manual_seed(seed)
    model = flow.nn.Sequential(flow.nn.Linear(6, 5), flow.nn.Tanh(), flow.nn.Linear(5, 3)).double()
    P = flow.placement("cpu", list(range(n)))
    grid_p = flow.placement("cpu", [[0, 1], [2, 3]]) if n == 4 else P
    S0, S1, B, PS = flow.sbp.split(0), flow.sbp.split(1), flow.sbp.broadcast, flow.sbp.partial_sum
    grid = flow.arange(35, dtype=flow.float64).reshape(5, 7) * (seed + 1)
    partial = flow.arange(4, dtype=flow.float64) + seed
    if layout == "save":  # 5 rows / columns over 4 ranks: pieces 2, 1, 1, 1
        sbps = {"0.weight": S0, "0.bias": S0, "2.weight": S1, "2.bias": B}
        model.to_global(P, lambda name, t: sbps[name])
        grid = grid.to_global(P, B).to_global(grid_p, (S0, S1) if n == 4 else S0)
        partial = partial.to_global(P, B).to_global(sbp=PS)  # a partial sum is saved as its sum
    elif layout == "load":
        sbps = {"0.weight": S1, "0.bias": B, "2.weight": S0, "2.bias": S0}
        model.to_global(P, lambda name, t: sbps[name])
        grid = grid.to_global(P, B).to_global(grid_p, (S1, S0) if n == 4 else S1)
        partial = partial.to_global(P, B).to_global(sbp=PS)
    opt = flow.optim.AdamW(model.parameters(), lr=lr)
    x = flow.randn(8, 6, dtype=flow.float64)
    if layout != "local":
        x = x.to_global(P, B)
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
    msd, osd = dcp.get_state_dict(model, opt)
    state = {"model": msd, "optim": osd, "extra": {"grid": grid, "partial": partial}}
    return state, model, opt


def logical(state) -> dict:
    """Every tensor of ``state`` as its logical value, by flattened key (a collective)."""
    out = {}

    def walk(obj, prefix):
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k))
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                walk(v, f"{prefix}.{i}")
        elif isinstance(obj, flow.Tensor):
            out[prefix] = obj.detach().numpy().copy()

    walk(state, "")
    return out


def main(argv):
    rank = flow.env.get_rank()
    mode, path = argv[0], argv[1]
    if mode == "save":
        state, _, _ = build("save", seed=0)
        dcp.save(state, checkpoint_id=path)
        ref = logical(state)
        if rank == 0:
            np.savez(argv[2], **ref)
            print("dcp save ok", flush=True)
    elif mode == "load":
        state, model, opt = build("load", seed=1, lr=0.5)
        before = {k: v.sbp for k, v in model.state_dict().items()}
        dcp.load(state, checkpoint_id=path)
        dcp.set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        assert {k: v.sbp for k, v in model.state_dict().items()} == before  # the target layout is kept
        assert opt.param_groups[0]["lr"] == 1e-2 and opt.param_groups[0]["betas"] == (0.9, 0.999)
        ref = np.load(argv[2])
        msd, osd = dcp.get_state_dict(model, opt)  # read back from the live model and optimizer
        got = logical({"model": msd, "optim": osd, "extra": state["extra"]})
        assert sorted(got) == sorted(ref.files), (sorted(got), ref.files)
        for k, v in got.items():
            np.testing.assert_array_equal(v, ref[k], err_msg=k)
        # a partial-sum target holds the value on the first rank, zeros on the others
        part = state["extra"]["partial"].to_local().numpy()
        np.testing.assert_array_equal(part, ref["extra.partial"] if rank == 0 else np.zeros(4))
        if rank == 0:
            print("dcp load ok", flush=True)
    elif mode == "crash":
        state, _, _ = build("save", seed=5)
        dcp.save(state, checkpoint_id=path)
        print(f"rank {rank} should not get here", flush=True)
    else:
        raise SystemExit(f"dcp.py: unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
