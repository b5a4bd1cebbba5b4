"""Higher-level autograd (``flow.autograd.functional``), as ``torch.autograd.functional``.

Every function differentiates a Python callable at given inputs, built on
:func:`flow.autograd.grad`; forward-mode products (``jvp``, ``hvp``) use the
double-backward trick, so they need the ops involved to have differentiable
gradients (``create_graph=True``).

>>> def f(x):
...     return (x ** 3).sum()
>>> flow.autograd.functional.hessian(f, flow.tensor([1.0, 2.0]))
tensor([[ 6.,  0.],
        [ 0., 12.]])
"""

from __future__ import annotations

from typing import Callable

from flow.autograd.grad_mode import enable_grad
from flow.errors import AutogradError

__all__ = ["vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"]


def _tensor_cls():
    from flow._tensor import Tensor

    return Tensor


def _as_tuple(x, arg_name: str, fn_name: str) -> tuple[bool, tuple]:
    """``(was_a_tuple, x as a tuple)``; everything in it must be a Tensor."""
    Tensor = _tensor_cls()
    is_tuple = isinstance(x, (tuple, list))
    t = tuple(x) if is_tuple else (x,)
    for i, e in enumerate(t):
        if not isinstance(e, Tensor):
            where = f"element {i} of the {arg_name}" if is_tuple else f"the {arg_name}"
            raise TypeError(
                f"{fn_name}: {where} must be a Tensor (the {arg_name} are a Tensor or a tuple of Tensors), "
                f"got {type(e).__name__}"
            )
    return is_tuple, t


def _untuple(res, is_tuple: bool):
    return res if is_tuple else res[0]


def _untuple2(res, out_tuple: bool, in_tuple: bool):
    """A nested ``res[out][in]`` reduced to the nesting the caller's arguments had."""
    if not out_tuple:
        res = res[0]
        return res if in_tuple else res[0]
    return res if in_tuple else tuple(r[0] for r in res)


def _prepare(inputs: tuple, create_graph: bool, need_graph: bool) -> tuple:
    # With create_graph the results must stay connected to the caller's inputs, so an input that already
    # requires grad is passed through a differentiable alias; otherwise the function sees fresh leaves.
    out = []
    for x in inputs:
        if create_graph and x.requires_grad:
            out.append(x.view_as(x))
        else:
            out.append(x.detach().requires_grad_(need_graph))
    return tuple(out)


def _check_outputs(outputs: tuple, strict: bool, fn_name: str) -> None:
    if not strict:
        return
    for i, o in enumerate(outputs):
        if not o.requires_grad:
            raise AutogradError(
                f"{fn_name}: output {i} of the user-provided function does not require gradients. The outputs "
                "must be computed in a differentiable manner from the input when running in strict mode"
            )


def _grad(outputs: tuple, inputs: tuple, grad_outputs, create_graph: bool, retain_graph: bool | None = None) -> tuple:
    """``autograd.grad`` that skips outputs not depending on anything and gives None for unused inputs."""
    from flow import autograd

    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
    if not pairs:
        return (None,) * len(inputs)
    if retain_graph is None:
        retain_graph = create_graph
    return autograd.grad(
        tuple(o for o, _ in pairs),
        inputs,
        tuple(g for _, g in pairs),
        retain_graph=retain_graph,
        create_graph=create_graph,
        allow_unused=True,
    )


def _fill(grads: tuple, refs: tuple, strict: bool, fn_name: str, what: str = "input") -> tuple:
    """Replace a None gradient by zeros shaped like ``refs[i]`` (strict mode refuses instead)."""
    out = []
    for i, (g, r) in enumerate(zip(grads, refs)):
        if g is None:
            if strict:
                raise AutogradError(
                    f"{fn_name}: the output of the user-provided function is independent of {what} {i}. "
                    "This is not allowed in strict mode"
                )
            from flow._creation import zeros_like

            g = zeros_like(r)
        out.append(g)
    return tuple(out)


def _check_v(v, refs: tuple, fn_name: str, v_name: str, refs_name: str) -> tuple:
    """``v`` as a tuple matching ``refs`` element by element in shape; None only for one one-element ref."""
    if v is None:
        if len(refs) != 1 or refs[0].numel() != 1:
            raise AutogradError(
                f"{fn_name}: the vector {v_name} can only be None if the {refs_name} is a single Tensor with a "
                "single element"
            )
        from flow._creation import ones_like

        return (ones_like(refs[0]),)
    _, v = _as_tuple(v, v_name, fn_name)
    if len(v) != len(refs):
        raise AutogradError(f"{fn_name}: {v_name} has {len(v)} elements but the {refs_name} has {len(refs)}")
    for i, (a, b) in enumerate(zip(v, refs)):
        if tuple(a.shape) != tuple(b.shape):
            raise AutogradError(
                f"{fn_name}: mismatch in shape: {v_name}[{i}] has shape {tuple(a.shape)} but the {refs_name}[{i}] "
                f"has shape {tuple(b.shape)}"
            )
    return v


def _detach_all(ts: tuple, create_graph: bool) -> tuple:
    return ts if create_graph else tuple(t.detach() for t in ts)


def vjp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(*inputs), v^T J)``: the vector-Jacobian product of ``func`` at ``inputs``."""
    with enable_grad():
        in_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
        inputs = _prepare(inputs, create_graph, True)
        out_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function", "vjp")
        _check_outputs(outputs, strict, "vjp")
        v = _check_v(v, outputs, "vjp", "v", "output of the user-provided function")
        grads = _fill(_grad(outputs, inputs, v, create_graph), inputs, strict, "vjp")
    return _untuple(_detach_all(outputs, create_graph), out_tuple), _untuple(grads, in_tuple)


def jvp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(*inputs), J v)``: the Jacobian-vector product, through two reverse passes."""
    from flow._creation import zeros_like

    with enable_grad():
        in_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
        inputs = _prepare(inputs, create_graph, True)
        v = _check_v(v, inputs, "jvp", "v", "input")
        out_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function", "jvp")
        _check_outputs(outputs, strict, "jvp")
        # u -> J^T u is linear in u, so differentiating it with respect to u at any point gives J v.
        dummy = tuple(zeros_like(o).requires_grad_(True) for o in outputs)
        g_in = _fill(_grad(outputs, inputs, dummy, create_graph=True), inputs, strict, "jvp")
        res = _fill(_grad(g_in, dummy, v, create_graph), outputs, strict, "jvp", "the vector (output)")
    return _untuple(_detach_all(outputs, create_graph), out_tuple), _untuple(res, out_tuple)


def _jac_rows(outputs: tuple, inputs: tuple, create_graph: bool, strict: bool, fn_name: str) -> tuple:
    """``jac[i][j]`` of shape ``outputs[i].shape + inputs[j].shape``, one reverse pass per output element."""
    from flow._creation import zeros
    from flow.ops.shape_ops import stack

    jac = []
    for i, out in enumerate(outputs):
        n = out.numel()
        rows: list = [[] for _ in inputs]
        for k in range(n):
            seed = zeros(n, dtype=out.dtype, device=out.device)
            seed[k] = 1.0
            gs = _grad((out,), inputs, (seed.reshape(tuple(out.shape)),), create_graph, retain_graph=True)
            for j, (g, x) in enumerate(zip(gs, inputs)):
                if g is None:
                    if strict:
                        raise AutogradError(
                            f"{fn_name}: output {i} of the user-provided function is independent of input {j}. "
                            "This is not allowed in strict mode"
                        )
                    g = zeros(tuple(x.shape), dtype=x.dtype, device=x.device)
                rows[j].append(g)
        per_in = []
        for j, x in enumerate(inputs):
            if n == 0:
                per_in.append(zeros(tuple(out.shape) + tuple(x.shape), dtype=out.dtype, device=out.device))
            else:
                per_in.append(stack(rows[j]).reshape(tuple(out.shape) + tuple(x.shape)))
        jac.append(tuple(per_in))
    return tuple(jac)


def _check_strategy(vectorize: bool, strategy: str, fn_name: str) -> None:
    if vectorize:
        raise AutogradError(f"{fn_name}: vectorize=True is not supported; use vectorize=False")
    if strategy != "reverse-mode":
        raise AutogradError(f"{fn_name}: only strategy 'reverse-mode' is supported, got {strategy!r}")


def jacobian(
    func: Callable,
    inputs,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    strategy: str = "reverse-mode",
):
    """The Jacobian of ``func`` at ``inputs``: ``out.shape + in.shape`` per (output, input) pair."""
    _check_strategy(vectorize, strategy, "jacobian")
    with enable_grad():
        in_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _prepare(inputs, create_graph, True)
        out_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function", "jacobian")
        _check_outputs(outputs, strict, "jacobian")
        jac = _jac_rows(outputs, inputs, create_graph, strict, "jacobian")
    return _untuple2(jac, out_tuple, in_tuple)


def _scalar_output(func: Callable, inputs: tuple, fn_name: str):
    out = func(*inputs)
    is_tuple, outs = _as_tuple(out, "outputs of the user-provided function", fn_name)
    if is_tuple and len(outs) != 1:
        raise AutogradError(f"{fn_name}: the function should return a single Tensor, got {len(outs)}")
    if outs[0].numel() != 1:
        raise AutogradError(
            f"{fn_name}: the Tensor returned by the function should contain a single element, got shape "
            f"{tuple(outs[0].shape)}"
        )
    return outs[0]


def hessian(
    func: Callable,
    inputs,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    outer_jacobian_strategy: str = "reverse-mode",
):
    """The Hessian of a scalar ``func`` at ``inputs`` (``hess[i][j]`` for tuple inputs)."""
    _check_strategy(vectorize, outer_jacobian_strategy, "hessian")
    in_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")

    def grad_func(*inp):
        out = _scalar_output(func, inp, "hessian")
        _check_outputs((out,), strict, "hessian")
        return _fill(_grad((out,), inp, None, create_graph=True), inp, strict, "hessian")

    res = jacobian(grad_func, inputs, create_graph=create_graph, strict=strict)
    return _untuple2(res, in_tuple, in_tuple)


def vhp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(*inputs), v^T H)`` for a scalar ``func``."""
    with enable_grad():
        in_tuple, inputs = _as_tuple(inputs, "inputs", "vhp")
        inputs = _prepare(inputs, create_graph, True)
        v = _check_v(v, inputs, "vhp", "v", "input")
        out = _scalar_output(func, inputs, "vhp")
        _check_outputs((out,), strict, "vhp")
        jac = _fill(_grad((out,), inputs, None, create_graph=True), inputs, strict, "vhp")
        res = _fill(_grad(jac, inputs, v, create_graph), inputs, strict, "vhp")
    return (out if create_graph else out.detach()), _untuple(res, in_tuple)


def hvp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(*inputs), H v)`` for a scalar ``func``, through the double-backward trick."""
    from flow._creation import zeros_like

    with enable_grad():
        in_tuple, inputs = _as_tuple(inputs, "inputs", "hvp")
        inputs = _prepare(inputs, create_graph, True)
        v = _check_v(v, inputs, "hvp", "v", "input")
        out = _scalar_output(func, inputs, "hvp")
        _check_outputs((out,), strict, "hvp")
        jac = _fill(_grad((out,), inputs, None, create_graph=True), inputs, strict, "hvp")
        dummy = tuple(zeros_like(x).requires_grad_(True) for x in inputs)
        back = _fill(_grad(jac, inputs, dummy, create_graph=True), inputs, strict, "hvp")
        res = _fill(_grad(back, dummy, v, create_graph), inputs, strict, "hvp")
    return (out if create_graph else out.detach()), _untuple(res, in_tuple)
