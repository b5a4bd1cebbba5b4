"""flow.ops.aliases and the Tensor alias methods against PyTorch: values, dtypes, gradients, errors."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

import flow
import flow.ops.aliases as AL
import flow.ops.combinatorics as CB
import flow.ops.nn_aliases as NA
from flow._methods import aliases as MA
from flow.errors import OpError, OpTypeError

torch = pytest.importorskip("torch")

NAN, INF = float("nan"), float("inf")
DATA = [[1.5, -2.25, 0.0, -0.0], [3.0, NAN, INF, -INF], [-0.5, 2.0, 2.0, -7.0]]
OTHER = [[1.5, NAN, -1.0, 0.0], [-3.0, 4.0, NAN, 5.0], [0.5, 2.0, 3.0, -7.0]]


def _pair(data, dtype="float32", requires_grad=False):
    a = np.array(data, dtype=dtype)
    return (
        flow.tensor(a.copy(), requires_grad=requires_grad),
        torch.tensor(a.copy(), requires_grad=requires_grad),
    )


def _same(f, t):
    if isinstance(f, (tuple, list)):
        assert len(f) == len(t)
        for a, b in zip(f, t):
            _same(a, b)
        return
    assert tuple(f.shape) == tuple(t.shape)
    assert str(f.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    np.testing.assert_allclose(f.detach().numpy(), t.detach().numpy(force=True), rtol=1e-6, atol=1e-6, equal_nan=True)


def test_no_alias_shadows_or_is_shadowed_by_another_flow_name():
    for mod in (AL, CB, NA):
        for name in mod.__all__:
            assert getattr(flow, name) is getattr(mod, name), (
                f"flow.{name} is defined elsewhere too: drop it from {mod}"
            )
    for name in ("exp_", "add_", "abs", "mT"):  # dedicated methods stay
        assert getattr(flow.Tensor, name) is not MA.methods().get(name)


@pytest.mark.parametrize(
    "name", ["fix", "sgn", "ravel", "adjoint", "conj", "resolve_neg", "isneginf", "isposinf", "isreal", "detach"]
)
def test_unary_functions_match_torch(name):
    f, t = _pair(DATA)
    _same(getattr(flow, name)(f), getattr(torch, name)(t))


def test_predicates_match_torch():
    f, t = _pair(DATA)
    fi, ti = _pair([[1, 2]], "int64")
    fu, tu = _pair([[1, 2]], "uint8")
    assert flow.is_same_size(f, f) is torch.is_same_size(t, t) is True
    assert flow.is_same_size(f, fi) is torch.is_same_size(t, ti) is False
    for a, b in ((f, t), (fi, ti), (fu, tu)):
        assert flow.is_signed(a) == torch.is_signed(b)
        assert a.is_signed() == b.is_signed()
        assert a.itemsize == b.itemsize and a.nbytes == b.nbytes
    assert flow.is_neg(f) is torch.is_neg(t) is False
    _same(flow.isposinf(fi), torch.isposinf(ti))
    assert flow.tensor([2.0]).is_nonzero() is torch.tensor([2.0]).is_nonzero() is True


@pytest.mark.parametrize("name", ["hsplit", "vsplit", "dsplit"])
@pytest.mark.parametrize("arg", [2, [1, 3], [0, 5]])
def test_directional_splits_match_torch(name, arg):
    a = np.arange(2 * 4 * 4, dtype=np.float32).reshape(2, 4, 4)
    fo, to = getattr(flow, name)(flow.tensor(a), arg), getattr(torch, name)(torch.tensor(a), arg)
    _same(fo, to)
    _same(getattr(flow.tensor(a), name)(arg), to)
    if name == "hsplit":
        _same(flow.hsplit(flow.arange(6.0), 3), torch.hsplit(torch.arange(6.0), 3))


def test_directional_split_errors_name_the_problem():
    with pytest.raises(OpError, match="not|cannot split"):
        flow.hsplit(flow.zeros(2, 4), 3)
    with pytest.raises(OpError, match="at least 3"):
        flow.dsplit(flow.zeros(2, 4), 2)
    with pytest.raises(OpTypeError, match="must be a Tensor"):
        flow.vsplit([1, 2], 2)


def test_split_variants_match_torch():
    f, t = _pair(np.arange(12.0).reshape(6, 2))
    _same(flow.split_with_sizes(f, [1, 5]), torch.split_with_sizes(t, [1, 5]))
    _same(f.unsafe_split_with_sizes([4, 2]), t.unsafe_split_with_sizes([4, 2]))
    _same(flow.unsafe_split(f, 4), torch.unsafe_split(t, 4))
    _same(f.unsafe_chunk(3, 0), t.unsafe_chunk(3, 0))
    with pytest.raises(OpError, match="add up to 5"):
        flow.split_with_sizes(f, [2, 3])


@pytest.mark.parametrize("name", ["fmax", "fmin"])
def test_fmax_fmin_values_and_gradients_match_torch(name):
    fa, ta = _pair(DATA, requires_grad=True)
    fb, tb = _pair(OTHER, requires_grad=True)
    fo, to = getattr(flow, name)(fa, fb), getattr(torch, name)(ta, tb)
    _same(fo, to)
    g = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    fo.backward(flow.tensor(g))
    to.backward(torch.tensor(g))
    _same(fa.grad, ta.grad)  # ties (1.5 vs 1.5, 2.0 vs 2.0) send the whole gradient to input, as in torch
    _same(fb.grad, tb.grad)
    fi, ti = _pair([[1, 5, 3]], "int64")
    _same(
        getattr(flow, name)(fi, flow.tensor([[2.0, NAN, 3.0]])),
        getattr(torch, name)(ti, torch.tensor([[2.0, NAN, 3.0]])),
    )
    _same(getattr(fi, name)(fi), getattr(ti, name)(ti))
    with pytest.raises(OpTypeError, match="'other' must be a Tensor"):
        getattr(flow, name)(fa, 1.0)


@pytest.mark.parametrize("p", [2, 1, 0, 3.5, INF])
def test_dist_matches_torch(p):
    fa, ta = _pair([[1.0, -2.0, 3.0], [0.5, 0.0, -1.0]], requires_grad=True)
    fb, tb = _pair([[0.0, 1.0, 3.0]])
    fo, to = flow.dist(fa, fb, p), torch.dist(ta, tb, p)
    _same(fo, to)
    if p != 0:  # torch's gradient of the 0-"norm" is zero, a count has none to compare
        fo.backward()
        to.backward()
        _same(fa.grad, ta.grad)
    _same(fa.detach().dist(fb, p), to)
    with pytest.raises(OpTypeError, match="floating-point"):
        flow.dist(flow.tensor([1, 2]), flow.tensor([0, 0]))


def test_fill_scalar_tensor_range_chain_matmul_match_torch():
    f, t = _pair([[1, 2, 3]], "int64")
    _same(flow.fill(f, 7), torch.fill(t, 7))
    _same(flow.fill(f.float(), flow.tensor(2.5)), torch.fill(t.float(), torch.tensor(2.5)))
    with pytest.raises(OpError, match="0-d"):
        flow.fill(f, flow.tensor([1, 2]))
    _same(flow.scalar_tensor(3), torch.scalar_tensor(3))
    _same(flow.scalar_tensor(2, dtype=flow.int64), torch.scalar_tensor(2, dtype=torch.int64))
    with pytest.raises(OpTypeError, match="Python number"):
        flow.scalar_tensor("3")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for args, kw in [((1, 4), {}), ((0, 1, 0.1), {}), ((5, 1, -1.5), {}), ((0, 3), {"dtype": "int64"})]:
            fkw = {k: getattr(flow, v) for k, v in kw.items()}
            tkw = {k: getattr(torch, v) for k, v in kw.items()}
            _same(flow.range(*args, **fkw), torch.range(*args, **tkw))
        m = [
            np.random.default_rng(i).standard_normal(s).astype(np.float32)
            for i, s in enumerate([(2, 3), (3, 4), (4, 2)])
        ]
        _same(flow.chain_matmul(*map(flow.tensor, m)), torch.chain_matmul(*map(torch.tensor, m)))
        with pytest.raises(OpError, match="point from start to end"):
            flow.range(0, 5, -1)
        with pytest.raises(OpError, match=r"matrices\[1\] must be 2-D"):
            flow.chain_matmul(flow.zeros(2, 2), flow.zeros(2))
    with pytest.warns(UserWarning, match="deprecated"):
        flow.range(0, 2)


@pytest.mark.parametrize(
    "name,args",
    [
        ("absolute", ()),
        ("arccos", ()),
        ("arctan2", ("other",)),
        ("greater", ("other",)),
        ("greater_equal", (0.0,)),
        ("less", ("other",)),
        ("less_equal", (1.5,)),
        ("not_equal", ("other",)),
        ("fix", ()),
        ("sgn", ()),
        ("positive", ()),
        ("ravel", ()),
        ("adjoint", ()),
        ("isneginf", ()),
        ("diagflat", ()),
    ],
)
def test_alias_methods_match_torch(name, args):
    f, t = _pair(DATA)
    fo, to = _pair(OTHER)
    fargs = [fo if a == "other" else a for a in args]
    targs = [to if a == "other" else a for a in args]
    _same(getattr(f, name)(*fargs), getattr(t, name)(*targs))


def test_mH_matches_torch():
    f, t = _pair(np.arange(6.0).reshape(1, 2, 3))
    _same(f.mH, t.mH)
    with pytest.raises(OpError, match="matrices"):
        flow.ones(3).adjoint()
    with pytest.raises(OpTypeError, match="bool"):
        flow.tensor([True]).positive()


INPLACE = [
    ("cos_", ()),
    ("sin_", ()),
    ("tan_", ()),
    ("atan_", ()),
    ("arctan_", ()),
    ("erf_", ()),
    ("expm1_", ()),
    ("log1p_", ()),
    ("ceil_", ()),
    ("trunc_", ()),
    ("fix_", ()),
    ("sign_", ()),
    ("sgn_", ()),
    ("square_", ()),
    ("nan_to_num_", (0.0, 9.0, -9.0)),
    ("clamp_max_", (1.0,)),
    ("cumsum_", (1,)),
    ("cumprod_", (0,)),
    ("fmod_", (1.25,)),
    ("remainder_", ("other",)),
    ("atan2_", ("other",)),
    ("arctan2_", ("other",)),
    ("absolute_", ()),
    ("multiply_", ("other",)),
    ("divide_", (4.0,)),
    ("subtract_", ("other",)),
    ("true_divide_", ("other",)),
    ("negative_", ()),
    ("eq_", ("other",)),
    ("ne_", (2.0,)),
    ("lt_", ("other",)),
    ("greater_equal_", ("other",)),
    ("less_", (0.0,)),
    ("not_equal_", ("other",)),
    ("logical_and_", ("other",)),
    ("logical_not_", ()),
]


@pytest.mark.parametrize("name,args", INPLACE, ids=[n for n, _ in INPLACE])
def test_inplace_methods_match_torch_values_and_gradients(name, args):
    fo, to = _pair(OTHER)
    fargs = [fo if a == "other" else a for a in args]
    targs = [to if a == "other" else a for a in args]
    # flow.sign(NaN) is NaN where torch.sign gives 0 (flow.ops.unary's rule, not this alias's): NaN-free rows
    f, t = _pair([DATA[0], DATA[2]] if name == "sign_" else DATA)
    fr, tr = getattr(f, name)(*fargs), getattr(t, name)(*targs)
    assert fr is f and tr is t
    _same(f, t)
    assert f._version[0] == 1
    # under autograd, through a non-leaf (a leaf that requires grad refuses in-place writes)
    ok = np.array([[0.3, -0.7, 0.2, 1.1], [0.6, -0.4, 0.9, -1.3]], dtype=np.float32)
    fl, tl = _pair(ok, requires_grad=True)
    fo, to = _pair(ok[::-1].copy() + 2.0)
    fargs = [fo if a == "other" else a for a in args]
    targs = [to if a == "other" else a for a in args]
    fy, ty = fl * 2, tl * 2
    getattr(fy, name)(*fargs)
    getattr(ty, name)(*targs)
    _same(fy, ty)
    # torch leaves grad_fn as it was after an in-place logical op (no derivative): nothing to compare
    if not name.startswith("logical_"):
        (fy * flow.tensor(ok)).sum().backward()
        (ty * torch.tensor(ok)).sum().backward()
        _same(fl.grad, tl.grad)


def test_inplace_methods_refuse_what_torch_refuses():
    with pytest.raises(OpError, match="cannot be cast"):
        flow.tensor([1, 2]).cos_()
    with pytest.raises(Exception, match="leaf"):
        flow.ones(2, requires_grad=True).sin_()
    x = flow.tensor([1, 2, 3])
    x.ge_(2)
    assert x.dtype is flow.int64 and x.tolist() == [0, 1, 1]


def test_aliases_are_the_last_base_so_dedicated_methods_win():
    mixin = vars(MA.AliasedMethods)
    assert flow.Tensor.__mro__[-2] is MA.AliasedMethods and set(MA.methods()) <= set(mixin)
    shadowed = 0
    for name in MA.methods():
        owners = [c for c in flow.Tensor.__mro__[:-2] if name in vars(c)]
        got = inspect.getattr_static(flow.Tensor, name)
        assert got is (vars(owners[0])[name] if owners else mixin[name]), name
        shadowed += bool(owners)
    assert shadowed < len(MA.methods())  # most aliases are reached through the mixin


def test_heaviside_matches_torch():
    f, t = _pair([-1.0, 0.0, 2.0, NAN, -0.0])
    fv, tv = _pair([0.5])
    _same(flow.heaviside(f, fv), torch.heaviside(t, tv))
    _same(f.clone().heaviside_(fv), t.clone().heaviside_(tv))
    with pytest.raises(OpTypeError, match="same dtype"):
        flow.heaviside(f, flow.tensor([1]))


def test_cartesian_prod_and_combinations_match_torch():
    fa, ta = _pair([1.0, 2.0, 3.0], requires_grad=True)
    fb, tb = _pair([4.0, 5.0])
    _same(flow.cartesian_prod(fa, fb), torch.cartesian_prod(ta, tb))
    _same(flow.cartesian_prod(fa, fb, fa), torch.cartesian_prod(ta, tb, ta))
    _same(flow.cartesian_prod(fa), torch.cartesian_prod(ta))
    for r, rep in [(2, False), (3, True), (1, False), (0, False), (4, False)]:
        _same(flow.combinations(fa, r, rep), torch.combinations(ta, r, rep))
    g = np.arange(1.0, 7.0, dtype=np.float32).reshape(3, 2)
    flow.combinations(fa).backward(flow.tensor(g))
    torch.combinations(ta).backward(torch.tensor(g))
    _same(fa.grad, ta.grad)
    with pytest.raises(OpError, match="1-D"):
        flow.combinations(flow.ones(2, 2))
    with pytest.raises(OpTypeError, match="one dtype"):
        flow.cartesian_prod(fa, flow.tensor([1]))


def test_block_diag_matches_torch():
    parts = [np.array(2.0, np.float32), np.array([1.0, 2.0], np.float32), np.ones((2, 3), np.int64)]
    fo = flow.block_diag(*map(flow.tensor, parts))
    _same(fo, torch.block_diag(*map(torch.tensor, parts)))
    _same(flow.block_diag(), torch.block_diag())
    fa, ta = _pair([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    g = np.arange(16.0, dtype=np.float32).reshape(4, 4)
    flow.block_diag(fa, fa * 2).backward(flow.tensor(g))
    torch.block_diag(ta, ta * 2).backward(torch.tensor(g))
    _same(fa.grad, ta.grad)
    with pytest.raises(OpError, match="2 or fewer"):
        flow.block_diag(flow.ones(1, 1, 1))


def test_isin_matches_torch():
    f, t = _pair([[1, 2], [3, 4]], "int64")
    for test in ([2, 3], [[4]], [], [2.0, 9.5]):
        a = np.array(test, dtype=np.float32 if any(isinstance(v, float) for v in np.ravel(test)) else np.int64)
        _same(flow.isin(f, flow.tensor(a)), torch.isin(t, torch.tensor(a)))
        _same(flow.isin(f, flow.tensor(a), invert=True), torch.isin(t, torch.tensor(a), invert=True))
    _same(flow.isin(f, 3), torch.isin(t, 3))
    _same(flow.isin(3, f), torch.isin(3, t))
    fn, tn = _pair([NAN, 1.0])
    _same(flow.isin(fn, fn), torch.isin(tn, tn))  # NaN is in nothing, not even itself
    with pytest.raises(OpTypeError, match="Tensor"):
        flow.isin(1, 2)


@pytest.mark.parametrize("N,increasing", [(None, False), (4, True), (1, False), (0, True)])
def test_vander_matches_torch(N, increasing):
    fi, ti = _pair([1, -2, 3], "int32")
    _same(flow.vander(fi, N, increasing), torch.vander(ti, N, increasing))
    f, t = _pair([0.5, -2.0, 3.0], requires_grad=True)
    fo, to = flow.vander(f, N, increasing), torch.vander(t, N, increasing)
    _same(fo, to)
    if to.numel():
        # torch.vander's own backward fails (it writes into a tensor its cumprod saved): explicit powers instead
        powers = torch.arange(to.shape[1]) if increasing else torch.arange(to.shape[1] - 1, -1, -1)
        fo.sum().backward()
        (t.unsqueeze(1) ** powers).sum().backward()
        _same(f.grad, t.grad)
    with pytest.raises(OpError, match="1-D"):
        flow.vander(flow.ones(2, 2))


def test_unravel_index_and_can_cast_match_torch():
    for idx, shape in [([4, 1, 0], (2, 3)), (5, (2, 3)), ([-1, 7, -7], (2, 3)), ([[3, 11]], (3, 2, 2)), ([2], 6)]:
        _same(flow.unravel_index(flow.tensor(idx), shape), torch.unravel_index(torch.tensor(idx), shape))
    assert flow.unravel_index(flow.tensor([1]), ()) == torch.unravel_index(torch.tensor([1]), ()) == ()
    with pytest.raises(OpTypeError, match="integer"):
        flow.unravel_index(flow.tensor([1.0]), (2,))
    with pytest.raises(OpError, match="non-negative"):
        flow.unravel_index(flow.tensor([1]), (2, -3))
    names = ["bool", "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
    for a in names:
        for b in names:
            assert flow.can_cast(getattr(flow, a), getattr(flow, b)) is torch.can_cast(
                getattr(torch, a), getattr(torch, b)
            )
    with pytest.raises(OpTypeError, match="'to' must be a flow.dtype"):
        flow.can_cast(flow.float32, "float64")


def _nn_case(name):
    rng = np.random.default_rng(0)
    x1 = rng.standard_normal((2, 4, 6)).astype(np.float32)
    x2 = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    x3 = rng.standard_normal((1, 2, 4, 4, 4)).astype(np.float32)
    cases = {
        "hardshrink": ((x1,), (0.7,)),
        "selu": ((x1,), ()),
        "celu": ((x1,), (0.5,)),
        "threshold": ((x1,), (0.1, -2.0)),
        "prelu": ((x1, np.array([0.25], np.float32)), ()),
        "pixel_shuffle": ((x2,), (2,)),
        "pixel_unshuffle": ((x2,), (3,)),
        "avg_pool1d": ((x1,), (3, 2, 1, True, False)),
        "adaptive_avg_pool1d": ((x1,), (4,)),
        "adaptive_max_pool1d": ((x1,), (4,)),
        "max_pool1d": ((x1,), (2,)),
        "max_pool2d": ((x2,), (3, 2, 1)),
        "max_pool3d": ((x3,), (2,)),
        "conv3d": ((x3, rng.standard_normal((3, 2, 2, 2, 2)).astype(np.float32)), (None, 1, 1)),
        "conv_transpose1d": ((x1, rng.standard_normal((4, 3, 3)).astype(np.float32)), (None, 2, 1, 1)),
        "conv_transpose2d": ((x2, rng.standard_normal((4, 2, 3, 3)).astype(np.float32)), (None, 2)),
        "pairwise_distance": ((x1[0], x1[1]), (1.5,)),
    }
    return cases[name]


@pytest.mark.parametrize("name", NA.__all__)
def test_top_level_nn_functions_match_torch_values_and_gradients(name):
    tensors, args = _nn_case(name)
    fs = [flow.tensor(a, requires_grad=True) for a in tensors]
    ts = [torch.tensor(a, requires_grad=True) for a in tensors]
    fo, to = getattr(flow, name)(*fs, *args), getattr(torch, name)(*ts, *args)
    _same(fo, to)
    fo, to = (fo[0], to[0]) if isinstance(to, tuple) else (fo, to)
    fo.sum().backward()
    to.sum().backward()
    for f, t in zip(fs, ts):
        np.testing.assert_allclose(f.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_methods_of_top_level_functions_match_torch():
    f, t = _pair([0.5, -1.0, 2.0, 0.0])
    for name, args in [("sinc", ()), ("i0", ()), ("float_power", (2,)), ("hardshrink", (0.6,))]:
        _same(getattr(f, name)(*args), getattr(t, name)(*args))
    _same(f.clone().sinc_(), t.clone().sinc_())
    _same(f.clone().i0_(), t.clone().i0_())
    fw, tw = _pair([0.25])
    _same(f.prelu(fw), t.prelu(tw))
    fm, tm = _pair([2.0, 3.5])
    _same(fm.mvlgamma(2), tm.mvlgamma(2))
    _same(fm.clone().mvlgamma_(3), tm.clone().mvlgamma_(3))


def test_random_methods_draw_as_the_functions_do():
    probs = flow.tensor([0.0, 1.0, 3.0])
    flow.manual_seed(3)
    a = probs.multinomial(20, replacement=True)
    flow.manual_seed(3)
    assert a.tolist() == flow.multinomial(probs, 20, replacement=True).tolist()
    assert a.dtype is flow.int64 and 0 not in a.tolist()
    p = flow.tensor([0.0, 1.0, 0.0, 1.0])
    assert p.bernoulli().tolist() == [0.0, 1.0, 0.0, 1.0]
    assert flow.zeros(3).bernoulli(1.0).tolist() == [1.0, 1.0, 1.0]
