"""torch.distributed.checkpoint.state_dict's ``get_state_dict`` / ``set_state_dict`` for flow.

``get_state_dict`` returns the model's state dict and an optimizer state dict keyed by parameter
name (torch's FQN form); the state of a global parameter is a global tensor laid out like it (as
``Optimizer.state_dict()`` gives it), so :func:`flow_dist.dcp.save` shards it and
:func:`flow_dist.dcp.load` re-shards it into another layout. ``set_state_dict`` puts such state
dicts back into the model and optimizer (``Optimizer.load_state_dict`` keeps each rank's piece). An optimizer
with no state yet gets it from a step with zero gradients and a learning rate of 0 (as torch's
does), so a fresh optimizer can be the target of a load.
"""

from __future__ import annotations

from typing import Any, Sequence

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
    name and ``"param_groups"`` whose ``"params"`` are names. Every rank calls it (an optimizer
    without state yet takes a step, a collective for global parameters)."""
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
            osd["state"][names[id(params[i])]] = dict(st)
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
        params = _ordered_params(opt)
        index = {names.get(id(p)): i for i, p in enumerate(params)}
        sd_groups = []
        for g, lg in zip(opt.param_groups, mine):
            if [names.get(id(p)) for p in g["params"]] != list(lg["params"]):
                raise ValueError(f"{_WHAT}: parameter group {lg['params']} does not match the optimizer's parameters")
            og = {k: (tuple(v) if isinstance(g.get(k), tuple) and isinstance(v, list) else v) for k, v in lg.items()}
            og["params"] = [index[n] for n in lg["params"]]
            sd_groups.append(og)
        sd_state = {index[n]: st for n, st in state.items() if n in index}
        opt.load_state_dict({"state": sd_state, "param_groups": sd_groups})
