"""flow.nn.Module and Parameter: registration, iteration, state dicts, hooks, conversion, repr (the
containers are in test_containers.py)."""

from __future__ import annotations

import copy
import pickle
from collections import OrderedDict

import numpy as np
import pytest
from _modules import Affine, Net

import flow
import flow.nn as nn


# -- Parameter ------------------------------------------------------------------------------
def test_parameter_shares_data_and_is_leaf():
    t = flow.ones(3)
    p = nn.Parameter(t)
    assert isinstance(p, flow.Tensor) and isinstance(p, nn.Parameter)
    assert p.requires_grad and p.is_leaf and p.grad_fn is None
    with flow.no_grad():
        t.mul_(2)
    np.testing.assert_array_equal(p.detach().numpy(), [2, 2, 2])
    assert not nn.Parameter(flow.ones(2), requires_grad=False).requires_grad
    assert repr(p).startswith("Parameter containing:\n")
    with pytest.raises(RuntimeError):
        nn.Parameter(flow.tensor([1, 2]))
    assert not nn.Parameter(flow.tensor([1, 2]), requires_grad=False).requires_grad


def test_parameter_attributes_deepcopy_pickle():
    p = nn.Parameter(flow.randn(2, 3))
    p.tag = "w"  # Tensor has __dict__, so subclasses and users can add attributes
    q = copy.deepcopy(p)
    assert isinstance(q, nn.Parameter) and q.requires_grad and q.tag == "w"
    np.testing.assert_array_equal(q.detach().numpy(), p.detach().numpy())
    with flow.no_grad():
        q.mul_(0)
    assert p.detach().numpy().any()
    r = pickle.loads(pickle.dumps(p))
    assert isinstance(r, nn.Parameter) and r.requires_grad
    np.testing.assert_array_equal(r.detach().numpy(), p.detach().numpy())


def test_parameter_gradient_flows():
    p = nn.Parameter(flow.tensor([1.0, 2.0]))
    (p * p).sum().backward()
    np.testing.assert_allclose(p.grad.numpy(), [2.0, 4.0])


# -- registration -------------------------------------------------------------------------
def test_setattr_registers_parameters_buffers_modules():
    m = Net()
    assert [n for n, _ in m.named_parameters()] == [
        "a.weight",
        "a.bias",
        "b.weight",
        "blocks.0.weight",
        "blocks.0.bias",
        "blocks.1.weight",
        "blocks.1.bias",
    ]
    assert [n for n, _ in m.named_buffers()] == [
        "a.calls",
        "a.scratch",
        "b.calls",
        "b.scratch",
        "blocks.0.calls",
        "blocks.0.scratch",
        "blocks.1.calls",
        "blocks.1.scratch",
    ]
    assert [n for n, _ in m.named_modules()] == ["", "a", "b", "blocks", "blocks.0", "blocks.1"]
    assert [n for n, _ in m.named_children()] == ["a", "b", "blocks"]
    assert len(list(m.parameters())) == 7 and len(list(m.parameters(recurse=False))) == 0
    assert len(list(m.modules())) == 6 and len(list(m.children())) == 3
    assert m.b.bias is None and "bias" not in m.b._parameters  # a plain None attribute, as torch
    assert [n for n, _ in m.a.named_parameters(prefix="enc")] == ["enc.weight", "enc.bias"]


def test_reassign_and_delete():
    m = Affine(2, 2)
    with pytest.raises(TypeError, match="cannot assign 'Tensor' as parameter 'weight'"):
        m.weight = flow.zeros(2, 2)
    m.weight = None
    assert m.weight is None and "weight" in m._parameters
    m.calls = flow.ones(())  # a tensor assigned to an existing buffer name replaces the buffer
    assert m._buffers["calls"].item() == 1.0
    with pytest.raises(TypeError):
        m.calls = 3
    m.extra = Affine(1, 1)
    assert "extra" in m._modules
    del m.extra
    assert "extra" not in m._modules
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        m.nothing  # noqa: B018
    # a plain attribute becomes a module when a module is assigned under its name
    m.thing = 3
    m.thing = Affine(1, 1)
    assert "thing" in m._modules and "thing" not in m.__dict__
    m.plain = 5
    assert m.plain == 5 and "plain" in dir(m) and "weight" in dir(m)


def test_register_methods_validate():
    m = nn.Module()
    with pytest.raises(KeyError, match="contain"):
        m.register_buffer("a.b", flow.zeros(1))
    with pytest.raises(KeyError, match="empty"):
        m.register_parameter("", None)
    with pytest.raises(TypeError):
        m.register_buffer("x", 3)
    with pytest.raises(TypeError):
        m.register_parameter("x", flow.zeros(1))
    m.foo = 1
    with pytest.raises(KeyError, match="already exists"):
        m.register_buffer("foo", flow.zeros(1))
    with pytest.raises(ValueError, match="non-leaf"):
        p = nn.Parameter(flow.ones(2))
        q = p * 2
        q.__class__ = nn.Parameter
        m.register_parameter("q", q)
    m.add_module("sub", Affine(1, 1))
    m.register_module("sub2", None)
    assert m.sub2 is None
    with pytest.raises(TypeError):
        m.add_module("bad", 3)
    with pytest.raises(AttributeError, match="before Module.__init__"):

        class Early(nn.Module):
            def __init__(self):
                self.p = nn.Parameter(flow.ones(1))
                super().__init__()

        Early()


def test_buffer_class_registers_buffer():
    m = nn.Module()
    m.stats = nn.Buffer(flow.zeros(3))
    m.tmp = nn.Buffer(flow.ones(1), persistent=False)
    assert set(dict(m.named_buffers())) == {"stats", "tmp"}
    assert list(m.state_dict()) == ["stats"]
    assert type(m.stats) is flow.Tensor


def test_shared_parameters_and_remove_duplicate():
    m = nn.Module()
    m.x = Affine(2, 2)
    m.y = m.x
    assert len(list(m.parameters())) == 2
    assert len(list(m.named_parameters(remove_duplicate=False))) == 4
    assert len(list(m.named_modules(remove_duplicate=False))) == 3
    assert len(list(m.modules())) == 2
    assert len(m.state_dict()) == 6  # state dicts list every path, as torch


def test_get_submodule_parameter_buffer():
    m = Net()
    assert m.get_submodule("blocks.1") is m.blocks[1]
    assert m.get_submodule("") is m
    assert m.get_parameter("blocks.0.weight") is m.blocks[0].weight
    assert m.get_buffer("a.calls") is m.a.calls
    with pytest.raises(AttributeError, match="has no attribute `zzz`"):
        m.get_submodule("a.zzz")
    with pytest.raises(AttributeError, match="is not an nn.Module"):
        m.get_submodule("a.weight")
    with pytest.raises(AttributeError, match="not an nn.Parameter"):
        m.get_parameter("a.calls")


# -- call, hooks --------------------------------------------------------------------------
def test_forward_missing_raises():
    with pytest.raises(NotImplementedError, match='missing the required "forward"'):
        nn.Module()(1)


def test_forward_hooks_and_handles():
    m = Affine(2, 2)
    log = []

    def pre(mod, args):
        log.append("pre")
        return (args[0] * 0,)

    def post(mod, args, out):
        log.append("post")
        return out + 1

    h1 = m.register_forward_pre_hook(pre)
    h2 = m.register_forward_hook(post)
    out = m(flow.ones(3, 2))
    np.testing.assert_allclose(out.detach().numpy(), np.ones((3, 2)))
    assert log == ["pre", "post"]
    h1.remove()
    h2.remove()
    assert not m._forward_hooks and not m._forward_pre_hooks
    out = m(flow.ones(3, 2))
    assert log == ["pre", "post"]
    # pre-hook may return a single non-tuple value
    with m.register_forward_pre_hook(lambda mod, args: args[0] * 0):
        np.testing.assert_allclose(m(flow.ones(1, 2)).detach().numpy(), m.bias.detach().numpy()[None])
    assert not m._forward_pre_hooks


def test_hooks_with_kwargs_prepend_always_call():
    class K(nn.Module):
        def forward(self, x, scale=1.0):
            if scale < 0:
                raise ValueError("negative")
            return x * scale

    m = K()
    order = []
    m.register_forward_pre_hook(lambda mod, a, kw: (a, {**kw, "scale": 3.0}), with_kwargs=True)
    m.register_forward_hook(lambda mod, a, kw, out: order.append(("kw", kw["scale"])), with_kwargs=True)
    m.register_forward_hook(lambda mod, a, out: order.append("first"), prepend=True)
    assert m(flow.ones(1), scale=2.0).item() == 3.0
    assert order == ["first", ("kw", 3.0)]
    with pytest.raises(RuntimeError, match="forward pre-hook must return"):
        h = m.register_forward_pre_hook(lambda mod, a, kw: 5, with_kwargs=True)
        m(flow.ones(1))
    h.remove()

    seen = []
    n = K()
    n.register_forward_hook(lambda mod, a, out: seen.append(out), always_call=True)
    n.register_forward_pre_hook(lambda mod, a, kw: (a, {"scale": -1.0}), with_kwargs=True)
    with pytest.raises(ValueError, match="negative"):
        n(flow.ones(1))
    assert seen == [None]


def test_global_forward_hooks():
    from flow.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    names = []
    m = Net()
    with (
        register_module_forward_pre_hook(lambda mod, a: names.append(type(mod).__name__)),
        register_module_forward_hook(lambda mod, a, out: None),
    ):
        m(flow.randn(1, 3))
    assert names == ["Net", "Affine", "Affine", "Affine", "Affine"]
    m(flow.randn(1, 3))
    assert len(names) == 5


# -- modes, grads, conversion ------------------------------------------------------------------
def test_train_eval_recursive():
    m = Net()
    assert m.training and m.blocks[1].training
    assert m.eval() is m
    assert not any(x.training for x in m.modules())
    m.train()
    assert all(x.training for x in m.modules())
    with pytest.raises(ValueError):
        m.train("yes")


def test_zero_grad_and_requires_grad_():
    m = Net()
    m(flow.randn(5, 3)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.numpy().any() for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())
    m.a.requires_grad_()
    assert [n for n, p in m.named_parameters() if p.requires_grad] == ["a.weight", "a.bias"]


def test_to_dtype_keeps_parameter_identity():
    m = Net()
    m(flow.randn(2, 3)).sum().backward()
    m.register_buffer("count", flow.tensor(3))
    w = m.a.weight
    assert m.to(flow.float64) is m
    assert m.a.weight is w and w.dtype == flow.float64 and w.requires_grad
    assert w.grad.dtype == flow.float64
    assert m.a.calls.dtype == flow.float64
    assert m.count.dtype == flow.int64  # integer buffers keep their dtype
    m.float()
    assert w.dtype == flow.float32 and m.a.weight is w
    m.half()
    assert w.dtype == flow.float16
    m.double()
    assert w.dtype == flow.float64
    m.to(dtype=flow.float32, device="cpu")
    assert w.dtype == flow.float32 and w.device == flow.device("cpu")
    m.to(flow.zeros(1, dtype=flow.float64))
    assert w.dtype == flow.float64
    m.cpu()
    with pytest.raises(TypeError, match="floating point"):
        m.to(flow.int32)
    # a converted model still trains: the graph goes to the same Parameter objects
    m.zero_grad()
    m(flow.randn(2, 3, dtype=flow.float64)).sum().backward()
    assert w.grad is not None and w.grad.dtype == flow.float64


def test_apply_visits_children_first():
    m = Net()
    order = []
    m.apply(lambda mod: order.append(type(mod).__name__))
    assert order == ["Affine", "Affine", "Affine", "Affine", "ModuleList", "Net"]


# -- state dict ---------------------------------------------------------------------------------
def test_state_dict_contents_and_detach():
    m = Net()
    sd = m.state_dict()
    assert isinstance(sd, OrderedDict)
    assert list(sd) == [
        "a.weight",
        "a.bias",
        "a.calls",
        "b.weight",
        "b.calls",
        "blocks.0.weight",
        "blocks.0.bias",
        "blocks.0.calls",
        "blocks.1.weight",
        "blocks.1.bias",
        "blocks.1.calls",
    ]
    assert not sd["a.weight"].requires_grad and not isinstance(sd["a.weight"], nn.Parameter)
    # detached values share storage with the parameters
    with flow.no_grad():
        m.a.weight.mul_(0)
    assert not sd["a.weight"].numpy().any()
    kv = m.state_dict(keep_vars=True)
    assert kv["a.weight"] is m.a.weight
    assert m.a.state_dict(prefix="x.").keys() == {"x.weight", "x.bias", "x.calls"}


def test_state_dict_round_trip():
    flow.manual_seed(0)
    src, dst = Net(), Net()
    x = flow.randn(4, 3)
    assert not np.allclose(src(x).detach().numpy(), dst(x).detach().numpy())
    res = dst.load_state_dict(src.state_dict())
    assert res.missing_keys == [] and res.unexpected_keys == []
    assert repr(res) == "<All keys matched successfully>"
    np.testing.assert_allclose(src(x).detach().numpy(), dst(x).detach().numpy())
    # loading copies: the destination keeps its own storage
    with flow.no_grad():
        src.a.weight.mul_(0)
    assert dst.a.weight.detach().numpy().any()


def test_load_state_dict_numpy_arrays_and_cast():
    m = Affine(2, 3)
    sd = {
        "weight": np.arange(6, dtype=np.float64).reshape(3, 2),
        "bias": np.ones(3, np.float32),
        "calls": np.array(7.0),
    }
    m.load_state_dict(sd)
    assert m.weight.dtype == flow.float32
    np.testing.assert_array_equal(m.weight.detach().numpy(), sd["weight"])
    assert m.calls.item() == 7.0


def test_load_state_dict_strict_errors():
    m = Net()
    sd = m.state_dict()
    del sd["a.bias"]
    sd["a.extra"] = flow.zeros(1)
    sd["blocks.5.weight"] = flow.zeros(1)
    with pytest.raises(RuntimeError) as e:
        m.load_state_dict(sd)
    msg = str(e.value)
    assert msg.startswith("Error(s) in loading state_dict for Net:")
    assert 'Missing key(s) in state_dict: "a.bias".' in msg
    assert '"a.extra"' in msg and '"blocks.5.weight"' in msg and "Unexpected key(s)" in msg
    res = m.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["a.bias"]
    assert res.unexpected_keys == ["a.extra", "blocks.5.weight"]
    missing, unexpected = res
    assert missing == ["a.bias"]


def test_load_state_dict_nonstrict_reports_like_torch():
    torch = pytest.importorskip("torch")

    class T(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(2, 2)

    t = T()
    tsd = t.state_dict()
    del tsd["a.bias"]
    tsd["a.zzz"] = torch.zeros(1)
    tres = t.load_state_dict(tsd, strict=False)

    class FlowT(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = Affine(2, 2)
            del self.a._buffers["calls"], self.a._buffers["scratch"]

    f = FlowT()
    fsd = {k: flow.tensor(v.numpy()) for k, v in tsd.items()}
    fres = f.load_state_dict(fsd, strict=False)
    assert fres.missing_keys == tres.missing_keys
    assert fres.unexpected_keys == tres.unexpected_keys


def test_load_state_dict_shape_mismatch_always_raises():
    m = Affine(2, 3)
    sd = m.state_dict()
    sd["weight"] = flow.zeros(3, 3)
    for strict in (True, False):
        with pytest.raises(
            RuntimeError,
            match=r"size mismatch for weight: copying a param with shape \[3, 3\] from "
            r"checkpoint, the shape in current model is \[3, 2\]",
        ):
            m.load_state_dict(sd, strict=strict)
    with pytest.raises(TypeError):
        m.load_state_dict([1, 2])


def test_load_state_dict_assign():
    m = Affine(2, 2)
    w = flow.ones(2, 2)
    m.load_state_dict({"weight": w, "bias": flow.zeros(2), "calls": flow.zeros(())}, assign=True)
    assert isinstance(m.weight, nn.Parameter) and m.weight.requires_grad
    with flow.no_grad():
        w.mul_(3)
    assert m.weight.detach().numpy()[0, 0] == 3.0  # assign shares the given storage


def test_non_persistent_buffers_not_in_state_dict():
    m = Affine(2, 2)
    assert "scratch" not in m.state_dict()
    m.load_state_dict(m.state_dict())  # and it is not required when loading


def test_deepcopy_and_pickle_module():
    m = Net()
    c = copy.deepcopy(m)
    x = flow.randn(2, 3)
    np.testing.assert_allclose(c(x).detach().numpy(), m(x).detach().numpy())
    assert c.a.weight is not m.a.weight and isinstance(c.a.weight, nn.Parameter)
    p = pickle.loads(pickle.dumps(m))
    np.testing.assert_allclose(p(x).detach().numpy(), m(x).detach().numpy())
    assert len(list(p.parameters())) == 7


# -- repr --------------------------------------------------------------------------------------
def test_repr_nested():
    m = Net()
    assert repr(m) == (
        "Net(\n  (a): Affine(3, 4)\n  (b): Affine(4, 2)\n  (blocks): ModuleList(\n    (0-1): 2 x Affine(2, 2)\n  )\n)"
    )
    assert repr(nn.Module()) == "Module()"
    assert repr(nn.ModuleList()) == "ModuleList()"


def test_repr_matches_torch_for_containers():
    torch = pytest.importorskip("torch")
    if not hasattr(nn, "Linear"):
        pytest.skip("nn.Linear missing")
    f = nn.Sequential(
        nn.Linear(2, 3),
        nn.ReLU(),
        nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 3), nn.Tanh()]),
        nn.ModuleDict({"x": nn.Sigmoid()}),
    )
    t = torch.nn.Sequential(
        torch.nn.Linear(2, 3),
        torch.nn.ReLU(),
        torch.nn.ModuleList([torch.nn.Linear(3, 3), torch.nn.Linear(3, 3), torch.nn.Tanh()]),
        torch.nn.ModuleDict({"x": torch.nn.Sigmoid()}),
    )
    assert repr(f) == repr(t)
