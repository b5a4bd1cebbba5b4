"""gradcheck (finite differences in float64) and opcheck (registrations agree).

``opcheck(name)`` takes the op's own samples (``samples=`` given at
registration) and checks, on every registered device type:

1. the meta rule's shapes and dtypes match what the kernel returns;
2. the kernel's values match the reference (generic NumPy) kernel;
3. the gradient matches finite differences (float64, on the CPU);
4. every bad input (the op's :class:`ErrorInput` samples and those its schema
   implies, see :mod:`flow.testing.error_inputs`) raises the declared flow error.

On a shape-only device (no data) only 1. and 4. are checked, plus a backward pass
whose gradients must have the inputs' shapes, dtypes and device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

from flow import _dtype as D
from flow.errors import FlowError


class OpCheckError(AssertionError):
    """An op's registrations disagree (meta vs kernel, device vs reference, gradient vs finite differences)."""


@dataclass
class SampleInput:
    """One way to call an op: positional tensor inputs and attributes.

    Tensors are given on the CPU in float64 (or their natural int/bool dtype);
    opcheck moves them to each device and floating dtype it checks.
    ``grad=False`` skips the gradient check for this sample (e.g. at kinks).
    """

    args: tuple
    kwargs: dict = field(default_factory=dict)
    grad: bool = True
    dtypes: tuple | None = None  # floating dtypes to check; default (float32, float64)
    rtol: float | None = None
    atol: float | None = None


def _to_np(t) -> np.ndarray:
    a = t.detach().numpy_host() if hasattr(t, "numpy_host") else np.asarray(t)
    if a.dtype == D.bfloat16.np or a.dtype == np.float16:
        a = a.astype(np.float32)
    return np.asarray(a)


def assert_close(actual, expected, rtol: float | None = None, atol: float | None = None, msg: str = "") -> None:
    """Assert two tensors/arrays are equal within tolerance (defaults by dtype, like torch.testing)."""
    a, e = _to_np(actual), _to_np(expected)
    if a.shape != e.shape:
        raise AssertionError(f"{msg} shape mismatch: {a.shape} vs {e.shape}")
    if rtol is None or atol is None:
        dt = a.dtype if a.dtype.kind == "f" else e.dtype
        if dt == np.float64:
            r, t = 1e-7, 1e-7
        elif dt == np.float32:
            r, t = 1.3e-6, 1e-5
        else:
            r, t = 0.0, 0.0
        rtol = r if rtol is None else rtol
        atol = t if atol is None else atol
    if a.dtype.kind in "biu" and e.dtype.kind in "biu":
        if not np.array_equal(a, e):
            raise AssertionError(f"{msg} values differ: {a} vs {e}")
        return
    if not np.allclose(a.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True):
        diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
        raise AssertionError(
            f"{msg} values differ: max abs diff {np.nanmax(diff) if diff.size else 0} (rtol={rtol}, atol={atol})"
        )


def _float_inputs(inputs) -> list[int]:
    from flow._tensor import Tensor

    return [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]


def gradcheck(
    fn: Callable,
    inputs: Sequence,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    seed: int = 0,
) -> bool:
    """Compare autograd's gradient of ``fn`` with central finite differences (float64).

    Every tensor in ``inputs`` that requires grad is checked. Outputs are
    projected on a random direction so one backward pass checks the whole
    Jacobian against ``2 * numel`` forward evaluations.
    """
    import flow
    from flow._tensor import Tensor

    inputs = tuple(inputs)
    idx = _float_inputs(inputs)
    if not idx:
        raise ValueError("gradcheck: no input requires grad")
    for i in idx:
        if inputs[i].dtype is not D.float64:
            raise ValueError(f"gradcheck: input {i} must be float64 for finite differences, got {inputs[i].dtype}")
    rng = np.random.default_rng(seed)
    out = fn(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    outs = [o for o in outs if isinstance(o, Tensor) and o.dtype.is_floating_point]
    projs = [flow.tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype) for o in outs]

    def scalar(*xs) -> float:
        with flow.no_grad():
            r = fn(*xs)
        rs = r if isinstance(r, (tuple, list)) else (r,)
        rs = [o for o in rs if isinstance(o, Tensor) and o.dtype.is_floating_point]
        return float(sum(float((o.double() * p.double()).sum().item()) for o, p in zip(rs, projs)))

    total = None
    for o, p in zip(outs, projs):
        if o.requires_grad:
            term = (o * p).sum()
            total = term if total is None else total + term
    wrt = [inputs[i] for i in idx]
    if total is None:
        analytic = [None] * len(wrt)
    else:
        analytic = flow.autograd.grad(total, wrt, allow_unused=True)
    for k, i in enumerate(idx):
        x = inputs[i]
        base = x.detach().numpy_host().copy()
        num = np.zeros_like(base)
        flat = base.reshape(-1)
        nflat = num.reshape(-1)
        for j in range(flat.size):
            orig = flat[j]
            for sgn in (1, -1):
                flat[j] = orig + sgn * eps
                xs = list(inputs)
                xs[i] = flow.tensor(base.copy(), dtype=x.dtype)
                val = scalar(*xs)
                nflat[j] += sgn * val
            flat[j] = orig
            nflat[j] /= 2 * eps
        a = analytic[k]
        a = np.zeros_like(num) if a is None else a.detach().numpy_host()
        if not np.allclose(a, num, atol=atol, rtol=rtol):
            if raise_exception:
                err = np.abs(a - num).max()
                raise OpCheckError(
                    f"gradcheck: gradient of input {i} differs from finite differences (max abs err {err:.3g})\n"
                    f"analytic:\n{a}\nnumerical:\n{num}"
                )
            return False
    return True


def gradgradcheck(
    fn: Callable, inputs: Sequence, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3, seed: int = 1
) -> bool:
    """Check second derivatives: gradcheck of (d fn / d inputs) . v with create_graph=True."""
    import flow
    from flow._tensor import Tensor

    rng = np.random.default_rng(seed)
    out = fn(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    projs = [flow.tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype) for o in outs if isinstance(o, Tensor)]
    idx = _float_inputs(inputs)

    def first_grad(*xs):
        with flow.enable_grad():
            # finite differences call this with plain copies of the inputs: differentiate those too
            xs = [x.detach().requires_grad_(True) if i in idx and not x.requires_grad else x for i, x in enumerate(xs)]
            r = fn(*xs)
            rs = r if isinstance(r, (tuple, list)) else (r,)
            tot = sum((o * p).sum() for o, p in zip(rs, projs))
            gs = flow.autograd.grad(tot, [xs[i] for i in idx], create_graph=True, allow_unused=True)
        return tuple(g for g in gs if g is not None)

    return gradcheck(first_grad, inputs, eps=eps, atol=atol, rtol=rtol)


# ---------------------------------------------------------------------------
def _device_types() -> list[str]:
    from flow.plugins.manager import ensure_loaded
    from flow.registry import REGISTRY

    ensure_loaded()
    return [n for n, d in REGISTRY.device_types.items() if _available(d)]


def _available(d) -> bool:
    try:
        return bool(d.is_available())
    except Exception:
        return False


def _convert(x, dtype, device):
    from flow._tensor import Tensor

    if isinstance(x, Tensor):
        t = x.detach()
        if t.dtype.is_floating_point and dtype is not None:
            t = t.to(dtype)
        if device is not None and device != "cpu":
            t = t.to(device)
        return t
    if isinstance(x, (list, tuple)) and x and all(isinstance(e, Tensor) for e in x):
        return type(x)(_convert(e, dtype, device) for e in x)
    return x


def _reference(op, args, kwargs):
    """Run the generic (NumPy) kernel on host copies of the inputs."""
    from flow._tensor import Tensor
    from flow.registry import REGISTRY

    entries = REGISTRY.kernel_entries(op, "generic", None)
    entries = [e for e in entries if e.generic] or op.kernels.get(("cpu", None), [])
    if not entries:
        return None
    e = entries[0]
    fn = e.fn(np) if e.generic else e.fn
    arrays = []
    for x in args:
        if isinstance(x, Tensor):
            arrays.append(np.array(x.numpy_host()))
        elif isinstance(x, (list, tuple)) and x and all(isinstance(t, Tensor) for t in x):
            arrays.append([np.array(t.numpy_host()) for t in x])
        else:
            arrays.append(x)
    out = fn(*arrays, **kwargs)
    return out if isinstance(out, tuple) else (out,)


def _meta_outputs(op, args, kwargs):
    m = op.meta(*args, **kwargs)
    return m if isinstance(m, tuple) else (m,)


def opcheck(
    op_name: str,
    *,
    devices: Iterable[str] | None = None,
    check_grad: bool = True,
    samples: Iterable[SampleInput] | None = None,
) -> dict:
    """Check an op's registrations agree; raise :class:`OpCheckError` naming the first disagreement.

    ``devices`` defaults to every registered, available device type. On a device
    with data: meta rule vs outputs, outputs vs the reference kernel, and (once,
    on the CPU in float64) the gradient vs finite differences. On a shape-only
    device (``DeviceType.extra["shape_only"]``): meta rule vs output shapes and
    dtypes, and backward giving every input a gradient of its shape, dtype and
    device; ops with ``dynamic_shape=True`` are skipped there.

    Error inputs (:class:`~flow.testing.ErrorInput`) among the samples, and those the schema
    implies, are run on every device and must raise the declared flow error; an op must have
    some unless it was registered with ``no_error_samples="<why>"``.

    Returns a small report: how many samples and devices were checked, what was skipped.
    """
    import flow
    from flow.registry import REGISTRY, get_op
    from flow.testing import error_inputs as E

    op = get_op(op_name)
    if samples is None:
        if op.samples is None:
            raise OpCheckError(
                f"op '{op_name}' (plugin '{op.plugin}') has no samples: pass samples= to "
                "register_op so opcheck can test it"
            )
        samples = list(op.samples())
    samples, errors = E.split(list(samples))
    if not samples:
        raise OpCheckError(f"op '{op_name}': its samples function yielded no SampleInput")
    undeclared = [i.name for i in op.schema.inputs if i.dtypes is None]
    if undeclared:
        raise OpCheckError(
            f"op '{op_name}' (plugin '{op.plugin}'): inputs {undeclared} declare no dtypes; give "
            "each input a flow.registry.Dtypes rule (schema(..., dtypes=...))"
        )
    if not errors and not E.generated(op, samples) and not op.no_error_samples:
        raise OpCheckError(
            f"op '{op_name}' (plugin '{op.plugin}') has no error samples: yield "
            "flow.testing.ErrorInput(...) from its samples for the inputs it rejects, or register "
            "it with no_error_samples='<why it accepts every input>'"
        )
    devs = list(devices) if devices is not None else _device_types()
    report = {
        "op": op_name,
        "samples": len(samples),
        "devices": devs,
        "grad_checked": 0,
        "skipped": [],
        "errors_checked": 0,
        "_samples": samples,
    }
    infos = {}
    for dev in devs:
        info = REGISTRY.device_types.get(dev)
        if info is None:
            raise OpCheckError(
                f"opcheck: no device type '{dev}' is registered (registered: {sorted(REGISTRY.device_types)})"
            )
        if info.extra.get("shape_only") and op.dynamic_shape:
            report["skipped"].append(
                f"{dev}: shapes only, and the output shape of '{op_name}' depends on the input values"
            )
            continue
        infos[dev] = info
    # gradients against finite differences (on the CPU) when a device with data is checked
    fd_grad = check_grad and any(not i.extra.get("shape_only") for i in infos.values())
    for si, s in enumerate(samples):
        dtypes = s.dtypes or (D.float32, D.float64)
        has_float = any(getattr(a, "dtype", None) is not None and a.dtype.is_floating_point for a in _flat(s.args))
        for dev, dtinfo in infos.items():
            shape_only = bool(dtinfo.extra.get("shape_only"))
            for dt in dtypes if has_float else (None,):
                args = tuple(_convert(a, dt, dev) for a in s.args)
                where = f"op '{op_name}' sample {si} on device '{dev}'" + (f" dtype {dt}" if dt else "")
                try:
                    out = flow.ops.call(op_name, *args, **s.kwargs)
                except FlowError as e:
                    raise OpCheckError(f"{where}: the op raised {type(e).__name__}: {e}") from e
                outs = out if isinstance(out, tuple) else (out,)
                metas = _meta_outputs(op, args, s.kwargs)
                if len(metas) != len(outs):
                    raise OpCheckError(f"{where}: meta rule gives {len(metas)} outputs, kernel {len(outs)}")
                for k, (o, m) in enumerate(zip(outs, metas)):
                    if tuple(o.shape) != tuple(m.shape) or o.dtype != m.dtype:
                        raise OpCheckError(
                            f"{where}: output {k} is {tuple(o.shape)} {o.dtype} but the meta rule "
                            f"says {tuple(m.shape)} {m.dtype}"
                        )
                if shape_only:
                    if check_grad and s.grad and op.grad is not None and dt is (dtypes[0] if has_float else None):
                        _check_shape_only_grad(op_name, args, s.kwargs, where)
                    continue
                if op.nondeterministic:
                    continue
                host_args = tuple(_convert(a, None, "cpu") if dev != "cpu" else a for a in args)
                ref = _reference(op, host_args, s.kwargs)
                if ref is not None:
                    lowp = dt in (D.float16, D.bfloat16)
                    rtol = s.rtol if s.rtol is not None else (1e-2 if lowp else 1e-4 if dt is D.float32 else 1e-7)
                    atol = s.atol if s.atol is not None else (1e-2 if lowp else 1e-5 if dt is D.float32 else 1e-8)
                    for k, (o, r) in enumerate(zip(outs, ref)):
                        try:
                            assert_close(o.cpu() if dev != "cpu" else o, r, rtol=rtol, atol=atol)
                        except AssertionError as e:
                            raise OpCheckError(f"{where}: output {k} differs from the reference kernel: {e}") from e
        if (
            fd_grad
            and s.grad
            and op.grad is not None
            and any(getattr(a, "dtype", None) is not None and a.dtype.is_floating_point for a in _flat(s.args))
        ):
            _check_op_grad(op_name, s, where=f"op '{op_name}' sample {si}")
            report["grad_checked"] += 1
    E.check(op, errors, infos, report)
    del report["_samples"]
    return report


def float_leaves(args: tuple) -> tuple[list, list]:
    """Inputs with a floating dtype (alone or in a list of tensors) made leaves that require grad, and
    the call arguments using them: ``(leaves, call_args)``."""
    from flow._tensor import Tensor

    leaves, call_args = [], []
    for a in args:
        if isinstance(a, Tensor) and a.dtype.is_floating_point:
            t = a.detach().requires_grad_(True)
            leaves.append(t)
            call_args.append(t)
        elif isinstance(a, (list, tuple)) and a and all(isinstance(e, Tensor) for e in a):
            seq = []
            for e in a:
                if e.dtype.is_floating_point:
                    e = e.detach().requires_grad_(True)
                    leaves.append(e)
                seq.append(e)
            call_args.append(type(a)(seq))
        else:
            call_args.append(a)
    return leaves, call_args


def _check_shape_only_grad(op_name: str, args: tuple, kwargs: dict, where: str) -> None:
    """On a shape-only device: backward through the op gives each input a gradient of its own
    shape, dtype and device (the gradient formula, run with flow ops, agrees with the meta rules)."""
    import flow

    leaves, call_args = float_leaves(args)
    if not leaves:
        return
    try:
        out = flow.ops.call(op_name, *call_args, **kwargs)
        outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o.requires_grad]
        if not outs:
            return
        grads = flow.autograd.grad(outs, leaves, grad_outputs=[flow.ones_like(o) for o in outs], allow_unused=True)
    except Exception as e:
        raise OpCheckError(f"{where}: backward failed: {type(e).__name__}: {e}") from e
    for k, (leaf, g) in enumerate(zip(leaves, grads)):
        if g is None:
            continue
        if tuple(g.shape) != tuple(leaf.shape) or g.dtype is not leaf.dtype or g.device is not leaf.device:
            raise OpCheckError(
                f"{where}: gradient {k} is {tuple(g.shape)} {g.dtype} on '{g.device}', expected "
                f"{tuple(leaf.shape)} {leaf.dtype} on '{leaf.device}'"
            )


def _flat(args) -> list:
    out = []
    for a in args:
        if isinstance(a, (list, tuple)):
            out.extend(a)
        else:
            out.append(a)
    return out


def _check_op_grad(op_name: str, s: SampleInput, where: str) -> None:
    import flow
    from flow._tensor import Tensor

    leaves = []
    args = []
    for a in s.args:
        if isinstance(a, Tensor) and a.dtype.is_floating_point:
            t = a.detach().double().clone().requires_grad_(True)
            leaves.append(t)
            args.append(t)
        elif isinstance(a, (list, tuple)) and a and all(isinstance(e, Tensor) for e in a):
            seq = []
            for e in a:
                if e.dtype.is_floating_point:
                    t = e.detach().double().clone().requires_grad_(True)
                    leaves.append(t)
                    seq.append(t)
                else:
                    seq.append(e)
            args.append(seq)
        else:
            args.append(a)
    if not leaves:
        return

    def fn(*ls):
        it = iter(ls)
        call_args = []
        for a in args:
            if isinstance(a, Tensor) and a.requires_grad:
                call_args.append(next(it))
            elif isinstance(a, list):
                call_args.append([next(it) if (isinstance(e, Tensor) and e.requires_grad) else e for e in a])
            else:
                call_args.append(a)
        return flow.ops.call(op_name, *call_args, **s.kwargs)

    try:
        gradcheck(fn, leaves)
    except OpCheckError as e:
        raise OpCheckError(f"{where}: {e}") from e
