"""Every in-place op gives the forward values and the gradients of its out-of-place version.

An in-place op overwrites its input; whatever its gradient needs from the old values must be saved
before the write (or the gradient written from the output). The cases below are every in-place
Tensor method and every ``inplace=True`` functional flow has: the lists are read from the API, so a
new in-place op without a case here fails ``test_every_inplace_op_has_a_case``.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import flow
import flow.nn as nn
import flow.nn.functional as F


def _x(shape=(3, 4), low=-2.0, high=2.0, seed=0):
    a = np.random.default_rng(seed).uniform(low, high, size=shape)
    a[np.abs(a) < 0.1] = 0.3  # away from kinks
    return a


# name -> (input values, out-of-place fn, in-place fn). Inputs are float64 and the in-place op runs on
# a non-leaf (x = leaf * 1), as in a network; gradients are taken w.r.t. the leaf.
def _other(shape):
    return flow.tensor(_x(tuple(shape), seed=1) + 3.0)


POS = dict(low=0.5, high=2.0)
FUNCTIONAL = {
    "relu": ({}, lambda x: F.relu(x), lambda x: F.relu(x, inplace=True)),
    "relu6": (dict(low=-1, high=7), lambda x: F.relu6(x), lambda x: F.relu6(x, inplace=True)),
    "leaky_relu": ({}, lambda x: F.leaky_relu(x, 0.2), lambda x: F.leaky_relu(x, 0.2, inplace=True)),
    "elu": ({}, lambda x: F.elu(x, 0.7), lambda x: F.elu(x, 0.7, inplace=True)),
    "selu": ({}, lambda x: F.selu(x), lambda x: F.selu(x, inplace=True)),
    "celu": ({}, lambda x: F.celu(x, 1.3), lambda x: F.celu(x, 1.3, inplace=True)),
    "hardtanh": ({}, lambda x: F.hardtanh(x, -1.0, 1.0), lambda x: F.hardtanh(x, -1.0, 1.0, inplace=True)),
    "hardsigmoid": (dict(low=-4, high=4), lambda x: F.hardsigmoid(x), lambda x: F.hardsigmoid(x, inplace=True)),
    "hardswish": (dict(low=-4, high=4), lambda x: F.hardswish(x), lambda x: F.hardswish(x, inplace=True)),
    "mish": ({}, lambda x: F.mish(x), lambda x: F.mish(x, inplace=True)),
    "silu": ({}, lambda x: F.silu(x), lambda x: F.silu(x, inplace=True)),
    "threshold": ({}, lambda x: F.threshold(x, 0.5, -1.0), lambda x: F.threshold(x, 0.5, -1.0, inplace=True)),
    "rrelu": ({}, lambda x: F.rrelu(x), lambda x: F.rrelu(x, inplace=True)),
    "dropout": ({}, None, None),  # random: checked by its own test below
    "dropout1d": ({}, None, None),
    "dropout2d": ({}, None, None),
    "dropout3d": ({}, None, None),
    "alpha_dropout": ({}, None, None),
    "feature_alpha_dropout": ({}, None, None),
}

METHODS = {
    "add_": ({}, lambda x: x + _other(x.shape) * 2, lambda x: x.add_(_other(x.shape), alpha=2)),
    "sub_": ({}, lambda x: x - _other(x.shape), lambda x: x.sub_(_other(x.shape))),
    "mul_": ({}, lambda x: x * _other(x.shape), lambda x: x.mul_(_other(x.shape))),
    "div_": ({}, lambda x: x / _other(x.shape), lambda x: x.div_(_other(x.shape))),
    "pow_": (POS, lambda x: x**2.5, lambda x: x.pow_(2.5)),
    "exp_": ({}, lambda x: x.exp(), lambda x: x.exp_()),
    "log_": (POS, lambda x: x.log(), lambda x: x.log_()),
    "sqrt_": (POS, lambda x: x.sqrt(), lambda x: x.sqrt_()),
    "abs_": ({}, lambda x: x.abs(), lambda x: x.abs_()),
    "neg_": ({}, lambda x: -x, lambda x: x.neg_()),
    "sigmoid_": ({}, lambda x: x.sigmoid(), lambda x: x.sigmoid_()),
    "tanh_": ({}, lambda x: x.tanh(), lambda x: x.tanh_()),
    "relu_": ({}, lambda x: x.relu(), lambda x: x.relu_()),
    "clamp_": ({}, lambda x: x.clamp(-1, 1), lambda x: x.clamp_(-1, 1)),
    "clamp_min_": ({}, lambda x: x.clamp(min=0.5), lambda x: x.clamp_min_(0.5)),
    "clip_": ({}, lambda x: x.clamp(-1, 1), lambda x: x.clip_(-1, 1)),
    "reciprocal_": (POS, lambda x: x.reciprocal(), lambda x: x.reciprocal_()),
    "lerp_": ({}, lambda x: x.lerp(_other(x.shape), 0.3), lambda x: x.lerp_(_other(x.shape), 0.3)),
    "addcmul_": (
        {},
        lambda x: x + x * _other(x.shape) * 0.5,
        lambda x: x.addcmul_(x.detach() * 0 + x, _other(x.shape), value=0.5),
    ),
    "addcdiv_": (
        {},
        lambda x: x + x / _other(x.shape) * 0.5,
        lambda x: x.addcdiv_(x.detach() * 0 + x, _other(x.shape), value=0.5),
    ),
    "tril_": ({}, lambda x: x.tril(), lambda x: x.tril_()),
    "triu_": ({}, lambda x: x.triu(1), lambda x: x.triu_(1)),
    "addmm_": (
        {},
        lambda x: flow.addmm(x, _other(x.shape), _other((x.shape[1],) * 2), beta=0.5),
        lambda x: x.addmm_(_other(x.shape), _other((x.shape[1],) * 2), beta=0.5),
    ),
    "baddbmm_": (
        dict(shape=(2, 3, 4)),
        lambda x: flow.baddbmm(x, _other(x.shape), _other((x.shape[0], x.shape[2], x.shape[2])), beta=0.5),
        lambda x: x.baddbmm_(_other(x.shape), _other((x.shape[0], x.shape[2], x.shape[2])), beta=0.5),
    ),
    "fill_diagonal_": (
        {},
        lambda x: x * (1 - flow.eye(*x.shape, dtype=x.dtype)) + 2.0 * flow.eye(*x.shape, dtype=x.dtype),
        lambda x: x.fill_diagonal_(2.0),
    ),
    "index_add_": (
        {},
        lambda x: x.index_add(0, flow.tensor([1, 0]), _other((2, x.shape[1])), alpha=0.5),
        lambda x: x.index_add_(0, flow.tensor([1, 0]), _other((2, x.shape[1])), alpha=0.5),
    ),
    "index_copy_": (
        {},
        lambda x: x.index_copy(0, flow.tensor([1, 0]), _other((2, x.shape[1]))),
        lambda x: x.index_copy_(0, flow.tensor([1, 0]), _other((2, x.shape[1]))),
    ),
    "index_fill_": (
        {},
        lambda x: x.index_fill(1, flow.tensor([1]), -1.0),
        lambda x: x.index_fill_(1, flow.tensor([1]), -1.0),
    ),
    "index_put_": (
        {},
        lambda x: x.index_put((flow.tensor([1, 0]),), _other((2, x.shape[1]))),
        lambda x: x.index_put_((flow.tensor([1, 0]),), _other((2, x.shape[1]))),
    ),
    "scatter_": (
        {},
        lambda x: x.scatter(1, flow.tensor([[0], [2], [1]])[: x.shape[0]], 5.0),
        lambda x: x.scatter_(1, flow.tensor([[0], [2], [1]])[: x.shape[0]], 5.0),
    ),
    "scatter_add_": (
        {},
        lambda x: x.scatter_add(1, flow.tensor([[0, 1], [2, 2], [1, 0]])[: x.shape[0]], _other((x.shape[0], 2))),
        lambda x: x.scatter_add_(1, flow.tensor([[0, 1], [2, 2], [1, 0]])[: x.shape[0]], _other((x.shape[0], 2))),
    ),
    "floor_": ({}, lambda x: x.floor(), lambda x: x.floor_()),
    "round_": ({}, lambda x: x.round(), lambda x: x.round_()),
    "masked_fill_": ({}, lambda x: x.masked_fill(x > 0, 2.0), lambda x: x.masked_fill_(x.detach() > 0, 2.0)),
    "copy_": ({}, lambda x: x * 0 + _other(x.shape), lambda x: x.copy_(_other(x.shape))),
    "zero_": ({}, lambda x: x * 0, lambda x: x.zero_()),
    "fill_": ({}, lambda x: x * 0 + 3.0, lambda x: x.fill_(3.0)),
    "deg2rad_": ({}, lambda x: x.deg2rad(), lambda x: x.deg2rad_()),
    "rad2deg_": ({}, lambda x: x.rad2deg(), lambda x: x.rad2deg_()),
    "exp2_": ({}, lambda x: x.exp2(), lambda x: x.exp2_()),
    "frac_": ({}, lambda x: x.frac(), lambda x: x.frac_()),
    "erfc_": ({}, lambda x: x.erfc(), lambda x: x.erfc_()),
    "erfinv_": (dict(low=-0.9, high=0.9), lambda x: x.erfinv(), lambda x: x.erfinv_()),
    "lgamma_": (POS, lambda x: x.lgamma(), lambda x: x.lgamma_()),
    "digamma_": (POS, lambda x: x.digamma(), lambda x: x.digamma_()),
    "polygamma_": (POS, lambda x: x.polygamma(1), lambda x: x.polygamma_(1)),
    "xlogy_": ({}, lambda x: x.xlogy(_other(x.shape)), lambda x: x.xlogy_(_other(x.shape))),
    "scatter_reduce_": (
        {},
        lambda x: x.scatter_reduce(
            1, flow.tensor([[0, 1], [2, 2], [1, 0]])[: x.shape[0]], _other((x.shape[0], 2)), "sum"
        ),
        lambda x: x.scatter_reduce_(
            1, flow.tensor([[0, 1], [2, 2], [1, 0]])[: x.shape[0]], _other((x.shape[0], 2)), "sum"
        ),
    ),
    # shape changes in place: the tensor keeps its identity, autograd sees the view op
    "t_": (dict(shape=(3, 3)), lambda x: x.t(), lambda x: x.t_()),
    "squeeze_": (dict(shape=(1, 3)), lambda x: x.squeeze(0), lambda x: x.squeeze_(0)),
    "unsqueeze_": ({}, lambda x: x.unsqueeze(0), lambda x: x.unsqueeze_(0)),
    "masked_scatter_": (
        {},
        lambda x: x.masked_scatter(_other(x.shape) > 3.0, _other(x.shape) * 2),
        lambda x: x.masked_scatter_(_other(x.shape) > 3.0, _other(x.shape) * 2),
    ),
}


def _run(fn, values, upstream, inplace):
    leaf = flow.tensor(values, requires_grad=True)
    x = leaf * 1.5  # a non-leaf, as inside a network
    y = fn(x)
    if inplace:
        assert y is x, "an in-place op returns its input"
    # the written tensor is read again afterwards (x holds y now), with an upstream gradient of its own
    loss = (y * upstream).sum() + ((x if inplace else y) ** 2 * 0.25).sum()
    loss.backward()
    return y.detach().numpy().copy(), leaf.grad.numpy().copy()


def _method_case(name, *args, constant=False, **kw):
    """``x.<name>(*args)`` against ``x.<name>_(*args)``; a callable arg is made from x's shape. A
    ``constant`` op (a comparison, a floor division) overwrites x with values of no gradient: its
    reference is those values in x's dtype, passing x a zero gradient."""

    def call(x, suffix):
        real = [a(x.shape) if callable(a) else a for a in args]
        return getattr(x, name + suffix)(*real)

    ref = (lambda x: x * 0 + call(x, "").to(x.dtype)) if constant else (lambda x: call(x, ""))
    return (kw, ref, lambda x: call(x, "_"))


UNIT = dict(low=-0.9, high=0.9)
C = dict(constant=True)
PROB = dict(low=0.1, high=0.9)
# the in-place twins and aliases (arccos_, multiply_, eq_ ...): each against its out-of-place form
METHODS.update(
    {
        f"{n}_": _method_case(n, *args, **kw)
        for n, args, kw in [
            *((n, (), {}) for n in ("absolute", "atan", "arctan", "ceil", "cos", "cosh", "erf", "expm1", "fix")),
            *((n, (), {}) for n in ("i0", "nan_to_num", "negative", "sgn", "sign", "sin", "sinc", "sinh", "square")),
            *((n, (), {}) for n in ("tan", "trunc")),
            *((n, (), UNIT) for n in ("acos", "arccos", "asin", "arcsin")),
            *((n, (), POS) for n in ("log10", "log1p", "log2", "rsqrt")),
            ("logit", (), PROB),
            ("mvlgamma", (1,), dict(low=1.0, high=3.0)),
            ("clamp_max", (0.5,), {}),
            ("cumsum", (1,), {}),
            ("cumprod", (1,), {}),
            *((n, (_other,), {}) for n in ("atan2", "arctan2", "divide", "true_divide", "multiply", "subtract")),
            *((n, (_other,), {}) for n in ("fmod", "remainder")),
            *((n, (_other,), C) for n in ("floor_divide", "heaviside", "eq", "ne", "not_equal", "ge")),
            *((n, (_other,), C) for n in ("greater_equal", "gt", "greater", "le", "less_equal", "lt", "less")),
            *((n, (_other,), C) for n in ("logical_and", "logical_or", "logical_xor")),
            ("logical_not", (), C),
        ]
    }
)

CASES = {
    **{f"F.{k}": v for k, v in FUNCTIONAL.items() if v[1] is not None},
    **{f"Tensor.{k}": v for k, v in METHODS.items()},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_inplace_matches_out_of_place(name):
    kw, ref, inplace = CASES[name]
    values = _x(**kw)
    upstream = flow.tensor(np.random.default_rng(5).standard_normal(values.shape))
    y0, g0 = _run(ref, values, upstream, False)
    y1, g1 = _run(inplace, values, upstream, True)
    np.testing.assert_allclose(y1, y0, rtol=1e-12, atol=1e-12, err_msg=f"{name}: forward")
    np.testing.assert_allclose(g1, g0, rtol=1e-10, atol=1e-12, err_msg=f"{name}: gradient")


@pytest.mark.parametrize("name", sorted(k for k in METHODS if k not in ("copy_", "zero_", "fill_")))
def test_inplace_gradient_against_finite_differences(name):
    kw, _, inplace = METHODS[name]
    leaf = flow.tensor(_x(**{"shape": (2, 3), **kw}), requires_grad=True)

    def fn(v):
        x = v * 1.0
        return inplace(x)

    if name in ("floor_", "round_"):
        pytest.skip("piecewise constant: zero gradient everywhere")
    flow.testing.gradcheck(fn, [leaf])


@pytest.mark.parametrize(
    "module",
    [
        nn.ReLU,
        nn.LeakyReLU,
        nn.ELU,
        nn.SELU,
        nn.CELU,
        nn.Hardswish,
        nn.Hardsigmoid,
        nn.Mish,
        nn.SiLU,
        nn.ReLU6,
        nn.Hardtanh,
    ],
)
def test_inplace_activation_modules_train_like_their_out_of_place_form(module):
    # the DCGAN pattern: conv -> activation(inplace=True) -> conv, trained for a few steps
    def losses(inplace):
        flow.manual_seed(0)
        net = nn.Sequential(
            nn.Linear(6, 8), module(inplace=inplace), nn.Linear(8, 8), module(inplace=inplace), nn.Linear(8, 1)
        )
        opt = flow.optim.SGD(net.parameters(), lr=0.05)
        x = flow.tensor(np.random.default_rng(0).standard_normal((16, 6)), dtype=flow.float32)
        out = []
        for _ in range(4):
            loss = (net(x) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(float(loss))
        return out

    np.testing.assert_allclose(losses(True), losses(False), rtol=1e-5)


@pytest.mark.parametrize(
    "name", ["dropout", "alpha_dropout", "feature_alpha_dropout", "dropout1d", "dropout2d", "dropout3d"]
)
def test_inplace_dropout_gradient_is_the_mask(name):
    fn = getattr(F, name)
    shape = (4, 3, 5, 2, 2) if name == "dropout3d" else (4, 3, 5, 2) if name == "dropout2d" else (4, 3, 5)
    leaf = flow.tensor(_x(shape=shape, low=0.5, high=2.0), requires_grad=True)
    x = leaf * 1.0
    flow.manual_seed(3)
    y = fn(x, 0.4, training=True, inplace=True)
    assert y is x
    y.sum().backward()
    flow.manual_seed(3)
    leaf2 = flow.tensor(leaf.detach().numpy(), requires_grad=True)
    y2 = fn(leaf2 * 1.0, 0.4, training=True)
    y2.sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), y2.detach().numpy())
    np.testing.assert_allclose(leaf.grad.numpy(), leaf2.grad.numpy())


def test_every_inplace_op_has_a_case():
    methods = {n for n in dir(flow.Tensor) if n.endswith("_") and not n.startswith("_")}
    functional = {
        n
        for n in dir(F)
        if callable(getattr(F, n))
        and not n.startswith("_")
        and "inplace" in inspect.signature(getattr(F, n)).parameters
    }
    # in-place methods that are not value computations (autograd flags, initialisers drawing random
    # numbers, which tests/test_init.py checks) need no gradient case
    not_values = {
        "requires_grad_",
        "detach_",
        "share_memory_",
        "retain_grad_",
        "bernoulli_",
        "normal_",
        "uniform_",
        "exponential_",
        "geometric_",
        "cauchy_",
        "log_normal_",
        "random_",
        # Python callables per element: refuse tensors that require grad (test_tensor_methods_more.py)
        "apply_",
        "map_",
    }
    integer_only = {"bitwise_and_", "bitwise_or_", "bitwise_xor_", "bitwise_not_"}
    missing_m = sorted(methods - set(METHODS) - not_values - integer_only - {k for k in methods if k.endswith("__")})
    missing_f = sorted(functional - set(FUNCTIONAL))
    assert not missing_m, f"in-place methods without a gradient case here: {missing_m}"
    assert not missing_f, f"inplace=True functionals without a gradient case here: {missing_f}"


def test_validation_happens_before_the_write():
    x = flow.tensor([1.0, 2.0, 3.0])
    before = x.numpy().copy()
    with pytest.raises(flow.errors.FlowError):
        x.add_(flow.ones(2))  # shapes do not broadcast
    with pytest.raises(flow.errors.FlowError):
        x.mul_(flow.ones(3, 3))  # the result does not fit in x
    i = flow.tensor([1, 2, 3])
    with pytest.raises(flow.errors.FlowError):
        i.mul_(1.5)  # float result into an int tensor
    np.testing.assert_array_equal(x.numpy(), before)
    np.testing.assert_array_equal(i.numpy(), [1, 2, 3])


@pytest.mark.parametrize("fn", ["embedding", "embedding_bag"])
@pytest.mark.parametrize("bad", [[0, 7, 2], [1, -1], [2, 5]])
def test_embedding_max_norm_validates_indices_before_renormalising(fn, bad):
    w = flow.tensor(np.random.default_rng(0).standard_normal((5, 3)) * 10)
    before = w.numpy().copy()
    idx = flow.tensor(bad)
    with pytest.raises(flow.errors.OpIndexError, match="out of range"):
        if fn == "embedding":
            F.embedding(idx, w, max_norm=1.0)
        else:
            F.embedding_bag(idx, w, flow.tensor([0]), max_norm=1.0)
    np.testing.assert_array_equal(w.numpy(), before)  # no row was renormalised


@pytest.mark.parametrize(
    "kw,err",
    [
        (dict(max_norm=-1.0), "max_norm' must be positive"),
        (dict(max_norm="1"), "max_norm' must be a number"),
        (dict(max_norm=1.0, norm_type=0.0), "norm_type' must be positive"),
    ],
)
def test_embedding_max_norm_arguments_are_checked_first(kw, err):
    w = flow.tensor(np.ones((5, 3)) * 4)
    with pytest.raises(flow.errors.OpError, match=err):
        F.embedding(flow.tensor([0, 1]), w, **kw)
    np.testing.assert_array_equal(w.numpy(), np.ones((5, 3)) * 4)


def test_embedding_module_with_max_norm_bad_index_leaves_weights_alone():
    emb = nn.Embedding(4, 2, max_norm=0.5)
    before = emb.weight.detach().numpy().copy()
    with pytest.raises(IndexError):
        emb(flow.tensor([1, 9]))
    np.testing.assert_array_equal(emb.weight.detach().numpy(), before)


def test_batch_norm_bad_eps_leaves_running_stats_alone():
    rm, rv = flow.zeros(3), flow.ones(3)
    with pytest.raises(flow.errors.OpTypeError, match="eps"):
        F.batch_norm(flow.randn(4, 3), rm, rv, training=True, eps="small")
    np.testing.assert_array_equal(rm.numpy(), np.zeros(3))
    np.testing.assert_array_equal(rv.numpy(), np.ones(3))
