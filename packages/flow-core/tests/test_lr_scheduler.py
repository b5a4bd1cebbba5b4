"""flow.optim.lr_scheduler: value-for-value against torch over many steps, state dicts, formulas."""

from __future__ import annotations

import math

import pytest

import flow
import flow.optim
from flow.optim import SGD, Adam
from flow.optim import lr_scheduler as S

N_STEPS = 120


def flow_opt(cls=SGD, **kw):
    a, b = flow.zeros(2, requires_grad=True), flow.zeros(3, requires_grad=True)
    return cls([{"params": [a]}, {"params": [b], "lr": 0.05}], lr=0.1, **kw)


def torch_opt(cls_name="SGD", **kw):
    torch = pytest.importorskip("torch")
    a, b = torch.zeros(2, requires_grad=True), torch.zeros(3, requires_grad=True)
    return getattr(torch.optim, cls_name)([{"params": [a]}, {"params": [b], "lr": 0.05}], lr=0.1, **kw)


def _lam(e):
    return 0.95**e


CASES = {
    "StepLR": lambda m, o: m.StepLR(o, step_size=7, gamma=0.5),
    "MultiStepLR": lambda m, o: m.MultiStepLR(o, milestones=[10, 30, 30, 80], gamma=0.3),
    "ExponentialLR": lambda m, o: m.ExponentialLR(o, gamma=0.97),
    "CosineAnnealingLR": lambda m, o: m.CosineAnnealingLR(o, T_max=25, eta_min=0.001),
    "LambdaLR": lambda m, o: m.LambdaLR(o, lr_lambda=_lam),
    "LambdaLR-list": lambda m, o: m.LambdaLR(o, lr_lambda=[_lam, lambda e: 1 / (e + 1)]),
    "LinearLR": lambda m, o: m.LinearLR(o, start_factor=0.2, end_factor=0.9, total_iters=30),
    "ConstantLR": lambda m, o: m.ConstantLR(o, factor=0.5, total_iters=10),
    "OneCycleLR": lambda m, o: m.OneCycleLR(o, max_lr=[1.0, 0.5], total_steps=N_STEPS + 1),
    "OneCycleLR-3phase-linear": lambda m, o: m.OneCycleLR(
        o, max_lr=0.3, epochs=11, steps_per_epoch=11, three_phase=True, anneal_strategy="linear"
    ),
    "SequentialLR": lambda m, o: m.SequentialLR(
        o,
        [
            m.LinearLR(o, start_factor=0.1, total_iters=10),
            m.ExponentialLR(o, gamma=0.9),
            m.CosineAnnealingLR(o, T_max=30),
        ],
        milestones=[10, 50],
    ),
}


def torch_mod():
    torch = pytest.importorskip("torch")
    return torch.optim.lr_scheduler


def lrs_over(sched, opt, n=N_STEPS):
    out = [list(sched.get_last_lr())]
    for _ in range(n):
        opt.step()
        sched.step()
        out.append(list(sched.get_last_lr()))
    return out


@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
@pytest.mark.parametrize("name", list(CASES))
def test_matches_torch(name, opt_name):
    tm = torch_mod()
    kw = dict(momentum=0.9) if opt_name == "SGD" else {}
    fo, to = flow_opt(getattr(flow.optim, opt_name), **kw), torch_opt(opt_name, **kw)
    fs, ts = CASES[name](S, fo), CASES[name](tm, to)
    got, ref = lrs_over(fs, fo), lrs_over(ts, to)
    for k, (a, b) in enumerate(zip(got, ref)):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-15), k
    for fg, tg in zip(fo.param_groups, to.param_groups):  # OneCycleLR also cycles momentum / beta1
        for key in ("momentum", "betas"):
            if key in tg:
                assert fg[key] == pytest.approx(tg[key], rel=1e-12)


def test_reduce_lr_on_plateau_matches_torch():
    tm = torch_mod()
    metrics = [1.0, 0.9, 0.9, 0.95, 0.91, 0.9, 0.89999, 0.8, 0.8, 0.8, 0.8, 0.8, 0.81, 0.7] * 5
    for kw in [
        dict(patience=2),
        dict(mode="max", factor=0.5, patience=1, cooldown=2, threshold_mode="abs", threshold=0.01, min_lr=[0.01, 0.02]),
    ]:
        fo, to = flow_opt(), torch_opt()
        fs, ts = S.ReduceLROnPlateau(fo, **kw), tm.ReduceLROnPlateau(to, **kw)
        for m in metrics:
            fs.step(m)
            ts.step(m)
            assert fs.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-12)
            assert fs.num_bad_epochs == ts.num_bad_epochs and fs.cooldown_counter == ts.cooldown_counter


@pytest.mark.parametrize(
    "name", ["StepLR", "MultiStepLR", "CosineAnnealingLR", "OneCycleLR", "SequentialLR", "LinearLR", "LambdaLR"]
)
def test_state_dict_resume_through_checkpoint(name, tmp_path):
    from flow.serialization import load, save

    fo = flow_opt()
    sched = CASES[name](S, fo)
    full = lrs_over(sched, fo)
    fo1 = flow_opt()
    s1 = CASES[name](S, fo1)
    first = lrs_over(s1, fo1, 40)
    save({"opt": fo1.state_dict(), "sched": s1.state_dict()}, tmp_path / "ck.flow")
    ck = load(tmp_path / "ck.flow")
    fo2 = flow_opt()
    s2 = CASES[name](S, fo2)
    fo2.load_state_dict(ck["opt"])
    s2.load_state_dict(ck["sched"])
    rest = lrs_over(s2, fo2, N_STEPS - 40)
    got = first + rest[1:]
    for k, (a, b) in enumerate(zip(got, full)):
        assert a == pytest.approx(b, rel=1e-12), k


def test_reduce_on_plateau_state_dict_round_trip(tmp_path):
    from flow.serialization import load, save

    fo = flow_opt()
    s = S.ReduceLROnPlateau(fo, patience=0)
    s.step(1.0)
    s.step(2.0)
    save(s.state_dict(), tmp_path / "s.flow")
    s2 = S.ReduceLROnPlateau(flow_opt(), patience=5)
    s2.load_state_dict(load(tmp_path / "s.flow"))
    assert s2.best == 1.0 and s2.patience == 0 and s2.mode_worse == math.inf
    assert s2.get_last_lr() == pytest.approx([0.01, 0.005])


def test_formulas_without_torch():
    o = flow_opt()
    s = S.StepLR(o, step_size=3, gamma=0.1)
    got = lrs_over(s, o, 9)
    assert [g[0] for g in got] == pytest.approx([0.1] * 3 + [0.01] * 3 + [0.001] * 3 + [0.0001])
    o = flow_opt()
    s = S.CosineAnnealingLR(o, T_max=10, eta_min=0.0)
    got = lrs_over(s, o, 10)
    for t, g in enumerate(got):
        assert g[0] == pytest.approx(0.05 * (1 + math.cos(math.pi * t / 10)), abs=1e-12)
        assert g[1] == pytest.approx(0.025 * (1 + math.cos(math.pi * t / 10)), abs=1e-12)
    o = flow_opt()
    s = S.LinearLR(o, start_factor=0.5, total_iters=4)
    assert [g[0] for g in lrs_over(s, o, 6)] == pytest.approx([0.05, 0.0625, 0.075, 0.0875, 0.1, 0.1, 0.1])
    o = flow_opt(Adam)
    s = S.OneCycleLR(o, max_lr=1.0, total_steps=10, pct_start=0.5, anneal_strategy="linear")
    lr = [g[0] for g in lrs_over(s, o, 9)]
    assert lr[0] == pytest.approx(1 / 25) and lr[4] == pytest.approx(1.0) and lr[9] == pytest.approx(1 / 25 / 1e4)
    assert o.param_groups[0]["betas"][0] == pytest.approx(0.95)


def test_errors():
    o = flow_opt()
    with pytest.raises(TypeError, match="not an Optimizer"):
        S.StepLR(object(), 3)
    with pytest.raises(KeyError, match="initial_lr"):
        S.StepLR(o, 3, last_epoch=5)
    with pytest.raises(ValueError, match="milestone"):
        S.SequentialLR(o, [S.ExponentialLR(o, 0.9), S.ExponentialLR(o, 0.9)], milestones=[])
    with pytest.raises(ValueError, match="total_steps"):
        S.OneCycleLR(o, max_lr=0.1)
    s = S.OneCycleLR(o, max_lr=0.1, total_steps=2)
    s.step()
    s.step()
    with pytest.raises(ValueError, match="Tried to step 3 times"):
        s.step()
    with pytest.raises(ValueError, match="Factor"):
        S.ReduceLROnPlateau(o, factor=1.0)
