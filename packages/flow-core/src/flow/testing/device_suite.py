"""The device conformance suite: every op, forward and backward, on one device type, against the reference.

A device plugin's tests call it with the device type it registers::

    # tests/test_device.py of flow-cuda
    from flow.testing import device_conformance_suite

    test_cuda_conformance = device_conformance_suite("cuda")

which gives one pytest test per registered op (``check_device`` runs them outside pytest).
For each op, on each of its samples (``samples=`` given at registration):

* **forward**: :func:`flow.testing.opcheck` on that device alone, so the meta rule must match the
  device's outputs, the outputs the reference (generic NumPy) kernel, and every error input must
  raise its flow error there too;
* **backward**: the gradients autograd computes on the device (the op's gradient formula run
  with the device's kernels) must match those computed on the CPU for the same inputs and
  output gradients, in each floating dtype the sample names. The CPU's gradients are themselves
  checked against finite differences by flow-core's own suite.

On a shape-only device (``DeviceType.extra["shape_only"]``) opcheck's shape checks stand for
both. Ops marked ``nondeterministic`` are checked for shapes and dtypes, not values. An op with
no kernel that can run on the device (its plugin registered kernels for other devices only, and
no generic one) is skipped, saying so.
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from flow.testing.checks import float_leaves


def _grads(op_name: str, args: tuple, kwargs: dict, device: str, seed: int):
    """Gradients of the op's floating outputs (projected on seeded random output gradients) on ``device``."""
    import flow

    leaves, call = float_leaves(args)
    if not leaves:
        return None
    out = flow.ops.call(op_name, *call, **kwargs)
    outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o.requires_grad]
    if not outs:
        return None
    rng = np.random.default_rng(seed)
    gouts = [flow.tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype).to(device) for o in outs]
    return flow.autograd.grad(outs, leaves, grad_outputs=gouts, allow_unused=True)


def check_op_on_device(op_name: str, device_type: str, *, backward: bool = True) -> dict:
    """Forward (opcheck) and backward (gradients vs the CPU's) of one op on ``device_type``.

    Raises :class:`flow.testing.OpCheckError` naming the op, the sample, the dtype and what differs;
    returns opcheck's report with ``backward_checked`` (samples x dtypes compared) added.
    """
    from flow import _dtype as D
    from flow.registry import REGISTRY, get_op
    from flow.testing import error_inputs as E
    from flow.testing.checks import OpCheckError, _convert, _flat, assert_close, opcheck

    op = get_op(op_name)
    info = REGISTRY.device_types.get(device_type)
    if info is None:
        raise OpCheckError(
            f"device conformance: no device type '{device_type}' is registered "
            f"(registered: {sorted(REGISTRY.device_types)})"
        )
    shape_only = bool(info.extra.get("shape_only"))
    if not _runs_on(REGISTRY, op, device_type, info):
        have = sorted({d for d, _ in op.kernels})
        return {
            "op": op_name,
            "samples": 0,
            "devices": [device_type],
            "grad_checked": 0,
            "errors_checked": 0,
            "backward_checked": 0,
            "skipped": [
                f"op '{op_name}' (plugin '{op.plugin}') has no kernel for '{device_type}' and no generic "
                f"kernel (it has kernels for: {', '.join(have) or 'no device'})"
            ],
        }
    # the finite-difference gradient check runs on the CPU, which flow-core's suite covers already
    report = opcheck(op_name, devices=[device_type], check_grad=shape_only)
    report["backward_checked"] = 0
    if shape_only or not backward or op.grad is None or op.nondeterministic or op.samples is None:
        return report
    samples, _ = E.split(list(op.samples()))
    for si, s in enumerate(samples):
        if not s.grad:
            continue
        if not any(getattr(a, "dtype", None) is not None and a.dtype.is_floating_point for a in _flat(s.args)):
            continue
        for dt in s.dtypes or (D.float32, D.float64):
            where = f"op '{op_name}' sample {si} on device '{device_type}' dtype {dt}: backward"
            cpu_args = tuple(_convert(a, dt, None) for a in s.args)
            dev_args = tuple(_convert(a, dt, device_type) for a in s.args)
            try:
                ref = _grads(op_name, cpu_args, s.kwargs, "cpu", seed=si)
                got = _grads(op_name, dev_args, s.kwargs, device_type, seed=si)
            except Exception as e:
                raise OpCheckError(f"{where} failed: {type(e).__name__}: {e}") from e
            if ref is None:
                continue
            lowp = dt in (D.float16, D.bfloat16)
            rtol = s.rtol if s.rtol is not None else (1e-2 if lowp else 1e-4 if dt is D.float32 else 1e-7)
            atol = s.atol if s.atol is not None else (1e-2 if lowp else 1e-5 if dt is D.float32 else 1e-8)
            for k, (g, r) in enumerate(zip(got, ref)):
                if (g is None) != (r is None):
                    raise OpCheckError(
                        f"{where}: gradient of input {k} is {'None' if g is None else 'a tensor'} "
                        f"on the device, {'None' if r is None else 'a tensor'} on the CPU"
                    )
                if g is None:
                    continue
                if g.device.type != device_type:
                    raise OpCheckError(f"{where}: gradient of input {k} is on '{g.device}', not '{device_type}'")
                try:
                    assert_close(g.cpu(), r, rtol=rtol, atol=atol)
                except AssertionError as e:
                    raise OpCheckError(f"{where}: gradient of input {k} differs from the CPU's: {e}") from e
            report["backward_checked"] += 1
    return report


def _runs_on(reg, op, device_type: str, info) -> bool:
    """Some kernel can run the op on the device: its own (any dtype), a generic one, or the device's fallback.
    An op that its plugin gave kernels for other devices only is not the device's to run."""
    if info.kernel_fallback is not None or any(d == device_type for d, _ in op.kernels):
        return True
    return info.use_generic_kernels and any(d == "generic" for d, _ in op.kernels)


def device_ops() -> list[str]:
    """Every registered op, sorted: what the suite checks by default."""
    from flow.registry import REGISTRY

    return sorted(REGISTRY.ops)


def check_device(device_type: str, ops: Iterable[str] | None = None, *, backward: bool = True) -> dict[str, dict]:
    """Run the suite over ``ops`` (default: every registered op) on ``device_type``; op -> report.
    Raises :class:`flow.testing.OpCheckError` at the first op that fails."""
    return {
        name: check_op_on_device(name, device_type, backward=backward)
        for name in (device_ops() if ops is None else ops)
    }


def device_conformance_suite(device_type: str, ops: Iterable[str] | None = None, *, backward: bool = True) -> Callable:
    """A pytest test function, parametrised over ``ops`` (default: every registered op), that runs
    :func:`check_op_on_device` for each on ``device_type``.

    Assign it to a ``test_`` name in a test module::

        test_cuda = device_conformance_suite("cuda")

    The device type must be registered when the test runs; the op list is taken when the
    suite is made (loading the plugins). A test for a device that is not available
    (``DeviceType.is_available()`` false, e.g. no GPU) is skipped.
    """
    import pytest

    names = device_ops() if ops is None else list(ops)

    @pytest.mark.parametrize("op_name", names)
    def test_device_conformance(op_name: str) -> None:
        from flow.registry import REGISTRY

        info = REGISTRY.device_types.get(device_type)
        if info is not None and not info.is_available():
            pytest.skip(f"device type '{device_type}' is not available here")
        report = check_op_on_device(op_name, device_type, backward=backward)
        if report["skipped"]:
            pytest.skip("; ".join(report["skipped"]))

    test_device_conformance.__doc__ = f"Every op, forward and backward, on '{device_type}' against the reference."
    return test_device_conformance
