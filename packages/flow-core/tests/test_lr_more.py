"""CosineAnnealingWarmRestarts, CyclicLR, PolynomialLR and ChainedScheduler: get_last_lr value for value against
torch.optim.lr_scheduler (with the momentum they cycle), state dicts mid-run, closed forms and argument checks."""

from __future__ import annotations

import math

import pytest

import flow
import flow.optim
from flow.optim import OptimizerError, OptimizerTypeError
from flow.optim import lr_scheduler as S

N_STEPS = 60
# torch warns when a scheduler steps without optimizer steps in between, which these tests do on purpose
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")


def flow_opt(name="SGD", **kw):
    a, b = flow.zeros(2, requires_grad=True), flow.zeros(3, requires_grad=True)
    return getattr(flow.optim, name)([{"params": [a]}, {"params": [b], "lr": 0.05}], lr=0.1, **kw)


def torch_opt(name="SGD", **kw):
    torch = pytest.importorskip("torch")
    a, b = torch.zeros(2, requires_grad=True), torch.zeros(3, requires_grad=True)
    return getattr(torch.optim, name)([{"params": [a]}, {"params": [b], "lr": 0.05}], lr=0.1, **kw)


class Halving:
    """A scale_fn object: its attributes are saved in the scheduler's state dict."""

    def __init__(self, base: float = 0.5) -> None:
        self.base = base

    def __call__(self, x):
        return self.base**x


CASES = {
    "CAWR": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=7, eta_min=0.001),
    "CAWR-mult": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2),
    "CyclicLR-triangular": lambda m, o: m.CyclicLR(o, base_lr=0.01, max_lr=[0.1, 0.2], step_size_up=5),
    "CyclicLR-triangular2": lambda m, o: m.CyclicLR(
        o, base_lr=[0.01, 0.02], max_lr=0.1, step_size_up=4, step_size_down=7, mode="triangular2"
    ),
    "CyclicLR-exp_range": lambda m, o: m.CyclicLR(
        o, 0.01, 0.1, step_size_up=6, mode="exp_range", gamma=0.97, base_momentum=0.7, max_momentum=[0.95, 0.9]
    ),
    "CyclicLR-scale_fn-iterations": lambda m, o: m.CyclicLR(
        o, 0.01, 0.1, step_size_up=3, scale_fn=lambda x: 1 / (1 + 0.1 * x), scale_mode="iterations"
    ),
    "CyclicLR-scale_fn-object": lambda m, o: m.CyclicLR(o, 0.01, 0.1, 4, 2, scale_fn=Halving(), cycle_momentum=False),
    "PolynomialLR": lambda m, o: m.PolynomialLR(o, total_iters=40, power=2.0),
    "PolynomialLR-linear": lambda m, o: m.PolynomialLR(o),
    "ChainedScheduler": lambda m, o: m.ChainedScheduler(
        [m.ConstantLR(o, factor=0.5, total_iters=5), m.ExponentialLR(o, gamma=0.95), m.PolynomialLR(o, 50, 0.5)]
    ),
    "ChainedScheduler-optimizer": lambda m, o: m.ChainedScheduler(
        [m.CosineAnnealingWarmRestarts(o, T_0=5), m.MultiStepLR(o, [10, 20], gamma=0.5)], optimizer=o
    ),
}
# (case, optimizer): CyclicLR cycles SGD's momentum and Adam's beta1
RUNS = [(c, "SGD") for c in CASES] + [("CyclicLR-triangular", "Adam"), ("CyclicLR-exp_range", "Adam")]


def _momenta(opt):
    return [g["betas"][0] if "betas" in g else g["momentum"] for g in opt.param_groups]


def _kw(opt_name):
    return dict(momentum=0.9) if opt_name == "SGD" else {}


@pytest.mark.parametrize("case,opt_name", RUNS, ids=[f"{c}-{o}" for c, o in RUNS])
def test_matches_torch(case, opt_name):
    tm = pytest.importorskip("torch").optim.lr_scheduler
    fo, to = flow_opt(opt_name, **_kw(opt_name)), torch_opt(opt_name, **_kw(opt_name))
    fs, ts = CASES[case](S, fo), CASES[case](tm, to)
    for k in range(N_STEPS):
        assert fs.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-12, abs=1e-15), k
        assert _momenta(fo) == pytest.approx(_momenta(to), rel=1e-12), k
        fo.step()
        to.step()
        fs.step()
        ts.step()


@pytest.mark.parametrize("case", list(CASES))
def test_state_dict_resumes_mid_run(case, tmp_path):
    """A scheduler saved after some steps (through flow.save) and loaded into a new one continues as torch's."""
    tm = pytest.importorskip("torch").optim.lr_scheduler
    fo, to = flow_opt(momentum=0.9), torch_opt(momentum=0.9)
    fs, ts = CASES[case](S, fo), CASES[case](tm, to)
    for _ in range(17):
        fs.step()
        ts.step()
    path = tmp_path / "sched.pt"
    flow.save({"opt": fo.state_dict(), "sched": fs.state_dict()}, str(path))
    ck = flow.load(str(path))
    fo2 = flow_opt(momentum=0.9)
    fs2 = CASES[case](S, fo2)
    fo2.load_state_dict(ck["opt"])
    fs2.load_state_dict(ck["sched"])
    # torch's own state dict loads too (its extra attributes are kept, as PyTorch does)
    fo3 = flow_opt(momentum=0.9)
    fs3 = CASES[case](S, fo3)
    fo3.load_state_dict(ck["opt"])
    fs3.load_state_dict(_plain(ts.state_dict()))
    for k in range(30):
        want = ts.get_last_lr()
        assert fs2.get_last_lr() == pytest.approx(want, rel=1e-12), k
        assert fs3.get_last_lr() == pytest.approx(want, rel=1e-12), k
        assert _momenta(fo2) == pytest.approx(_momenta(to), rel=1e-12), k
        for s in (fs2, fs3, ts):
            s.step()


def _plain(sd):
    """torch's scheduler state dict without its torch-only bookkeeping objects."""
    if isinstance(sd, dict):
        return {k: _plain(v) for k, v in sd.items() if k not in ("_scale_fn_ref", "_get_lr_called_within_step")}
    if isinstance(sd, list):
        return [_plain(v) for v in sd]
    return sd


def test_cyclic_scale_fn_object_state_is_saved():
    o = flow_opt(momentum=0.9)
    fn = Halving(0.5)
    s = S.CyclicLR(o, 0.01, 0.1, 2, scale_fn=fn)
    fn.base = 0.8
    sd = s.state_dict()
    assert sd["_scale_fn_custom"] == {"base": 0.8}
    fn2 = Halving(0.1)
    s2 = S.CyclicLR(flow_opt(momentum=0.9), 0.01, 0.1, 2, scale_fn=fn2)
    s2.load_state_dict(sd)
    assert fn2.base == 0.8 and s2._scale_fn_custom is fn2
    s3 = S.CyclicLR(flow_opt(momentum=0.9), 0.01, 0.1, 2, scale_fn=lambda x: 1.0)
    assert s3.state_dict()["_scale_fn_custom"] is None  # a plain function is not saved


def test_cawr_fractional_epochs_match_torch():
    tm = pytest.importorskip("torch").optim.lr_scheduler
    for T_mult in (1, 2, 3):
        fo, to = flow_opt(), torch_opt()
        fs = S.CosineAnnealingWarmRestarts(fo, T_0=4, T_mult=T_mult, eta_min=0.002)
        ts = tm.CosineAnnealingWarmRestarts(to, T_0=4, T_mult=T_mult, eta_min=0.002)
        for epoch in [0.25, 1.5, 3.99, 4.0, 7.3, 12.5, 30.0, 2.0, 55.5]:
            fs.step(epoch)
            ts.step(epoch)
            assert fs.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-12), (T_mult, epoch)
            assert fs.last_epoch == ts.last_epoch and fs.T_i == ts.T_i


def test_formulas_without_torch():
    o = flow_opt()
    s = S.PolynomialLR(o, total_iters=4, power=2.0)
    lrs = [s.get_last_lr()[0]]
    for _ in range(6):
        s.step()
        lrs.append(s.get_last_lr()[0])
    assert lrs == pytest.approx([0.1 * (1 - min(e, 4) / 4) ** 2 for e in range(7)], abs=1e-15)
    with pytest.warns(UserWarning, match="deprecated"):
        s.step(2)  # the closed form
    assert s.get_last_lr()[0] == pytest.approx(0.1 * 0.25)
    o = flow_opt()
    s = S.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=2)
    seen = [s.get_last_lr()[0]]
    for _ in range(6):
        s.step()
        seen.append(s.get_last_lr()[0])
    # restarts at epochs 2 and 6 (periods 2, 4)
    assert seen == pytest.approx(
        [0.1, 0.05, 0.1, 0.1 * (1 + math.cos(math.pi / 4)) / 2, 0.05, 0.1 * (1 + math.cos(3 * math.pi / 4)) / 2, 0.1]
    )
    o = flow_opt(momentum=0.9)
    s = S.CyclicLR(o, 0.0, 1.0, step_size_up=2, step_size_down=2, mode="triangular2")
    seen = []
    for _ in range(9):
        seen.append((s.get_last_lr()[0], o.param_groups[0]["momentum"]))
        s.step()
    assert [x for x, _ in seen] == pytest.approx([0, 0.5, 1, 0.5, 0, 0.25, 0.5, 0.25, 0])
    assert [m for _, m in seen[:3]] == pytest.approx([0.9, 0.85, 0.8])


def test_chained_scheduler_multiplies_the_factors():
    o = flow_opt()
    s = S.ChainedScheduler([S.ExponentialLR(o, 0.5), S.StepLR(o, 2, gamma=0.1)])
    got = []
    for _ in range(4):
        s.step()
        got.append(s.get_last_lr()[0])
    assert got == pytest.approx([0.05, 0.0025, 0.00125, 0.0000625])
    assert s.optimizer is o and len(s.state_dict()["_schedulers"]) == 2
    with pytest.raises(OptimizerError, match="has 1 schedulers, this one chains 2"):
        s.load_state_dict({"_schedulers": [{}]})


@pytest.mark.parametrize(
    "make,err,text",
    [
        (lambda o: S.CosineAnnealingWarmRestarts(o, 0), OptimizerError, "Invalid T_0: 0"),
        (lambda o: S.CosineAnnealingWarmRestarts(o, 2.5), OptimizerTypeError, "T_0 must be an int"),
        (lambda o: S.CosineAnnealingWarmRestarts(o, 5, T_mult=0), OptimizerError, "T_mult"),
        (lambda o: S.CosineAnnealingWarmRestarts(o, 5, eta_min="0"), OptimizerTypeError, "eta_min must be a real"),
        (lambda o: S.CosineAnnealingWarmRestarts(o, 5, eta_min=-1.0), OptimizerError, "eta_min"),
        (lambda o: S.PolynomialLR(o, total_iters=0), OptimizerError, "total_iters"),
        (lambda o: S.PolynomialLR(o, power=-1.0), OptimizerError, "Invalid power: -1"),
        (lambda o: S.CyclicLR(o, 0.1, 1.0, mode="cosine"), OptimizerError, "mode must be one of 'triangular'"),
        (lambda o: S.CyclicLR(o, 0.1, 1.0, scale_fn=3), OptimizerTypeError, "scale_fn must be a function"),
        (lambda o: S.CyclicLR(o, [0.1, 0.2, 0.3], 1.0), OptimizerError, "expected 2 values for base_lr"),
        (lambda o: S.CyclicLR(o, 0.1, -1.0), OptimizerError, "max_lr"),
        (lambda o: S.CyclicLR(o, 0.1, 1.0, step_size_up=0), OptimizerError, "step_size_up"),
        (lambda o: S.CyclicLR(o, 0.1, 1.0, step_size_down=-2), OptimizerError, "step_size_down"),
        (lambda o: S.CyclicLR(o, 0.1, 1.0, gamma=0.0), OptimizerError, "gamma"),
        (lambda o: S.CyclicLR(o, 0.1, 1.0, scale_mode="epoch"), OptimizerError, "scale_mode"),
        (lambda o: S.CyclicLR(o, 0.1, 1.0, max_momentum=1.5), OptimizerError, "max_momentum"),
        (lambda o: S.CyclicLR(o, 0.1, 1.0, last_epoch=-3), OptimizerError, "last_epoch"),
        (lambda o: S.ChainedScheduler(o), OptimizerTypeError, "schedulers must be a list"),
        (lambda o: S.ChainedScheduler([]), OptimizerError, "at least one scheduler"),
        (lambda o: S.ChainedScheduler([S.StepLR(o, 2), "x"]), OptimizerTypeError, r"schedulers\[1\]"),
        (lambda o: S.ChainedScheduler([S.ReduceLROnPlateau(o)]), OptimizerError, "ReduceLROnPlateau"),
        (lambda o: S.ChainedScheduler([S.StepLR(o, 2), S.StepLR(flow_opt(), 2)]), OptimizerError, "same optimizer"),
    ],
)
def test_errors(make, err, text):
    o = flow_opt(momentum=0.9)
    before = [dict(g) for g in o.param_groups]
    with pytest.raises(err, match=text):
        make(o)
    if "Chained" not in text and "scheduler" not in text and "optimizer" not in text:
        assert [dict(g) for g in o.param_groups] == before  # nothing written before the checks


def test_cyclic_momentum_needs_an_optimizer_with_momentum():
    o = flow.optim.Adagrad([flow.zeros(2, requires_grad=True)], lr=0.1)
    with pytest.raises(OptimizerError, match="must support momentum or beta1"):
        S.CyclicLR(o, 0.01, 0.1)
    S.CyclicLR(o, 0.01, 0.1, cycle_momentum=False)
    assert o.param_groups[0]["lr"] == 0.01


def test_cawr_bad_epochs():
    s = S.CosineAnnealingWarmRestarts(flow_opt(), 3)
    with pytest.raises(OptimizerError, match="Invalid epoch: -1"):
        s.step(-1)
    with pytest.raises(OptimizerTypeError, match="epoch must be a real number"):
        s.step("2")
