"""``flow.compile(module)``: the OptimizedModule surface (``_orig_mod``, state dicts, attributes,
train/eval) and the compiled forward and backward graphs against eager mode (gradients, BatchNorm
statistics, dropout masks, optimizer steps) and PyTorch."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import flow
import flow.nn as nn
import flow.nn.functional as F
from flow.errors import AutogradError, FlowError
from flow.graph.compile import CompiledFunction
from flow.graph.compile_module import OptimizedModule
from flow.graph.config import GraphConfig


def _mlp(dtype=None):
    flow.manual_seed(0)
    m = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))
    return m.double() if dtype == "float64" else m


def _cnn():
    flow.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64, 5),
    )


def _block(dropout):
    flow.manual_seed(0)
    return nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=dropout, batch_first=True)


def _inputs(shape, n, seed=1, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [flow.tensor(rng.standard_normal(shape).astype(dtype)) for _ in range(n)]


def _grads(m):
    return [p.grad.numpy().copy() for p in m.parameters()]


def _train(model, xs, opt_cls=flow.optim.SGD, seed=5, **opt_kw):
    opt = opt_cls(model.parameters(), **opt_kw)
    flow.manual_seed(seed)
    losses = []
    for x in xs:
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _same_state(a, b, tol=0.0):
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        np.testing.assert_allclose(sa[k].numpy(), sb[k].numpy(), rtol=0, atol=tol, err_msg=k)


# -- the wrapper ------------------------------------------------------------------------------
def test_compile_module_returns_optimized_module():
    m = _mlp()
    cm = flow.compile(m)
    assert isinstance(cm, OptimizedModule) and isinstance(cm, nn.Module)
    assert cm._orig_mod is m
    assert repr(cm).startswith("OptimizedModule(\n  (_orig_mod): Sequential(")
    assert flow.compile(m, disable=True) is m
    assert isinstance(flow.compile(lambda x: x * 2), CompiledFunction)  # functions as before
    deco = flow.compile(fullgraph=True, dynamic=False, mode="default")
    assert isinstance(deco(m), OptimizedModule)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown mode 'fastest'"):
        flow.compile(_mlp(), mode="fastest")
    with pytest.raises(ValueError, match="either mode or options"):
        flow.compile(_mlp(), mode="max-autotune", options={"x": 1})
    with pytest.raises(TypeError, match="options must be a dict"):
        flow.compile(_mlp(), options=[1])
    with pytest.raises(TypeError, match="expected a function or a flow.nn.Module, got int"):
        flow.compile(3)


def test_state_dict_has_orig_mod_prefix_and_round_trips():
    cm = flow.compile(_mlp())
    keys = list(cm.state_dict())
    assert keys == ["_orig_mod." + k for k in cm._orig_mod.state_dict()]
    other = flow.compile(nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3)))
    other.load_state_dict(cm.state_dict())
    _same_state(cm, other)
    (x,) = _inputs((4, 5), 1)
    np.testing.assert_array_equal(other(x).detach().numpy(), cm(x).detach().numpy())
    plain = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))
    plain.load_state_dict(cm._orig_mod.state_dict())  # the original's keys have no prefix
    np.testing.assert_array_equal(plain(x).detach().numpy(), cm(x).detach().numpy())
    with pytest.raises(RuntimeError, match="Missing key.*_orig_mod.0.weight"):
        other.load_state_dict(plain.state_dict())  # unprefixed keys do not fit the wrapper


def test_attributes_reach_the_original_module():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(5, 4), nn.ReLU())
            self.head = nn.Linear(4, 2)
            self.hidden = 4

        def forward(self, x):
            return self.head(self.encoder(x))

    net = Net()
    cm = flow.compile(net)
    assert cm.encoder is net.encoder and cm.head.weight is net.head.weight and cm.hidden == 4
    assert cm.encoder[0].out_features == 4
    assert [id(p) for p in cm.parameters()] == [id(p) for p in net.parameters()]
    with pytest.raises(AttributeError, match="no attribute 'decoder'"):
        _ = cm.decoder


def test_eval_and_train_switch_the_original_and_specialise():
    cm = flow.compile(_cnn())
    (x,) = _inputs((2, 3, 8, 8), 1)
    cm(x)
    cm.eval()
    assert not cm.training and all(not m.training for m in cm._orig_mod.modules())
    cm(x)
    assert cm.compiles == 2
    cm.train()
    assert all(m.training for m in cm._orig_mod.modules())
    cm(x)
    assert cm.compiles == 2  # the training specialisation is reused


def test_a_new_shape_recompiles():
    cm = flow.compile(_mlp())
    a, b = _inputs((4, 5), 1)[0], _inputs((7, 5), 1)[0]
    cm(a).sum().backward()
    cm(b).sum().backward()
    assert cm.compiles == 2
    cm(a).sum().backward()
    assert cm.compiles == 2
    assert cm(b).shape == (7, 3)


def test_to_acts_on_the_original():
    cm = flow.compile(_mlp())
    assert cm.to(flow.float64) is cm
    assert all(p.dtype == flow.float64 for p in cm._orig_mod.parameters())


# -- the training path ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,tol", [("float32", 1e-6), ("float64", 1e-12)])
def test_mlp_gradients_equal_eager(dtype, tol):
    eager = _mlp(dtype)
    cm = flow.compile(copy.deepcopy(eager))
    (xa,) = _inputs((4, 5), 1, dtype=np.float32 if dtype == "float32" else np.float64)
    xa.requires_grad_(True)
    xb = xa.detach().clone().requires_grad_(True)
    F.cross_entropy(eager(xa), flow.tensor([0, 2, 1, 1])).backward()
    F.cross_entropy(cm(xb), flow.tensor([0, 2, 1, 1])).backward()
    for ga, gb in zip(_grads(eager), _grads(cm._orig_mod)):
        np.testing.assert_allclose(gb, ga, rtol=tol, atol=tol)
    np.testing.assert_allclose(xb.grad.numpy(), xa.grad.numpy(), rtol=tol, atol=tol)
    # two graphs: the forward takes only the module's input, the backward only saved values and grad outputs
    part = cm.training_step.partition
    assert len(part.forward.inputs) == 1 and not part.backward.states
    assert part.backward.nodes and all(n.tags.get("phase") == "backward" for n in part.backward.nodes)
    assert not any(n.tags.get("phase") == "forward" for n in part.backward.nodes)


def test_gradients_accumulate_and_retain_graph():
    cm = flow.compile(_mlp())
    (x,) = _inputs((4, 5), 1)
    cm(x).sum().backward()
    once = _grads(cm)
    out = cm(x).sum()
    out.backward(retain_graph=True)
    out.backward()
    for a, b in zip(once, _grads(cm)):
        np.testing.assert_allclose(b, 3 * a, rtol=1e-6)
    out = cm(x).sum()
    out.backward()
    with pytest.raises(AutogradError, match="backward through the graph a second time"):
        out.backward()


def test_gradient_flows_into_eager_layers_before_it():
    flow.manual_seed(0)
    pre = nn.Linear(3, 5)
    eager = _mlp()
    cm = flow.compile(copy.deepcopy(eager))
    pre2 = copy.deepcopy(pre)
    (x,) = _inputs((4, 3), 1)
    eager(pre(x)).sum().backward()
    cm(pre2(x)).sum().backward()
    np.testing.assert_allclose(pre2.weight.grad.numpy(), pre.weight.grad.numpy(), atol=1e-6)
    for ga, gb in zip(_grads(eager), _grads(cm)):
        np.testing.assert_allclose(gb, ga, atol=1e-6)


def test_unused_parameters_frozen_parameters_and_structured_outputs():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(5, 3)
            self.frozen = nn.Linear(5, 3)
            self.unused = nn.Linear(2, 2)
            self.frozen.requires_grad_(False)

        def forward(self, x, *, scale=1.0):
            y = self.a(x) * scale + self.frozen(x)
            return {"y": y, "idx": y.argmax(-1)}

    flow.manual_seed(0)
    eager = Net()
    cm = flow.compile(copy.deepcopy(eager))
    (x,) = _inputs((4, 5), 1)
    ea, ca = eager(x, scale=2.0), cm(x, scale=2.0)
    np.testing.assert_array_equal(ca["idx"].numpy(), ea["idx"].numpy())
    assert not ca["idx"].requires_grad and ca["y"].requires_grad
    ea["y"].sum().backward()
    ca["y"].sum().backward()
    np.testing.assert_allclose(cm.a.weight.grad.numpy(), eager.a.weight.grad.numpy(), atol=1e-6)
    assert cm.frozen.weight.grad is None and cm.unused.weight.grad is None
    cm(x, scale=3.0)
    assert cm.compiles == 2  # a non-tensor argument is a constant of the specialisation


def test_inference_path_under_no_grad():
    cm = flow.compile(_mlp())
    (x,) = _inputs((4, 5), 1)
    with flow.no_grad():
        y = cm(x)
    assert not y.requires_grad and cm._inference.compiles == 1
    np.testing.assert_allclose(y.numpy(), cm._orig_mod(x).detach().numpy(), atol=1e-6)
    with pytest.raises(FlowError, match="no call has run the training path"):
        _ = cm.training_step


def test_cnn_with_batchnorm_matches_eager_in_train_and_eval():
    eager = _cnn()
    # bit-for-bit with eager needs eager's kernels: autotuning may pick Winograd for the 3x3 conv
    config = GraphConfig()
    config.enable_autotune(False)
    cm = flow.compile(copy.deepcopy(eager), config=config)
    xs = _inputs((2, 3, 8, 8), 5)
    assert _train(eager, xs, lr=0.1) == _train(cm, xs, lr=0.1)
    _same_state(eager, cm._orig_mod)  # weights and running statistics
    assert int(cm._orig_mod[1].num_batches_tracked.item()) == 5
    eager.eval()
    cm.eval()
    before = cm._orig_mod[1].running_mean.numpy().copy()
    eager.zero_grad()
    cm.zero_grad()
    ya, yb = eager(xs[0]), cm(xs[0])
    np.testing.assert_array_equal(yb.detach().numpy(), ya.detach().numpy())
    ya.square().sum().backward()
    yb.square().sum().backward()
    for ga, gb in zip(_grads(eager), _grads(cm)):  # eval-mode backward reads the running statistics
        np.testing.assert_allclose(gb, ga, atol=1e-6)
    with flow.no_grad():
        np.testing.assert_allclose(cm(xs[1]).numpy(), eager(xs[1]).numpy(), atol=1e-6)
    np.testing.assert_array_equal(cm._orig_mod[1].running_mean.numpy(), before)


def test_transformer_block_with_dropout_matches_eager_step_for_step():
    eager = _block(0.1)
    cm = flow.compile(copy.deepcopy(eager))
    xs = _inputs((2, 5, 16), 5)
    la = _train(eager, xs, flow.optim.Adam, lr=1e-2)
    lb = _train(cm, xs, flow.optim.Adam, lr=1e-2)
    assert la == lb  # the same dropout masks: the forward graph draws in eager order
    _same_state(eager, cm._orig_mod)
    no_drop = _block(0.0)
    assert _train(copy.deepcopy(no_drop), xs, flow.optim.Adam, lr=1e-2) != la  # dropout was applied


def test_dropout_is_applied_in_train_and_not_in_eval():
    cm = flow.compile(nn.Sequential(nn.Linear(8, 64), nn.Dropout(0.5)))
    (x,) = _inputs((4, 8), 1)
    a, b = cm(x), cm(x)
    assert not np.array_equal(a.detach().numpy(), b.detach().numpy())
    assert np.mean(a.detach().numpy() == 0) > 0.3
    cm.eval()
    np.testing.assert_array_equal(cm(x).detach().numpy(), cm._orig_mod(x).detach().numpy())


# -- PyTorch --------------------------------------------------------------------------------
def test_surface_matches_torch_compile():
    torch = pytest.importorskip("torch")
    tm = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    tc = torch.compile(tm)  # wrapping does not compile yet: no C compiler needed
    cm = flow.compile(_mlp())
    assert list(cm.state_dict()) == list(tc.state_dict())
    assert [n for n, _ in cm.named_parameters()] == [n for n, _ in tc.named_parameters()]
    assert type(cm).__name__ == type(tc).__name__
    assert repr(cm).splitlines()[:2] == repr(tc).splitlines()[:2]
    assert torch.compile(tm, disable=True) is tm and flow.compile(cm._orig_mod, disable=True) is cm._orig_mod


def test_training_matches_torch_eager():
    torch = pytest.importorskip("torch")
    cm = flow.compile(_mlp())
    tm = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    with torch.no_grad():
        for tp, fp in zip(tm.parameters(), cm.parameters()):
            tp.copy_(torch.from_numpy(fp.detach().numpy().copy()))
    xs = _inputs((8, 5), 5)
    ys = [np.random.default_rng(i).integers(0, 3, 8) for i in range(5)]
    fopt = flow.optim.SGD(cm.parameters(), lr=0.1, momentum=0.9)
    topt = torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9)
    for x, y in zip(xs, ys):
        fopt.zero_grad()
        fl = F.cross_entropy(cm(x), flow.tensor(y))
        fl.backward()
        fopt.step()
        topt.zero_grad()
        tl = torch.nn.functional.cross_entropy(tm(torch.from_numpy(x.numpy())), torch.from_numpy(y))
        tl.backward()
        topt.step()
        np.testing.assert_allclose(fl.item(), tl.item(), rtol=1e-5)
    for tp, fp in zip(tm.parameters(), cm.parameters()):
        np.testing.assert_allclose(fp.detach().numpy(), tp.detach().numpy(), atol=1e-5)


def test_compiled_module_inside_a_compiled_train_step():
    eager = _mlp()
    cm = flow.compile(copy.deepcopy(eager))
    opt = flow.optim.SGD(cm.parameters(), lr=0.1)

    @flow.compile
    def step(x):
        opt.zero_grad()
        loss = cm(x).square().mean()  # traced inline: one graph with forward, backward and update
        loss.backward()
        opt.step()
        return loss

    xs = _inputs((4, 5), 3)
    got = [step(x).item() for x in xs]
    assert got == pytest.approx(_train(eager, xs, lr=0.1), abs=1e-6)
    assert not cm._training_steps and step.compiles == 1


def test_modifying_a_saved_input_in_place_raises_as_in_eager():
    cm = flow.compile(nn.Linear(2, 2))
    x = flow.randn(3, 2)
    y = cm(x)
    x.add_(1)  # the weight's gradient reads x
    with pytest.raises(AutogradError, match="modified by an in-place operation"):
        y.sum().backward()


def test_only_some_outputs_used_in_the_loss():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(5, 3)
            self.b = nn.Linear(5, 2)

        def forward(self, x):
            return self.a(x).tanh(), self.b(x)

    flow.manual_seed(0)
    eager = Two()
    cm = flow.compile(copy.deepcopy(eager))
    (x,) = _inputs((4, 5), 1)
    eager(x)[0].sum().backward()
    cm(x)[0].sum().backward()  # no gradient arrives for the second output
    np.testing.assert_allclose(cm.a.weight.grad.numpy(), eager.a.weight.grad.numpy(), atol=1e-6)
    np.testing.assert_array_equal(cm.b.weight.grad.numpy(), np.zeros((2, 5), np.float32))
    assert eager.b.weight.grad is None or not eager.b.weight.grad.numpy().any()
