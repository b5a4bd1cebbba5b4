"""Function transforms (``flow.func``), as ``torch.func``: grad, vjp, jacrev, jacfwd, hessian, vmap,
functional_call.

The transforms are built on the eager autograd engine (:func:`flow.autograd.grad`), so they nest:
inside another transform the inner one keeps its graph (``create_graph``), which makes
``grad(grad(f))`` and ``hessian`` work. ``jacfwd`` computes the same Jacobian as ``jacrev``
(reverse mode, one backward per output element). ``vmap`` runs the function once per batch
element and stacks the results: the values are those of a batched kernel, without its speed.

>>> f = lambda x: (x.sin() ** 2).sum()
>>> flow.func.grad(f)(flow.tensor([0.5, 1.0]))
tensor([0.8415, 0.9093])
"""

from __future__ import annotations

import functools
import threading
from contextlib import contextmanager
from typing import Any, Callable

from flow.autograd import functional as _af
from flow.autograd.grad_mode import enable_grad
from flow.errors import AutogradError

__all__ = ["grad", "grad_and_value", "vjp", "jacrev", "jacfwd", "hessian", "vmap", "functional_call"]


class _Depth(threading.local):
    def __init__(self) -> None:
        self.n = 0


_DEPTH = _Depth()


@contextmanager
def _level():
    # Depth > 0 means an enclosing transform may differentiate what this one returns (also through
    # closures), so the inner one must build a graph of its own gradient.
    _DEPTH.n += 1
    try:
        yield
    finally:
        _DEPTH.n -= 1


def _tensor_cls():
    from flow._tensor import Tensor

    return Tensor


def _argnums(argnums, n_args: int, fn_name: str) -> tuple[bool, tuple]:
    is_tuple = isinstance(argnums, tuple)
    nums = argnums if is_tuple else (argnums,)
    if not nums:
        raise ValueError(f"{fn_name}: argnums must be non-empty")
    out = []
    for a in nums:
        if not isinstance(a, int) or isinstance(a, bool):
            raise TypeError(f"{fn_name}: argnums must be an int or a tuple of ints, got {a!r}")
        if not -n_args <= a < n_args:
            raise ValueError(f"{fn_name}: got argnums={a} but only {n_args} positional inputs")
        out.append(a % n_args)
    return is_tuple, tuple(out)


def _prepare_args(args: tuple, nums: tuple, fn_name: str) -> tuple[list, bool]:
    """Args with those at ``nums`` made differentiable; and whether the result must keep a graph."""
    Tensor = _tensor_cls()
    args = list(args)
    keep = _DEPTH.n > 1  # called inside this transform's own level: > 1 means an enclosing transform
    for a in nums:
        x = args[a]
        if not isinstance(x, Tensor):
            raise TypeError(f"{fn_name}: argument {a} (in argnums) must be a Tensor, got {type(x).__name__}")
        if not x.dtype.is_floating_point:
            raise TypeError(f"{fn_name}: argument {a} must be a floating-point Tensor to differentiate, got {x.dtype}")
        keep = keep or x.requires_grad
        args[a] = x.view_as(x) if x.requires_grad else x.detach().requires_grad_(True)
    return args, keep


def _split_aux(out, has_aux: bool, fn_name: str):
    if not has_aux:
        return out, None
    if not isinstance(out, tuple) or len(out) != 2:
        raise AutogradError(f"{fn_name}(f, has_aux=True): f must return a tuple (output, aux)")
    return out


def _detach_tree(x, keep: bool):
    Tensor = _tensor_cls()
    if keep:
        return x
    if isinstance(x, Tensor):
        return x.detach()
    if isinstance(x, (tuple, list)):
        return type(x)(_detach_tree(e, keep) for e in x)
    if isinstance(x, dict):
        return {k: _detach_tree(v, keep) for k, v in x.items()}
    return x


def grad_and_value(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """A function returning ``(gradient, value)`` of the scalar ``func`` (``(grad, (value, aux))`` with aux)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        is_tuple, nums = _argnums(argnums, len(args), "grad")
        with enable_grad(), _level():
            args, keep = _prepare_args(args, nums, "grad")
            out, aux = _split_aux(func(*args, **kwargs), has_aux, "grad")
            if not isinstance(out, _tensor_cls()):
                raise AutogradError(f"grad: f must return a Tensor, got {type(out).__name__}")
            if out.numel() != 1:
                raise AutogradError(
                    f"grad: f must return a one-element Tensor (a scalar), got shape {tuple(out.shape)}"
                )
            xs = tuple(args[a] for a in nums)
            gs = _af._fill(_af._grad((out,), xs, None, create_graph=keep), xs, False, "grad")
        g = gs if is_tuple else gs[0]
        value = _detach_tree(out, keep)
        if has_aux:
            return _detach_tree(g, keep), (value, _detach_tree(aux, keep))
        return _detach_tree(g, keep), value

    return wrapper


def grad(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """A function returning the gradient of the scalar ``func`` with respect to the ``argnums`` arguments."""
    gv = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = gv(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapper


def vjp(func: Callable, *primals, has_aux: bool = False):
    """``(func(*primals), vjp_fn)`` (and aux); ``vjp_fn(cotangents)`` gives one gradient per primal."""
    nums = tuple(range(len(primals)))
    with enable_grad(), _level():
        args, keep = _prepare_args(primals, nums, "vjp")
        out, aux = _split_aux(func(*args), has_aux, "vjp")
    out_tuple, outs = _af._as_tuple(out, "outputs of the function", "vjp")
    keep = keep or _DEPTH.n > 0

    def vjp_fn(cotangents):
        v = _af._check_v(cotangents, outs, "vjp_fn", "cotangents", "output")
        with enable_grad():
            # retain: a vjp_fn may be called more than once, as torch.func allows
            gs = _af._grad(outs, tuple(args), v, create_graph=keep, retain_graph=True)
            gs = _af._fill(gs, tuple(args), False, "vjp_fn")
        return _detach_tree(gs, keep)

    res = _detach_tree(out, keep)
    return (res, vjp_fn, _detach_tree(aux, keep)) if has_aux else (res, vjp_fn)


def jacrev(func: Callable, argnums=0, *, has_aux: bool = False, chunk_size: int | None = None) -> Callable:
    """A function returning the Jacobian of ``func`` with respect to the ``argnums`` arguments.

    Each entry has shape ``output.shape + input.shape``; a tuple of outputs (or of argnums) gives a tuple.
    """
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"jacrev: chunk_size must be positive, got {chunk_size}")

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        in_tuple, nums = _argnums(argnums, len(args), "jacrev")
        with enable_grad(), _level():
            args, keep = _prepare_args(args, nums, "jacrev")
            out, aux = _split_aux(func(*args, **kwargs), has_aux, "jacrev")
            out_tuple, outs = _af._as_tuple(out, "outputs of the function", "jacrev")
            xs = tuple(args[a] for a in nums)
            jac = _af._untuple2(_af._jac_rows(outs, xs, keep, False, "jacrev"), out_tuple, in_tuple)
        jac = _detach_tree(jac, keep)
        return (jac, _detach_tree(aux, keep)) if has_aux else jac

    return wrapper


def jacfwd(func: Callable, argnums=0, has_aux: bool = False, *, randomness: str = "error") -> Callable:
    """The Jacobian of ``func``, as ``torch.func.jacfwd``; computed in reverse mode (the same values)."""
    _check_randomness(randomness, "jacfwd")
    return jacrev(func, argnums, has_aux=has_aux)


def hessian(func: Callable, argnums=0) -> Callable:
    """A function returning the Hessian of the scalar ``func``: the Jacobian of its gradient."""
    return jacfwd(jacrev(func, argnums), argnums)


def _check_randomness(randomness: str, fn_name: str) -> None:
    if randomness not in ("error", "different", "same"):
        raise ValueError(f"{fn_name}: randomness must be 'error', 'different' or 'same', got {randomness!r}")


def _batch_size(args: tuple, dims: tuple) -> int:
    Tensor = _tensor_cls()
    sizes = set()
    for k, (a, d) in enumerate(zip(args, dims)):
        if d is None:
            continue
        if not isinstance(a, Tensor):
            raise ValueError(f"vmap: in_dim={d} given for argument {k}, which is a {type(a).__name__}, not a Tensor")
        if not -a.dim() <= d < a.dim():
            raise ValueError(f"vmap: in_dim={d} is out of range for argument {k} of shape {tuple(a.shape)}")
        sizes.add(a.shape[d])
    if not sizes:
        raise ValueError("vmap: at least one argument must be mapped over (every in_dim is None)")
    if len(sizes) > 1:
        raise ValueError(f"vmap: the mapped dimensions of the arguments have different sizes {sorted(sizes)}")
    return sizes.pop()


def _stack_out(results: list, out_dims, where: str):
    Tensor = _tensor_cls()
    from flow.ops.shape_ops import stack

    first = results[0]
    if isinstance(first, Tensor):
        if out_dims is None:
            return first
        if not isinstance(out_dims, int):
            raise ValueError(f"vmap: out_dims for {where} must be an int or None, got {out_dims!r}")
        return stack(results, dim=out_dims)
    if isinstance(first, (tuple, list)):
        dims = out_dims if isinstance(out_dims, (tuple, list)) else (out_dims,) * len(first)
        if len(dims) != len(first):
            raise ValueError(f"vmap: out_dims has {len(dims)} entries but the function returned {len(first)} outputs")
        return type(first)(_stack_out([r[i] for r in results], d, f"{where}[{i}]") for i, d in enumerate(dims))
    raise ValueError(f"vmap: the function must return Tensors (or tuples of them), got {type(first).__name__}")


def vmap(
    func: Callable,
    in_dims: Any = 0,
    out_dims: Any = 0,
    randomness: str = "error",
    *,
    chunk_size: int | None = None,
) -> Callable:
    """A function mapping ``func`` over a dimension of its inputs, as ``torch.func.vmap``.

    ``in_dims`` is an int (every argument) or a tuple with one int-or-None per positional argument;
    ``out_dims`` gives where the batch dimension goes in each output. The function runs once per
    batch element. ``randomness``: ``'error'`` refuses a function that draws random numbers,
    ``'different'`` draws afresh per element, ``'same'`` gives every element the same draws.
    """
    _check_randomness(randomness, "vmap")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"vmap: chunk_size must be positive, got {chunk_size}")

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from flow._random import get_rng_state, set_rng_state

        if isinstance(in_dims, (tuple, list)):
            if len(in_dims) != len(args):
                raise ValueError(f"vmap: in_dims has {len(in_dims)} entries but {len(args)} positional arguments")
            dims = tuple(in_dims)
        elif in_dims is None or isinstance(in_dims, int):
            dims = (in_dims,) * len(args)
        else:
            raise ValueError(f"vmap: in_dims must be an int, None or a tuple of them, got {in_dims!r}")
        n = _batch_size(args, dims)
        start = get_rng_state()
        results = []
        for b in range(n):
            if randomness == "same":
                set_rng_state(start)
            sliced = tuple(a if d is None else a.select(d, b) for a, d in zip(args, dims))
            results.append(func(*sliced, **kwargs))
            if randomness == "error" and b == 0 and not _same_state(start, get_rng_state()):
                raise AutogradError(
                    "vmap: called a random operation while in randomness='error' mode; pass randomness='same' "
                    "or 'different' to vmap, or draw the random numbers outside it"
                )
        return _stack_out(results, out_dims, "the output")

    return wrapper


def _same_state(a, b) -> bool:
    return bool(a.shape == b.shape and (a == b).all().item())


def functional_call(
    module, parameter_and_buffer_dicts, args=None, kwargs=None, *, tie_weights: bool = True, strict: bool = False
):
    """Call ``module`` with its parameters and buffers replaced by the given tensors (by dotted name).

    The module is restored afterwards. With ``tie_weights`` a tensor given for one name of a shared
    parameter replaces every name of it; ``strict`` requires every parameter and buffer to be given.
    """
    dicts = parameter_and_buffer_dicts
    if isinstance(dicts, dict):
        dicts = (dicts,)
    merged: dict = {}
    for d in dicts:
        if not isinstance(d, dict):
            raise TypeError(
                f"functional_call: expected a dict of tensors (or a tuple of dicts), got {type(d).__name__}"
            )
        for k, v in d.items():
            if k in merged:
                raise ValueError(f"functional_call: {k!r} appears in more than one of the given dicts")
            merged[k] = v
    names = [n for n, _ in module.named_parameters(remove_duplicate=False)]
    names += [n for n, _ in module.named_buffers(remove_duplicate=False)]
    current = dict(module.named_parameters(remove_duplicate=False))
    current.update(module.named_buffers(remove_duplicate=False))
    unexpected = [k for k in merged if k not in current]
    if unexpected:
        raise ValueError(f"functional_call: unexpected key(s) {unexpected}: not parameters or buffers of the module")
    if tie_weights:
        by_id = {id(current[k]): v for k, v in merged.items()}
        for n in names:
            if n not in merged and id(current[n]) in by_id:
                merged[n] = by_id[id(current[n])]
    if strict:
        missing = [n for n in names if n not in merged]
        if missing:
            raise ValueError(f"functional_call: missing key(s) {missing} (strict=True)")
    swapped = []
    try:
        for name, value in merged.items():
            mod_path, _, leaf = name.rpartition(".")
            mod = module.get_submodule(mod_path) if mod_path else module
            store = mod._parameters if leaf in mod._parameters else mod._buffers
            swapped.append((store, leaf, store[leaf]))
            store[leaf] = value
        if args is None:
            args = ()
        elif not isinstance(args, tuple):
            args = (args,)
        return module(*args, **(kwargs or {}))
    finally:
        for store, leaf, old in reversed(swapped):
            store[leaf] = old
