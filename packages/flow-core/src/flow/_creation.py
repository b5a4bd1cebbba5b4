"""Making tensors: ``flow.tensor``, factories and random sampling."""

from __future__ import annotations

import builtins
import math
from typing import Sequence

import numpy as np

from flow import _dtype as D
from flow._device import CPU
from flow._device import device as _device
from flow._random import host_rng
from flow._tensor import Tensor
from flow.errors import OpError, OpMemoryError, OpTypeError

__all__ = [
    "tensor",
    "as_tensor",
    "from_numpy",
    "zeros",
    "ones",
    "full",
    "empty",
    "arange",
    "linspace",
    "logspace",
    "eye",
    "zeros_like",
    "ones_like",
    "full_like",
    "empty_like",
    "rand",
    "randn",
    "randint",
    "randperm",
    "rand_like",
    "randn_like",
    "randint_like",
    "normal",
    "bernoulli",
    "multinomial",
]


def _dev(device) -> _device:
    if device is None:
        return CPU
    return _device(device) if not isinstance(device, _device) else device


def _to_device(arr: np.ndarray, dev: _device):
    if dev is CPU:
        return arr
    from flow.registry import get_device_type

    return get_device_type(dev.type).from_host(arr, dev.index)


def _finish(arr: np.ndarray, dtype: D.dtype, dev: _device, requires_grad: bool) -> Tensor:
    t = Tensor._make(_to_device(arr, dev), dtype, dev)
    if requires_grad:
        if not dtype.is_floating_point:
            raise OpTypeError("tensor", f"only floating-point tensors can require gradients, got {dtype}")
        t._requires_grad = True
    return t


def _infer_dtype(data) -> D.dtype:
    """PyTorch's inference: bools -> bool, ints -> int64, floats -> default dtype."""
    kinds = set()
    stack = [data]
    while stack:
        x = stack.pop()
        if isinstance(x, Tensor):
            return x.dtype
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, builtins.bool) or isinstance(x, np.bool_):
            kinds.add(0)
        elif isinstance(x, (int, np.integer)):
            kinds.add(1)
        elif isinstance(x, (float, np.floating)):
            kinds.add(2)
        elif isinstance(x, complex):
            raise OpTypeError("tensor", "complex numbers are not supported")
        else:
            raise OpTypeError("tensor", f"cannot make a tensor from an element of type {type(x).__name__}")
    if not kinds:
        return D._default_dtype
    k = max(kinds)
    return D.bool if k == 0 else D.int64 if k == 1 else D._default_dtype


def _host_array(data, dtype: D.dtype | None) -> tuple[np.ndarray, D.dtype]:
    if isinstance(data, Tensor):
        a = np.array(data.numpy_host(), copy=True)
        dt = dtype or data.dtype
        return a.astype(dt.np, copy=False), dt
    if isinstance(data, np.ndarray) or (hasattr(data, "__array__") and not isinstance(data, (list, tuple))):
        a = np.array(data, copy=True)
        if dtype is None:
            if a.dtype == np.float64 and not isinstance(data, (np.ndarray, np.generic)):
                dt = D._default_dtype
            else:
                try:
                    dt = D.NP_TO_DTYPE[a.dtype]
                except KeyError:
                    raise OpTypeError("tensor", f"unsupported NumPy dtype {a.dtype}") from None
        else:
            dt = dtype
        return a.astype(dt.np, copy=False), dt
    if isinstance(data, (list, tuple)) and any(isinstance(x, Tensor) for x in _flat_iter(data)):
        data = _tensors_to_lists(data)
    dt = dtype or _infer_dtype(data)
    try:
        a = np.array(data, dtype=dt.np)
    except (ValueError, TypeError) as e:
        raise OpError("tensor", f"could not build a tensor from the given data: {e}") from None
    if a.dtype == object:
        raise OpError("tensor", "the given nested sequences have inconsistent lengths")
    return a, dt


def _flat_iter(x):
    stack = [x]
    while stack:
        y = stack.pop()
        if isinstance(y, (list, tuple)):
            stack.extend(y)
        else:
            yield y


def _tensors_to_lists(x):
    if isinstance(x, Tensor):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [_tensors_to_lists(y) for y in x]
    return x


def tensor(data, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (nested lists, numbers, NumPy arrays, tensors).

    >>> flow.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    """
    dt = D.as_dtype(dtype) if dtype is not None else None
    a, dt = _host_array(data, dt)
    return _finish(a, dt, _dev(device), requires_grad)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """Like :func:`tensor`, but returns ``data`` itself when it is already a fitting tensor."""
    if isinstance(data, Tensor):
        out = data
        if dtype is not None:
            out = out.to(D.as_dtype(dtype))
        if device is not None:
            out = out.to(_dev(device))
        return out
    if isinstance(data, np.ndarray) and dtype is None and device is None:
        return from_numpy(data)
    return tensor(data, dtype=dtype, device=device)


def from_numpy(ndarray: np.ndarray) -> Tensor:
    """A CPU tensor sharing memory with ``ndarray`` (changes show in both)."""
    if not isinstance(ndarray, np.ndarray):
        raise OpTypeError("from_numpy", f"expected a NumPy array, got {type(ndarray).__name__}")
    try:
        dt = D.NP_TO_DTYPE[ndarray.dtype]
    except KeyError:
        raise OpTypeError("from_numpy", f"unsupported NumPy dtype {ndarray.dtype}") from None
    return Tensor._make(ndarray, dt, CPU)


def _sizes(op: str, sizes: tuple, size) -> tuple:
    """The dims of a factory called as ``f(2, 3)``, ``f((2, 3))`` or, as PyTorch allows, ``f(size=(2, 3))``."""
    if size is None:
        return sizes
    if sizes:
        raise TypeError(f"{op}() got the size both as positional arguments {sizes!r} and as size={size!r}")
    return (size,)


def _size(op: str, size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    out = []
    for s in size:
        if isinstance(s, Tensor):
            s = int(s.item())
        if isinstance(s, builtins.bool) or not isinstance(s, (int, np.integer)):
            raise OpTypeError(op, f"size must be a sequence of ints, got {size!r}")
        if s < 0:
            raise OpError(op, f"negative dimension {s} in size {tuple(size)}")
        out.append(int(s))
    if math.prod(out) > _MAX_ELEMENTS:
        raise OpMemoryError(op, f"size {tuple(out)} has {math.prod(out)} elements, more than any device can hold")
    return tuple(out)


_MAX_ELEMENTS = (1 << 63) // 16  # NumPy's own limit is the byte size in an intp, for the widest dtype


def _alloc(op: str, fn, shape: tuple, *args):
    """``fn(shape, *args)`` (np.zeros ...), with running out of memory named as the op's."""
    try:
        return fn(shape, *args)
    except MemoryError as e:
        raise OpMemoryError(op, f"out of memory for size {tuple(shape)}: {e}") from None


def _dt(dtype, default=None) -> D.dtype:
    if dtype is None:
        return default or D._default_dtype
    return D.as_dtype(dtype)


def zeros(*sizes, size=None, dtype=None, device=None, requires_grad: bool = False, placement=None, sbp=None) -> Tensor:
    """A tensor of zeros."""
    size = _sizes("zeros", sizes, size)
    if placement is not None or sbp is not None:
        return _global("zeros", placement, sbp, requires_grad, lambda: zeros(*size, dtype=dtype, device=device))
    dt = _dt(dtype)
    return _finish(_alloc("zeros", np.zeros, _size("zeros", size), dt.np), dt, _dev(device), requires_grad)


def ones(*sizes, size=None, dtype=None, device=None, requires_grad: bool = False, placement=None, sbp=None) -> Tensor:
    """A tensor of ones."""
    size = _sizes("ones", sizes, size)
    if placement is not None or sbp is not None:
        return _global("ones", placement, sbp, requires_grad, lambda: ones(*size, dtype=dtype, device=device))
    dt = _dt(dtype)
    return _finish(_alloc("ones", np.ones, _size("ones", size), dt.np), dt, _dev(device), requires_grad)


def empty(
    *sizes,
    size=None,
    dtype=None,
    device=None,
    requires_grad: bool = False,
    memory_format=None,
    placement=None,
    sbp=None,
) -> Tensor:
    """An uninitialised tensor."""
    size = _sizes("empty", sizes, size)
    if placement is not None or sbp is not None:
        return _global("empty", placement, sbp, requires_grad, lambda: empty(*size, dtype=dtype, device=device))
    dt = _dt(dtype)
    return _finish(_alloc("empty", np.empty, _size("empty", size), dt.np), dt, _dev(device), requires_grad)


def full(size, fill_value, *, dtype=None, device=None, requires_grad: bool = False, placement=None, sbp=None) -> Tensor:
    """A tensor filled with ``fill_value`` (dtype inferred from it, as PyTorch does)."""
    if placement is not None or sbp is not None:
        return _global(
            "full", placement, sbp, requires_grad, lambda: full(size, fill_value, dtype=dtype, device=device)
        )
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    dt = D.as_dtype(dtype) if dtype is not None else _infer_dtype(fill_value)
    shape = _size("full", (size,) if isinstance(size, (tuple, list)) else (size,))
    return _finish(_alloc("full", np.full, shape, fill_value, dt.np), dt, _dev(device), requires_grad)


def _like(x: Tensor, dtype, device):
    return (D.as_dtype(dtype) if dtype is not None else x.dtype), (_dev(device) if device is not None else x.device)


def zeros_like(
    input: Tensor, *, dtype=None, device=None, requires_grad: bool = False, placement=None, sbp=None
) -> Tensor:
    """Zeros with ``input``'s shape (and dtype and device unless given)."""
    if placement is not None or sbp is not None or input._data.__class__ is not np.ndarray:
        g = _global_like(
            "zeros_like", input, placement, sbp, requires_grad, lambda x: zeros_like(x, dtype=dtype, device=device)
        )
        if g is not None:
            return g
    dt, dev = _like(input, dtype, device)
    return _finish(np.zeros(input._data.shape, dt.np), dt, dev, requires_grad)


def ones_like(
    input: Tensor, *, dtype=None, device=None, requires_grad: bool = False, placement=None, sbp=None
) -> Tensor:
    """Ones with ``input``'s shape (and dtype and device unless given); seeds ``backward()``."""
    if placement is not None or sbp is not None or input._data.__class__ is not np.ndarray:
        g = _global_like(
            "ones_like", input, placement, sbp, requires_grad, lambda x: ones_like(x, dtype=dtype, device=device)
        )
        if g is not None:
            return g
    if dtype is None and device is None and not requires_grad:
        dev = input.device
        a = np.ones(input._data.shape, input.dtype.np)
        return Tensor._make(a if dev is CPU else _to_device(a, dev), input.dtype, dev)
    dt, dev = _like(input, dtype, device)
    return _finish(np.ones(input._data.shape, dt.np), dt, dev, requires_grad)


def empty_like(
    input: Tensor, *, dtype=None, device=None, requires_grad: bool = False, placement=None, sbp=None
) -> Tensor:
    if placement is not None or sbp is not None or input._data.__class__ is not np.ndarray:
        g = _global_like(
            "empty_like", input, placement, sbp, requires_grad, lambda x: empty_like(x, dtype=dtype, device=device)
        )
        if g is not None:
            return g
    dt, dev = _like(input, dtype, device)
    return empty(tuple(input.shape), dtype=dt, device=dev, requires_grad=requires_grad)


def full_like(
    input: Tensor, fill_value, *, dtype=None, device=None, requires_grad: bool = False, placement=None, sbp=None
) -> Tensor:
    if placement is not None or sbp is not None or input._data.__class__ is not np.ndarray:
        g = _global_like(
            "full_like",
            input,
            placement,
            sbp,
            requires_grad,
            lambda x: full_like(x, fill_value, dtype=dtype, device=device),
        )
        if g is not None:
            return g
    dt, dev = _like(input, dtype, device)
    return full(tuple(input.shape), fill_value, dtype=dt, device=dev, requires_grad=requires_grad)


def arange(
    start, end=None, step=1, *, dtype=None, device=None, requires_grad: bool = False, placement=None, sbp=None
) -> Tensor:
    """Values from ``start`` up to (not including) ``end`` by ``step``."""
    if placement is not None or sbp is not None:
        return _global(
            "arange", placement, sbp, requires_grad, lambda: arange(start, end, step, dtype=dtype, device=device)
        )
    if end is None:
        start, end = 0, start
    vals = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    start, end, step = vals
    if step == 0:
        raise OpError("arange", "step must be nonzero")
    if (end - start) * step < 0:
        raise OpError("arange", f"upper bound and step are inconsistent: start={start}, end={end}, step={step}")
    if dtype is None:
        dt = D.int64 if all(isinstance(v, (int, np.integer)) for v in vals) else D._default_dtype
    else:
        dt = D.as_dtype(dtype)
    n = max(0, math.ceil((end - start) / step))
    a = (np.arange(n, dtype=np.float64) * step + start) if dt.is_floating_point else np.arange(start, end, step)
    return _finish(a.astype(dt.np), dt, _dev(device), requires_grad)


def linspace(start, end, steps: int, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive."""
    if steps < 0:
        raise OpError("linspace", f"number of steps must be non-negative, got {steps}")
    dt = _dt(dtype)
    return _finish(np.linspace(start, end, steps).astype(dt.np), dt, _dev(device), requires_grad)


def logspace(start, end, steps: int, base: float = 10.0, *, dtype=None, device=None) -> Tensor:
    dt = _dt(dtype)
    return _finish(np.logspace(start, end, steps, base=base).astype(dt.np), dt, _dev(device), False)


def eye(n: int, m: int | None = None, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A 2-d tensor with ones on the diagonal."""
    if n < 0 or (m is not None and m < 0):
        raise OpError("eye", f"n and m must be non-negative, got n={n}, m={m}")
    dt = _dt(dtype)
    return _finish(np.eye(n, m, dtype=dt.np), dt, _dev(device), requires_grad)


# -- random ---------------------------------------------------------------------
def _rng(generator):
    return host_rng(generator)


def rand(
    *sizes, size=None, generator=None, dtype=None, device=None, requires_grad: bool = False, placement=None, sbp=None
) -> Tensor:
    """Uniform samples in [0, 1)."""
    size = _sizes("rand", sizes, size)
    if placement is not None or sbp is not None:
        return _global(
            "rand", placement, sbp, requires_grad, lambda: rand(*size, generator=generator, dtype=dtype, device=device)
        )
    dt = _dt(dtype)
    if not dt.is_floating_point:
        raise OpTypeError("rand", f"dtype must be floating point, got {dt}")
    a = _rng(generator).random(_size("rand", size), dtype=np.float64).astype(dt.np)
    return _finish(a, dt, _dev(device), requires_grad)


def randn(
    *sizes, size=None, generator=None, dtype=None, device=None, requires_grad: bool = False, placement=None, sbp=None
) -> Tensor:
    """Standard normal samples."""
    size = _sizes("randn", sizes, size)
    if placement is not None or sbp is not None:
        return _global(
            "randn",
            placement,
            sbp,
            requires_grad,
            lambda: randn(*size, generator=generator, dtype=dtype, device=device),
        )
    dt = _dt(dtype)
    if not dt.is_floating_point:
        raise OpTypeError("randn", f"dtype must be floating point, got {dt}")
    a = _rng(generator).standard_normal(_size("randn", size), dtype=np.float64).astype(dt.np)
    return _finish(a, dt, _dev(device), requires_grad)


def randint(low, high=None, size=None, *, generator=None, dtype=None, device=None, placement=None, sbp=None) -> Tensor:
    """Integers uniformly drawn from [low, high)."""
    if placement is not None or sbp is not None:
        return _global(
            "randint",
            placement,
            sbp,
            False,
            lambda: randint(low, high, size, generator=generator, dtype=dtype, device=device),
        )
    if size is None:
        if isinstance(high, (tuple, list)):
            low, high, size = 0, low, high
        else:
            raise OpTypeError("randint", "missing the 'size' argument")
    if high is None:
        low, high = 0, low
    if high <= low:
        raise OpError("randint", f"expected low < high, got low={low}, high={high}")
    dt = _dt(dtype, D.int64)
    a = _rng(generator).integers(low, high, size=_size("randint", (size,)), dtype=np.int64).astype(dt.np)
    return _finish(a, dt, _dev(device), False)


def randperm(n: int, *, generator=None, dtype=None, device=None) -> Tensor:
    """A random permutation of 0..n-1."""
    if n < 0:
        raise OpError("randperm", f"n must be non-negative, got {n}")
    dt = _dt(dtype, D.int64)
    return _finish(_rng(generator).permutation(n).astype(dt.np), dt, _dev(device), False)


def rand_like(input: Tensor, *, generator=None, dtype=None, device=None, placement=None, sbp=None) -> Tensor:
    if placement is not None or sbp is not None or input._data.__class__ is not np.ndarray:
        g = _global_like(
            "rand_like",
            input,
            placement,
            sbp,
            False,
            lambda x: rand_like(x, generator=generator, dtype=dtype, device=device),
        )
        if g is not None:
            return g
    dt, dev = _like(input, dtype, device)
    return rand(tuple(input.shape), generator=generator, dtype=dt, device=dev)


def randn_like(input: Tensor, *, generator=None, dtype=None, device=None, placement=None, sbp=None) -> Tensor:
    if placement is not None or sbp is not None or input._data.__class__ is not np.ndarray:
        g = _global_like(
            "randn_like",
            input,
            placement,
            sbp,
            False,
            lambda x: randn_like(x, generator=generator, dtype=dtype, device=device),
        )
        if g is not None:
            return g
    dt, dev = _like(input, dtype, device)
    return randn(tuple(input.shape), generator=generator, dtype=dt, device=dev)


def randint_like(input: Tensor, low, high=None, *, dtype=None, device=None, placement=None, sbp=None) -> Tensor:
    if placement is not None or sbp is not None or input._data.__class__ is not np.ndarray:
        g = _global_like(
            "randint_like",
            input,
            placement,
            sbp,
            False,
            lambda x: randint_like(x, low, high, dtype=dtype, device=device),
        )
        if g is not None:
            return g
    dt, dev = _like(input, dtype, device)
    return randint(low, high, tuple(input.shape), dtype=dt, device=dev)


def normal(mean=0.0, std=1.0, size: Sequence[int] | None = None, *, generator=None, dtype=None, device=None) -> Tensor:
    """Normal samples; ``mean``/``std`` may be tensors (broadcast) or numbers with ``size``."""
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        ref = mean if isinstance(mean, Tensor) else std
        shape = np.broadcast_shapes(tuple(getattr(mean, "shape", ())), tuple(getattr(std, "shape", ())))
        z = randn(shape, generator=generator, dtype=ref.dtype, device=ref.device)
        return z * std + mean
    if size is None:
        raise OpTypeError("normal", "give 'size' when mean and std are numbers")
    return randn(tuple(size), generator=generator, dtype=dtype, device=device) * std + mean


def bernoulli(input: Tensor, p: float | None = None, *, generator=None) -> Tensor:
    """0/1 samples with probability ``input`` (or ``p``), same dtype as input."""
    probs = input.numpy_host() if p is None else np.full(tuple(input.shape), p)
    if np.any((probs < 0) | (probs > 1)):
        raise OpError("bernoulli", "probabilities must be in [0, 1]")
    a = (_rng(generator).random(tuple(input.shape)) < probs).astype(input.dtype.np)
    return _finish(a, input.dtype, input.device, False)


def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *, generator=None) -> Tensor:
    """Sample indices from the rows of ``input`` (non-negative weights)."""
    w = np.asarray(input.numpy_host(), dtype=np.float64)
    if w.ndim not in (1, 2):
        raise OpError("multinomial", f"expected a 1-d or 2-d tensor, got {w.ndim}-d")
    if np.any(w < 0) or not np.all(np.isfinite(w)):
        raise OpError("multinomial", "weights must be finite and non-negative")
    rows = w.reshape(-1, w.shape[-1])
    rng = _rng(generator)
    out = []
    for r in rows:
        s = r.sum()
        if s <= 0:
            raise OpError("multinomial", "each row must have a positive sum")
        if not replacement and num_samples > np.count_nonzero(r):
            raise OpError(
                "multinomial",
                f"cannot draw {num_samples} samples without replacement from {np.count_nonzero(r)} nonzero weights",
            )
        out.append(rng.choice(len(r), size=num_samples, replace=replacement, p=r / s))
    a = np.stack(out).astype(np.int64).reshape(w.shape[:-1] + (num_samples,))
    return _finish(a, D.int64, input.device, False)


# -- pickling --------------------------------------------------------------------------------
def _rebuild_tensor(arr, dtype_name, device_str, requires_grad):
    t = tensor(arr, dtype=D.as_dtype(dtype_name), device=device_str)
    if requires_grad:
        t._requires_grad = True
    return t


# -- global tensors: placement= / sbp= (flow-dist, through flow.provided) ------------------------
def constant_for(input: Tensor, value, *, dtype=None) -> Tensor:
    """A tensor holding ``value`` (the same in every process) for an op with ``input``: a plain tensor
    on ``input``'s device, or, when ``input`` is global, a broadcast global tensor on its placement
    (flow-dist's ``"global_constant"``), so that composites can make masks and bands for any input."""
    t = tensor(value, dtype=dtype, device=input.device)
    if input._data.__class__ is not np.ndarray and input.is_global:
        from flow import provided

        return provided.require("global_constant", "a constant for a global tensor")(t, input)
    return t


def _global(name: str, placement, sbp, requires_grad: bool, build):
    """A factory's global tensor: ``build()`` makes the whole logical tensor on every rank (the same
    values for the same seed, whatever the placement and SBP); flow-dist's ``global_factory`` keeps
    this rank's piece."""
    if placement is None or sbp is None:
        raise OpError(name, "placement= and sbp= go together: give both for a global tensor")
    from flow import provided

    out = provided.require("global_factory", f"flow.{name}(placement=...)")(build(), placement, sbp)
    if requires_grad:
        out.requires_grad_(True)
    return out


def _global_like(name: str, input: Tensor, placement, sbp, requires_grad: bool, build):
    """``*_like``: global when ``placement``/``sbp`` are given or ``input`` is global (then like it);
    None for any other input (a symbolic tensor while tracing: the plain path)."""
    if placement is None and sbp is None:
        if not input.is_global:
            return None
        placement, sbp = input.placement, input.sbp
    # the logical tensor is built from a plain stand-in of input's logical shape, dtype and device
    stand_in = empty(tuple(input.shape), dtype=input.dtype, device=input.device)
    return _global(name, placement, sbp, requires_grad, lambda: build(stand_in))
