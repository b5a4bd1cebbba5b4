"""``flow.optim.Optimizer``: parameter groups, flat fused storage, PyTorch-format state dicts.

Subclasses declare their hyper-parameters (``defaults``), the state buffers they need
(:meth:`Optimizer._state_names`) and one update over a contiguous run of a bucket
(:meth:`Optimizer._update`); the base class keeps each group's parameters, gradients and states
as views into flat buffers (see :mod:`flow.optim._flat`), so :meth:`step` is one fused update per
group and dtype.

``state_dict()`` follows PyTorch's format: ``{"state": {index: {name: tensor}}, "param_groups":
[{...options, "params": [index, ...]}]}``, indices counting parameters across groups in order.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Callable, Iterable

import numpy as np

from flow._tensor import Tensor
from flow.optim._flat import FlatBucket


class _Required:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _Required()

# Set by flow.graph while it traces a compiled training step: step() then records the fused update
# as graph ops (see flow.graph.optim_ops) instead of running it.
_graph_step_hook = None


def _float(x) -> float:
    return float(x.item()) if isinstance(x, Tensor) else float(x)


class Optimizer:
    """Base class of flow's optimizers (``torch.optim.Optimizer``'s API).

    ``params`` is an iterable of tensors or of dicts (parameter groups: ``{"params": [...],
    "lr": ...}``); options missing from a group come from ``defaults``.
    """

    #: subclasses that keep a ``step`` count in their state (Adam, ...) set this
    _has_step = True

    def __init__(self, params: Iterable, defaults: dict) -> None:
        self.defaults = dict(defaults)
        self.param_groups: list[dict] = []
        self._flat: list[tuple[tuple, list[FlatBucket]] | None] = []
        if isinstance(params, Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors or dicts, but got a Tensor"
            )
        if isinstance(params, (set, frozenset)):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but got a set")
        groups = list(params)
        if len(groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    # -- parameter groups -------------------------------------------------------------------
    def add_param_group(self, param_group: dict) -> None:
        """Add a group of parameters with its own options (missing ones come from ``defaults``)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        group = dict(param_group)
        params = group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, (set, frozenset)):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but got a set")
        else:
            params = list(params)
        seen = set()
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
            if not p.dtype.is_floating_point:
                raise TypeError(f"optimizer can only optimize floating-point Tensors, got {p.dtype}")
            if id(p) in seen:
                raise ValueError("a parameter appears more than once in one parameter group")
            seen.add(id(p))
        group["params"] = params
        for name, default in self.defaults.items():
            if default is required and name not in group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {name}")
            group.setdefault(name, default)
        for g in self.param_groups:
            if any(id(p) in seen for p in g["params"]):
                raise ValueError("some parameters appear in more than one parameter group")
        self._validate_group(group)
        self.param_groups.append(group)
        self._flat.append(None)

    def _validate_group(self, group: dict) -> None:
        """Check a group's options (subclasses raise ValueError for invalid values)."""

    # -- flat storage ---------------------------------------------------------------------------
    def _buckets(self, gi: int) -> list[FlatBucket]:
        """The flat buckets of group ``gi``, (re)built when its parameters or their arrays changed."""
        while len(self._flat) < len(self.param_groups):
            self._flat.append(None)
        params = self.param_groups[gi]["params"]
        key = tuple(id(p) for p in params)
        entry = self._flat[gi]
        if entry is not None and entry[0] == key and all(b.in_sync() for b in entry[1]):
            return entry[1]
        old = entry[1] if entry is not None else []
        carried = _collect(old)
        by_dtype: dict = {}
        for p in params:
            by_dtype.setdefault((p.dtype, p.device), []).append(p)
        buckets = [FlatBucket(ps) for ps in by_dtype.values()]
        group = self.param_groups[gi]
        for b in buckets:
            self._init_bucket(group, b)
            for i, p in enumerate(b.params):
                c = carried.get(id(p))
                if c is None:
                    continue
                b.steps[i] = c[0]
                for name, arr in c[1].items():
                    b.set_param_state(i, name, arr)
        self._flat[gi] = (key, buckets)
        return buckets

    def _all_buckets(self):
        for gi, group in enumerate(self.param_groups):
            for b in self._buckets(gi):
                yield group, b

    def _init_bucket(self, group: dict, bucket: FlatBucket) -> None:
        """Initialise the state of new parameters (most optimizers do it lazily, in the first step)."""

    def _state_names(self, group: dict) -> dict[str, float]:
        """``{state name: initial value}`` of the per-element state buffers this group needs."""
        return {}

    def _update(self, group: dict, p, g, state: dict, step: int, layout) -> None:
        """Update ``p`` in place (1-d contiguous, compute dtype) from gradient ``g`` (scratch, may be
        overwritten); ``state`` maps names to flat state slices, ``step`` is the 1-based step count and
        ``layout`` is ``(starts, numels, present)``: where each parameter of the run starts in ``p``,
        its size, and which states held a value before this step."""
        raise NotImplementedError

    # -- the public API -----------------------------------------------------------------------
    def step(self, closure: Callable | None = None):
        """Update every parameter that has a gradient; ``closure`` re-evaluates the model and returns the loss."""
        if _graph_step_hook is not None:  # graph mode: recorded into the trace of this thread, if any
            r = _graph_step_hook(self, closure)
            if r is not NotImplemented:
                return r
        loss = None
        if closure is not None:
            from flow.autograd import enable_grad

            with enable_grad():
                loss = closure()
        for gi, group in enumerate(self.param_groups):
            names = self._state_names(group)
            for b in self._buckets(gi):
                for i0, i1 in b.runs(names):
                    self._step_run(group, b, names, i0, i1)
        return loss

    def _reads_grad_only(self, group: dict, b: FlatBucket) -> bool:
        """Whether :meth:`_update` leaves ``g`` untouched for this group and bucket (then a parameter's own
        gradient can be passed instead of a copy). Subclasses whose update only reads it say so."""
        return False

    def _step_run(self, group: dict, b: FlatBucket, names: dict, i0: int, i1: int) -> None:
        o0, o1 = int(b.offsets[i0]), int(b.offsets[i1])
        maximize = group.get("maximize", False)
        g = b.gather_grads(i0, i1, copy=maximize or not self._reads_grad_only(group, b))
        if maximize:
            b.xp.negative(g, out=g)
        b.steps[i0:i1] += 1
        step = int(b.steps[i0])
        was = {}
        state = {}
        for name, fill in names.items():
            buf = b.state(name, fill)
            was[name] = bool(b.present[name][i0])
            state[name] = buf[o0:o1]
        p = b.param_slice(o0, o1)
        starts = b.offsets[i0:i1] - o0
        self._update(group, p, g, state, step, (starts, b.numels[i0:i1], was))
        b.write_back(o0, o1, p)
        for name in names:
            b.present[name][i0:i1] = True

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients: to ``None`` (default), or to zeros in place."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    g = p.grad
                    if g.grad_fn is not None or g.requires_grad:
                        g = g.detach()
                        p.grad = g
                    g._data[...] = 0

    @property
    def state(self) -> "_StateView":
        """``{param: {name: tensor}}``: read access to the per-parameter state (tensors are views)."""
        return _StateView(self)

    def _param_state(self, b: FlatBucket, i: int) -> dict:
        from flow._creation import from_numpy, tensor
        from flow._dtype import float32

        st: dict[str, Any] = {}
        for name, arr in b.param_state(i).items():
            st[name] = from_numpy(arr) if isinstance(arr, np.ndarray) else tensor(arr)
        if not st and not (self._has_step and b.steps[i] > 0):
            return {}
        if self._has_step:
            st = {"step": tensor(float(b.steps[i]), dtype=float32), **st}
        return st

    def state_dict(self) -> dict:
        """The optimizer's state in PyTorch's format (state tensors are views of the live state)."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            g = {k: v for k, v in group.items() if k != "params"}
            ids = []
            for p in group["params"]:
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            g["params"] = ids
            groups.append(g)
        state: dict[int, dict] = {}
        for _, b in self._all_buckets():
            for i, p in enumerate(b.params):
                st = self._param_state(b, i)
                if st:
                    state[index[id(p)]] = st
        state = dict(sorted(state.items()))
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a state produced by :meth:`state_dict` (group options and per-parameter states)."""
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for i, (g, s) in enumerate(zip(self.param_groups, saved_groups)):
            if len(g["params"]) != len(s["params"]):
                raise ValueError(
                    f"loaded state dict contains a parameter group {i} with {len(s['params'])} parameters, "
                    f"which doesn't match the size of the optimizer's group ({len(g['params'])})"
                )
        id_map = {}
        for g, s in zip(self.param_groups, saved_groups):
            for p, idx in zip(g["params"], s["params"]):
                id_map[idx] = p
        saved_state = state_dict.get("state", {})
        new_groups = []
        for g, s in zip(self.param_groups, saved_groups):
            ng = {k: copy.deepcopy(v) for k, v in s.items() if k != "params"}
            ng["params"] = g["params"]
            new_groups.append(ng)
        self.param_groups = new_groups
        by_param = {id(id_map[k]): v for k, v in saved_state.items() if k in id_map}
        for group, b in self._all_buckets():
            b.clear_state()
            self._init_bucket(group, b)
            for i, p in enumerate(b.params):
                st = by_param.get(id(p))
                if st is None:
                    continue
                for name, value in st.items():
                    if value is None:
                        continue
                    if name == "step":
                        b.steps[i] = int(round(_float(value)))
                    else:
                        b.set_param_state(i, name, value)

    def __repr__(self) -> str:
        lines = [type(self).__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(group):
                if k != "params":
                    lines.append(f"    {k}: {group[k]}")
        lines.append(")")
        return "\n".join(lines)


def _collect(buckets: list[FlatBucket]) -> dict:
    """``{id(param): (step, {name: array copy})}`` of every parameter in ``buckets``."""
    out = {}
    for b in buckets:
        for i, p in enumerate(b.params):
            out[id(p)] = (int(b.steps[i]), {k: np.array(v, copy=True) for k, v in b.param_state(i).items()})
    return out


class _StateView(Mapping):
    """``optimizer.state``: maps each parameter that has state to ``{name: tensor}``."""

    def __init__(self, opt: Optimizer) -> None:
        self._items: dict[int, tuple] = {}
        for _, b in opt._all_buckets():
            for i, p in enumerate(b.params):
                st = opt._param_state(b, i)
                if st:
                    self._items[id(p)] = (p, st)

    def __getitem__(self, p):
        item = self._items.get(id(p))
        return item[1] if item is not None else {}

    def __contains__(self, p) -> bool:
        return id(p) in self._items

    def __iter__(self):
        return (p for p, _ in self._items.values())

    def __len__(self) -> int:
        return len(self._items)
