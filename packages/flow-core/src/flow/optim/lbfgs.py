"""``flow.optim.LBFGS`` (torch.optim.LBFGS): limited-memory BFGS with an optional strong-Wolfe line search.

L-BFGS re-evaluates the model several times per step through a closure and branches on the losses
it sees, so it runs eagerly only: :class:`flow.nn.Graph` does not compile it (its ``step`` is not one
update op as the other optimizers' are). The parameters are handled as one flat vector (the
concatenation of all of them), as PyTorch does; the scalars of the recursion are Python floats.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Callable

import numpy as np

from flow._tensor import Tensor
from flow.autograd import enable_grad, no_grad
from flow.optim._flat import check_param_array
from flow.optim._hyper import Int, Real, _show
from flow.optim._state_dict import check_state_dict
from flow.optim.errors import OptimizerError, OptimizerTypeError
from flow.optim.optimizer import Optimizer, _float

_LINE_SEARCHES = (None, "strong_wolfe")
_TENSOR_STATES = ("d", "prev_flat_grad")
_LIST_STATES = ("old_dirs", "old_stps")
_COUNT_STATES = ("func_evals", "n_iter")
_REAL_STATES = ("t", "H_diag", "prev_loss")
_REAL_LIST_STATES = ("ro", "al")
_STATES = _TENSOR_STATES + _LIST_STATES + _COUNT_STATES + _REAL_STATES + _REAL_LIST_STATES
_GROUPS_MSG = "LBFGS doesn't support per-parameter options (parameter groups)"


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None) -> float:
    """The minimiser of the cubic through two points with their slopes, clamped to ``bounds``."""
    if bounds is not None:
        xmin_bound, xmax_bound = bounds
    else:
        xmin_bound, xmax_bound = (x1, x2) if x1 <= x2 else (x2, x1)
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1**2 - g1 * g2
    if d2_square >= 0:
        d2 = d2_square**0.5
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """Moré-Thuente style search along ``d`` for a step ``t`` meeting the strong Wolfe conditions
    (PyTorch's port of minFunc's): bracket a minimum, then zoom in with cubic interpolation.

    Returns ``(loss, flat_grad, t, function evaluations)``."""
    d_norm = _float(d.abs().max())
    g = g.clone()
    f_new, g_new = obj_func(x, t, d)
    ls_func_evals = 1
    gtd_new = _float(g_new.dot(d))
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    bracket, bracket_f, bracket_g, bracket_gtd = [], [], [], []
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.clone()], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.clone()], [gtd_prev, gtd_new]
            break
        # extrapolate: the next trial lies beyond t, at most 10 times it
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new.clone(), gtd_new
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = _float(g_new.dot(d))
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]

    # zoom: shrink the bracket until a point meets the conditions or the bracket is too small
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1])
        # a trial too close to a bracket end makes little progress: move it inside by 10% of the bracket
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                t = max(bracket) - eps if abs(t - max(bracket)) < abs(t - min(bracket)) else min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = _float(g_new.dot(d))
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new.clone(), gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos], bracket_gtd[high_pos] = bracket_g[low_pos], bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new.clone(), gtd_new
    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals


class LBFGS(Optimizer):
    """torch.optim.LBFGS: quasi-Newton steps from the last ``history_size`` parameter and gradient
    changes, ``max_iter`` iterations (at most ``max_eval`` closure calls) per :meth:`step`.

    One parameter group only; ``step(closure)`` needs a closure that zeroes the gradients, computes the
    loss, calls ``backward()`` and returns the loss. Runs eagerly (not compiled by ``nn.Graph``).
    State (of the first parameter, as in PyTorch): ``func_evals``, ``n_iter``, ``d``, ``t``, ``old_dirs``,
    ``old_stps``, ``ro``, ``H_diag``, ``prev_flat_grad``, ``prev_loss``, ``al``.

    >>> opt = flow.optim.LBFGS(model.parameters(), lr=1, line_search_fn="strong_wolfe")
    >>> def closure():
    ...     opt.zero_grad()
    ...     loss = loss_fn(model(x), y)
    ...     loss.backward()
    ...     return loss
    >>> opt.step(closure)
    """

    _has_step = False
    _hyper = {
        "max_iter": Int("max_iter value", 1),
        "max_eval": Int("max_eval value", 1),
        "tolerance_grad": Real("tolerance_grad value", 0.0),
        "tolerance_change": Real("tolerance_change value", 0.0),
        "history_size": Int("history_size value", 1),
    }

    def __init__(
        self,
        params,
        lr: float | Tensor = 1,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
    ) -> None:
        if max_eval is None and isinstance(max_iter, (numbers.Integral, np.integer)) and not isinstance(max_iter, bool):
            max_eval = int(max_iter) * 5 // 4
        defaults = dict(
            lr=lr,
            max_iter=max_iter,
            max_eval=max_eval,
            tolerance_grad=tolerance_grad,
            tolerance_change=tolerance_change,
            history_size=history_size,
            line_search_fn=line_search_fn,
        )
        self._lbfgs_state: dict = {}
        # as in PyTorch, every group given is checked (types, duplicates across groups ...) before more than
        # one is refused; after construction add_param_group refuses outright
        self._built = False
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise OptimizerError(_GROUPS_MSG)
        self._built = True
        self._params = self.param_groups[0]["params"]

    def _check_group(self, group: dict) -> None:
        v = group.get("line_search_fn")
        if v is not None and not isinstance(v, str):
            raise OptimizerTypeError(f"LBFGS: line_search_fn must be None or a str, got {type(v).__name__} {_show(v)}")
        if v not in _LINE_SEARCHES:
            raise OptimizerError(
                f"LBFGS: Invalid line_search_fn: {v!r} (line_search_fn must be None or 'strong_wolfe')"
            )

    def add_param_group(self, param_group: dict) -> None:
        """Refused once the optimizer is built: L-BFGS works on one flat vector of all parameters."""
        if self._built:
            raise OptimizerError(_GROUPS_MSG)
        super().add_param_group(param_group)

    # -- the flat parameter vector -------------------------------------------------------------
    def _gather_flat_grad(self) -> Tensor:
        from flow import _creation as C
        from flow.ops.shape_ops import cat

        views = []
        for j, p in enumerate(self._params):
            g = p.grad
            if g is None:
                views.append(C.zeros(p.numel(), dtype=p.dtype, device=p.device))
                continue
            g = g.to_dense() if g.is_sparse else g
            # a gradient that does not fit its parameter would shift every later one in the flat vector
            label = f"param_groups[0]['params'][{j}]"
            if tuple(g.shape) != tuple(p.shape):
                raise OptimizerError(
                    f"LBFGS: {label} of shape {tuple(p.shape)} has a gradient of shape {tuple(g.shape)}"
                )
            if g.dtype is not p.dtype or g.device != p.device:
                raise OptimizerError(
                    f"LBFGS: {label} ({p.dtype} on {p.device}) has a gradient of dtype {g.dtype} on {g.device}"
                )
            views.append(g.reshape(-1))
        return cat(views, 0)

    def _add_grad(self, step_size: float, update: Tensor) -> None:
        offset = 0
        for p in self._params:
            n = p.numel()
            p.add_(update[offset : offset + n].view_as(p), alpha=step_size)
            offset += n

    def _directional_evaluate(self, closure: Callable, x: list, t: float, d: Tensor) -> tuple:
        self._add_grad(t, d)
        with enable_grad():
            loss = _float(closure())
        flat_grad = self._gather_flat_grad()
        for p, data in zip(self._params, x):
            p.copy_(data)
        return loss, flat_grad

    # -- one step ------------------------------------------------------------------------------
    def step(self, closure: Callable | None = None):
        """Run up to ``max_iter`` L-BFGS iterations; ``closure`` re-evaluates the model and returns the loss.

        Returns the loss of the first closure call. Options, writable parameters and each evaluation's
        gradients are checked; a step that fails (or whose closure raises) leaves the parameters and the
        state as they were before it."""
        if closure is None or not callable(closure):
            # nn.Graph steps its optimizers without a closure: this is also what compiling LBFGS reports
            raise OptimizerTypeError(
                "LBFGS: step() needs a closure that re-evaluates the model and returns the loss "
                "(LBFGS runs eagerly: nn.Graph's add_optimizer cannot step it)"
            )
        self._revalidate()
        for j, p in enumerate(self._params):
            check_param_array("LBFGS", f"param_groups[0]['params'][{j}]", p)
        with no_grad():
            # later evaluations run after updates: keep what is needed to undo the step (the state's tensors
            # are replaced, never written, by a step; its lists are edited, so they are copied)
            saved_params = [p.clone() for p in self._params]
            saved_state = {k: list(v) if isinstance(v, list) else v for k, v in self._lbfgs_state.items()}
            try:
                return self._step(closure)
            except BaseException:
                for p, x in zip(self._params, saved_params):
                    p.copy_(x)
                self._lbfgs_state = saved_state
                raise

    def _step(self, closure: Callable):
        group = self.param_groups[0]
        lr = _float(group["lr"])
        max_iter, max_eval = group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]
        state = self._lbfgs_state
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        with enable_grad():
            orig_loss = closure()
        loss = _float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if _float(flat_grad.abs().max()) <= tolerance_grad:
            return orig_loss

        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        H_diag, prev_flat_grad, prev_loss = state.get("H_diag"), state.get("prev_flat_grad"), state.get("prev_loss")
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d = flat_grad.neg()
                old_dirs, old_stps, ro, H_diag = [], [], [], 1.0
            else:
                # update the curvature pairs, then the two-loop recursion for d = -H g
                y = flat_grad.sub(prev_flat_grad)
                s = d.mul(t)
                ys = _float(y.dot(s))
                if ys > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    H_diag = ys / _float(y.dot(y))
                num_old = len(old_dirs)
                if "al" not in state:
                    state["al"] = [None] * history_size
                al = state["al"]
                q = flat_grad.neg()
                for i in range(num_old - 1, -1, -1):
                    al[i] = _float(old_stps[i].dot(q)) * ro[i]
                    q.add_(old_dirs[i], alpha=-al[i])
                d = r = q.mul(H_diag)
                for i in range(num_old):
                    be_i = _float(old_dirs[i].dot(r)) * ro[i]
                    r.add_(old_stps[i], alpha=al[i] - be_i)
            prev_flat_grad = flat_grad.clone()
            prev_loss = loss
            # the first step is scaled down so that it moves by about lr in the sup norm
            t = min(1.0, 1.0 / _float(flat_grad.abs().sum())) * lr if state["n_iter"] == 1 else lr
            gtd = _float(flat_grad.dot(d))
            if gtd > -tolerance_change:  # not a descent direction
                break

            ls_func_evals = 0
            if line_search_fn is not None:
                x_init = [p.clone() for p in self._params]

                def obj_func(x, t, d):
                    return self._directional_evaluate(closure, x, t, d)

                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    obj_func, x_init, t, d, loss, flat_grad, gtd, max_ls=max_eval - current_evals
                )
                self._add_grad(t, d)
                opt_cond = _float(flat_grad.abs().max()) <= tolerance_grad
            else:
                self._add_grad(t, d)
                opt_cond = False
                if n_iter != max_iter:
                    with enable_grad():
                        loss = _float(closure())
                    flat_grad = self._gather_flat_grad()
                    opt_cond = _float(flat_grad.abs().max()) <= tolerance_grad
                    ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals

            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if _float(d.mul(t).abs().max()) <= tolerance_change:
                break
            if abs(loss - prev_loss) < tolerance_change:
                break

        state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=H_diag)
        state.update(prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)
        return orig_loss

    # -- state -----------------------------------------------------------------------------------
    @property
    def state(self) -> dict:
        """``{first parameter: {name: value}}``, as PyTorch keeps LBFGS's state."""
        return {self._params[0]: self._lbfgs_state} if self._lbfgs_state else {}

    def state_dict(self) -> dict:
        """PyTorch's format: ``{"state": {0: {...}}, "param_groups": [{..., "params": [0, 1, ...]}]}``
        (tensors and lists are copies, so later steps do not change a saved state)."""
        g = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        g["params"] = list(range(len(self._params)))
        st = {}
        for k, v in self._lbfgs_state.items():
            st[k] = v.clone() if isinstance(v, Tensor) else ([_copy(x) for x in v] if isinstance(v, list) else v)
        return {"state": {0: st} if st else {}, "param_groups": [g]}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a state from :meth:`state_dict` (or PyTorch's LBFGS, with its tensors converted to flow).

        Everything is checked first (the group as :meth:`Optimizer.load_state_dict` checks it; the state: kept
        under the first parameter, known names, flat tensors of the parameters' total size, counts and reals);
        a mismatch raises OptimizerError and leaves the optimizer as it was."""
        # the per-parameter state checks of the base class do not apply (LBFGS's state is of the flat vector)
        groups_only = {k: v for k, v in state_dict.items() if k != "state"} if isinstance(state_dict, Mapping) else None
        groups, _ = check_state_dict(self, groups_only if groups_only is not None else state_dict)
        raw = state_dict.get("state", {})
        if not isinstance(raw, Mapping):
            raise OptimizerTypeError(f"LBFGS: loaded state dict's 'state' must be a dict, got {type(raw).__name__}")
        indices = list(state_dict["param_groups"][0]["params"])
        st: dict = {}
        for key, value in raw.items():
            if key not in indices:
                raise OptimizerError(
                    f"LBFGS: loaded state dict has state for parameter {key!r}, which the parameter group does not "
                    f"list (indices {indices})"
                )
            if key != indices[0]:
                raise OptimizerError(
                    f"LBFGS: loaded state dict has state for parameter {key!r}; LBFGS keeps its state under the "
                    f"first parameter ({indices[0]!r})"
                )
            if not isinstance(value, Mapping):
                raise OptimizerTypeError(
                    f"LBFGS: loaded state of parameter {key} must be a dict, got {type(value).__name__}"
                )
            st = _checked_state(dict(value), sum(p.numel() for p in self._params), key)
        self.param_groups[0] = groups[0]
        self._checked[0] = ()  # the new group's options are checked again before the next step
        self._lbfgs_state = st


def _checked_state(st: dict, n: int, index) -> dict:
    """A copy of a loaded LBFGS state, with tensors cloned and scalars as Python numbers, or an error."""
    out: dict = {}
    for k, v in st.items():
        if k not in _STATES:
            raise OptimizerError(
                f"LBFGS: loaded state of parameter {index} has '{k}', which LBFGS does not keep "
                f"(expected {', '.join(sorted(_STATES))})"
            )
        if k in _TENSOR_STATES:
            out[k] = None if v is None else _flat_state(k, v, n)
        elif k in _LIST_STATES:
            if not isinstance(v, (list, tuple)):
                raise OptimizerTypeError(f"LBFGS: loaded state '{k}' must be a list of Tensors, got {type(v).__name__}")
            out[k] = [_flat_state(f"{k}[{i}]", x, n) for i, x in enumerate(v)]
        elif k in _COUNT_STATES:
            c = _real(k, v)
            if not (c >= 0 and c == int(c)):
                raise OptimizerError(f"LBFGS: loaded state '{k}' is {_show(v)}; expected a whole number >= 0")
            out[k] = int(c)
        elif k in _REAL_STATES:
            out[k] = _real(k, v)
        else:
            if not isinstance(v, (list, tuple)):
                raise OptimizerTypeError(f"LBFGS: loaded state '{k}' must be a list of numbers, got {type(v).__name__}")
            out[k] = [None if x is None else _real(f"{k}[{i}]", x) for i, x in enumerate(v)]
    return out


def _flat_state(name: str, v, n: int) -> Tensor:
    from flow._creation import from_numpy

    if isinstance(v, np.ndarray):
        v = from_numpy(np.array(v, copy=True))
    if not isinstance(v, Tensor):
        raise OptimizerTypeError(f"LBFGS: loaded state '{name}' must be a Tensor or an array, got {type(v).__name__}")
    if v.numel() != n:
        raise OptimizerError(f"LBFGS: loaded state '{name}' has {v.numel()} elements, the parameters have {n}")
    return v.detach().clone().reshape(-1)


def _real(name: str, v) -> float:
    if isinstance(v, Tensor) and v.numel() == 1:
        v = v.item()
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Real, np.integer, np.floating)):
        raise OptimizerTypeError(f"LBFGS: loaded state '{name}' must be a real number, got {type(v).__name__}")
    x = float(v)
    if x != x:
        raise OptimizerError(f"LBFGS: loaded state '{name}' is nan")
    return x


def _copy(x):
    return x.clone() if isinstance(x, Tensor) else x
