"""Parametrizations (weight_norm, spectral_norm, register_parametrization), the hook forms
nn.utils.weight_norm / spectral_norm, LazyLinear, and full backward hooks, against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
from _layer_parity import check_parity, randn

import flow
import flow.nn as nn
from flow.nn.utils import parametrize

torch = pytest.importorskip("torch")


def _load(fm, tm):
    assert list(fm.state_dict()) == list(tm.state_dict())
    fm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})


def _same_state(fm, tm, tol=1e-6):
    fs = fm.state_dict()
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(fs[k].numpy(), v.detach().numpy(), rtol=tol, atol=tol, err_msg=k)


# -- weight norm -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dim", [0, 1, None])
@pytest.mark.parametrize("form", ["parametrization", "hook"])
def test_weight_norm(dim, form):
    if form == "hook":
        fwn, twn = nn.utils.weight_norm, torch.nn.utils.weight_norm
    else:
        fwn, twn = nn.utils.parametrizations.weight_norm, torch.nn.utils.parametrizations.weight_norm
    with pytest.warns(FutureWarning) if form == "hook" else _nullcontext():
        tm = twn(torch.nn.Conv2d(2, 3, 3), dim=dim)
    fm = fwn(nn.Conv2d(2, 3, 3), dim=dim)
    _load(fm, tm)
    check_parity(fm, tm, randn(2, 2, 5, 5), copy=False)
    # the computed weight itself, and setting it through the parametrization
    np.testing.assert_allclose(fm.weight.detach().numpy(), tm.weight.detach().numpy(), rtol=1e-6, atol=1e-6)


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_weight_norm_remove_and_errors():
    m = nn.utils.weight_norm(nn.Linear(4, 3))
    w = m.weight.detach().clone()
    nn.utils.remove_weight_norm(m)
    assert list(m.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(m.weight.detach().numpy(), w.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="weight_norm of 'weight' not found"):
        nn.utils.remove_weight_norm(m)
    with pytest.raises(ValueError, match="no parameter named 'kernel'"):
        nn.utils.weight_norm(nn.Linear(4, 3), name="kernel")
    m = nn.utils.weight_norm(nn.Linear(4, 3))
    with pytest.raises(RuntimeError, match="Cannot register two weight_norm hooks"):
        nn.utils.weight_norm(m)


# -- spectral norm -----------------------------------------------------------------------------------
@pytest.mark.parametrize("form", ["parametrization", "hook"])
@pytest.mark.parametrize("layer", ["linear", "conv_transpose"])
def test_spectral_norm_steps(form, layer):
    make = {
        "linear": lambda m: m.Linear(5, 4),
        "conv_transpose": lambda m: m.ConvTranspose2d(3, 2, 3),
    }[layer]
    if form == "hook":
        fsn, tsn = nn.utils.spectral_norm, torch.nn.utils.spectral_norm
    else:
        fsn, tsn = nn.utils.parametrizations.spectral_norm, torch.nn.utils.parametrizations.spectral_norm
    tm, fm = tsn(make(torch.nn), n_power_iterations=2), fsn(make(nn), n_power_iterations=2)
    _load(fm, tm)  # the same u (and v) as torch's start
    shape = (3, 5) if layer == "linear" else (2, 3, 4, 4)
    for step in range(3):  # each training forward runs the power iteration on the buffers
        check_parity(fm, tm, randn(*shape, seed=step), copy=False, rtol=1e-4, atol=1e-5)
        _same_state(fm, tm, 1e-5)
        fm.zero_grad()
        tm.zero_grad()
    fm.eval()
    tm.eval()
    before = {k: v.clone() for k, v in fm.state_dict().items()}
    check_parity(fm, tm, randn(*shape, seed=9), copy=False, rtol=1e-4, atol=1e-5)
    for k, v in fm.state_dict().items():  # no power iteration in eval mode
        np.testing.assert_array_equal(v.numpy(), before[k].numpy())


def test_spectral_norm_value_and_errors():
    m = nn.utils.parametrizations.spectral_norm(nn.Linear(6, 5), n_power_iterations=30)
    for _ in range(3):
        m(flow.randn(1, 6))
    sv = np.linalg.svd(m.parametrizations.weight.original.detach().numpy(), compute_uv=False)
    np.testing.assert_allclose(np.linalg.svd(m.weight.detach().numpy(), compute_uv=False)[0], 1.0, rtol=1e-4)
    assert sv[0] > 0
    with pytest.raises(ValueError, match="non-negative int"):
        nn.utils.spectral_norm(nn.Linear(3, 3), n_power_iterations=-1)
    m = nn.utils.spectral_norm(nn.Linear(3, 3))
    nn.utils.remove_spectral_norm(m)
    assert list(m.state_dict()) == ["bias", "weight"]


# -- register_parametrization ------------------------------------------------------------------------
class _Symmetric(nn.Module):
    def forward(self, x):
        return x.triu() + x.triu(1).transpose(-1, -2)


class _TSymmetric(torch.nn.Module):
    def forward(self, x):
        return x.triu() + x.triu(1).transpose(-1, -2)


def test_register_parametrization():
    fm, tm = nn.Linear(3, 3), torch.nn.Linear(3, 3)
    parametrize.register_parametrization(fm, "weight", _Symmetric())
    torch.nn.utils.parametrize.register_parametrization(tm, "weight", _TSymmetric())
    assert type(fm).__name__ == "ParametrizedLinear" and isinstance(fm, nn.Linear)
    assert parametrize.is_parametrized(fm) and parametrize.is_parametrized(fm, "weight")
    assert not parametrize.is_parametrized(fm, "bias")
    _load(fm, tm)
    check_parity(fm, tm, randn(2, 3), copy=False)
    w = fm.weight.detach().numpy()
    np.testing.assert_array_equal(w, w.T)
    opt_param = fm.parametrizations.weight.original
    parametrize.remove_parametrizations(fm, "weight")
    torch.nn.utils.parametrize.remove_parametrizations(tm, "weight")
    assert type(fm) is nn.Linear and list(fm.state_dict()) == list(tm.state_dict()) == ["bias", "weight"]
    assert fm.weight is opt_param  # the same Parameter object, now holding the parametrized value
    np.testing.assert_array_equal(fm.weight.detach().numpy(), w)
    with pytest.raises(ValueError, match="does not have a parametrization on weight"):
        parametrize.remove_parametrizations(fm, "weight")
    with pytest.raises(ValueError, match="no parameter or buffer named 'nope'"):
        parametrize.register_parametrization(fm, "nope", _Symmetric())


# -- LazyLinear ----------------------------------------------------------------------------------------
def test_lazy_linear():
    m = nn.LazyLinear(3)
    assert isinstance(m.weight, nn.UninitializedParameter) and m.has_uninitialized_params()
    with pytest.raises(ValueError, match="uninitialized parameter"):
        _ = m.weight.shape
    params = list(m.parameters())
    y = m(flow.randn(2, 7))
    assert type(m) is nn.Linear and m.in_features == 7 and tuple(y.shape) == (2, 3)
    assert [p for p in m.parameters()] == params  # materialised in place: an optimizer keeps working
    assert type(m.weight) is nn.Parameter and tuple(m.weight.shape) == (3, 7)
    bound = 1 / np.sqrt(7)
    assert np.abs(m.weight.detach().numpy()).max() <= bound and np.abs(m.bias.detach().numpy()).max() <= bound
    tm = torch.nn.LazyLinear(3)
    tm(torch.zeros(2, 7))
    assert list(m.state_dict()) == list(tm.state_dict())
    # a torch checkpoint loads into a still-lazy module
    fresh = nn.LazyLinear(3, bias=True)
    fresh.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    check_parity(fresh, tm, randn(4, 7), copy=False)
    assert type(fresh) is nn.Linear
    nb = nn.LazyLinear(2, bias=False)
    nb(flow.randn(1, 5))
    assert nb.bias is None and list(nb.state_dict()) == ["weight"]


# -- full backward hooks -------------------------------------------------------------------------------
def _two_in_two_out(lib):
    base = torch.nn.Module if lib is torch.nn else nn.Module

    class M(base):
        def __init__(self):
            super().__init__()
            self.l = lib.Linear(3, 2)

        def forward(self, a, k, b):
            return self.l(a) * k + b.sum(), self.l(b)

    return M()


def _run_hooks(lib, T, m, x, y, replace: bool):
    log = []

    def pre(mod, go):
        log.append(("pre", [round(float(g.sum()), 5) for g in go]))
        return (go[0] * 2, go[1]) if replace else None

    def hook(mod, gi, go):
        log.append(("hook", [None if g is None else round(float(g.sum()), 5) for g in gi]))
        log.append(("go", [round(float(g.sum()), 5) for g in go]))
        return (gi[0] * 3, None, gi[2]) if replace else None

    hs = [m.register_full_backward_pre_hook(pre), m.register_full_backward_hook(hook)]
    a, b = T(x, requires_grad=True), T(y)
    o1, o2 = m(a, 2.0, b)
    (o1.sum() + 0.5 * o2.sum()).backward()
    for h in hs:
        h.remove()
    return log, a.grad.detach().numpy(), m.l.weight.grad.detach().numpy()


@pytest.mark.parametrize("replace", [False, True])
def test_full_backward_hooks(replace):
    tm, fm = _two_in_two_out(torch.nn), _two_in_two_out(nn)
    _load(fm, tm)
    x, y = randn(4, 3), randn(4, 3, seed=1)
    flog, fga, fgw = _run_hooks(nn, flow.tensor, fm, x, y, replace)
    tlog, tga, tgw = _run_hooks(torch.nn, torch.tensor, tm, x, y, replace)
    assert flog == tlog
    np.testing.assert_allclose(fga, tga, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fgw, tgw, rtol=1e-5, atol=1e-6)
    # removed hooks no longer run
    fm.zero_grad()
    o1, o2 = fm(flow.tensor(x, requires_grad=True), 2.0, flow.tensor(y))
    (o1.sum() + o2.sum()).backward()


def test_backward_hook_without_input_grad_and_errors():
    m = nn.Linear(3, 2)
    seen = []
    m.register_full_backward_hook(lambda mod, gi, go: seen.append((gi, tuple(g.shape for g in go))))
    m(flow.randn(4, 3)).sum().backward()  # only the parameters need grad: grad_input is all None
    assert seen == [((None,), ((4, 2),))]
    m2 = nn.Linear(3, 2)
    m2.register_full_backward_hook(lambda mod, gi, go: (gi[0], gi[0]))
    with pytest.raises(RuntimeError, match="invalid number of grad_input, got 2, but expected 1"):
        m2(flow.randn(4, 3, requires_grad=True)).sum().backward()
    m3 = nn.Linear(3, 2)
    m3.register_full_backward_pre_hook(lambda mod, go: (go[0], go[0]))
    with pytest.raises(RuntimeError, match="invalid number of grad_output"):
        m3(flow.randn(4, 3, requires_grad=True)).sum().backward()
