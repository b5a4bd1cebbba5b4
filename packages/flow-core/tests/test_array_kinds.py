"""Array kinds (flow.array_kinds) with a test-only kind: a "mirrored" array holding two copies of
the data (tests/_mirrored_kind.py). Its handler runs every op on both copies and checks that they
stay equal, so each test also checks that every op went through it. Training and graph mode:
tests/test_array_kinds_training.py."""

from __future__ import annotations

import numpy as np
import pytest
from _mirrored_kind import SEEN, MirroredArray, _piece, is_mirrored, mirrored, mirrored_handler

import flow
from flow import array_kinds as K
from flow.errors import FlowError
from flow.interceptors import intercept, run_op


@pytest.fixture(autouse=True)
def mirrored_kind():
    K.register_array_kind(MirroredArray, mirrored_handler)
    SEEN.clear()
    yield
    K.unregister_array_kind(MirroredArray)


# -- registration -----------------------------------------------------------------------------
def test_registration_api():
    assert K.registered_array_kinds()[MirroredArray] is mirrored_handler
    assert K.handler_for(MirroredArray(np.zeros(1), np.zeros(1))) is mirrored_handler
    assert K.handler_for(np.zeros(1)) is None
    with pytest.raises(FlowError, match="NumPy array class"):
        K.register_array_kind(np.ndarray, mirrored_handler)
    with pytest.raises(TypeError, match="callable"):
        K.register_array_kind(MirroredArray, 3)
    with pytest.raises(TypeError, match="expected a class"):
        K.register_array_kind(MirroredArray(np.zeros(1), np.zeros(1)), mirrored_handler)

    class Other:
        pass

    with pytest.raises(FlowError, match="not a registered array kind"):
        K.unregister_array_kind(Other)


def test_no_handler_call_for_plain_tensors():
    a, b = flow.randn(3), flow.randn(3)
    (a + b).sum()
    flow.matmul(flow.randn(2, 3), flow.randn(3, 2))
    assert SEEN == []


# -- what a tensor of a kind reports ----------------------------------------------------------
def test_properties_answer_from_the_array():
    x, a = mirrored(2, 3)
    assert x.shape == (2, 3) and x.size(1) == 3 and x.size(-2) == 2
    assert x.ndim == 2 and x.dim() == 2 and x.numel() == 6 and x.nelement() == 6 and len(x) == 2
    assert x.dtype is flow.float32 and x.device == flow.device("cpu")
    assert x.is_contiguous() and x.stride() == (3, 1)
    np.testing.assert_array_equal(x.numpy(), a)
    r = repr(x)
    assert r.startswith("tensor([[") and "mirrored=True" in r
    assert f"{a[0, 0]:.4f}" in r
    s, _ = mirrored(1)
    assert s.item() == pytest.approx(float(_[0]))


def test_dtype_and_device_from_the_array():
    class Meta:  # shape, a flow dtype and a device of its own; no host value
        shape = (4, 5)
        ndim, size = 2, 20
        dtype = flow.float16
        device = "meta"

    t = K.wrap(Meta())
    assert t.shape == (4, 5) and t.dtype is flow.float16 and t.device.type == "meta"
    K.register_array_kind(Meta, lambda op, inputs, attrs: NotImplemented)
    try:
        assert repr(t) == "tensor(..., size=(4, 5), device='meta', dtype=flow.float16)"
        with pytest.raises(FlowError, match="no host value"):
            t.numpy()
        with pytest.raises(RuntimeError, match="Meta .an array kind. have no strides"):
            t.stride()
        assert t.is_contiguous()
    finally:
        K.unregister_array_kind(Meta)


# -- forward ---------------------------------------------------------------------------------
def test_ops_run_on_both_copies():
    x, a = mirrored(3, 4)
    w, b = mirrored(4, 2, seed=1)
    plain = flow.tensor(np.ones((3, 2), np.float32))
    y = flow.relu(x @ w) * 2.0 + plain
    assert is_mirrored(y)
    np.testing.assert_allclose(y.numpy(), np.maximum(a @ b, 0) * 2 + 1, rtol=1e-6)
    assert SEEN[:2] == ["matmul", "relu"] and "add" in SEEN
    s = y.sum(dim=0)
    assert is_mirrored(s) and s.shape == (2,)
    parts = flow.split(x, 2, dim=1)  # an op with several outputs
    assert all(is_mirrored(p) for p in parts)
    np.testing.assert_array_equal(parts[1].numpy(), a[:, 2:])
    cat = flow.cat([x, flow.zeros(3, 4)], dim=0)  # a list input
    assert is_mirrored(cat) and cat.shape == (6, 4)


def test_divergence_is_caught():
    x, _ = mirrored(3)
    x._data.b[0] += 1.0
    with pytest.raises(AssertionError, match="diverged"):
        x + 1


def test_inplace_ops_write_both_copies():
    x, a = mirrored(3)
    x.add_(1.0)
    x.mul_(flow.tensor([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(x._data.a, (a + 1) * [1, 2, 3], rtol=1e-6)
    np.testing.assert_array_equal(x._data.a, x._data.b)
    assert x._version[0] == 2


# -- precedence ------------------------------------------------------------------------------
def test_interceptors_come_before_array_kinds():
    x, a = mirrored(2)
    order = []

    def watch(op, inputs, attrs):
        order.append(("interceptor", op.name, len(SEEN)))
        return NotImplemented

    with intercept(watch):
        y = x + 1
    assert order == [("interceptor", "add", 0)] and SEEN == ["add"] and is_mirrored(y)

    def answer(op, inputs, attrs):
        return flow.zeros(2)

    with intercept(answer):
        z = x * 3
    assert SEEN == ["add"] and not is_mirrored(z)


def test_not_implemented_falls_through_to_the_next_kind_then_the_kernel():
    class Plainish:  # a kind whose handler declines every op: the kernel gets its array as it is
        def __init__(self, a):
            self.a = a

        shape = property(lambda self: self.a.shape)
        dtype = property(lambda self: self.a.dtype)
        ndim = property(lambda self: self.a.ndim)
        size = property(lambda self: self.a.size)

        def __array__(self, dtype=None, copy=None):
            return self.a

    declined = []

    def decline(op, inputs, attrs):
        declined.append(op.name)
        return NotImplemented

    K.register_array_kind(Plainish, decline)
    try:
        p = K.wrap(Plainish(np.array([1.0, 2.0], np.float32)))
        m, a = mirrored(2)
        r = p + m  # Plainish comes first and declines; the mirrored handler answers
        # Plainish is asked first and declines; the mirrored handler answers, and its calls on the
        # two local pieces (Plainish + plain) are offered to Plainish again, then run by the kernel
        assert declined == ["add"] * 3 and SEEN == ["add"] and is_mirrored(r)
        np.testing.assert_allclose(r.numpy(), a + [1, 2])
        q = flow.neg(p)  # only Plainish, which declines: the kernel runs
        assert declined == ["add"] * 3 + ["neg"]
        np.testing.assert_array_equal(q.numpy(), [-1.0, -2.0])
    finally:
        K.unregister_array_kind(Plainish)


# -- autograd --------------------------------------------------------------------------------
def test_backward_gives_mirrored_gradients_through_the_handler():
    x, a = mirrored(3, 4, requires_grad=True)
    w, b = mirrored(4, 2, requires_grad=True, seed=1)
    loss = (flow.tanh(x @ w) ** 2).mean()
    n_fwd = len(SEEN)
    loss.backward()
    assert len(SEEN) > n_fwd  # the backward ops went through the handler too
    assert is_mirrored(x.grad) and is_mirrored(w.grad)
    # the same gradients as plain tensors give, and as the closed form: d/dz mean(tanh(z)^2)
    px, pw = flow.tensor(a, requires_grad=True), flow.tensor(b, requires_grad=True)
    (flow.tanh(px @ pw) ** 2).mean().backward()
    np.testing.assert_array_equal(x.grad.numpy(), px.grad.numpy())
    np.testing.assert_array_equal(w.grad.numpy(), pw.grad.numpy())
    t = np.tanh(a @ b)
    dz = 2 * t * (1 - t**2) / t.size
    np.testing.assert_allclose(x.grad.numpy(), dz @ b.T, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(w.grad.numpy(), a.T @ dz, rtol=1e-5, atol=1e-7)


def test_record_around_runs_with_the_gradient():
    entered = []

    class Around:
        def __enter__(self):
            entered.append(len(SEEN))

        def __exit__(self, *exc):
            entered.append(len(SEEN))

    x, a = mirrored(3, requires_grad=True)
    y = run_op("exp", [_piece(x, 0)], {})  # a plain op, recorded by hand with around=
    y = K.wrap(MirroredArray(y._data, y._data.copy()))
    node = K.record("exp", (x,), {}, y, around=Around)
    assert node is not None and y.grad_fn is node and node.name() == "expBackward"
    y.sum().backward()
    assert len(entered) == 2 and entered[1] > entered[0]  # the gradient's ops ran inside around()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(a), rtol=1e-6)
    with flow.no_grad():
        assert K.record("exp", (x,), {}, K.wrap(MirroredArray(np.ones(3), np.ones(3)))) is None


def test_run_kernel_on_local_pieces():
    a = np.array([1.0, -2.0], np.float32)
    np.testing.assert_array_equal(K.run_kernel("neg", a), [-1.0, 2.0])
    out = K.run_kernel("add", a, np.float32(1))
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    with pytest.raises(FlowError, match="dtype"):
        K.run_kernel("neg", 3)


def test_the_dispatcher_does_not_import_the_op_modules():
    import ast

    from flow import _dispatch

    tree = ast.parse(open(_dispatch.__file__).read())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    assert not [m for m in names if m == "flow.ops" or m.startswith("flow.ops.")]


def test_casts_of_the_dispatcher_go_through_array_kinds():
    x, a = mirrored(3)
    y = x + flow.tensor([1, 2, 3])  # int64 + float32: the dispatcher casts the int tensor
    assert is_mirrored(y) and y.dtype is flow.float32
    z = flow.tensor([1, 2, 3]) * x.to(flow.float64)  # the mirrored tensor itself is cast
    assert is_mirrored(z) and z.dtype is flow.float64 and "cast" in SEEN
    np.testing.assert_allclose(z.numpy(), a.astype(np.float64) * [1, 2, 3])


def test_tensors_on_different_devices_reach_the_handler_then_fail_if_it_declines():
    from flow.errors import OpError

    got = []

    def handler(op, inputs, attrs):
        got.append([t.device.type for t in inputs[0]])
        return NotImplemented if len(got) > 1 else flow.zeros(3)

    class Other:  # a kind on the meta device
        shape, ndim, size, dtype, device = (1,), 1, 1, np.dtype(np.float32), "meta"

    K.register_array_kind(Other, handler)
    try:
        parts = [flow.ones(1), flow.ones(1), K.wrap(Other())]
        assert flow.cat(parts).shape == (3,)  # answered by the handler: devices are its business
        with pytest.raises(OpError, match="same device"):
            flow.cat(parts)  # declined: the usual error
        assert got == [["cpu", "cpu", "meta"]] * 2
    finally:
        K.unregister_array_kind(Other)


# -- a kind whose tensors have a logical shape other than their pieces' ------------------------
class RowSplitArray:
    """A logical array kept as two row blocks (as a global tensor split over two ranks)."""

    def __init__(self, parts):
        self.parts = list(parts)

    shape = property(lambda self: (sum(p.shape[0] for p in self.parts),) + self.parts[0].shape[1:])
    ndim = property(lambda self: self.parts[0].ndim)
    size = property(lambda self: sum(p.size for p in self.parts))
    dtype = property(lambda self: self.parts[0].dtype)

    def __array__(self, dtype=None, copy=None):
        return np.concatenate(self.parts)

    def repr_extras(self):
        return [f"pieces={[p.shape for p in self.parts]}"]


ELEMENTWISE = {"add", "mul", "neg", "tanh"}


def row_split_handler(op, inputs, attrs):
    """Elementwise ops run piece by piece with the raw kernels; everything else is declined."""
    if op.name not in ELEMENTWISE:
        return NotImplemented
    split = next(x._data for x in inputs if isinstance(x, flow.Tensor) and isinstance(x._data, RowSplitArray))
    dev = next(x.device for x in inputs if isinstance(x, flow.Tensor))
    pieces = []
    for i in range(len(split.parts)):
        args = [
            x._data.parts[i]
            if isinstance(x, flow.Tensor) and isinstance(x._data, RowSplitArray)
            else x._data
            if isinstance(x, flow.Tensor)
            else x
            for x in inputs
        ]
        pieces.append(K.run_kernel(op, *args, device=dev.type, **attrs))
    out = K.wrap(RowSplitArray(pieces), dev)
    K.record(op, inputs, attrs, out)
    return out


def test_a_kind_reports_its_logical_shape_and_runs_kernels_on_pieces():
    K.register_array_kind(RowSplitArray, row_split_handler)
    try:
        a = np.arange(12, dtype=np.float32).reshape(4, 3)
        x = K.wrap(RowSplitArray([a[:2].copy(), a[2:].copy()]))
        assert x.shape == (4, 3) and x.numel() == 12 and len(x) == 4 and x.ndim == 2
        assert "pieces=[(2, 3), (2, 3)]" in repr(x)
        y = flow.tanh(x * 2.0) + x
        assert isinstance(y._data, RowSplitArray) and [p.shape for p in y._data.parts] == [(2, 3), (2, 3)]
        np.testing.assert_allclose(y.numpy(), np.tanh(a * 2) + a, rtol=1e-6)
        s = y.sum()  # declined: the kernel reads the logical value through __array__
        assert not isinstance(s._data, RowSplitArray)
        np.testing.assert_allclose(s.item(), (np.tanh(a * 2) + a).sum(), rtol=1e-5)
    finally:
        K.unregister_array_kind(RowSplitArray)


def test_the_example_in_docs_plugins_md_runs():
    import pathlib

    doc = pathlib.Path(__file__).resolve().parents[3] / "docs" / "plugins.md"
    if not doc.exists():
        pytest.skip("docs/plugins.md is not part of this checkout")
    section = doc.read_text().split("\n## Array kinds\n", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    env: dict = {}
    try:
        exec(compile(code, str(doc), "exec"), env)
        assert isinstance(env["x"].grad._data, env["MirroredArray"])
        np.testing.assert_array_equal(env["x"].grad.numpy(), 2 * env["a"])
    finally:
        if "MirroredArray" in env and env["MirroredArray"] in K.registered_array_kinds():
            K.unregister_array_kind(env["MirroredArray"])
