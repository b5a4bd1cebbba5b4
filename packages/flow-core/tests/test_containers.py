"""flow.nn containers (Sequential, ModuleList/Dict, ParameterList/Dict) and nn.utils."""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest
from _modules import Affine, Net

import flow
import flow.nn as nn


# -- containers ------------------------------------------------------------------------------------
def test_sequential():
    a, b, c = Affine(3, 4), Affine(4, 4), Affine(4, 2)
    s = nn.Sequential(a, b, c)
    x = flow.randn(2, 3)
    np.testing.assert_allclose(s(x).detach().numpy(), c(b(a(x))).detach().numpy())
    assert len(s) == 3 and s[0] is a and s[-1] is c and list(s) == [a, b, c]
    sub = s[1:]
    assert isinstance(sub, nn.Sequential) and list(sub) == [b, c]
    s.append(Affine(2, 2))
    assert len(s) == 4 and [n for n, _ in s.named_children()] == ["0", "1", "2", "3"]
    del s[1]
    assert [n for n, _ in s.named_children()] == ["0", "1", "2"] and s[1] is c
    s[0] = b
    assert s[0] is b
    s.insert(0, a)
    assert s[0] is a and len(s) == 4
    assert s.pop(0) is a and len(s) == 3
    with pytest.raises(IndexError):
        s[7]
    named = nn.Sequential(OrderedDict([("first", a), ("second", b)]))
    assert named.first is a and named[1] is b
    assert len(named + nn.Sequential(c)) == 3
    s.extend([Affine(2, 2)])
    assert len(s) == 4


def test_module_list():
    ml = nn.ModuleList([Affine(1, 1) for _ in range(3)])
    assert len(ml) == 3 and len(list(ml.parameters())) == 6
    extra = Affine(1, 1)
    ml.append(extra)
    assert ml[-1] is extra and ml[3] is extra
    ml += [Affine(1, 1)]
    assert len(ml) == 5
    ml.insert(1, extra)
    assert ml[1] is extra and len(ml) == 6
    del ml[0]
    assert ml[0] is extra and list(ml._modules) == ["0", "1", "2", "3", "4"]
    assert [n for n, _ in ml.named_children()] == ["0", "1", "2", "4"]  # extra sits at 0 and 3: listed once
    assert isinstance(ml[1:3], nn.ModuleList) and len(ml[1:3]) == 2
    ml[0] = Affine(2, 2)
    assert ml[0].weight.shape == (2, 2)
    assert ml.pop() is not None and len(ml) == 4
    with pytest.raises(IndexError):
        ml[10]
    with pytest.raises(TypeError):
        ml.extend(Affine(1, 1))


def test_module_dict():
    md = nn.ModuleDict({"a": Affine(1, 1), "b": Affine(1, 2)})
    assert list(md.keys()) == ["a", "b"] and len(md) == 2 and "a" in md
    md["c"] = Affine(2, 1)
    assert [k for k, _ in md.items()] == ["a", "b", "c"]
    assert list(md) == ["a", "b", "c"]
    md.update([("d", Affine(1, 1))])
    assert len(list(md.values())) == 4
    assert isinstance(md.pop("a"), Affine) and "a" not in md
    del md["b"]
    assert list(md) == ["c", "d"]
    assert len(list(md.parameters())) == 4
    md.clear()
    assert len(md) == 0
    with pytest.raises(ValueError):
        md.update([("x",)])


def test_parameter_list_and_dict():
    pl = nn.ParameterList([nn.Parameter(flow.ones(2)), flow.zeros(3)])
    assert len(pl) == 2 and all(isinstance(p, nn.Parameter) for p in pl)
    pl.append(flow.ones(1))
    assert [n for n, _ in pl.named_parameters()] == ["0", "1", "2"]
    assert pl[-1].shape == (1,)
    assert "Parameter containing: [flow.float32 of size 3]" in repr(pl) or "float32 of size 3" in repr(pl)
    pd = nn.ParameterDict({"w": flow.ones(2)})
    pd["b"] = nn.Parameter(flow.zeros(1))
    assert list(pd.keys()) == ["w", "b"] and isinstance(pd["w"], nn.Parameter)
    assert {n for n, _ in pd.named_parameters()} == {"w", "b"}
    assert "w" in pd and len(pd) == 2
    pd.pop("w")
    assert list(pd) == ["b"] and len(list(pd.parameters())) == 1

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.ps = nn.ParameterList([flow.ones(2), flow.ones(2)])

    assert list(Holder().state_dict()) == ["ps.0", "ps.1"]


def test_hot_path_calls_forward_directly():
    m = Affine(2, 2)
    calls = []
    m.forward = lambda x: calls.append(x) or x
    m(1)
    assert calls == [1]


# -- nn.utils ----------------------------------------------------------------------------------------
def _with_grads(*grads):
    ps = []
    for g in grads:
        p = nn.Parameter(flow.zeros(*np.shape(g)))
        p.grad = flow.tensor(np.asarray(g, np.float32))
        ps.append(p)
    return ps


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
def test_clip_grad_norm(norm_type):
    g1, g2 = np.array([3.0, -4.0]), np.array([[1.0, 2.0], [-2.0, 0.5]])
    ps = _with_grads(g1, g2)
    flat = np.concatenate([g1.ravel(), g2.ravel()])
    expected = np.abs(flat).max() if norm_type == float("inf") else (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
    total = nn.utils.clip_grad_norm_(ps, max_norm=1.0, norm_type=norm_type)
    assert isinstance(total, flow.Tensor)
    assert total.item() == pytest.approx(expected, rel=1e-5)
    scale = 1.0 / (expected + 1e-6)
    np.testing.assert_allclose(ps[0].grad.numpy(), g1 * scale, rtol=1e-5)
    np.testing.assert_allclose(ps[1].grad.numpy(), g2 * scale, rtol=1e-5)
    # below the threshold: untouched
    qs = _with_grads(g1 * 1e-3)
    nn.utils.clip_grad_norm_(qs, max_norm=10.0, norm_type=norm_type)
    np.testing.assert_allclose(qs[0].grad.numpy(), g1 * 1e-3, rtol=1e-6)


def test_clip_grad_norm_matches_torch_and_nonfinite():
    torch = pytest.importorskip("torch")
    grads = [np.random.default_rng(i).standard_normal(s).astype(np.float32) for i, s in enumerate([(3, 4), (5,)])]
    fp = _with_grads(*grads)
    tp = [torch.nn.Parameter(torch.zeros(g.shape)) for g in grads]
    for p, g in zip(tp, grads):
        p.grad = torch.tensor(g)
    ft = nn.utils.clip_grad_norm_(fp, 0.5)
    tt = torch.nn.utils.clip_grad_norm_(tp, 0.5)
    assert ft.item() == pytest.approx(tt.item(), rel=1e-5)
    for f, t in zip(fp, tp):
        np.testing.assert_allclose(f.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-7)
    single = _with_grads(np.array([1.0, 2.0]))[0]
    assert nn.utils.clip_grad_norm_(single, 1.0).item() == pytest.approx(math.sqrt(5), rel=1e-5)
    bad = _with_grads(np.array([1.0, np.nan]))
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_(bad, 1.0, error_if_nonfinite=True)
    assert math.isnan(nn.utils.clip_grad_norm_(bad, 1.0).item())
    assert nn.utils.clip_grad_norm_([nn.Parameter(flow.ones(2))], 1.0).item() == 0.0  # no grads


def test_clip_grad_value():
    ps = _with_grads(np.array([-3.0, 0.5, 2.0]))
    nn.utils.clip_grad_value_(ps, 1.0)
    np.testing.assert_array_equal(ps[0].grad.numpy(), [-1.0, 0.5, 1.0])


def test_parameters_vector_round_trip():
    m = Net()
    vec = nn.utils.parameters_to_vector(m.parameters())
    n = sum(p.numel() for p in m.parameters())
    assert vec.shape == (n,)
    np.testing.assert_array_equal(
        vec.detach().numpy(), np.concatenate([p.detach().numpy().ravel() for p in m.parameters()])
    )
    params = list(m.parameters())
    new = flow.arange(n, dtype=flow.float32)
    nn.utils.vector_to_parameters(new, m.parameters())
    assert list(m.parameters())[0] is params[0]
    np.testing.assert_array_equal(m.a.weight.detach().numpy().ravel(), np.arange(12))
    assert m.a.bias.detach().numpy().tolist() == [12, 13, 14, 15]
    # parameters_to_vector is differentiable
    vec = nn.utils.parameters_to_vector(m.a.parameters())
    (vec * vec).sum().backward()
    np.testing.assert_allclose(m.a.bias.grad.numpy(), 2 * m.a.bias.detach().numpy())
    with pytest.raises(TypeError):
        nn.utils.vector_to_parameters([1.0], m.parameters())
