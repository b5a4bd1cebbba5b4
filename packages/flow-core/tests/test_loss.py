"""nn.functional losses: cross_entropy / nll_loss (fused ops with backward ops), ctc_loss, and the composite
losses, against NumPy formulas and PyTorch."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from _nnf_helpers import DTYPES, compare, gradgrad, leaf, tol, torch_or_skip

import flow
import flow.nn.functional as F
from flow.errors import OpError, OpIndexError, OpTypeError
from flow.testing import opcheck

RNG = np.random.default_rng(2)


@pytest.mark.parametrize(
    "op", ["cross_entropy", "cross_entropy_backward", "nll_loss", "nll_loss_backward", "ctc_loss", "ctc_loss_backward"]
)
def test_opcheck(op):
    assert opcheck(op)["samples"] > 0


# -- cross entropy / nll without torch ------------------------------------------------------------------------
def np_log_softmax(x, axis):
    z = x - x.max(axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis, keepdims=True))


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_formula(dtype):
    x = RNG.standard_normal((5, 4)).astype(dtype)
    t = np.array([0, 3, -100, 1, 3])
    w = np.array([1.0, 2.0, 0.5, 1.5], dtype)
    lp = np_log_softmax(x.astype(np.float64), 1)
    valid = t != -100
    picked = np.where(valid, -lp[np.arange(5), np.where(valid, t, 0)] * w[np.where(valid, t, 0)], 0)
    got = F.cross_entropy(flow.tensor(x), flow.tensor(t), flow.tensor(w), reduction="none")
    assert got.dtype.np == dtype
    np.testing.assert_allclose(got.numpy(), picked, **tol(dtype))
    mean = F.cross_entropy(flow.tensor(x), flow.tensor(t), flow.tensor(w))
    np.testing.assert_allclose(float(mean), picked.sum() / w[t[valid]].sum(), **tol(dtype))
    # label smoothing: (1 - eps) nll + eps / C * sum_c -w_c lp_c
    eps = 0.2
    smooth = np.where(valid, -(lp * w).sum(1), 0)
    ls = F.cross_entropy(flow.tensor(x), flow.tensor(t), flow.tensor(w), reduction="sum", label_smoothing=eps)
    np.testing.assert_allclose(float(ls), (1 - eps) * picked.sum() + eps / 4 * smooth.sum(), **tol(dtype))
    nll = F.nll_loss(flow.tensor(lp.astype(dtype)), flow.tensor(t), reduction="sum")
    np.testing.assert_allclose(float(nll), -lp[np.arange(5)[valid], t[valid]].sum(), **tol(dtype))


def test_cross_entropy_gradient_formula():
    x = leaf(RNG.standard_normal((4, 3)))
    t = np.array([2, 0, 1, 1])
    F.cross_entropy(x, flow.tensor(t)).backward()
    p = np.exp(np_log_softmax(x.detach().numpy(), 1))
    p[np.arange(4), t] -= 1
    np.testing.assert_allclose(x.grad.numpy(), p / 4, rtol=1e-10)


def test_cross_entropy_probabilities_and_spatial():
    x = RNG.standard_normal((2, 3, 4))
    p = RNG.dirichlet(np.ones(3), (2, 4)).transpose(0, 2, 1)
    got = F.cross_entropy(flow.tensor(x), flow.tensor(p), reduction="none").numpy()
    np.testing.assert_allclose(got, -(np_log_softmax(x, 1) * p).sum(1), rtol=1e-10)
    t = RNG.integers(0, 3, (2, 4))
    got = F.cross_entropy(flow.tensor(x), flow.tensor(t), reduction="none").numpy()
    lp = np_log_softmax(x, 1)
    np.testing.assert_allclose(got, -np.take_along_axis(lp, t[:, None], 1)[:, 0], rtol=1e-10)


def test_cross_entropy_errors():
    x = flow.randn(3, 4)
    with pytest.raises(OpIndexError, match=r"cross_entropy.*target.*7.*\[0, 4\)"):
        F.cross_entropy(x, flow.tensor([0, 1, 7]))
    with pytest.raises(OpIndexError, match="nll_loss"):
        F.nll_loss(x, flow.tensor([0, -1, 2]))
    with pytest.raises(OpError, match="target"):
        F.cross_entropy(x, flow.tensor([0, 1]))
    with pytest.raises(OpError, match="weight"):
        F.cross_entropy(x, flow.tensor([0, 1, 2]), flow.ones(3))
    with pytest.raises(OpError, match="label_smoothing"):
        F.cross_entropy(x, flow.tensor([0, 1, 2]), label_smoothing=1.5)
    with pytest.raises(OpError, match="reduction"):
        F.cross_entropy(x, flow.tensor([0, 1, 2]), reduction="avg")
    with pytest.raises(OpTypeError, match="cross_entropy"):
        F.cross_entropy(flow.tensor([[1, 2]]), flow.tensor([0]))
    with pytest.raises(OpError, match="shape"):
        F.cross_entropy(x, flow.randn(3, 5))
    # all targets ignored: the mean is NaN (0 / 0), the gradient is zero
    z = leaf(RNG.standard_normal((2, 3)))
    loss = F.cross_entropy(z, flow.tensor([-100, -100]))
    assert np.isnan(float(loss))
    loss.backward()
    assert (z.grad.numpy() == 0).all()


def test_cross_entropy_higher_order():
    x = leaf(RNG.standard_normal((4, 3)))
    t = flow.tensor([2, 0, -100, 1])
    w = flow.tensor([1.0, 0.5, 2.0], dtype=flow.float64)
    for red in ("none", "mean", "sum"):
        assert gradgrad(lambda x, red=red: F.cross_entropy(x, t, w, reduction=red, label_smoothing=0.1) ** 2, [x])
        assert gradgrad(lambda x, red=red: F.nll_loss(x, t, w, reduction=red) ** 2, [x])


def test_legacy_reduction_flags():
    x, t = flow.randn(3, 4), flow.tensor([0, 1, 2])
    with pytest.warns(UserWarning):
        a = F.cross_entropy(x, t, size_average=False)
    np.testing.assert_allclose(float(a), float(F.cross_entropy(x, t, reduction="sum")), rtol=1e-6)
    with pytest.warns(UserWarning):
        assert F.nll_loss(x, t, reduce=False).shape == (3,)


# -- against PyTorch ----------------------------------------------------------------------------------------------
CE_SHAPES = [((6, 5), (6,)), ((3, 4, 2, 3), (3, 2, 3)), ((5,), ())]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,tshape", CE_SHAPES)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_cross_entropy_nll_against_torch(shape, tshape, reduction, dtype):
    torch = torch_or_skip()
    tf = torch.nn.functional
    c = shape[0] if len(shape) == 1 else shape[1]
    t = RNG.integers(0, c, tshape)
    if t.ndim:
        t.reshape(-1)[0] = -100
    w = RNG.uniform(0.5, 2, c).astype(dtype)
    x = RNG.standard_normal(shape)
    for ls in (0.0, 0.3):
        for weight in (None, w):
            wf = None if weight is None else flow.tensor(weight)
            wt = None if weight is None else torch.tensor(weight)
            compare(
                lambda x, t, wf=wf, ls=ls: F.cross_entropy(x, t, wf, reduction=reduction, label_smoothing=ls),
                lambda x, t, wt=wt, ls=ls: tf.cross_entropy(x, t, wt, reduction=reduction, label_smoothing=ls),
                [x],
                dtype,
                consts=[t],
            )
            compare(
                lambda x, t, wf=wf: F.nll_loss(x, t, wf, reduction=reduction),
                lambda x, t, wt=wt: tf.nll_loss(x, t, wt, reduction=reduction),
                [x],
                dtype,
                consts=[t],
            )
    compare(
        lambda x, t: F.cross_entropy(x, t, ignore_index=1, reduction=reduction),
        lambda x, t: tf.cross_entropy(x, t, ignore_index=1, reduction=reduction),
        [x],
        dtype,
        consts=[np.where(t < 0, 1, t)],
    )


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_cross_entropy_probabilities_against_torch(reduction):
    torch = torch_or_skip()
    x = RNG.standard_normal((4, 5, 3))
    p = RNG.dirichlet(np.ones(5), (4, 3)).transpose(0, 2, 1)
    w = RNG.uniform(0.5, 2, 5)
    for ls in (0.0, 0.2):
        compare(
            lambda x, p, ls=ls: F.cross_entropy(x, p, flow.tensor(w), reduction=reduction, label_smoothing=ls),
            lambda x, p, ls=ls: torch.nn.functional.cross_entropy(
                x, p, torch.tensor(w), reduction=reduction, label_smoothing=ls
            ),
            [x, p],
        )


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_cross_entropy_double_backward_against_torch(reduction):
    torch = torch_or_skip()
    x = RNG.standard_normal((3, 4, 2))
    t = np.array([[0, 3], [-100, 1], [2, 2]])
    w = RNG.uniform(0.5, 2, 4)
    xf, xt = leaf(x), torch.tensor(x, requires_grad=True)
    a = F.cross_entropy(xf, flow.tensor(t), flow.tensor(w), reduction=reduction, label_smoothing=0.1)
    b = torch.nn.functional.cross_entropy(
        xt, torch.tensor(t), torch.tensor(w), reduction=reduction, label_smoothing=0.1
    )
    (gf,) = flow.autograd.grad((a * a).sum(), [xf], create_graph=True)
    (gt,) = torch.autograd.grad((b * b).sum(), [xt], create_graph=True)
    (gf**3).sum().backward()
    (gt**3).sum().backward()
    np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=1e-8, atol=1e-12)


def _sign(a):
    return np.where(a > 0.5, 1.0, -1.0)


XS = RNG.uniform(0.05, 0.95, (4, 5))
TS = RNG.uniform(0, 1, (4, 5))
WS = RNG.uniform(0.5, 1.5, (4, 5))
LOSSES = [
    ("mse_loss", lambda f, a, b: f.mse_loss(a, b, reduction=R), [XS, TS]),
    ("mse_loss_w", lambda f, a, b, w: f.mse_loss(a, b, reduction=R, weight=w), [XS, TS, WS]),
    ("l1_loss", lambda f, a, b: f.l1_loss(a, b, reduction=R), [XS, TS]),
    ("l1_loss_w", lambda f, a, b, w: f.l1_loss(a, b, reduction=R, weight=w), [XS, TS, WS]),
    ("smooth_l1", lambda f, a, b: f.smooth_l1_loss(a, b, reduction=R, beta=0.3), [XS * 4, TS]),
    ("smooth_l1_0", lambda f, a, b: f.smooth_l1_loss(a, b, reduction=R, beta=0.0), [XS * 4, TS]),
    ("huber", lambda f, a, b: f.huber_loss(a, b, reduction=R, delta=0.3), [XS * 4, TS]),
    ("huber_w", lambda f, a, b, w: f.huber_loss(a, b, reduction=R, delta=0.3, weight=w), [XS * 4, TS, WS]),
    ("bce", lambda f, a, b: f.binary_cross_entropy(a, b, reduction=R), [XS, TS]),
    ("kl", lambda f, a, b: f.kl_div(a, b, reduction=R), [np.log(XS), TS]),
    ("kl_log", lambda f, a, b: f.kl_div(a, b, reduction=R, log_target=True), [np.log(XS), np.log(TS)]),
    ("margin_ranking", lambda f, a, b: f.margin_ranking_loss(a, b, _t(f, _sign(TS)), 0.1, reduction=R), [XS, TS]),
    ("soft_margin", lambda f, a: f.soft_margin_loss(a, _t(f, _sign(TS)), reduction=R), [XS]),
    ("hinge", lambda f, a: f.hinge_embedding_loss(a, _t(f, _sign(TS)), 0.7, reduction=R), [XS]),
    ("poisson", lambda f, a, b: f.poisson_nll_loss(a, b * 5, reduction=R, full=True), [XS, TS]),
    ("poisson_lin", lambda f, a, b: f.poisson_nll_loss(a, b, log_input=False, reduction=R), [XS, TS]),
    ("gaussian", lambda f, a, b, v: f.gaussian_nll_loss(a, b, v, full=True, reduction=R), [XS, TS, WS]),
    (
        "multilabel_soft",
        lambda f, a: f.multilabel_soft_margin_loss(a, _t(f, (TS > 0.5) * 1.0), _t(f, WS[0]), reduction=R),
        [XS],
    ),
    (
        "cosine_emb",
        lambda f, a, b: f.cosine_embedding_loss(a, b, _t(f, np.array([1, -1, 1, -1.0])), 0.1, reduction=R),
        [XS, TS],
    ),
    ("triplet", lambda f, a, b, c: f.triplet_margin_loss(a, b, c, swap=True, reduction=R), [XS, TS, WS]),
]
R = "mean"


def _t(f, a):
    mod = flow if f is F else __import__("torch")
    return mod.tensor(np.asarray(a, np.float64))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("name,fn,arrays", LOSSES, ids=[x[0] for x in LOSSES])
def test_losses_against_torch(name, fn, arrays, reduction):
    torch = torch_or_skip()
    global R
    R = reduction
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compare(lambda *a: fn(F, *a), lambda *a: fn(torch.nn.functional, *a), arrays)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_bce_against_torch(reduction, dtype):
    torch = torch_or_skip()
    tf = torch.nn.functional
    w, pw = WS.astype(dtype), RNG.uniform(0.5, 2, 5).astype(dtype)
    compare(
        lambda a, b: F.binary_cross_entropy(a, b, flow.tensor(w), reduction=reduction),
        lambda a, b: tf.binary_cross_entropy(a, b, torch.tensor(w), reduction=reduction),
        [XS, TS],
        dtype,
    )
    compare(
        lambda a, b: F.binary_cross_entropy_with_logits(
            a, b, flow.tensor(w), reduction=reduction, pos_weight=flow.tensor(pw)
        ),
        lambda a, b: tf.binary_cross_entropy_with_logits(
            a, b, torch.tensor(w), reduction=reduction, pos_weight=torch.tensor(pw)
        ),
        [XS * 60 - 30, TS],
        dtype,
    )


def test_bce_stability_and_errors():
    x = leaf([-1000.0, -30.0, 0.0, 30.0, 1000.0])
    t = flow.tensor([0.0, 1.0, 0.5, 0.0, 1.0], dtype=flow.float64)
    loss = F.binary_cross_entropy_with_logits(x, t, reduction="none")
    loss.sum().backward()
    assert np.isfinite(loss.detach().numpy()).all() and np.isfinite(x.grad.numpy()).all()
    p = flow.tensor([0.0, 1.0, 0.5], dtype=flow.float64)
    assert np.isfinite(F.binary_cross_entropy(p, flow.tensor([1.0, 0.0, 0.5], dtype=flow.float64)).numpy())
    with pytest.raises(OpError, match="between 0 and 1"):
        F.binary_cross_entropy(flow.tensor([1.5]), flow.tensor([1.0]))
    with pytest.raises(OpError, match="shape"):
        F.binary_cross_entropy_with_logits(flow.randn(3), flow.randn(2, 3))
    with pytest.warns(UserWarning, match="target size"):
        F.mse_loss(flow.randn(3, 1), flow.randn(3))
    with pytest.raises(OpError, match="mse_loss"):
        F.mse_loss(flow.randn(3), flow.randn(4))
    with pytest.raises(OpError, match="reduction"):
        F.l1_loss(flow.randn(3), flow.randn(3), reduction="batchmean")


def test_kl_div_batchmean_and_warning():
    torch = torch_or_skip()
    a, b = np.log(XS), TS
    got = F.kl_div(flow.tensor(a), flow.tensor(b), reduction="batchmean")
    want = torch.nn.functional.kl_div(torch.tensor(a), torch.tensor(b), reduction="batchmean")
    np.testing.assert_allclose(float(got), float(want), rtol=1e-10)
    with pytest.warns(UserWarning, match="batchmean"):
        F.kl_div(flow.tensor(a), flow.tensor(b))


def test_distances_against_torch():
    torch = torch_or_skip()
    tf = torch.nn.functional
    x = RNG.standard_normal((4, 6, 3))
    compare(
        lambda a, b: F.cosine_similarity(a, b, 1),
        lambda a, b: tf.cosine_similarity(a, b, 1),
        [x, RNG.standard_normal((6, 1))],
    )
    for p in (2.0, 1.0, 3.0):
        compare(
            lambda a, b, p=p: F.pairwise_distance(a, b, p),
            lambda a, b, p=p: tf.pairwise_distance(a, b, p),
            [RNG.standard_normal((5, 4)), RNG.standard_normal((5, 4))],
        )
        compare(
            lambda a, b, p=p: F.pairwise_distance(a, b, p, keepdim=True),
            lambda a, b, p=p: tf.pairwise_distance(a, b, p, keepdim=True),
            [RNG.standard_normal((5, 4)), RNG.standard_normal((4,))],
        )


# -- ctc ------------------------------------------------------------------------------------------------------------
def _ctc_case():
    T, N, C, S = 12, 4, 6, 5
    x = RNG.standard_normal((T, N, C))
    tg = RNG.integers(1, C, (N, S))
    tg[0, 1] = tg[0, 2]  # a repeated label needs a blank in between
    return x, tg, np.array([12, 10, 7, 12]), np.array([5, 3, 0, 2])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_ctc_against_torch(reduction, dtype):
    torch = torch_or_skip()
    tf = torch.nn.functional
    x, tg, il, tl = _ctc_case()
    # gradients compared through log_softmax: PyTorch's kernel returns the gradient w.r.t. the logits of a
    # log_softmax (it adds exp(log_probs)); after log_softmax both agree
    compare(
        lambda a: F.ctc_loss(
            F.log_softmax(a, 2), flow.tensor(tg), flow.tensor(il), flow.tensor(tl), reduction=reduction
        ),
        lambda a: tf.ctc_loss(
            tf.log_softmax(a, 2), torch.tensor(tg), torch.tensor(il), torch.tensor(tl), reduction=reduction
        ),
        [x],
        dtype,
    )
    flat = np.concatenate([tg[i, : tl[i]] for i in range(4)])
    compare(
        lambda a: F.ctc_loss(
            F.log_softmax(a, 2), flow.tensor(flat), tuple(il), tuple(tl), blank=0, reduction=reduction
        ),
        lambda a: tf.ctc_loss(tf.log_softmax(a, 2), torch.tensor(flat), tuple(il), tuple(tl), reduction=reduction),
        [x],
        dtype,
    )


def test_ctc_blank_zero_infinity_unbatched():
    torch = torch_or_skip()
    tf = torch.nn.functional
    x, tg, il, tl = _ctc_case()
    tg2 = RNG.integers(0, 5, (4, 5))
    compare(
        lambda a: F.ctc_loss(F.log_softmax(a, 2), flow.tensor(tg2), flow.tensor(il), flow.tensor(tl), blank=5),
        lambda a: tf.ctc_loss(tf.log_softmax(a, 2), torch.tensor(tg2), torch.tensor(il), torch.tensor(tl), blank=5),
        [x],
    )
    short = np.array([2, 10, 7, 12])  # sample 0 cannot be aligned: infinite loss, zeroed
    compare(
        lambda a: F.ctc_loss(
            F.log_softmax(a, 2),
            flow.tensor(tg),
            flow.tensor(short),
            flow.tensor(tl),
            zero_infinity=True,
            reduction="none",
        ),
        lambda a: tf.ctc_loss(
            tf.log_softmax(a, 2),
            torch.tensor(tg),
            torch.tensor(short),
            torch.tensor(tl),
            zero_infinity=True,
            reduction="none",
        ),
        [x],
    )
    inf = F.ctc_loss(
        flow.tensor(x).log_softmax(2), flow.tensor(tg), flow.tensor(short), flow.tensor(tl), reduction="none"
    )
    assert np.isinf(inf.numpy()[0])
    compare(
        lambda a: F.ctc_loss(F.log_softmax(a, 1), flow.tensor(tg[0]), 12, 5),
        lambda a: tf.ctc_loss(tf.log_softmax(a, 1), torch.tensor(tg[0]), torch.tensor(12), torch.tensor(5)),
        [x[:, 0]],
    )


def test_ctc_gradient_is_the_derivative_of_the_loss():
    x, tg, il, tl = _ctc_case()
    lp = F.log_softmax(flow.tensor(x[:6, :2]), 2).detach().requires_grad_(True)
    from flow.testing import gradcheck

    assert gradcheck(
        lambda a: F.ctc_loss(a, flow.tensor(tg[:2, :2]), flow.tensor([6, 5]), flow.tensor([2, 1]), reduction="sum"),
        [lp],
    )
    with pytest.raises(OpIndexError, match="ctc_loss"):
        F.ctc_loss(lp, flow.tensor([[0, 1], [1, 1]]), flow.tensor([6, 5]), flow.tensor([2, 1]))
    with pytest.raises(OpError, match="input_lengths"):
        F.ctc_loss(lp, flow.tensor(tg[:2, :2]), flow.tensor([7, 5]), flow.tensor([2, 1]))
