"""Complex tensors against PyTorch's: construction, arithmetic, reductions, shape ops, autograd
(values and gradients, complex64 and complex128), and the clear error of every other op."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import flow
from flow import _dtype as D
from flow._complex import ComplexTensor
from flow.errors import AutogradError, OpError, OpTypeError

torch = pytest.importorskip("torch")

CDTYPES = [("complex64", "float32", 1e-5), ("complex128", "float64", 1e-12)]


def _z(shape, seed, real: str):
    """The same random complex values as a flow leaf and a torch leaf requiring grad."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    cd = {"float32": np.complex64, "float64": np.complex128}[real]
    f = flow.tensor(a.astype(cd)).requires_grad_()
    t = torch.tensor(a.astype(cd)).requires_grad_()
    return f, t


def _x(shape, seed, real: str):
    a = np.random.default_rng(seed).standard_normal(shape)
    return flow.tensor(a, dtype=getattr(flow, real), requires_grad=True), torch.tensor(
        a, dtype=getattr(torch, real), requires_grad=True
    )


def _np(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().resolve_conj().numpy()
    return t.detach().numpy()


def _iscx(t) -> bool:
    return t.is_complex() if isinstance(t, torch.Tensor) else flow.is_complex(t)


def _as(m, r, z):
    """A real operand as torch needs it next to a complex one (flow takes it as it is)."""
    return r if m is flow else r.to(z.dtype)


def _loss(m, out, seed=7):
    """A real loss of a (complex or real) result, the same in both frameworks."""
    w = np.random.default_rng(seed).standard_normal(tuple(out.shape))
    dt = out.real.dtype if _iscx(out) else out.dtype
    wt = m.tensor(w, dtype=dt)
    if _iscx(out):
        return (out.real * wt).sum() + (out.imag * wt * 0.5).sum()
    return (out * wt).sum()


def _check(fo, to, tol, leaves):
    assert _iscx(fo) == _iscx(to)
    np.testing.assert_allclose(_np(fo), _np(to), rtol=tol, atol=tol)
    _loss(flow, fo).backward()
    _loss(torch, to).backward()
    for fl, tl in leaves:
        assert fl.grad is not None, "no gradient reached a leaf"
        assert isinstance(fl.grad, ComplexTensor) == tl.is_complex()
        np.testing.assert_allclose(_np(fl.grad), _np(tl.grad), rtol=tol, atol=tol)


def test_dtypes():
    c64, c128 = flow.complex64, flow.complex128
    assert flow.cfloat is c64 and flow.cdouble is c128
    assert c64.is_complex and not c64.is_floating_point and c64.itemsize == 8 and c128.itemsize == 16
    assert c64.to_real() is flow.float32 and c128.to_real() is flow.float64
    assert repr(c128) == "flow.complex128" and isinstance(c64, flow.dtype)
    assert pickle.loads(pickle.dumps(c64)) is c64
    assert c64 not in D.ALL_DTYPES and np.dtype(np.complex64) not in D.NP_TO_DTYPE  # no kernel sees them
    assert D.promote_types(flow.float64, c64) is c64


@pytest.mark.parametrize("cd,real,tol", CDTYPES)
def test_construction_matches_torch(cd, real, tol):
    fr, tr = _x((2, 3), 1, real)
    fi, ti = _x((2, 3), 2, real)
    z, tz = flow.complex(fr, fi), torch.complex(tr, ti)
    assert z.dtype is getattr(flow, cd) and flow.is_complex(z) and not z.is_floating_point()
    assert tuple(z.shape) == (2, 3) and z.ndim == 2 and z.numel() == 6
    np.testing.assert_array_equal(z.detach().numpy(), _np(tz))
    assert z.detach().numpy().dtype == np.dtype(cd)
    mag = np.abs(np.random.default_rng(5).standard_normal((2, 3))) + 0.1  # torch's gradient assumes abs >= 0
    fm, tm = flow.tensor(mag, dtype=fr.dtype, requires_grad=True), torch.tensor(mag, dtype=tr.dtype, requires_grad=True)
    _check(flow.polar(fm, fi), torch.polar(tm, ti), tol, [(fm, tm), (fi, ti)])
    fx, tx = _x((3, 2), 3, real)
    _check(flow.view_as_complex(fx), torch.view_as_complex(tx), tol, [(fx, tx)])
    fz, tz = _z((2, 3), 4, real)
    _check(flow.view_as_real(fz), torch.view_as_real(tz), tol, [(fz, tz)])
    np.testing.assert_array_equal(flow.real(fz).detach().numpy(), _np(tz.real))
    np.testing.assert_array_equal(flow.imag(fz).detach().numpy(), _np(tz.imag))


def test_complex_keeps_its_parts_apart_from_the_inputs_and_grads_reach_them():
    a, b = flow.tensor([1.0, 2.0], requires_grad=True), flow.tensor([3.0, 4.0], requires_grad=True)
    z = flow.complex(a, b)
    assert z.requires_grad and not z.is_leaf and z.grad_fn is not None
    (z.real * 2 + z.imag * 3).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(b.grad.numpy(), [3.0, 3.0])
    p, q = flow.tensor([1.0]), flow.tensor([2.0])
    w = flow.complex(p, q).requires_grad_()
    assert w.is_leaf and w.requires_grad and not p.requires_grad  # the caller's tensors are not changed


def test_tensor_of_complex_data_matches_torch():
    for data in ([1 + 2j, 3.0], [[1j, 2], [3, -1 - 1j]], 2.5j, np.array([1 + 1j], np.complex128)):
        f, t = flow.tensor(data), torch.tensor(data)
        assert f.dtype.name == str(t.dtype).replace("torch.", "")
        np.testing.assert_array_equal(f.numpy(), t.numpy())
    z = flow.tensor([1.0, 2.0], dtype=flow.complex128)
    assert z.dtype is flow.complex128 and z.numpy().tolist() == [1 + 0j, 2 + 0j]
    assert flow.tensor([1.0, 2.0]).dtype is flow.float32  # real data is as before
    assert flow.tensor(1 + 2j).item() == 1 + 2j
    with pytest.raises(OpTypeError, match="real dtype"):
        flow.tensor([1j], dtype=flow.float32)


_BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
}


@pytest.mark.parametrize("cd,real,tol", CDTYPES)
@pytest.mark.parametrize("op", sorted(_BINARY))
@pytest.mark.parametrize("other", ["complex", "real", "real_row", "int", "float", "pycomplex"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_arithmetic_matches_torch(op, other, side, cd, real, tol):
    fz, tz = _z((3, 4), 1, real)
    leaves = [(fz, tz)]
    if other == "complex":
        fo, to = _z((3, 4), 2, real)
        leaves.append((fo, to))
    elif other.startswith("real"):
        fo, to = _x((4,) if other == "real_row" else (3, 4), 3, real)
        leaves.append((fo, to))
    else:
        fo = to = {"int": 3, "float": -1.5, "pycomplex": 0.5 - 2j}[other]
    fn = _BINARY[op]
    fr, tr = (fn(fz, fo), fn(tz, to)) if side == "left" else (fn(fo, fz), fn(to, tz))
    assert fr.dtype.name == str(tr.dtype).replace("torch.", "")
    _check(fr, tr, tol, leaves)


@pytest.mark.parametrize("cd,real,tol", CDTYPES)
def test_functional_forms_of_complex_complex_arithmetic(cd, real, tol):
    fa, ta = _z((2, 3), 1, real)
    fb, tb = _z((2, 3), 2, real)
    for name in ("add", "sub", "mul", "div"):
        got = getattr(flow, name)(fa, fb)
        want = getattr(torch, name)(ta, tb)
        np.testing.assert_allclose(_np(got), _np(want), rtol=tol, atol=tol)


_UNARY = {
    "abs": lambda m, z: z.abs(),
    "flow.abs": lambda m, z: m.abs(z),
    "angle": lambda m, z: z.angle(),
    "conj": lambda m, z: z.conj(),
    "flow.conj": lambda m, z: m.conj(z),
    "exp": lambda m, z: z.exp(),
    "neg": lambda m, z: -z,
    "real": lambda m, z: z.real * 2,
    "imag": lambda m, z: z.imag * 3,
    "sum": lambda m, z: z.sum(),
    "sum_dim": lambda m, z: z.sum(1),
    "sum_dims_keep": lambda m, z: z.sum((0, 2), keepdim=True),
    "mean": lambda m, z: z.mean(),
    "mean_dim": lambda m, z: m.mean(z, -1),
    "reshape": lambda m, z: z.reshape(4, 6),
    "view": lambda m, z: z.view(-1),
    "permute": lambda m, z: z.permute(2, 0, 1),
    "transpose": lambda m, z: z.transpose(0, 2),
    "slice": lambda m, z: z[1:, ::2, 1],
    "index_int": lambda m, z: z[0],
    "ellipsis": lambda m, z: z[..., 1:3],
    "unsqueeze": lambda m, z: z.unsqueeze(1),
    "flatten": lambda m, z: z.flatten(1),
    "cat": lambda m, z: m.cat([z, z * 2], 0),
    "stack": lambda m, z: m.stack([z, z.conj()], -1),
    "matmul": lambda m, z: z[0] @ z[1].transpose(0, 1),
    "flow.matmul": lambda m, z: m.matmul(z[0], z[1].mT),
    "matmul_real": lambda m, z: z[0] @ _as(m, z[1].real, z).transpose(0, 1),
    "real_matmul": lambda m, z: _as(m, z[0].imag, z).transpose(0, 1) @ z[1],
    "clone": lambda m, z: z.clone(),
    "roll": lambda m, z: m.roll(z, 1, 2),
    "flip": lambda m, z: z.flip(0),
}


@pytest.mark.parametrize("cd,real,tol", CDTYPES)
@pytest.mark.parametrize("name", sorted(_UNARY))
def test_ops_match_torch(name, cd, real, tol):
    fz, tz = _z((2, 3, 4), 5, real)
    fn = _UNARY[name]
    fo, to = fn(flow, fz), fn(torch, tz)
    assert tuple(fo.shape) == tuple(to.shape)
    _check(fo, to, tol, [(fz, tz)])


def test_abs_gradient_at_zero_is_zero_as_torch():
    fz = flow.tensor([0j, 3 + 4j]).requires_grad_()
    tz = torch.tensor([0j, 3 + 4j]).requires_grad_()
    fz.abs().sum().backward()
    tz.abs().sum().backward()
    np.testing.assert_allclose(fz.grad.numpy(), tz.grad.numpy(), rtol=1e-6)


def test_autograd_api():
    fz, tz = _z((3,), 1, "float64")
    assert fz.is_leaf and fz.requires_grad and fz.grad is None
    d = fz.detach()
    assert not d.requires_grad and isinstance(d, ComplexTensor)
    c = fz.clone()
    assert c.requires_grad and not c.is_leaf
    # backward with a complex gradient: PyTorch's vector-Jacobian product
    g = np.array([1 + 2j, -1j, 0.5])
    (fz * fz).backward(flow.tensor(g))
    (tz * tz).backward(torch.tensor(g))
    np.testing.assert_allclose(fz.grad.numpy(), tz.grad.numpy(), rtol=1e-12)
    assert fz.grad.dtype is flow.complex128
    fz.grad = None
    assert fz.grad is None
    with pytest.raises(AutogradError, match="real scalar outputs"):
        (fz * 2).backward()
    with pytest.raises(AutogradError, match="requires grad"):
        fz.numpy()


def test_to_device_dtype_and_numpy():
    z = flow.tensor([1 + 2j, 3 - 4j])
    assert z.to("cpu").device == z.device and z.cpu().dtype is flow.complex64
    w = z.to(flow.complex128)
    assert w.dtype is flow.complex128 and w.real.dtype is flow.float64
    np.testing.assert_array_equal(w.numpy(), np.array([1 + 2j, 3 - 4j]))
    assert z.tolist() == [1 + 2j, 3 - 4j] and z[1].item() == 3 - 4j
    with pytest.raises(OpTypeError, match="cannot cast a complex tensor to the real dtype"):
        z.to(flow.float32)
    for name in ("float", "double", "long"):
        with pytest.raises(OpTypeError, match=f"{name}: a complex tensor cannot be cast to a real dtype"):
            getattr(z, name)()
    assert z.cdouble().dtype is flow.complex128
    assert pickle.loads(pickle.dumps(z)).tolist() == z.tolist()
    assert ((z == flow.tensor([1 + 2j, 3 + 4j])).tolist()) == [True, False]


def test_repr_like_torch():
    assert repr(flow.tensor([1 + 2j, -1j])) == repr(torch.tensor([1 + 2j, -1j])).replace("torch", "flow")
    assert "dtype=flow.complex128" in repr(flow.tensor(np.array([0.5 + 1j])))
    assert "requires_grad=True" in repr(flow.tensor([1j]).requires_grad_())


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda z: z.sin(), "sin"),
        (lambda z: flow.sin(z), "sin"),
        (lambda z: flow.sqrt(z), "sqrt"),
        (lambda z: z.max(), "amax"),
        (lambda z: z**2, "pow"),
        (lambda z: z < z, "lt"),
        (lambda z: flow.relu(z), "relu"),
        (lambda z: z.sort(), "sort"),
        (lambda z: flow.where(z.real > 0, z, z), "where"),
    ],
)
def test_unsupported_ops_raise_naming_the_op(call, name):
    z = flow.tensor([1 + 2j, 3 - 1j])
    with pytest.raises(OpTypeError, match=f"{name}: this op does not support complex tensors"):
        call(z)


def test_argument_errors():
    x = flow.ones(3)
    with pytest.raises(OpTypeError, match="one dtype"):
        flow.complex(x, x.double())
    with pytest.raises(OpTypeError, match="float32 or float64"):
        flow.complex(flow.ones(2, dtype=flow.int64), flow.ones(2, dtype=flow.int64))
    with pytest.raises(OpTypeError, match="'real' must be a real floating-point tensor"):
        flow.complex([1.0], x)
    with pytest.raises(OpError, match="last dimension must have size 2"):
        flow.view_as_complex(flow.ones(3, 3))
    with pytest.raises(OpTypeError, match="only supported for complex tensors"):
        flow.view_as_real(x)
    with pytest.raises(OpTypeError, match="not implemented for real tensors"):
        flow.imag(x)
    with pytest.raises(OpError, match="cannot be broadcast"):
        flow.tensor([1j, 2j]) + flow.ones(3)


# -- a real operand next to a complex one: promoted, as torch does --------------------------------
@pytest.mark.parametrize(
    "expr",
    [
        "lib.add(x, z)",
        "lib.mul(x, z)",
        "lib.sub(x, z)",
        "lib.div(x, z)",
        "x * 1j",
        "1j * x",
        "x - 2j",
        "(x * 1j) * z",
        "lib.add(z, x)",
    ],
)
def test_a_real_operand_is_promoted_next_to_a_complex_one(expr):
    torch = pytest.importorskip("torch")

    def run(lib):
        x = lib.tensor([1.5, -2.0, 0.5], dtype=lib.float64, requires_grad=True)
        zr = lib.tensor([[0.5, 1.0], [2.0, -1.0], [-0.5, 3.0]], dtype=lib.float64, requires_grad=True)
        z = lib.view_as_complex(zr)
        out = eval(expr, {"lib": lib, "x": x, "z": z})
        out.abs().sum().backward()
        return lib.view_as_real(out.detach()).numpy(), x.grad.numpy(), None if zr.grad is None else zr.grad.numpy()

    got, want = run(flow), run(torch)
    for g, w in zip(got, want):
        if w is None:
            assert g is None or not np.any(g)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_an_integer_tensor_times_1j_is_complex64():
    out = flow.tensor([1, 2]) * 1j
    assert out.dtype is flow.complex64
    np.testing.assert_array_equal(out.numpy(), np.array([1j, 2j], dtype=np.complex64))
