"""``flow.optim.Optimizer``: parameter groups, flat fused state, PyTorch-format state dicts.

Subclasses declare their hyper-parameters (``defaults``, checked against the table
:attr:`Optimizer._hyper`), the state buffers they need (:meth:`Optimizer._state_names`) and one
update over a run of parameters: :meth:`Optimizer._update` over the run gathered into one
contiguous buffer (or :meth:`Optimizer._apply` over the parameters' own arrays). :meth:`step`
runs every update as a registered op through the dispatcher (see :mod:`flow.ops.optim`):
``sgd_update`` for SGD, ``adam_update`` for Adam/AdamW, ``optimizer_update`` (which calls the
class's ``_apply``) for the others, one call per group, dtype bucket and run of parameters in the
same state, so interceptors, devices and the graph tracer see it like any op. Parameters are
always updated in their own memory, so every view and alias of a parameter sees the new values;
the states live in flat buffers (see :mod:`flow.optim._flat`).

``state_dict()`` follows PyTorch's format: ``{"state": {index: {name: tensor}}, "param_groups":
[{...options, "params": [index, ...]}]}``, indices counting parameters across groups in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Callable

import numpy as np

from flow import _dtype as D
from flow._dispatch import call as _call
from flow._tensor import Tensor
from flow.ops import optim as _ops
from flow.optim import _hyper
from flow.optim._flat import FlatBucket, check_param_array
from flow.optim._foreach import flat_update
from flow.optim.errors import OptimizerError, OptimizerTypeError


class _Required:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _Required()


def _float(x) -> float:
    return float(x.item()) if isinstance(x, Tensor) else float(x)


class Optimizer:
    """Base class of flow's optimizers (``torch.optim.Optimizer``'s API).

    ``params`` is an iterable of tensors or of dicts (parameter groups: ``{"params": [...],
    "lr": ...}``); options missing from a group come from ``defaults``.

    >>> w = flow.nn.Parameter(flow.zeros(3))
    >>> opt = flow.optim.SGD([w], lr=0.1)
    >>> w.grad = flow.ones(3); opt.step(); w.tolist()
    [-0.1, -0.1, -0.1]
    """

    #: subclasses that keep a ``step`` count in their state (Adam, ...) set this
    _has_step = True
    #: ``{argument: spec}`` of the hyper-parameters this optimizer checks (see :mod:`flow.optim._hyper`),
    #: on top of :data:`flow.optim._hyper.COMMON`
    _hyper: dict = {}

    def __init__(self, params: Iterable, defaults: dict) -> None:
        self.defaults = dict(defaults)
        self.param_groups: list[dict] = []
        self._flat: list[tuple[tuple, list[FlatBucket]] | None] = []
        self._checked: list[tuple] = []  # per group: the (keys, values) last validated
        self._op_attrs: list[tuple] = []  # per group: (the validated signature, the update op's attributes)
        specs = self._specs()
        name = type(self).__name__
        for k, v in self.defaults.items():
            if v is not required and k in specs:
                specs[k].check(name, k, v)
        for g in _split_groups(name, params):
            self.add_param_group(g)
        if not any(g["params"] for g in self.param_groups):
            raise OptimizerError(f"{name}: optimizer got an empty parameter list")

    # -- parameter groups -------------------------------------------------------------------
    @classmethod
    def _specs(cls) -> dict:
        return {**_hyper.COMMON, **cls._hyper}

    def add_param_group(self, param_group: dict) -> None:
        """Add a group of parameters with its own options (missing ones come from ``defaults``).

        Every check runs before the optimizer changes: a bad group leaves it as it was."""
        name = type(self).__name__
        if not isinstance(param_group, Mapping):
            raise OptimizerTypeError(f"{name}: param_group must be a dict, got {type(param_group).__name__}")
        if "params" not in param_group:
            raise OptimizerError(f"{name}: param_group has no 'params' entry (keys: {sorted(param_group)})")
        group = dict(param_group)
        gi = len(self.param_groups)
        params = _param_list(name, group["params"], f"param_groups[{gi}]['params']")
        seen: set[int] = set()
        for j, p in enumerate(params):
            label = f"param_groups[{gi}]['params'][{j}]"
            if not isinstance(p, Tensor):
                raise OptimizerTypeError(
                    f"{name}: optimizer can only optimize Tensors, but {label} is {type(p).__name__}"
                )
            if not p.dtype.is_floating_point:
                raise OptimizerTypeError(
                    f"{name}: optimizer can only optimize floating-point Tensors, but {label} is {p.dtype}"
                )
            if not p.is_leaf:
                raise OptimizerError(
                    f"{name}: can't optimize a non-leaf Tensor ({label}, shape "
                    f"{tuple(p.shape)}, computed by {type(p.grad_fn).__name__}); optimize the "
                    "leaf it was computed from, or pass t.detach().requires_grad_()"
                )
            if id(p) in seen:
                raise OptimizerError(
                    f"{name}: {label} (shape {tuple(p.shape)}) appears more than once in one parameter group"
                )
            seen.add(id(p))
            check_param_array(name, label, p)
        for k, g in enumerate(self.param_groups):
            if any(id(p) in seen for p in g["params"]):
                raise OptimizerError(
                    f"{name}: some parameters appear in more than one parameter group (groups {k} and {gi})"
                )
        group["params"] = params
        for k, default in self.defaults.items():
            if default is required and k not in group:
                raise OptimizerError(
                    f"{name}: parameter group didn't specify a value of required optimization parameter {k}"
                )
            group.setdefault(k, default)
        self._validate_group(group)
        self.param_groups.append(group)
        self._flat.append(None)
        self._checked.append(_signature(group))

    def _validate_group(self, group: dict) -> None:
        """Check a group's options: types and ranges from :attr:`_hyper`, then :meth:`_check_group`."""
        _hyper.check_group(type(self).__name__, self._specs(), group)
        self._check_group(group)

    def _check_group(self, group: dict) -> None:
        """Rules between options (Nesterov needs momentum ...); subclasses raise OptimizerError."""

    def _revalidate(self) -> None:
        """Check again the groups whose options changed since they were last checked (``group["lr"] = x``
        by the user or a scheduler): one identity comparison per option when nothing changed."""
        while len(self._checked) < len(self.param_groups):
            self._checked.append(())
        for gi, group in enumerate(self.param_groups):
            keys, values = self._checked[gi] or ((), ())
            if (
                len(keys) != len(group)
                or any(a is not b for a, b in zip(values, group.values()))
                or tuple(group) != keys
            ):
                self._validate_group(group)
                self._checked[gi] = _signature(group)

    # -- flat storage ---------------------------------------------------------------------------
    def _buckets(self, gi: int) -> list[FlatBucket]:
        """The flat buckets of group ``gi``: the parameters' arrays re-read when they were replaced, the group
        rebuilt (states carried over) when its parameters, their dtypes or shapes changed."""
        while len(self._flat) < len(self.param_groups):
            self._flat.append(None)
        params = self.param_groups[gi]["params"]
        key = tuple(id(p) for p in params)
        entry = self._flat[gi]
        if entry is not None and entry[0] == key:
            if all(b.in_sync() for b in entry[1]):
                return entry[1]
            if all(b.in_sync() or b.refresh() for b in entry[1]):
                return entry[1]
        self._flat[gi] = (key, self._make_buckets(gi, entry[1] if entry is not None else []))
        return self._flat[gi][1]

    def _make_buckets(self, gi: int, old: list[FlatBucket]) -> list[FlatBucket]:
        carried = _collect(old)
        group = self.param_groups[gi]
        by_dtype: dict = {}
        for j, p in enumerate(group["params"]):
            by_dtype.setdefault((p.dtype, p.device), []).append((j, p))
        buckets = []
        for items in by_dtype.values():
            labels = [f"param_groups[{gi}]['params'][{j}]" for j, _ in items]
            b = FlatBucket([p for _, p in items], type(self).__name__, labels)
            self._init_bucket(group, b)
            for i, p in enumerate(b.params):
                c = carried.get(id(p))
                if c is None:
                    continue
                b.steps[i] = c[0]
                for name, arr in c[1].items():
                    b.set_param_state(i, name, arr)
            buckets.append(b)
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

    def _apply(self, group: dict, params: list, grads: list, state: dict, step: int, layout, ctx) -> None:
        """Update the run's parameter arrays ``params`` (each in place, in its own memory) from ``grads``.

        ``ctx`` is ``(xp, compute dtype, scratch)``. The default gathers the run into one buffer, calls
        :meth:`_update` and writes the values back. The kernel of the ``optimizer_update`` op calls it, on
        a bare instance of the class: it must depend on its arguments only."""
        xp, cdtype, scratch = ctx
        flat_update(
            lambda p, g: self._update(group, p, g, state, step, layout),
            xp,
            params,
            grads,
            cdtype,
            scratch,
            bool(group.get("maximize", False)),
        )

    # -- the update op ------------------------------------------------------------------------
    def _attrs(self, gi: int, group: dict) -> dict:
        """The update op's attributes of group ``gi``, made again only after the group's options changed."""
        attrs = self._op_attrs
        while len(attrs) <= gi:
            attrs.append((None, None))
        sig, a = attrs[gi]
        if sig is not self._checked[gi]:
            a = self._op_attributes(group)
            attrs[gi] = (self._checked[gi], a)
        return a

    def _op_attributes(self, group: dict) -> dict:
        """Attributes of ``optimizer_update``: the class to run and the group's options (hashable)."""
        cls = type(self)
        # lists (betas=[0.9, 0.99]) become tuples: attributes are hashed
        hyper = tuple(
            sorted(
                (k, tuple(v) if isinstance(v, list) else v)
                for k, v in group.items()
                if k not in ("params", "lr", "initial_lr")
            )
        )
        return dict(optimizer=f"{cls.__module__}:{cls.__qualname__}", hyper=hyper, inplace=True)

    def _feed_names(self) -> tuple:
        """The host values (besides ``lr``) that :meth:`_update_call` feeds through ``FlatBucket.feed``."""
        return ("step", "present")

    def _update_call(
        self,
        group: dict,
        attrs: dict,
        b: FlatBucket,
        names: dict,
        i0: int,
        i1: int,
        params: list,
        grads: list,
        states: list,
        lr,
    ) -> tuple:
        """``(op, inputs, attributes)`` of the update of parameters ``i0:i1`` of bucket ``b`` (``states``:
        their state tensors, name-major). This default is ``optimizer_update`` (this class's ``_apply``)."""
        step_arr, step = b.feed("step")
        step_arr[()] = int(b.steps[i0]) + 1
        pres_arr, present = b.feed("present", (len(names),), D.bool)
        for k, name in enumerate(names):
            pres_arr[k] = bool(b.present[name][i0])
        return _ops.optimizer_update, (params, grads, states, lr, step, present), dict(attrs, names=tuple(names))

    # -- the public API -----------------------------------------------------------------------
    def step(self, closure: Callable | None = None):
        """Update every parameter that has a gradient; ``closure`` re-evaluates the model and returns the loss.

        Each update is an op call (``sgd_update``, ``adam_update``, ``optimizer_update``) seen by the
        active interceptors; in graph mode the tracer records it."""
        loss = None
        if closure is not None:
            from flow.autograd import enable_grad

            with enable_grad():
                loss = closure()
        # every check (options, parameter arrays, gradient shapes and dtypes) before the first update: an
        # error leaves all parameters and states as they were
        self._revalidate()
        runs = []
        for gi, group in enumerate(self.param_groups):
            names = self._state_names(group)
            for b in self._buckets(gi):
                b.check_writable()
                runs.extend((gi, group, b, names, i0, i1, b.grads(i0, i1)) for i0, i1 in b.runs(names))
        for run in runs:
            self._step_run(*run)
        return loss

    def _step_run(self, gi: int, group: dict, b: FlatBucket, names: dict, i0: int, i1: int, grads: list) -> None:
        params = b.params[i0:i1]
        states = []
        for name, fill in names.items():
            states.extend(b.state_views(name, fill)[i0:i1])
        lr_arr, lr = b.feed("lr", (), D.float64)
        lr_arr[()] = _float(group["lr"])
        op, inputs, attrs = self._update_call(
            group, self._attrs(gi, group), b, names, i0, i1, params, grads, states, lr
        )
        outs = _call(op, *inputs, **attrs)
        # the op's outputs are the new parameters and states: with inplace=True the kernel wrote them into
        # the inputs' own arrays (nothing to do: checked on the first of each); the graph tracer (or an
        # interceptor answering the call) returns new values, which the parameters and states now hold
        n = len(params)
        if outs[0]._data is not params[0]._data or (states and outs[n]._data is not states[0]._data):
            for t, o in zip(params + states, outs):
                if o._data is not t._data:
                    t._data = o._data
        whole = i0 == 0 and i1 == len(b.params)
        steps = b.steps
        if whole:
            steps += 1
        else:
            steps[i0:i1] += 1
        for name in names:
            pres = b.present[name]
            if whole:
                pres.fill(True)
            else:
                pres[i0:i1] = True

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
        from flow.array_kinds import is_kind_array, wrap

        st: dict[str, Any] = {}
        data = b.params[i]._data
        kind = is_kind_array(data) and hasattr(data, "with_storage")
        for name, arr in b.param_state(i).items():
            if kind and isinstance(arr, np.ndarray):  # a global parameter's state: laid out like it, a view
                st[name] = wrap(data.with_storage(arr), b.params[i].device)
            else:
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
        """Load a state produced by :meth:`state_dict` (group options and per-parameter states).

        The whole state dict is checked first (number of groups and parameters, options, state names and
        shapes); a mismatch raises OptimizerError and leaves the optimizer as it was."""
        from flow.optim._state_dict import apply_state, check_state_dict

        groups, by_param = check_state_dict(self, state_dict)
        apply_state(self, groups, by_param)

    def __repr__(self) -> str:
        lines = [type(self).__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(group):
                if k != "params":
                    lines.append(f"    {k}: {group[k]}")
        lines.append(")")
        return "\n".join(lines)


def _signature(group: dict) -> tuple:
    return tuple(group), tuple(group.values())


def _split_groups(name: str, params) -> list:
    """The constructor's ``params`` as a list of group dicts."""
    if isinstance(params, Tensor):
        raise OptimizerTypeError(
            f"{name}: params argument given to the optimizer should be an iterable of Tensors "
            "or dicts, but got a Tensor (wrap it in a list)"
        )
    if isinstance(params, Mapping):
        raise OptimizerTypeError(
            f"{name}: params argument given to the optimizer should be an iterable of Tensors "
            "or dicts, but got a dict (pass a list of parameter groups: [{'params': ...}])"
        )
    items = _param_list(name, params, "params")
    if not items:
        raise OptimizerError(f"{name}: optimizer got an empty parameter list")
    dicts = [isinstance(x, Mapping) for x in items]
    if all(dicts):
        return items
    if any(dicts):
        raise OptimizerTypeError(
            f"{name}: params mixes parameter groups (dicts) and Tensors; pass either Tensors or dicts"
        )
    return [{"params": items}]


def _param_list(name: str, params, what: str) -> list:
    if isinstance(params, Tensor):
        return [params]
    if isinstance(params, (set, frozenset)):
        raise OptimizerTypeError(
            f"{name}: optimizer parameters need to be organized in ordered collections, but "
            f"{what} is a set (its order varies between runs); use a list"
        )
    if isinstance(params, (str, bytes)) or not isinstance(params, Iterable):
        hint = " (pass model.parameters())" if hasattr(params, "parameters") else ""
        raise OptimizerTypeError(f"{name}: {what} must be an iterable of Tensors, got {type(params).__name__}{hint}")
    return list(params)


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
