"""bfloat16 / float16 on the CPU: native conversions, float32 compute, result dtypes (flow.backends.cpu.lowp)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import flow
import flow.nn.functional as F
from flow import _dtype as D
from flow.backends.cpu import lowp, native
from flow.errors import FlowError
from flow.registry import REGISTRY
from flow.testing import checks as C
from flow.testing import error_inputs as E

pytestmark = pytest.mark.skipif(not native.HAVE_NATIVE, reason=f"flow._C not built: {native.NATIVE_ERROR}")

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
LOW = [D.bfloat16, D.float16]

EDGE_F32_BITS = [
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001,
    0x7FBFFFFF, 0x7F802000, 0x7F801FFF, 0xFFFFFFFF, 0x7F7FFFFF, 0x00000001, 0x007FFFFF, 0x00800000,
    0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F808001, 0x477FEFFF, 0x477FF000, 0x477FFFFF, 0x47800000,
    0x33000000, 0x33000001, 0x337FFFFF, 0x38800000, 0x387FFFFF, 0x38000000, 0x33800000, 0xB3800001,
]  # fmt: skip


def _f32_bits(n: int, seed: int = 0) -> np.ndarray:
    """Random float32 bit patterns (every class: normal, subnormal, inf, NaN) plus the edge cases."""
    bits = np.random.default_rng(seed).integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([bits, np.array(EDGE_F32_BITS, dtype=np.uint32)])


@pytest.fixture(params=["f16c", "scalar"])
def f16_path(request):
    """Run a float16 test through F16C (when the CPU has it) and through the portable scalar code."""
    from flow import _C

    if request.param == "f16c" and not _C.lowp_has_f16c():
        pytest.skip("this CPU has no F16C")
    _C._lowp_force_scalar(request.param == "scalar")
    yield request.param
    _C._lowp_force_scalar(False)


def _same_bits(got: np.ndarray, ref: np.ndarray) -> None:
    g, r = (
        got.view(np.uint16 if got.itemsize == 2 else np.uint32),
        ref.view(np.uint16 if ref.itemsize == 2 else np.uint32),
    )
    bad = np.nonzero(g != r)[0]
    assert bad.size == 0, f"{bad.size} values differ, first at {bad[:4]}: got {g[bad[:4]]} want {r[bad[:4]]}"


# -- conversions ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1000, 300_001])  # tails of the 8-wide loops; OpenMP chunks
def test_f32_to_bf16_matches_ml_dtypes(n):
    f = _f32_bits(n).view(np.float32)
    with np.errstate(all="ignore"):
        ref = f.astype(BF16)
    got = native.f32_to_bf16(f)
    assert got.dtype == BF16 and got.shape == f.shape
    _same_bits(got, ref)


def test_bf16_to_f32_exact_for_every_value():
    h = np.arange(65536, dtype=np.uint16).view(BF16)
    got = native.bf16_to_f32(h)
    assert got.dtype == np.float32
    _same_bits(got, h.astype(np.float32))


@pytest.mark.parametrize("n", [0, 5, 8, 1000, 300_001])
def test_f32_to_f16_matches_numpy(f16_path, n):
    f = _f32_bits(n, seed=1).view(np.float32)
    with np.errstate(all="ignore"):
        ref = f.astype(np.float16)
    _same_bits(native.f32_to_f16(f), ref)


def test_f16_to_f32_exact_for_every_value(f16_path):
    h = np.arange(65536, dtype=np.uint16).view(np.float16)
    _same_bits(native.f16_to_f32(h), h.astype(np.float32))


def test_conversions_of_strided_zero_dim_and_into_out():
    x = np.random.default_rng(2).standard_normal((6, 8)).astype(np.float32)
    t = x[:, ::2].T  # not contiguous
    _same_bits(native.f32_to_bf16(t), t.astype(BF16))
    assert native.f32_to_f16(np.float32(1.5).reshape(())).shape == ()
    out = np.empty(x.shape, BF16)
    assert native.f32_to_bf16(x, out=out) is out
    _same_bits(out, x.astype(BF16))
    with pytest.raises(TypeError, match="expected a float32 array"):
        native.f32_to_bf16(x.astype(np.float64))
    with pytest.raises(TypeError, match="'out' must be"):
        native.f32_to_f16(x, out=np.empty((2, 2), np.float16))


@pytest.mark.parametrize("src", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dst", ["float32", "float64", "bfloat16", "float16", "int32", "bool"])
def test_cast_op_matches_astype(src, dst):
    a = (np.random.default_rng(3).standard_normal(257) * 50).astype(np.float32)
    a[:4] = [np.inf, -np.inf, 0.0, -0.0]
    x = flow.tensor(a).to(getattr(flow, src))
    with np.errstate(all="ignore"):
        ref = x.numpy().astype(getattr(flow, dst).np)
    y = x.to(getattr(flow, dst))
    assert y.dtype is getattr(flow, dst)
    np.testing.assert_array_equal(y.numpy().view(np.uint8), ref.view(np.uint8))


# -- GEMM: float32 accumulation, result in the input dtype ------------------------------------------------


def _ref(fn, *arrays, dtype):
    """The float32 computation on the (already rounded) inputs, rounded once to ``dtype``."""
    return fn(*[a.astype(np.float32) for a in arrays]).astype(dtype.np)


@pytest.mark.parametrize("dt", LOW, ids=str)
def test_matmul_family_dtype_and_values(dt):
    rng = np.random.default_rng(4)
    a = flow.tensor(rng.standard_normal((2, 5, 16)).astype(np.float32)).to(dt)
    b = flow.tensor(rng.standard_normal((2, 16, 3)).astype(np.float32)).to(dt)
    cases = [
        (flow.matmul(a, b), np.matmul, (a, b)),
        (flow.bmm(a, b), np.matmul, (a, b)),
        (flow.mm(a[0], b[0]), np.matmul, (a[0], b[0])),
        (a[0] @ b[0, :, 0], np.matmul, (a[0], b[0, :, 0])),
    ]
    for out, fn, args in cases:
        assert out.dtype is dt
        np.testing.assert_array_equal(out.numpy(), _ref(fn, *[t.numpy() for t in args], dtype=dt))
    w = flow.tensor(rng.standard_normal((4, 16)).astype(np.float32)).to(dt)
    bias = flow.tensor(rng.standard_normal(4).astype(np.float32)).to(dt)
    y = F.linear(a[0], w, bias)
    assert y.dtype is dt
    ref = a[0].numpy().astype(np.float32) @ w.numpy().astype(np.float32).T + bias.numpy().astype(np.float32)
    np.testing.assert_allclose(y.numpy().astype(np.float32), ref, rtol=1e-2, atol=1e-2)
    c = flow.tensor(rng.standard_normal((5, 3)).astype(np.float32)).to(dt)
    z = flow.addmm(c, a[0], b[0], beta=0.5, alpha=2.0)
    assert z.dtype is dt
    ref = 0.5 * c.numpy().astype(np.float32) + 2.0 * (a[0].numpy().astype(np.float32) @ b[0].numpy().astype(np.float32))
    np.testing.assert_allclose(z.numpy().astype(np.float32), ref, rtol=2e-2, atol=5e-2)


@pytest.mark.parametrize("dt", LOW, ids=str)
def test_conv2d_forward_and_backward_in_low_precision(dt):
    rng = np.random.default_rng(5)
    x64 = rng.standard_normal((2, 3, 9, 9))
    w64 = rng.standard_normal((4, 3, 3, 3)) * 0.3
    x = flow.tensor(x64.astype(np.float32)).to(dt).requires_grad_()
    w = flow.tensor(w64.astype(np.float32)).to(dt).requires_grad_()
    y = F.conv2d(x, w, stride=2, padding=1)
    assert y.dtype is dt
    xr = flow.tensor(x.detach().numpy().astype(np.float64)).requires_grad_()
    wr = flow.tensor(w.detach().numpy().astype(np.float64)).requires_grad_()
    yr = F.conv2d(xr, wr, stride=2, padding=1)
    C.assert_close(y, yr, rtol=2e-2, atol=3e-2)
    y.sum().backward()
    yr.sum().backward()
    assert x.grad.dtype is dt and w.grad.dtype is dt
    C.assert_close(x.grad, xr.grad, rtol=2e-2, atol=3e-2)
    C.assert_close(w.grad, wr.grad, rtol=2e-2, atol=0.2)  # sums of 2*5*5 bf16 products


def test_bf16_matmul_close_to_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    a = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal((64, 16)).astype(np.float32)
    ours = (flow.tensor(a).bfloat16() @ flow.tensor(b).bfloat16()).float().numpy()
    theirs = (torch.from_numpy(a).bfloat16() @ torch.from_numpy(b).bfloat16()).float().numpy()
    np.testing.assert_allclose(ours, theirs, rtol=2e-2, atol=5e-2)


# -- every op: the output dtypes are the meta rule's ------------------------------------------------------


def _op_names():
    return sorted(n for n, op in REGISTRY.ops.items() if op.samples is not None)


@pytest.mark.parametrize("name", _op_names())
def test_every_op_gives_the_meta_dtypes_for_low_precision(name):
    op = REGISTRY.ops[name]
    samples, _ = E.split(list(op.samples()))
    ran = 0
    for si, s in enumerate(samples):
        if not any(getattr(a, "dtype", None) is not None and a.dtype.is_floating_point for a in C._flat(s.args)):
            continue
        for dt in LOW:
            args = tuple(C._convert(a, dt, "cpu") for a in s.args)
            try:
                metas = C._meta_outputs(op, args, s.kwargs)
            except FlowError:  # the schema rejects this dtype: fine
                continue
            out = flow.ops.call(name, *args, **s.kwargs)
            outs = out if isinstance(out, tuple) else (out,)
            assert len(outs) == len(metas)
            for k, (o, m) in enumerate(zip(outs, metas)):
                assert o.dtype == m.dtype and tuple(o.shape) == tuple(m.shape), (
                    f"{name} sample {si} {dt} output {k}: {tuple(o.shape)} {o.dtype}, meta {tuple(m.shape)} {m.dtype}"
                )
            ran += 1
    if not ran:
        pytest.skip(f"{name}: no floating sample accepts bfloat16/float16")


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "gelu", "cross_entropy", "sum", "var"])
def test_reductions_and_normalisations_accumulate_in_float32(name):
    op = REGISTRY.ops[name]
    samples, _ = E.split(list(op.samples()))
    for s in samples:
        for dt in LOW:
            args = tuple(C._convert(a, dt, "cpu") for a in s.args)
            try:
                out = flow.ops.call(name, *args, **s.kwargs)
            except FlowError:
                continue
            # the float32 result on the same rounded inputs, rounded once: what float32 accumulation gives
            ref = flow.ops.call(name, *(C._convert(a, D.float32, "cpu") for a in args), **s.kwargs)
            for o, r in zip(out if isinstance(out, tuple) else (out,), ref if isinstance(ref, tuple) else (ref,)):
                if o.dtype.is_floating_point:
                    np.testing.assert_array_equal(o.numpy(), r.numpy().astype(o.dtype.np))


def test_float32_kernels_are_not_wrapped():
    for name in ("add", "softmax", "layer_norm", "relu"):
        op = REGISTRY.ops[name]
        assert not hasattr(REGISTRY.resolve_kernel(op, "cpu", D.float32), "__wrapped__")
        assert hasattr(REGISTRY.resolve_kernel(op, "cpu", D.bfloat16), "__wrapped__")
    # matmul and linear have native 16-bit GEMM kernels when NumPy's BLAS is bound (test_lowp_gemm.py)
    from flow.backends.cpu import threads

    for name in ("matmul", "linear"):
        op = REGISTRY.ops[name]
        assert not hasattr(REGISTRY.resolve_kernel(op, "cpu", D.float32), "__wrapped__")
        wrapped = hasattr(REGISTRY.resolve_kernel(op, "cpu", D.bfloat16), "__wrapped__")
        assert wrapped == (threads.BLAS_PATH is None), name
    assert not hasattr(REGISTRY.resolve_kernel(REGISTRY.ops["reshape"], "cpu", D.bfloat16), "__wrapped__")


def test_low_precision_views_stay_views():
    x = flow.randn(4, 6).bfloat16()
    v = x.reshape(6, 4)
    t = x.t()
    s = x[1:3]
    for view in (v, t, s):
        assert np.shares_memory(view._data, x._data)
    x.add_(1.0)
    np.testing.assert_array_equal(v.numpy(), x.numpy().reshape(6, 4))


# -- in place ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", LOW, ids=str)
def test_inplace_ops_write_into_the_low_precision_buffer(dt):
    x = flow.randn(5, 3).to(dt)
    buf = x._data
    ref = buf.astype(np.float32)
    x.mul_(2.0).add_(1.0).relu_()
    assert x._data is buf and x.dtype is dt
    np.testing.assert_allclose(x.numpy().astype(np.float32), np.maximum(ref * 2 + 1, 0), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("opt_cls", ["SGD", "Adam"])
def test_optimizer_updates_low_precision_parameters_in_their_buffers(opt_cls):
    p = flow.nn.Parameter(flow.randn(7).bfloat16())
    buf = p._data
    start = buf.astype(np.float32)
    kw = dict(lr=0.5, momentum=0.9) if opt_cls == "SGD" else dict(lr=0.5)
    opt = getattr(flow.optim, opt_cls)([p], **kw)
    p.grad = flow.ones(7).bfloat16()
    opt.step()
    assert p._data is buf and p.dtype is flow.bfloat16
    # both take a first step of lr against a gradient of ones (Adam: lr * m / sqrt(v) = lr)
    np.testing.assert_allclose(p.detach().numpy().astype(np.float32), start - 0.5, rtol=1e-2, atol=2e-2)


# -- autograd ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", LOW, ids=str)
def test_gradients_through_low_precision_ops_have_the_input_dtypes(dt):
    rng = np.random.default_rng(7)
    leaves = [rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (6, 8), (6,))]
    target = flow.tensor([0, 1, 2, 3])

    def loss_of(x, w, b, dropout):
        h = F.layer_norm(F.gelu(F.linear(x, w, b)), (6,))
        loss = F.cross_entropy(h.softmax(-1) * 3.0, target)
        return loss + F.dropout(h, 0.1).sum() * 0.01 if dropout else loss

    low = [flow.tensor(a).to(dt).requires_grad_() for a in leaves]
    loss = loss_of(*low, dropout=True)
    assert loss.dtype is dt
    loss.backward()
    for t in low:
        assert t.grad is not None and t.grad.dtype is dt and tuple(t.grad.shape) == tuple(t.shape)
        assert np.isfinite(t.grad.numpy().astype(np.float32)).all()
    # without dropout: close to the float32 gradient of the same rounded inputs
    low = [flow.tensor(a).to(dt).requires_grad_() for a in leaves]
    ref = [flow.tensor(t.detach().numpy().astype(np.float32)).requires_grad_() for t in low]
    loss_of(*low, dropout=False).backward()
    loss_of(*ref, dropout=False).backward()
    for t, r in zip(low, ref):
        C.assert_close(t.grad, r.grad, rtol=5e-2, atol=2e-2)


def test_lowp_module_example_holds():
    a = flow.randn(4, 8).bfloat16()
    assert (a @ flow.randn(8, 3).bfloat16()).dtype is flow.bfloat16
    assert lowp.from_f32(np.float32([1.0]).reshape(1), BF16).dtype == BF16
