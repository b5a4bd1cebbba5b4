"""``Optimizer.load_state_dict``: check a (PyTorch-format) state dict against the optimizer, then load it.

Everything is checked before anything changes: the number of groups and of parameters in each,
the parameter indices, every group's options (as :meth:`Optimizer.add_param_group` checks them),
and each parameter's state (names the optimizer keeps with those options, shapes equal to the
parameter's, a step count that is a whole number >= 0). The state of a parameter whose data is an
array kind's (a global tensor) is kept as this rank's piece: it may come as a tensor of that kind laid
out like the parameter (what ``state_dict()`` gives) or as the logical value. Loading then builds new flat buckets and
swaps them in, restoring the old ones if anything still fails.
"""

from __future__ import annotations

import copy
import math
import numbers
from collections.abc import Mapping

import numpy as np

from flow._tensor import Tensor
from flow.array_kinds import is_kind_array, storage_of
from flow.optim.errors import OptimizerError, OptimizerTypeError


def check_state_dict(opt, state_dict) -> tuple[list, dict]:
    """``(new param_groups, {id(param): {name: value}})`` from ``state_dict``, or OptimizerError."""
    name = type(opt).__name__
    if not isinstance(state_dict, Mapping):
        raise OptimizerTypeError(
            f"{name}: load_state_dict expects a dict (from state_dict()), got {type(state_dict).__name__}"
        )
    if "param_groups" not in state_dict:
        raise OptimizerError(f"{name}: loaded state dict has no 'param_groups' (keys: {sorted(map(str, state_dict))})")
    saved = state_dict["param_groups"]
    if not isinstance(saved, (list, tuple)) or not all(isinstance(s, Mapping) and "params" in s for s in saved):
        raise OptimizerError(f"{name}: loaded state dict's 'param_groups' must be a list of dicts with 'params'")
    if len(saved) != len(opt.param_groups):
        raise OptimizerError(
            f"{name}: loaded state dict has {len(saved)} parameter groups, but the optimizer has "
            f"{len(opt.param_groups)}"
        )
    id_map: dict = {}
    groups = []
    for gi, (g, s) in enumerate(zip(opt.param_groups, saved)):
        idx = list(s["params"])
        if len(idx) != len(g["params"]):
            raise OptimizerError(
                f"{name}: loaded state dict contains a parameter group {gi} with {len(idx)} parameters, "
                f"which doesn't match the size of the optimizer's group ({len(g['params'])})"
            )
        for j, (k, p) in enumerate(zip(idx, g["params"])):
            if isinstance(k, bool) or not isinstance(k, (numbers.Integral, np.integer)):
                raise OptimizerTypeError(
                    f"{name}: loaded param_groups[{gi}]['params'][{j}] must be an int index, "
                    f"got {type(k).__name__} {k!r}"
                )
            if int(k) in id_map:
                raise OptimizerError(f"{name}: loaded state dict lists parameter index {k} more than once")
            id_map[int(k)] = (gi, p)
        ng = {k: copy.deepcopy(v) for k, v in s.items() if k != "params"}
        for k, v in g.items():  # options an older state dict lacks keep their current values
            if k != "params":
                ng.setdefault(k, v)
        ng["params"] = g["params"]
        try:
            opt._validate_group(ng)
        except OptimizerError as e:
            raise type(e)(f"{e} (in param_groups[{gi}] of the loaded state dict)") from None
        groups.append(ng)
    states = state_dict.get("state", {})
    if not isinstance(states, Mapping):
        raise OptimizerTypeError(f"{name}: loaded state dict's 'state' must be a dict, got {type(states).__name__}")
    by_param: dict = {}
    for k, st in states.items():
        key = int(k) if isinstance(k, (numbers.Integral, np.integer)) and not isinstance(k, bool) else None
        if key not in id_map:
            raise OptimizerError(
                f"{name}: loaded state dict has state for parameter {k!r}, which no parameter group "
                f"lists (indices {min(id_map)}..{max(id_map)})"
            )
        if not isinstance(st, Mapping):
            raise OptimizerTypeError(f"{name}: loaded state of parameter {k} must be a dict, got {type(st).__name__}")
        gi, p = id_map[key]
        by_param[id(p)] = _check_param_state(opt, groups[gi], key, p, st)
    return groups, by_param


def _check_param_state(opt, group: dict, index: int, p, st: Mapping) -> dict:
    name = type(opt).__name__
    allowed = set(opt._state_names(group)) | ({"step"} if opt._has_step else set())
    out: dict = {}
    for k, v in st.items():
        if v is None:  # torch's SGD keeps momentum_buffer=None without momentum
            continue
        if k not in allowed:
            raise OptimizerError(
                f"{name}: loaded state of parameter {index} has '{k}', which {name} with these "
                f"options does not keep (expected {', '.join(sorted(allowed)) or 'no state'})"
            )
        if k != "step" and is_kind_array(p._data):  # a global parameter: its state is this rank's piece
            out[k] = _piece_of(name, index, k, v, p)
            continue
        arr = _as_array(name, index, k, v)
        if k == "step":
            s = float(arr.reshape(-1)[0]) if arr.size == 1 else math.nan
            if not (math.isfinite(s) and s >= 0 and s == int(s)):
                raise OptimizerError(
                    f"{name}: loaded state of parameter {index} has step {_short(v)}; expected a whole number >= 0"
                )
            out[k] = int(s)
            continue
        if tuple(arr.shape) != tuple(p.shape):
            raise OptimizerError(
                f"{name}: loaded state '{k}' of parameter {index} has shape {tuple(arr.shape)}, but "
                f"the parameter has shape {tuple(p.shape)}"
            )
        out[k] = np.array(arr, copy=True)
    return out


def _piece_of(name: str, index: int, key: str, v, p) -> np.ndarray:
    """This rank's piece of the state ``v`` of a parameter ``p`` whose data is an array kind's (a global
    tensor). ``v`` is a tensor of that kind (what :meth:`Optimizer.state_dict` gives: laid out like
    ``p``; another layout is converted) or the logical value (a plain tensor or array of ``p``'s
    shape); either is written into an array laid out like ``p`` with the array protocol's
    ``a[...] = b``, which picks the piece (for a global tensor, a collective when layouts differ)."""
    kind = isinstance(v, Tensor) and is_kind_array(v._data)
    if kind and v._data.__class__ is not p._data.__class__:
        raise OptimizerTypeError(
            f"{name}: loaded state '{key}' of parameter {index} is a {type(v._data).__name__}, but the "
            f"parameter is a {type(p._data).__name__}"
        )
    value = v._data if kind else _as_array(name, index, key, v)
    if tuple(value.shape) != tuple(p.shape):
        raise OptimizerError(
            f"{name}: loaded state '{key}' of parameter {index} has shape {tuple(value.shape)}, but "
            f"the parameter has shape {tuple(p.shape)}"
        )
    local = np.asarray(storage_of(p._data))
    dtype = np.asarray(storage_of(v._data)).dtype if kind else value.dtype
    target = p._data.with_storage(np.empty(local.shape, dtype=dtype))
    target[...] = value
    return np.asarray(storage_of(target))


def _as_array(name: str, index: int, key: str, v) -> np.ndarray:
    if isinstance(v, Tensor):
        arr = v.detach().numpy()
    elif isinstance(v, (np.ndarray, numbers.Real, np.generic)) and not isinstance(v, (bool, np.bool_)):
        arr = np.asarray(v)
    else:
        raise OptimizerTypeError(
            f"{name}: loaded state '{key}' of parameter {index} must be a Tensor or an array, got {type(v).__name__}"
        )
    if arr.dtype.kind not in "fiu":
        raise OptimizerTypeError(
            f"{name}: loaded state '{key}' of parameter {index} has dtype {arr.dtype}; expected a real number type"
        )
    return arr


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def apply_state(opt, groups: list, by_param: dict) -> None:
    """Swap in ``groups`` and new buckets holding the checked states (the old ones back on any failure)."""
    from flow.optim.optimizer import _signature

    old = (opt.param_groups, opt._flat, opt._checked)
    try:
        opt.param_groups = groups
        opt._flat = [None] * len(groups)
        opt._checked = [_signature(g) for g in groups]
        for gi, group in enumerate(groups):
            buckets = opt._make_buckets(gi, [])
            for b in buckets:
                for i, p in enumerate(b.params):
                    for k, v in by_param.get(id(p), {}).items():
                        if k == "step":
                            b.steps[i] = v
                        else:
                            b.set_param_state(i, k, v)
            opt._flat[gi] = (tuple(id(p) for p in group["params"]), buckets)
    except BaseException:
        opt.param_groups, opt._flat, opt._checked = old
        raise
