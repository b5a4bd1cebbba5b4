"""nn.functional activations: softmax family (fused ops, native kernels, higher-order gradients), silu and
the composite activations, against NumPy formulas and PyTorch."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from _nnf_helpers import DTYPES, compare, gradgrad, leaf, tol, torch_or_skip

import flow
import flow.nn.functional as F
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.testing import opcheck

RNG = np.random.default_rng(0)


def np_softmax(x, dim):
    e = np.exp(x - x.max(dim, keepdims=True))
    return e / e.sum(dim, keepdims=True)


# -- opcheck -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "op", ["softmax", "log_softmax", "softmax_backward", "log_softmax_backward", "silu", "silu_backward"]
)
def test_opcheck(op):
    assert opcheck(op)["samples"] > 0


# -- softmax / log_softmax without torch ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", [((4, 7), -1), ((4, 7), 0), ((2, 3, 5), 1), ((2, 3, 5), 2), ((6,), 0)])
def test_softmax_formula(shape, dim, dtype):
    x = RNG.standard_normal(shape).astype(dtype) * 3
    y = F.softmax(flow.tensor(x), dim)
    ly = F.log_softmax(flow.tensor(x), dim)
    assert y.dtype.np == dtype and ly.dtype.np == dtype
    np.testing.assert_allclose(y.numpy(), np_softmax(x.astype(np.float64), dim), **tol(dtype))
    np.testing.assert_allclose(ly.numpy(), np.log(np_softmax(x.astype(np.float64), dim)), **tol(dtype))
    np.testing.assert_allclose(
        F.softmin(flow.tensor(x), dim).numpy(), np_softmax(-x.astype(np.float64), dim), **tol(dtype)
    )


def test_softmax_large_values_are_stable():
    x = flow.tensor([[1000.0, 1001.0, 999.0], [-1e4, 0.0, 1e4]])
    y = F.softmax(x, 1).numpy()
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y.sum(1), 1.0, rtol=1e-6)
    assert np.isfinite(F.log_softmax(x, 1).numpy()).all()


def test_softmax_zero_dim_dtype_and_methods():
    assert float(F.softmax(flow.tensor(3.0), 0)) == 1.0
    assert float(F.log_softmax(flow.tensor(3.0), -1)) == 0.0
    x = flow.tensor(RNG.standard_normal((3, 4)).astype(np.float32))
    y = F.softmax(x, 1, dtype=flow.float64)
    assert y.dtype is flow.float64
    np.testing.assert_allclose(x.softmax(1).numpy(), F.softmax(x, 1).numpy())
    np.testing.assert_allclose(x.log_softmax(-1).numpy(), F.log_softmax(x, -1).numpy())
    assert x.softmax(1, dtype=flow.float64).dtype is flow.float64
    i = flow.tensor([[1, 2, 3]])
    assert F.softmax(i, 1, dtype=flow.float32).dtype is flow.float32


def test_softmax_implicit_dim_warns():
    x = flow.randn(3, 4)
    with pytest.warns(UserWarning, match="Implicit dimension"):
        y = F.softmax(x)
    np.testing.assert_allclose(y.numpy(), F.softmax(x, 1).numpy())


def test_softmax_errors():
    with pytest.raises(OpTypeError, match="softmax"):
        F.softmax(flow.tensor([1, 2, 3]), 0)
    with pytest.raises(OpIndexError, match="dim"):
        F.softmax(flow.randn(3, 4), 2)
    with pytest.raises(OpTypeError, match="log_softmax"):
        F.log_softmax([1.0, 2.0], 0)


@pytest.mark.parametrize("dtype", [flow.float32, flow.float64])
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "softmax_backward", "log_softmax_backward"])
def test_native_kernels_match_reference(op, dtype):
    """The CPU kernel (native when built) agrees with the NumPy reference kernel, also for a dim not last."""
    from flow.registry import get_op

    opdef = get_op(op)
    ref = [e for e in opdef.kernels[("generic", None)]][0].fn(np)
    x = RNG.standard_normal((5, 6, 7)).astype(dtype.np)
    g = RNG.standard_normal((5, 6, 7)).astype(dtype.np)
    for dim in (0, 1, 2):
        args = (x,) if "backward" not in op else (g, np_softmax(x, dim).astype(dtype.np))
        out = flow.ops.call(op, *[flow.tensor(a) for a in args], dim=dim)
        np.testing.assert_allclose(out.numpy(), ref(*args, dim=dim), rtol=1e-5, atol=1e-6)


def test_softmax_gradient_formula():
    x = leaf(RNG.standard_normal((3, 5)))
    g = RNG.standard_normal((3, 5))
    y = F.softmax(x, 1)
    y.backward(flow.tensor(g))
    s = np_softmax(x.detach().numpy(), 1)
    np.testing.assert_allclose(x.grad.numpy(), s * (g - (g * s).sum(1, keepdims=True)), rtol=1e-10)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: F.softmax(x, 1) ** 3,
        lambda x: F.log_softmax(x, 0) ** 3,
        lambda x: F.softmax(x, -1) * F.log_softmax(x, -1),
        lambda x: F.silu(x) ** 2,
    ],
)
def test_second_derivatives(fn):
    x = leaf(RNG.standard_normal((3, 4)))
    assert gradgrad(fn, [x])


def test_third_derivative_of_softmax():
    def f(x):
        y = F.softmax(x, 1)
        (g,) = flow.autograd.grad((y * y * y).sum(), [x], create_graph=True)
        return (g * g).sum()

    assert gradgrad(f, [leaf(RNG.standard_normal((2, 4)))])


# -- silu and the composite activations: formulas --------------------------------------------------------------
def test_silu_formula_and_inplace():
    x = RNG.standard_normal((4, 5)) * 4
    np.testing.assert_allclose(F.silu(flow.tensor(x)).numpy(), x / (1 + np.exp(-x)), rtol=1e-12)
    t = flow.tensor(x.copy())
    out = F.silu(t, inplace=True)
    assert out is t
    np.testing.assert_allclose(t.numpy(), x / (1 + np.exp(-x)), rtol=1e-12)


def _np_act(name, x):
    return {
        "leaky_relu": np.where(x > 0, x, 0.01 * x),
        "elu": np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
        "selu": 1.0507009873554804934193349852946
        * np.where(x > 0, x, 1.6732632423543772848170429916717 * np.expm1(np.minimum(x, 0))),
        "hardtanh": np.clip(x, -1, 1),
        "relu6": np.clip(x, 0, 6),
        "hardsigmoid": np.clip(x / 6 + 0.5, 0, 1),
        "hardswish": x * np.clip(x + 3, 0, 6) / 6,
        "mish": x * np.tanh(np.log1p(np.exp(x))),
        "softsign": x / (1 + np.abs(x)),
        "tanhshrink": x - np.tanh(x),
        "logsigmoid": -np.log1p(np.exp(-x)),
        "relu": np.maximum(x, 0),
    }[name]


@pytest.mark.parametrize(
    "name",
    [
        "leaky_relu",
        "elu",
        "selu",
        "hardtanh",
        "relu6",
        "hardsigmoid",
        "hardswish",
        "mish",
        "softsign",
        "tanhshrink",
        "logsigmoid",
        "relu",
    ],
)
def test_activation_formulas(name):
    x = np.linspace(-8, 8, 41)
    np.testing.assert_allclose(getattr(F, name)(flow.tensor(x)).numpy(), _np_act(name, x), rtol=1e-10, atol=1e-12)


def test_activations_have_no_nan_gradient_for_large_inputs():
    x = leaf([-1000.0, -50.0, 0.5, 50.0, 1000.0])
    for fn in (F.elu, F.selu, F.celu, F.logsigmoid, F.mish, F.silu, F.softsign):
        x.grad = None
        fn(x).sum().backward()
        assert np.isfinite(x.grad.numpy()).all(), fn.__name__


def test_glu_threshold_shrink():
    x = RNG.standard_normal((2, 6, 3))
    a, b = x[:, :3], x[:, 3:]
    np.testing.assert_allclose(F.glu(flow.tensor(x), 1).numpy(), a / (1 + np.exp(-b)), rtol=1e-12)
    np.testing.assert_allclose(F.threshold(flow.tensor(x), 0.1, 20.0).numpy(), np.where(x > 0.1, x, 20.0))
    np.testing.assert_allclose(F.hardshrink(flow.tensor(x), 0.5).numpy(), np.where(np.abs(x) > 0.5, x, 0))
    np.testing.assert_allclose(
        F.softshrink(flow.tensor(x), 0.5).numpy(), np.where(x > 0.5, x - 0.5, np.where(x < -0.5, x + 0.5, 0))
    )
    with pytest.raises(OpError, match="glu"):
        F.glu(flow.randn(2, 5), -1)


def test_inplace_variants():
    x = flow.tensor([-1.0, 2.0, -3.0])
    assert F.relu_(x) is x and x.tolist() == [0.0, 2.0, 0.0]
    y = flow.tensor([-1.0, 2.0])
    F.leaky_relu(y, 0.5, inplace=True)
    assert y.tolist() == [-0.5, 2.0]
    z = flow.tensor([-2.0, 0.5, 3.0])
    F.hardtanh_(z)
    assert z.tolist() == [-1.0, 0.5, 1.0]
    w = flow.tensor([-1.0, 1.0], requires_grad=True)
    with pytest.raises(flow.errors.FlowError):
        F.elu(w, inplace=True)


def test_prelu_rrelu_gumbel():
    x = RNG.standard_normal((2, 3, 4))
    w = np.array([0.1, 0.2, 0.3])
    np.testing.assert_allclose(
        F.prelu(flow.tensor(x), flow.tensor(w)).numpy(), np.where(x > 0, x, x * w[:, None]), rtol=1e-12
    )
    with pytest.raises(OpError, match="prelu"):
        F.prelu(flow.tensor(x), flow.tensor(np.ones(4)))
    np.testing.assert_allclose(F.rrelu(flow.tensor(x)).numpy(), np.where(x > 0, x, x * (1 / 8 + 1 / 3) / 2))
    r = F.rrelu(flow.tensor(x), training=True).numpy()
    ratio = r[x < 0] / x[x < 0]
    assert ((ratio >= 1 / 8) & (ratio <= 1 / 3)).all()
    flow.manual_seed(3)
    g1 = F.gumbel_softmax(flow.tensor(x), tau=0.5, dim=1)
    flow.manual_seed(3)
    g2 = F.gumbel_softmax(flow.tensor(x), tau=0.5, dim=1)
    np.testing.assert_array_equal(g1.numpy(), g2.numpy())
    np.testing.assert_allclose(g1.numpy().sum(1), 1.0, rtol=1e-12)
    h = F.gumbel_softmax(leaf(x), hard=True, dim=-1)
    assert set(np.unique(h.detach().numpy())) <= {0.0, 1.0} and (h.detach().numpy().sum(-1) == 1).all()


# -- against PyTorch ------------------------------------------------------------------------------------------
ACTS = [
    ("softmax", (1,), {}),
    ("log_softmax", (0,), {}),
    ("softmin", (2,), {}),
    ("silu", (), {}),
    ("leaky_relu", (0.2,), {}),
    ("elu", (0.7,), {}),
    ("selu", (), {}),
    ("celu", (1.3,), {}),
    ("hardtanh", (-1.5, 2.0), {}),
    ("relu6", (), {}),
    ("hardswish", (), {}),
    ("hardsigmoid", (), {}),
    ("mish", (), {}),
    ("softsign", (), {}),
    ("tanhshrink", (), {}),
    ("logsigmoid", (), {}),
    ("threshold", (0.5, -2.0), {}),
    ("hardshrink", (0.6,), {}),
    ("softshrink", (0.6,), {}),
    ("relu", (), {}),
    ("gelu", (), {}),
    ("gelu", (), {"approximate": "tanh"}),
    ("softplus", (), {"beta": 2.0}),
    ("sigmoid", (), {}),
    ("tanh", (), {}),
    ("glu", (1,), {}),
    ("glu", (-1,), {}),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,args,kwargs", ACTS, ids=[f"{a[0]}{i}" for i, a in enumerate(ACTS)])
def test_against_torch(name, args, kwargs, dtype):
    torch = torch_or_skip()
    x = RNG.uniform(-7, 7, (4, 6, 2))
    x[0, :4, 0] = [0.0, -3.0, 3.0, 6.0]  # kinks: the gradients follow PyTorch's conventions there too
    compare(
        lambda t: getattr(F, name)(t, *args, **kwargs),
        lambda t: getattr(torch.nn.functional, name)(t, *args, **kwargs),
        [x],
        dtype,
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_prelu_against_torch(dtype):
    torch = torch_or_skip()
    x = RNG.standard_normal((3, 5, 2))
    compare(F.prelu, torch.nn.functional.prelu, [x, RNG.uniform(0, 1, 5)], dtype)
    compare(F.prelu, torch.nn.functional.prelu, [x, [0.25]], dtype)


def test_softmax_double_backward_against_torch():
    torch = torch_or_skip()
    x = RNG.standard_normal((3, 5))
    xf, xt = leaf(x), torch.tensor(x, requires_grad=True)
    for fn, tfn in ((F.softmax, torch.softmax), (F.log_softmax, torch.log_softmax)):
        xf.grad, xt.grad = None, None
        (gf,) = flow.autograd.grad((fn(xf, 1) ** 2).sum(), [xf], create_graph=True)
        (gt,) = torch.autograd.grad((tfn(xt, 1) ** 2).sum(), [xt], create_graph=True)
        (gf * gf).sum().backward()
        (gt * gt).sum().backward()
        np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=1e-9)


def test_exports():
    for name in (
        "softmax",
        "log_softmax",
        "silu",
        "leaky_relu",
        "elu",
        "selu",
        "celu",
        "hardtanh",
        "relu6",
        "hardswish",
        "hardsigmoid",
        "mish",
        "softsign",
        "tanhshrink",
        "glu",
        "logsigmoid",
        "prelu",
        "threshold",
        "gelu",
        "relu",
        "sigmoid",
        "tanh",
        "softplus",
    ):
        assert callable(getattr(F, name)), name
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an explicit dim: no warning
        assert math.isclose(F.softmax(flow.tensor([0.0, 0.0]), 0).numpy()[0], 0.5)
