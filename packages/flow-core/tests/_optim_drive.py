"""Helpers shared by the class-wide optimizer suites (test_optim_validation, test_optim_aliasing): stepping every
optimizer, flow's or torch's, the same way, including one whose ``step(closure)`` re-evaluates the model (LBFGS),
and comparing states that hold lists and numbers besides tensors."""

from __future__ import annotations

import math

import numpy as np

import flow
from flow.optim import OptimizerError, OptimizerTypeError

# optimizers (by class name: flow's and torch's alike) whose step() re-evaluates the model through a closure
CLOSURE_DRIVEN = {"LBFGS"}
# torch optimizers without a ``foreach`` option, and torch's SparseAdam, which takes sparse gradients only
NO_FOREACH = {"LBFGS", "SparseAdam"}
SPARSE_GRADS = {"SparseAdam"}


def closure_driven(opt) -> bool:
    return type(opt).__name__ in CLOSURE_DRIVEN


# -- state snapshots --------------------------------------------------------------------------------------
def plain(v):
    """A state value as plain data: tensors as array copies, lists (LBFGS's history) item by item."""
    if isinstance(v, flow.Tensor):
        return v.numpy().copy()
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


def equal(a, b) -> bool:
    """Whether two :func:`plain` values are the same (arrays element for element, lists item by item)."""
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(map(equal, a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    return a == b


# -- stepping ---------------------------------------------------------------------------------------------
def drive(opt):
    """``opt.step()`` with the gradients the test set; a closure-driven optimizer gets a closure that sets them
    again at every evaluation and returns the loss of the linear function they are the gradient of."""
    if not closure_driven(opt):
        return opt.step()
    given = [(p, p.grad) for g in opt.param_groups for p in g["params"] if p.grad is not None]

    def closure():
        loss = 0.0
        for p, g in given:
            p.grad = g
            if tuple(g.shape) == tuple(p.shape):  # one of the wrong shape is what the step must refuse
                loss += float((g * p.detach()).sum())
        return flow.tensor(loss)

    return opt.step(closure)


def torch_opt(torch, tname: str, ps: list, kw: dict):
    """torch.optim's ``tname`` over ``ps``, one parameter after the other (foreach=False where it has the option)."""
    extra = {} if tname in NO_FOREACH else dict(foreach=False)
    return getattr(torch.optim, tname)(ps, **extra, **kw)


def wrap_grad(lib, tname):
    """numpy gradient -> a gradient of ``lib`` for optimizer ``tname`` (torch's SparseAdam takes sparse ones)."""
    if lib is flow or tname not in SPARSE_GRADS:
        return lib.tensor
    return lambda g: lib.tensor(g).to_sparse()


def step_with(opt, ps: list, gs: list, wrap):
    """One step with gradients ``gs``: set and ``opt.step()``, or for a closure-driven optimizer a closure whose
    gradients are ``gs + p`` at the parameters' current values (loss ``sum(gs * p + p * p / 2)``)."""
    if not closure_driven(opt):
        for p, g in zip(ps, gs):
            p.grad = wrap(g)
        return opt.step()

    def closure():
        loss = 0.0
        for p, g in zip(ps, gs):
            x = np.array(p.detach().numpy(), dtype=g.dtype)
            p.grad = wrap(g + x)
            loss += float(np.sum(g * x + x * x / 2, dtype=np.float64))
        return loss

    return opt.step(closure)


def model_step(opt, model, lib, tname, loss_fn):
    """One training step of ``model`` on ``loss_fn(model)``: backward then step, or through a closure."""

    def closure():
        opt.zero_grad()
        loss = loss_fn(model)
        loss.backward()
        if lib is not flow and tname in SPARSE_GRADS:
            for p in model.parameters():
                p.grad = p.grad.to_sparse()
        return loss

    if closure_driven(opt):
        return opt.step(closure)
    closure()
    return opt.step()


# -- LBFGS's state dict -----------------------------------------------------------------------------------
def flat_state_cases(edit) -> list:
    """Bad LBFGS states (of 2x2 and 3 parameters): flat tensors of all 7 elements, counts, reals, under parameter 0.

    ``edit(fn)`` is a copy of the good state dict changed by ``fn``."""
    return [
        (edit(lambda sd: sd["state"][0].update(d=flow.zeros(3))), OptimizerError, "'d' has 3 elements.* have 7"),
        (
            edit(lambda sd: sd["state"][0].update(old_dirs=[flow.zeros(7), flow.zeros(2, 2)])),
            OptimizerError,
            r"'old_dirs\[1\]' has 4 elements",
        ),
        (edit(lambda sd: sd["state"][0].update(d="zeros")), OptimizerTypeError, "Tensor or an array"),
        (edit(lambda sd: sd["state"][0].update(old_stps=flow.zeros(7))), OptimizerTypeError, "list of Tensors"),
        (edit(lambda sd: sd["state"][0].update(n_iter=-1)), OptimizerError, "'n_iter' is -1; expected a whole"),
        (edit(lambda sd: sd["state"][0].update(func_evals=2.5)), OptimizerError, "whole number"),
        (edit(lambda sd: sd["state"][0].update(H_diag="x")), OptimizerTypeError, "'H_diag' must be a real"),
        (edit(lambda sd: sd["state"][0].update(t=math.nan)), OptimizerError, "'t' is nan"),
        (edit(lambda sd: sd["state"].update({1: {}})), OptimizerError, "under the first parameter"),
    ]
