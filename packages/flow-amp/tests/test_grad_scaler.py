"""GradScaler / StaticGradScaler in eager mode: step for step against torch.amp.GradScaler where torch is
installed, against the reference rule otherwise."""

from __future__ import annotations

import math

import numpy as np
import pytest

import flow
from flow.errors import FlowError
from flow_amp.grad_scaler import GradScaler, StaticGradScaler

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the injected infs and nans


def _mlp(seed: int = 0):
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((8, 4)).astype(np.float32) * 0.5
    b1 = rng.standard_normal(8).astype(np.float32) * 0.1
    w2 = rng.standard_normal((3, 8)).astype(np.float32) * 0.5
    b2 = rng.standard_normal(3).astype(np.float32) * 0.1
    return [w1, b1, w2, b2]


def _batch(step: int):
    rng = np.random.default_rng(100 + step)
    return rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)


class _FlowRun:
    def __init__(self, arrays, opt_name, opt_kw, scaler_kw, static=None):
        self.params = [flow.nn.Parameter(flow.tensor(a.copy())) for a in arrays]
        self.opt = getattr(flow.optim, opt_name)(self.params, **opt_kw)
        self.scaler = StaticGradScaler(static) if static is not None else GradScaler(**scaler_kw)

    def loss(self, x, y):
        w1, b1, w2, b2 = self.params
        h = flow.relu(flow.tensor(x) @ w1.t() + b1)
        return ((h @ w2.t() + b2 - flow.tensor(y)) ** 2).mean()

    def step(self, x, y, inject=None, clip=False):
        self.opt.zero_grad()
        loss = self.loss(x, y)
        self.scaler.scale(loss).backward()
        if inject is not None:
            self.params[inject[0]].grad._data.reshape(-1)[0] = inject[1]
        if clip:
            self.scaler.unscale_(self.opt)
        ret = self.scaler.step(self.opt)
        self.scaler.update()
        return float(loss.item()), ret


class _TorchRun:
    def __init__(self, torch, arrays, opt_name, opt_kw, scaler_kw):
        self.torch = torch
        self.params = [torch.nn.Parameter(torch.tensor(a.copy())) for a in arrays]
        self.opt = getattr(torch.optim, opt_name)(self.params, **opt_kw)
        self.scaler = torch.amp.GradScaler("cpu", **scaler_kw)

    def step(self, x, y, inject=None, clip=False):
        t = self.torch
        self.opt.zero_grad()
        w1, b1, w2, b2 = self.params
        h = t.relu(t.tensor(x) @ w1.t() + b1)
        loss = ((h @ w2.t() + b2 - t.tensor(y)) ** 2).mean()
        self.scaler.scale(loss).backward()
        if inject is not None:
            with t.no_grad():
                self.params[inject[0]].grad.view(-1)[0] = inject[1]
        if clip:
            self.scaler.unscale_(self.opt)
        self.scaler.step(self.opt)
        self.scaler.update()
        return float(loss.item())


# steps with an injected inf / nan in some gradient (parameter index, value)
INJECT = {2: (0, math.inf), 3: (3, math.nan), 7: (2, -math.inf)}


@pytest.mark.parametrize(
    "opt_name,opt_kw",
    [("SGD", dict(lr=0.05, momentum=0.9)), ("Adam", dict(lr=0.01)), ("AdamW", dict(lr=0.01, weight_decay=0.1))],
)
@pytest.mark.parametrize("clip", [False, True])
def test_matches_torch_step_for_step(opt_name, opt_kw, clip):
    torch = pytest.importorskip("torch")
    arrays = _mlp()
    scaler_kw = dict(init_scale=2.0**10, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)
    fr = _FlowRun(arrays, opt_name, opt_kw, scaler_kw)
    tr = _TorchRun(torch, arrays, opt_name, opt_kw, scaler_kw)
    scales = []
    for i in range(12):
        x, y = _batch(i)
        before = [p.detach().numpy().copy() for p in fr.params]
        lf, _ = fr.step(x, y, INJECT.get(i), clip)
        lt = tr.step(x, y, INJECT.get(i), clip)
        np.testing.assert_allclose(lf, lt, rtol=1e-5, atol=1e-7)
        assert fr.scaler.get_scale() == tr.scaler.get_scale()
        assert fr.scaler.state_dict() == tr.scaler.state_dict()
        scales.append(fr.scaler.get_scale())
        for pf, pt in zip(fr.params, tr.params):
            np.testing.assert_allclose(pf.detach().numpy(), pt.detach().numpy(), rtol=1e-5, atol=1e-6)
        if i in INJECT:
            for b, p in zip(before, fr.params):  # skipped: parameters untouched
                np.testing.assert_array_equal(b, p.detach().numpy())
    # the sequence holds growth after 3 clean steps and back-offs on the injected steps
    assert scales == [1024.0, 1024.0, 512.0, 256.0, 256.0, 256.0, 512.0, 256.0, 256.0, 256.0, 512.0, 512.0]
    # optimizer states match (momentum buffer / Adam moments and step counts): skipped steps left them
    sf, st = fr.opt.state_dict()["state"], tr.opt.state_dict()["state"]
    assert sorted(sf) == sorted(st)
    for k in st:
        for name, v in st[k].items():
            np.testing.assert_allclose(np.asarray(sf[k][name].tolist()), v.numpy(), rtol=1e-5, atol=1e-6)


def _reference_update(scale, tracker, found, growth, backoff, interval):
    if found:
        return scale * backoff, 0
    if tracker + 1 == interval:
        return scale * growth, 0
    return scale, tracker + 1


def test_scale_sequence_matches_reference_rule():
    fr = _FlowRun(
        _mlp(1), "SGD", dict(lr=0.01), dict(init_scale=64.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=2)
    )
    scale, tracker = 64.0, 0
    for i in range(10):
        x, y = _batch(i)
        inj = INJECT.get(i)
        ret = fr.step(x, y, inj)[1]
        assert ret is None
        scale, tracker = _reference_update(scale, tracker, inj is not None, 4.0, 0.25, 2)
        assert fr.scaler.get_scale() == scale
        assert fr.scaler._get_growth_tracker() == tracker


def test_growth_keeps_a_finite_scale():
    s = GradScaler(init_scale=2.0**127, growth_interval=1)
    p = flow.nn.Parameter(flow.ones(2))
    opt = flow.optim.SGD([p], lr=0.0)
    s.scale((p * 1.0).sum()).backward()
    s.step(opt)
    s.update()
    assert s.get_scale() == 2.0**127  # 2**128 overflows float32: the scale stays


def test_step_returns_optimizer_result_and_skips():
    class Opt(flow.optim.SGD):
        calls = 0

        def step(self, closure=None):
            Opt.calls += 1
            super().step()
            return "ran"

    p = flow.nn.Parameter(flow.ones(3))
    opt = Opt([p], lr=0.1)
    s = GradScaler(init_scale=8.0)
    s.scale((p * 2.0).sum()).backward()
    np.testing.assert_array_equal(p.grad.numpy(), [16.0] * 3)
    assert s.step(opt) == "ran"
    np.testing.assert_allclose(p.detach().numpy(), [0.8] * 3)  # the true gradient (2) was used
    s.update()
    opt.zero_grad()
    s.scale((p * float("nan")).sum()).backward()
    assert s.step(opt) is None and Opt.calls == 1
    s.update()
    assert s.get_scale() == 4.0


def test_unscale_divides_grads_and_finds_inf_once_per_optimizer():
    a, b = flow.nn.Parameter(flow.ones(2)), flow.nn.Parameter(flow.ones(3, dtype=flow.float64))
    opt = flow.optim.SGD([a, b], lr=0.1)
    s = GradScaler(init_scale=4.0)
    s.scale(a.sum() * 3.0 + b.sum()).backward()
    s.unscale_(opt)
    np.testing.assert_array_equal(a.grad.numpy(), [3.0, 3.0])
    np.testing.assert_array_equal(b.grad.numpy(), [1.0, 1.0, 1.0])
    assert b.grad.dtype is flow.float64
    with pytest.raises(FlowError, match="already been called"):
        s.unscale_(opt)
    s.step(opt)
    with pytest.raises(FlowError, match="after step"):
        s.unscale_(opt)
    with pytest.raises(FlowError, match="step\\(\\) has already been called"):
        s.step(opt)
    s.update()
    s.unscale_(opt)  # a new iteration: allowed again


def test_multiple_optimizers_combine_found_inf():
    a, b = flow.nn.Parameter(flow.ones(2)), flow.nn.Parameter(flow.ones(2))
    oa, ob = flow.optim.SGD([a], lr=1.0), flow.optim.SGD([b], lr=1.0)
    s = GradScaler(init_scale=16.0)
    s.scale(a.sum() + b.sum()).backward()
    b.grad._data[0] = np.inf
    s.step(oa)
    s.step(ob)
    s.update()
    np.testing.assert_array_equal(a.detach().numpy(), [0.0, 0.0])  # oa's grads were clean: it stepped
    np.testing.assert_array_equal(b.detach().numpy(), [1.0, 1.0])  # ob skipped
    assert s.get_scale() == 8.0  # one inf anywhere backs the scale off


def test_scale_nested_outputs_and_errors():
    s = GradScaler(init_scale=2.0)
    out = s.scale([flow.tensor(1.0), (flow.tensor([2.0, 3.0]),)])
    assert isinstance(out, list) and isinstance(out[1], tuple)
    assert out[0].item() == 2.0 and out[1][0].tolist() == [4.0, 6.0]
    with pytest.raises(ValueError, match="Tensor or an iterable"):
        s.scale(3.0)


def test_update_new_scale():
    s = GradScaler(init_scale=2.0)
    s.scale(flow.tensor(1.0))
    s.update(new_scale=32.0)
    assert s.get_scale() == 32.0
    s.update(flow.tensor([8.0]))
    assert s.get_scale() == 8.0
    with pytest.raises(ValueError, match="new_scale"):
        s.update(flow.tensor([1.0, 2.0]))
    with pytest.raises(FlowError, match="no inf/nan checks"):
        s.update()


def test_state_dict_round_trip():
    s = GradScaler(init_scale=128.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=5)
    p = flow.nn.Parameter(flow.ones(2))
    opt = flow.optim.SGD([p], lr=0.1)
    s.scale(p.sum()).backward()
    s.step(opt)
    s.update()
    sd = s.state_dict()
    assert sd == {
        "scale": 128.0,
        "growth_factor": 3.0,
        "backoff_factor": 0.25,
        "growth_interval": 5,
        "_growth_tracker": 1,
    }
    t = GradScaler()
    t.load_state_dict(sd)
    assert t.state_dict() == sd
    t.scale(flow.tensor(1.0))  # made lazily from the loaded values
    assert t.get_scale() == 128.0 and t._get_growth_tracker() == 1
    u = GradScaler(init_scale=4.0)
    u.scale(flow.tensor(1.0))
    u.load_state_dict(sd)  # into a live scale
    assert u.state_dict() == sd
    with pytest.raises(FlowError, match="empty"):
        u.load_state_dict({})


def test_state_dict_keys_match_torch():
    torch = pytest.importorskip("torch")
    ts = torch.amp.GradScaler("cpu", init_scale=32.0, growth_interval=7)
    fs = GradScaler(init_scale=32.0, growth_interval=7)
    assert fs.state_dict() == ts.state_dict()
    fs.load_state_dict(ts.state_dict())
    assert fs.state_dict() == ts.state_dict()


def test_disabled_is_pass_through():
    s = GradScaler(enabled=False, growth_factor=0.5)  # no validation when disabled, as torch
    x = flow.tensor([1.0, 2.0])
    assert s.scale(x) is x
    p = flow.nn.Parameter(flow.ones(2))
    opt = flow.optim.SGD([p], lr=0.5)
    p.grad = flow.tensor([np.inf, 1.0])
    s.unscale_(opt)
    assert p.grad.tolist()[1] == 1.0
    s.step(opt)  # not skipped: disabled
    assert p.tolist()[1] == 0.5
    s.update()
    assert s.get_scale() == 1.0 and s.state_dict() == {} and not s.is_enabled()
    s.load_state_dict({})  # a no-op


@pytest.mark.parametrize(
    "kw,name",
    [
        (dict(growth_factor=1.0), "growth_factor"),
        (dict(growth_factor=0.5), "growth_factor"),
        (dict(backoff_factor=1.0), "backoff_factor"),
        (dict(backoff_factor=0.0), "backoff_factor"),
        (dict(backoff_factor=-0.5), "backoff_factor"),
        (dict(growth_interval=0), "growth_interval"),
        (dict(growth_interval=2.5), "growth_interval"),
        (dict(init_scale=0.0), "init_scale"),
        (dict(init_scale=-1.0), "init_scale"),
        (dict(init_scale="big"), "init_scale"),
    ],
)
def test_bad_arguments(kw, name):
    with pytest.raises(ValueError, match=name):
        GradScaler(**kw)


def test_setters_validate():
    s = GradScaler()
    s.set_growth_factor(4.0)
    s.set_backoff_factor(0.125)
    s.set_growth_interval(10)
    assert (s.get_growth_factor(), s.get_backoff_factor(), s.get_growth_interval()) == (4.0, 0.125, 10)
    with pytest.raises(ValueError, match="growth_factor"):
        s.set_growth_factor(1.0)
    with pytest.raises(ValueError, match="backoff_factor"):
        s.set_backoff_factor(2.0)
    with pytest.raises(ValueError, match="growth_interval"):
        s.set_growth_interval(0)


def test_misuse_errors():
    s = GradScaler()
    p = flow.nn.Parameter(flow.ones(2))
    opt = flow.optim.SGD([p], lr=0.1)
    with pytest.raises(FlowError, match="scale\\(loss\\)"):
        s.step(opt)
    with pytest.raises(FlowError, match="closure"):
        s.step(opt, closure=lambda: None)
    h = flow.nn.Parameter(flow.ones(2, dtype=flow.float16))
    oh = flow.optim.SGD([h], lr=0.1)
    s.scale((h.float() * 1.0).sum()).backward()
    with pytest.raises(ValueError, match="FP16"):
        s.unscale_(oh)


def test_static_scaler_fixed_and_skips():
    s = StaticGradScaler(256.0)
    p = flow.nn.Parameter(flow.ones(2))
    opt = flow.optim.SGD([p], lr=0.5)
    for i in range(6):
        opt.zero_grad()
        loss = (p * (float("inf") if i == 2 else 1.0)).sum()
        s.scale(loss).backward()
        if i != 2:
            assert p.grad.tolist() == [256.0, 256.0]
        s.step(opt)
        s.update()
        assert s.get_scale() == 256.0
    np.testing.assert_allclose(p.detach().numpy(), [1.0 - 0.5 * 5] * 2)  # 5 steps ran, the inf one was skipped
    with pytest.raises(ValueError, match="scale_factor"):
        StaticGradScaler(0.0)
    with pytest.raises(FlowError, match="fixed"):
        s.update(2.0)


def test_fp16_mlp_with_dynamic_scaling_trains():
    """Master weights float32, forward in float16 (autocast when flow has it, casts by hand otherwise):
    the loss falls, the scale backs off from an overflowing start and no parameter is ever non-finite."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 16)).astype(np.float32)
    true_w = rng.standard_normal((16, 1)).astype(np.float32)
    y = (x @ true_w).astype(np.float32)
    w1 = flow.nn.Parameter(flow.tensor(rng.standard_normal((16, 32)).astype(np.float32) * 0.25))
    w2 = flow.nn.Parameter(flow.tensor(rng.standard_normal((32, 1)).astype(np.float32) * 0.25))
    opt = flow.optim.Adam([w1, w2], lr=1e-2)
    scaler = GradScaler(init_scale=2.0**24, growth_interval=20)  # starts too high: must back off
    xt, yt = flow.tensor(x), flow.tensor(y)
    losses, skipped = [], 0
    for _ in range(150):
        opt.zero_grad()
        if hasattr(flow, "autocast"):
            with flow.autocast("cpu", dtype=flow.float16):
                out = flow.relu(xt @ w1) @ w2
        else:
            out = flow.relu(xt.half() @ w1.half()) @ w2.half()
        loss = ((out.float() - yt) ** 2).mean()
        scaler.scale(loss).backward()
        before = w1.detach().numpy().copy()
        scaler.step(opt)
        if np.array_equal(before, w1.detach().numpy()):
            skipped += 1
        scaler.update()
        losses.append(float(loss.item()))
        assert np.isfinite(w1.detach().numpy()).all() and np.isfinite(w2.detach().numpy()).all()
    assert skipped >= 1 and scaler.get_scale() < 2.0**24
    assert np.isfinite(losses[-1]) and losses[-1] < 0.2 * losses[0]


def test_unscale_op_checks():
    from flow.testing import opcheck
    from flow_amp import loss_scale_ops

    assert opcheck(loss_scale_ops.UNSCALE)["errors_checked"] > 0
    assert opcheck(loss_scale_ops.UPDATE_SCALE)["errors_checked"] > 0
