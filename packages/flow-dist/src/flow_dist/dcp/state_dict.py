"""torch.distributed.checkpoint.state_dict's ``get_state_dict`` / ``set_state_dict`` for flow.

An eager optimizer keeps the state of a global parameter as this rank's local piece, which a
checkpoint cannot place in the logical tensor. ``get_state_dict`` returns the model's state dict
and an optimizer state dict keyed by parameter name (torch's FQN form) in which each per-parameter
state tensor laid out like its parameter is a global tensor of the parameter's placement and SBP,
so :func:`flow_dist.dcp.save` shards it and :func:`flow_dist.dcp.load` re-shards it into another
layout. ``set_state_dict`` puts such state dicts back into the model and optimizer. An optimizer
with no state yet gets it from a step with zero gradients and a learning rate of 0 (as torch's
does), so a fresh optimizer can be the target of a load.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["get_state_dict", "set_state_dict"]

_WHAT = "flow.distributed.checkpoint.state_dict"


def _optimizers(optimizers: Any) -> list:
    import flow

    opts = list(optimizers) if isinstance(optimizers, (list, tuple)) else [optimizers]
    for o in opts:
        if not isinstance(o, flow.optim.Optimizer):
            raise TypeError(f"{_WHAT}: expected an optimizer (or a list of them), got {type(o).__name__}")
    return opts


def _names(model: Any) -> dict:
    return {id(p): n for n, p in model.named_parameters()}


def _ordered_params(opt: Any) -> list:
    """The parameters in the numbering of ``opt.state_dict()``."""
    seen: dict = {}
    for g in opt.param_groups:
        for p in g["params"]:
            seen.setdefault(id(p), p)
    return list(seen.values())


def _init_state(opt: Any) -> None:
    """Give every parameter its state by one step with zero gradients and no learning rate."""
    import flow

    params = _ordered_params(opt)
    if all(opt.state.get(p) for p in params):
        return
    grads = [p.grad for p in params]
    lrs = [g["lr"] for g in opt.param_groups]
    with flow.no_grad():
        for p in params:
            p.grad = flow.zeros_like(p)
        for g in opt.param_groups:
            g["lr"] = 0.0
        opt.step()
    for g, lr in zip(opt.param_groups, lrs):
        g["lr"] = lr
    for p, gr in zip(params, grads):
        p.grad = gr


def get_state_dict(model: Any, optimizers: Any) -> tuple:
    """``(model_state_dict, optimizer_state_dict)``; the second has ``"state"`` keyed by parameter
    name and ``"param_groups"`` whose ``"params"`` are names. Every rank calls it (making the state
    tensors global is a collective)."""
    import flow

    names = _names(model)
    osd: dict = {"state": {}, "param_groups": []}
    for opt in _optimizers(optimizers):
        _init_state(opt)
        params = _ordered_params(opt)
        unnamed = [i for i, p in enumerate(params) if id(p) not in names]
        if unnamed:
            raise ValueError(f"{_WHAT}: the optimizer's parameters {unnamed} are not parameters of the model")
        sd = opt.state_dict()
        for i, st in sd["state"].items():
            p = params[i]
            out = {}
            for k, v in st.items():
                if isinstance(v, flow.Tensor) and p.is_global and not v.is_global and v.ndim > 0:
                    v = v.to_global(p.placement, p.sbp)  # this rank's piece of a state laid out like p
                out[k] = v
            osd["state"][names[id(p)]] = out
        for g in sd["param_groups"]:
            osd["param_groups"].append({**g, "params": [names[id(params[i])] for i in g["params"]]})
    return model.state_dict(), osd


def set_state_dict(
    model: Any,
    optimizers: Any,
    *,
    model_state_dict: dict | None = None,
    optim_state_dict: dict | None = None,
) -> None:
    """Load what :func:`get_state_dict` gave (after :func:`flow_dist.dcp.load` filled it) back into
    ``model`` and ``optimizers``."""
    if model_state_dict is not None:
        model.load_state_dict(model_state_dict)
    if optim_state_dict is None:
        return
    names = _names(model)
    groups: Sequence = optim_state_dict.get("param_groups", [])
    state = optim_state_dict.get("state", {})
    at = 0
    for opt in _optimizers(optimizers):
        mine = groups[at : at + len(opt.param_groups)]
        at += len(opt.param_groups)
        if len(mine) != len(opt.param_groups):
            raise ValueError(
                f"{_WHAT}: the state dict has {len(mine)} parameter groups for an optimizer with "
                f"{len(opt.param_groups)}"
            )
        for g, lg in zip(opt.param_groups, mine):
            if [names.get(id(p)) for p in g["params"]] != list(lg["params"]):
                raise ValueError(f"{_WHAT}: parameter group {lg['params']} does not match the optimizer's parameters")
            for k, v in lg.items():
                if k != "params":
                    g[k] = tuple(v) if isinstance(g.get(k), tuple) and isinstance(v, list) else v
        _init_state(opt)
        _write_states(opt, names, state)


def _write_states(opt: Any, names: dict, state: dict) -> None:
    """This rank's piece of each saved state into the optimizer's live state arrays."""
    import flow

    # Optimizer.load_state_dict wants whole states while the optimizer keeps pieces of a global
    # parameter's, so the pieces are written into the live state arrays in place instead
    for _, b in opt._all_buckets():
        for i, p in enumerate(b.params):
            st = state.get(names[id(p)])
            if st is None:
                continue
            for k, arr in b.param_state(i).items():
                if k not in st:
                    raise ValueError(f"{_WHAT}: the state dict has no {k!r} for parameter {names[id(p)]!r}")
                v = st[k]
                if isinstance(v, flow.Tensor):
                    v = (v.to_local() if v.is_global else v).detach().numpy()
                piece = np.asarray(v)
                if piece.shape != arr.shape:
                    raise ValueError(
                        f"{_WHAT}: state {k!r} of {names[id(p)]!r} has a piece of shape {piece.shape} for "
                        f"this rank's {arr.shape}"
                    )
                arr[...] = piece
            if "step" in st and opt._has_step:
                step = st["step"]
                b.steps[i] = int(float(step.item() if hasattr(step, "item") else step))
