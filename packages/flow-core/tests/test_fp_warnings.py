"""NumPy floating-point warnings never reach users: kernels give inf/nan silently, as PyTorch's.

Every op's own samples are run with values that hit poles and overflow (0, +-inf, nan, huge),
forward and backward, eagerly and in a compiled graph, with RuntimeWarning turned into an error.
The user's own NumPy error state is left as it was.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import flow
from flow.errors import FlowError
from flow.plugins import ensure_loaded
from flow.registry import REGISTRY

ensure_loaded()
OPS = sorted(name for name, op in REGISTRY.ops.items() if op.samples is not None)
_SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e308, -1e308, 1e-320, 88.8, -745.2])


def _extreme(t):
    """The same tensor with special values written into it (floating tensors only)."""
    if not isinstance(t, flow.Tensor) or not t.dtype.is_floating_point or t.numel() == 0:
        return t
    a = t.detach().numpy().copy().reshape(-1)
    with np.errstate(over="ignore"):  # 1e308 overflows a float32 sample to inf: fine, it is a special value
        a[: min(a.size, _SPECIAL.size)] = _SPECIAL[: a.size].astype(a.dtype)
    return flow.tensor(a.reshape(tuple(t.shape)), dtype=t.dtype)


def _args(sample):
    out = []
    for a in sample.args:
        if isinstance(a, (list, tuple)) and a and all(isinstance(e, flow.Tensor) for e in a):
            out.append(type(a)(_extreme(e) for e in a))
        else:
            out.append(_extreme(a))
    return out


@pytest.mark.parametrize("op_name", OPS)
def test_no_runtime_warning_from_any_op(op_name):
    op = REGISTRY.ops[op_name]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for s in op.samples():
            args = _args(s)
            leaves = []
            for i, a in enumerate(args):
                if isinstance(a, flow.Tensor) and a.dtype.is_floating_point and op.grad is not None:
                    args[i] = a.detach().requires_grad_(True)
                    leaves.append(args[i])
            try:
                out = flow.ops.call(op_name, *args, **s.kwargs)
            except FlowError:
                continue  # rejecting a value (a negative size, an index) is fine; warning is not
            outs = [
                o for o in (out if isinstance(out, tuple) else (out,)) if isinstance(o, flow.Tensor) and o.requires_grad
            ]
            if outs and leaves:
                try:
                    flow.autograd.grad(outs, leaves, grad_outputs=[flow.ones_like(o) for o in outs], allow_unused=True)
                except FlowError:
                    pass


def test_default_warning_settings_show_nothing():
    # no filter of the user's: flow's own filter keeps its kernels' RuntimeWarnings away, at no cost
    import subprocess
    import sys

    code = (
        "import warnings, flow; x = flow.tensor([0.0, 1.0, -1.0]); "
        "y = flow.log(x) + flow.exp(x * 1000.0) + x / x + flow.sqrt(x); "
        "import numpy as np; np.log(np.zeros(1))"
    )  # the user's own NumPy call still warns
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("RuntimeWarning") == 1 and "<string>" in r.stderr, r.stderr


def test_a_plugin_kernel_module_is_quieted_too():
    import types

    from flow.ops.meta import TensorMeta
    from flow.registry import schema

    mod = types.ModuleType("tests_quiet_plugin")
    src = "import numpy as np\ndef kernel(x):\n    return np.log(x)\n"
    kmod = types.ModuleType("tests_quiet_kernels")
    exec(compile(src, "tests_quiet_kernels.py", "exec"), kmod.__dict__)
    kmod.kernel.__module__ = "tests_quiet_kernels"
    mod.flow_register_ops = flow.plugins.hookimpl(
        lambda registry: registry.register_op(
            schema("tests_quiet_log", ["x"]), meta=lambda x: TensorMeta(tuple(x.shape), x.dtype, x.device)
        )
    )
    mod.flow_register_kernels = flow.plugins.hookimpl(
        lambda registry: registry.register_kernel("tests_quiet_log", "cpu", kmod.kernel)
    )
    flow.plugins.register(mod, name="tests.quiet")
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.resetwarnings()
            from flow._fpstate import _install_filter

            _install_filter()  # the filters as flow leaves them, without pytest's own
            out = flow.ops.call("tests_quiet_log", flow.zeros(2))
        assert np.isneginf(out.numpy()).all()
        assert not [w for w in seen if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in seen]
    finally:
        flow.plugins.unregister("tests.quiet")


def test_graph_mode_kernels_are_quiet_too():
    def f(x):
        return flow.log(x) + flow.exp(x * 1000.0) + x / x

    g = flow.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        out = g(flow.tensor([0.0, 1.0, -1.0]))
    a = out.numpy()
    assert np.isneginf(a[0]) or np.isnan(a[0])
    assert np.isinf(a[1])


def test_the_users_numpy_error_state_is_kept():
    old = np.seterr(all="raise")
    try:
        assert np.isneginf(flow.log(flow.zeros(1)).numpy()).all()
        with pytest.raises(FloatingPointError):
            np.log(np.zeros(1))
    finally:
        np.seterr(**old)
    with np.errstate(divide="warn"), pytest.warns(RuntimeWarning):
        np.log(np.zeros(1))


def test_out_of_memory_in_a_kernel_stays_a_memory_error(monkeypatch):
    from flow.backends.cpu import kernels  # noqa: F401  (the kernels are resolved through the registry)
    from flow.errors import OpMemoryError

    x = flow.ones(3)
    flow.exp(x)  # resolve and cache the kernel
    op = REGISTRY.ops["exp"]
    key = ("cpu", x.dtype)
    assert key in op._kcache

    def boom(*a, **k):
        raise MemoryError("Unable to allocate 8.00 EiB")

    monkeypatch.setitem(op._kcache, key, boom)
    with pytest.raises(MemoryError) as info:
        flow.exp(x)
    assert isinstance(info.value, OpMemoryError) and info.value.op == "exp"
    assert "exp: out of memory" in str(info.value) and "(3,)" in str(info.value)


@pytest.mark.parametrize("size", [(1 << 31, 1 << 31), (1 << 40,)])
def test_a_huge_allocation_is_a_memory_error(size):
    with pytest.raises(MemoryError, match="zeros"):
        flow.zeros(*size)
    with pytest.raises(MemoryError):
        flow.ones(1 << 20).expand(1 << 20, 1 << 20).contiguous()
