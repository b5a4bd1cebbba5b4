"""Per-parameter scalar optimizer states (NAdam's ``mu_product``, ASGD's ``eta`` and ``mu``).

PyTorch keeps these as one 0-d tensor per parameter. The update ops (:mod:`flow.ops.optim`) take
states shaped like their parameters, which is what lets graph mode feed and update them like the
other states, so flow keeps such a value in an ordinary flat state buffer, every element of a
parameter's piece holding the same number. :class:`ScalarStates` shows it as PyTorch does: a 0-d
float32 tensor in ``state`` / ``state_dict()``, and a 0-d (or one-element) value in a loaded state
dict is spread over the parameter's shape.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from flow._tensor import Tensor
from flow.optim.optimizer import Optimizer


def per_param(buf, layout):
    """The value each parameter of a run holds in the scalar state ``buf`` (all its elements are equal): a
    float when every parameter holds the same one (the usual case), else one value per element (an array of
    the buffer's kind); None for a run of empty parameters."""
    starts, numels, _ = layout
    nz = numels > 0
    if not nz.any():
        return None
    vals = buf[starts[nz]]
    vals = np.asarray(vals.get() if hasattr(vals, "get") else vals, dtype=np.float64)  # a few values to the host
    if (vals == vals[0]).all():
        return float(vals[0])
    return buf.astype(np.float64)  # each element holds its parameter's value: the buffer itself, on its device


def as_dtype(value, dtype):
    """``value`` from :func:`per_param` in a parameter's dtype: a float stays a float (NumPy then computes
    in the array's dtype, as torch does with a Python scalar)."""
    return value if isinstance(value, float) else value.astype(dtype)


def f32(x: float) -> float:
    """``x`` rounded to float32: torch keeps the scalar states as float32 tensors."""
    return float(np.float32(x))


class ScalarStates(Optimizer):
    """An optimizer with per-parameter scalar states (named in :attr:`_scalar_states`)."""

    _scalar_states: tuple = ()

    def _scalar_default(self, group: dict, name: str, step: int) -> float:
        """The value of scalar state ``name`` of an empty parameter (which has no element to hold it) after
        ``step`` steps with the group's current options."""
        raise NotImplementedError

    def _group_of(self, b) -> dict:
        for gi, entry in enumerate(self._flat):
            if entry is not None and any(x is b for x in entry[1]):
                return self.param_groups[gi]
        return self.param_groups[0]

    def _param_state(self, b, i: int) -> dict:
        from flow._creation import tensor
        from flow._dtype import float32

        st = super()._param_state(b, i)
        for name in self._scalar_states:
            if name in st:
                v = st[name]
                if v.numel():
                    value = float(v.reshape(-1)[0].item())
                else:
                    value = self._scalar_default(self._group_of(b), name, int(b.steps[i]))
                st[name] = tensor(value, dtype=float32)
        return st

    def load_state_dict(self, state_dict: dict) -> None:
        """:meth:`Optimizer.load_state_dict`, the scalar states (0-d, as PyTorch saves them) spread over the
        parameters' shapes first; anything malformed is passed on for the base class to report."""
        super().load_state_dict(self._spread_scalars(state_dict))

    def _spread_scalars(self, state_dict):
        if not isinstance(state_dict, Mapping):
            return state_dict
        saved, states = state_dict.get("param_groups"), state_dict.get("state")
        if not isinstance(saved, (list, tuple)) or not isinstance(states, Mapping):
            return state_dict
        shapes = {}
        for s, g in zip(saved, self.param_groups):
            if not isinstance(s, Mapping) or not isinstance(s.get("params"), (list, tuple)):
                return state_dict
            for k, p in zip(s["params"], g["params"]):
                if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
                    shapes[int(k)] = tuple(p.shape)
        out = {}
        for k, st in states.items():
            shape = shapes.get(k) if isinstance(k, (int, np.integer)) and not isinstance(k, bool) else None
            if shape is not None and isinstance(st, Mapping):
                st = dict(st)
                for name in self._scalar_states:
                    value = _one_value(st.get(name))
                    if value is not None and _shape_of(st[name]) != shape:
                        st[name] = np.full(shape, value, dtype=np.float32)
            out[k] = st
        return {**state_dict, "state": out}


def _shape_of(v) -> tuple:
    return tuple(v.shape) if hasattr(v, "shape") else ()


def _one_value(v):
    """The number a one-element Tensor / array / real holds, else None (left for the checks to report)."""
    if isinstance(v, Tensor):
        v = v.detach().numpy()
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (np.ndarray, int, float, np.number)):
        return None
    arr = np.asarray(v)
    if arr.size != 1 or arr.dtype.kind not in "fiu":
        return None
    return float(arr.reshape(-1)[0])
