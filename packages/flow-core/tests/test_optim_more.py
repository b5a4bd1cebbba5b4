"""flow.optim's Adadelta, Adamax, NAdam, RAdam, Rprop and ASGD: step for step against torch.optim (param groups,
parameters without gradients, lr changes), state dicts both ways, argument checks, and graph mode against eager."""

from __future__ import annotations

import numpy as np
import pytest

import flow
import flow.nn as nn
import flow.optim
from flow.optim import ASGD, NAdam, OptimizerError, OptimizerTypeError, RAdam, Rprop

SHAPES = [(3, 4), (5,), (), (2, 2, 2), (0,), (7, 1)]
STEPS = 24

# (name, kwargs of every group, kwargs of the second group): each optimizer in its modes
CASES = [
    ("Adadelta", dict(), dict(rho=0.5)),
    ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1, maximize=True), dict(lr=2.0)),
    ("Adamax", dict(), dict(lr=0.01)),
    ("Adamax", dict(lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, maximize=True), dict(betas=(0.5, 0.9))),
    ("NAdam", dict(lr=0.01), dict(momentum_decay=0.01)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True), dict(betas=(0.8, 0.9))),
    ("NAdam", dict(lr=0.02, weight_decay=0.05, momentum_decay=0.0, maximize=True), dict(lr=0.005)),
    ("RAdam", dict(lr=0.01), dict(betas=(0.5, 0.9))),  # rho_t > 5 from step 6 in the second group
    ("RAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, maximize=True), dict(lr=0.1)),
    ("RAdam", dict(lr=0.02, betas=(0.7, 0.95), weight_decay=0.2, eps=1e-4), dict(weight_decay=0.0)),
    ("Rprop", dict(), dict(lr=0.1)),
    ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.2), maximize=True), dict(etas=(0.6, 1.1))),
    ("ASGD", dict(), dict(lr=0.05)),
    ("ASGD", dict(lr=0.05, lambd=0.01, alpha=0.5, t0=5, weight_decay=0.1), dict(t0=12, lambd=0.1)),
    ("ASGD", dict(lr=0.02, t0=0.0, maximize=True), dict(alpha=1.0)),
]
IDS = [f"{n}-{i}" for i, (n, _, _) in enumerate(CASES)]


def tol(dtype):
    return dict(rtol=2e-5, atol=2e-6) if np.dtype(dtype) == np.float32 else dict(rtol=1e-10, atol=1e-12)


def data(dtype=np.float32, seed=0, steps=STEPS):
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    # a gradient that often keeps its sign (Rprop grows its steps) and sometimes flips, now and then exactly 0
    grads = []
    for k in range(steps):
        gs = [(rng.standard_normal(s) + (0.7 if k % 3 else -0.2)).astype(dtype) for s in SHAPES]
        gs[1][k % 5] = 0
        grads.append(gs)
    return init, grads


def _groups(ps, group_kw):
    return [{"params": ps[:3]}, {"params": ps[3:], **group_kw}]


def _set_grads(ps, gs, k, skip, make):
    for i, (p, g) in enumerate(zip(ps, gs)):
        p.grad = None if (k, i) in skip else make(g)


def run_pair(name, kw, group_kw, init, grads, skip=(), lr_at=None, start=0):
    """The parameters after running flow's and torch's optimizer side by side (asserting every step)."""
    torch = pytest.importorskip("torch")
    fps = [flow.tensor(a, requires_grad=True) for a in init]
    tps = [torch.tensor(a, requires_grad=True) for a in init]
    fo = getattr(flow.optim, name)(_groups(fps, group_kw), **kw)
    to = getattr(torch.optim, name)(_groups(tps, group_kw), foreach=False, **kw)
    dtype = init[0].dtype
    for k, gs in enumerate(grads):
        if lr_at is not None:
            for fg, tg in zip(fo.param_groups, to.param_groups):
                fg["lr"] = tg["lr"] = lr_at(k)
        _set_grads(fps, gs, k, skip, flow.tensor)
        _set_grads(tps, gs, k, skip, torch.tensor)
        fo.step()
        to.step()
        for i, (a, b) in enumerate(zip(fps, tps)):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), **tol(dtype), err_msg=f"step {k} p{i}")
    return fps, tps, fo, to


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,kw,group_kw", CASES, ids=IDS)
def test_matches_torch_step_for_step(name, kw, group_kw, dtype):
    init, grads = data(dtype)
    _, _, fo, to = run_pair(name, kw, group_kw, init, grads)
    _same_state(fo.state_dict(), to.state_dict(), dtype)


@pytest.mark.parametrize("name,kw,group_kw", CASES[::2], ids=IDS[::2])
def test_parameters_without_gradients_and_changing_lr(name, kw, group_kw):
    """Parameters that miss steps keep their own step counts (and lazily made states); every step changes lr
    (ASGD's eta uses the previous step's lr, Rprop's step sizes only the first one's)."""
    init, grads = data(np.float64, seed=3)
    skip = {(0, 0), (0, 3), (1, 0), (5, 4), (7, 1), (8, 5), (9, 5)}
    _, _, fo, to = run_pair(name, kw, group_kw, init, grads, skip=skip, lr_at=lambda k: 0.01 * (1 + k % 4))
    _same_state(fo.state_dict(), to.state_dict(), np.float64)


def _same_state(fsd, tsd, dtype):
    assert sorted(fsd["state"]) == sorted(tsd["state"])
    for k, tst in tsd["state"].items():
        fst = fsd["state"][k]
        assert sorted(fst) == sorted(tst), k
        for name, tv in tst.items():
            fv = fst[name].numpy()
            assert fv.shape == tuple(tv.shape), (k, name)
            np.testing.assert_allclose(fv, tv.numpy(), **tol(dtype), err_msg=f"{k} {name}")
    for fg, tg in zip(fsd["param_groups"], tsd["param_groups"]):
        for key, v in fg.items():
            assert tg[key] == (list(v) if isinstance(tg[key], list) else v), key


def _to_torch_sd(sd):
    torch = pytest.importorskip("torch")
    return {
        "state": {k: {n: torch.tensor(v.numpy()) for n, v in st.items()} for k, st in sd["state"].items()},
        "param_groups": [dict(g) for g in sd["param_groups"]],
    }


def _from_torch_sd(sd):
    return {
        "state": {k: {n: flow.tensor(v.numpy()) for n, v in st.items()} for k, st in sd["state"].items()},
        "param_groups": [dict(g) for g in sd["param_groups"]],
    }


@pytest.mark.parametrize("name,kw,group_kw", CASES, ids=IDS)
def test_state_dict_round_trips_through_torch(name, kw, group_kw):
    """flow's state dict loads into torch (and torch's into flow); both then continue step for step."""
    torch = pytest.importorskip("torch")
    init, grads = data(np.float32, seed=1, steps=20)
    fps, tps, fo, to = run_pair(name, kw, group_kw, init, grads[:10])
    # cross over: torch continues from flow's state, a fresh flow optimizer from torch's
    tps2 = [torch.tensor(p.detach().numpy(), requires_grad=True) for p in fps]
    to2 = getattr(torch.optim, name)(_groups(tps2, group_kw), foreach=False, **kw)
    to2.load_state_dict(_to_torch_sd(fo.state_dict()))
    fps2 = [flow.tensor(p.detach().numpy(), requires_grad=True) for p in tps]
    fo2 = getattr(flow.optim, name)(_groups(fps2, group_kw), **kw)
    fo2.load_state_dict(_from_torch_sd(to.state_dict()))
    _same_state(fo2.state_dict(), to.state_dict(), np.float32)
    # and flow's own round trip, through flow.save / flow.load
    fps3 = [flow.tensor(p.detach().numpy(), requires_grad=True) for p in fps]
    fo3 = getattr(flow.optim, name)(_groups(fps3, group_kw), **kw)
    fo3.load_state_dict(fo.state_dict())
    for k, gs in enumerate(grads[10:]):
        for opt, ps, make in ((to2, tps2, torch.tensor), (fo2, fps2, flow.tensor), (fo3, fps3, flow.tensor)):
            _set_grads(ps, gs, k, (), make)
            opt.step()
        for a, b, c in zip(tps2, fps2, fps3):
            np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), **tol(np.float32))
            np.testing.assert_allclose(c.detach().numpy(), a.detach().numpy(), **tol(np.float32))


def test_scalar_states_are_zero_dim_and_spread_on_load():
    ps = [flow.tensor(np.ones((2, 3), np.float32), requires_grad=True), flow.zeros(0, requires_grad=True)]
    opt = NAdam(ps, lr=0.1)
    for _ in range(3):
        for p in ps:
            p.grad = flow.ones_like(p)
        opt.step()
    st = opt.state_dict()["state"]
    assert st[0]["mu_product"].shape == () and st[0]["exp_avg"].shape == (2, 3)
    # the empty parameter has no element to hold its mu_product: the product of the mu_t so far
    assert st[1]["mu_product"].item() == st[0]["mu_product"].item()
    assert opt.state[ps[0]]["mu_product"].shape == ()
    sd = opt.state_dict()
    sd["state"][0]["mu_product"] = flow.tensor(0.25)
    opt.load_state_dict(sd)
    assert opt.state_dict()["state"][0]["mu_product"].item() == 0.25
    a = ASGD(ps, lr=0.1, t0=1)
    for p in ps:
        p.grad = flow.ones_like(p)
    a.step()
    a.step()
    st = a.state_dict()["state"]
    assert st[0]["mu"].item() == 1.0 and st[1]["eta"].item() == st[0]["eta"].item()
    bad = a.state_dict()
    bad["state"][0]["eta"] = flow.ones(4)  # neither one value nor the parameter's shape
    with pytest.raises(OptimizerError, match="has shape"):
        a.load_state_dict(bad)


@pytest.mark.parametrize(
    "name,kw,values",
    [
        ("NAdam", dict(lr=0.05), {"mu_product": [0.5, 0.125]}),
        ("ASGD", dict(lr=0.05, t0=1), {"eta": [0.02, 0.07], "mu": [1.0, 0.25]}),
    ],
)
def test_parameters_of_one_run_with_different_scalar_states(name, kw, values):
    """Parameters in the same step but holding different scalar states (a loaded state dict) each use their own."""
    torch = pytest.importorskip("torch")
    init, grads = data(np.float32, seed=5, steps=6)
    init, grads = init[:2], [gs[:2] for gs in grads]
    tps = [torch.tensor(a, requires_grad=True) for a in init]
    to = getattr(torch.optim, name)(tps, foreach=False, **kw)
    for k in range(3):
        _set_grads(tps, grads[k], k, (), torch.tensor)
        to.step()
    sd = to.state_dict()
    for state_name, vs in values.items():
        for i, v in enumerate(vs):
            sd["state"][i][state_name] = torch.tensor(v)
    to.load_state_dict(sd)
    fps = [flow.tensor(p.detach().numpy(), requires_grad=True) for p in tps]
    fo = getattr(flow.optim, name)(fps, **kw)
    fo.load_state_dict(_from_torch_sd(to.state_dict()))
    for k in range(3, 6):
        _set_grads(tps, grads[k], k, (), torch.tensor)
        _set_grads(fps, grads[k], k, (), flow.tensor)
        to.step()
        fo.step()
        for a, b in zip(fps, tps):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), **tol(np.float32))
    _same_state(fo.state_dict(), to.state_dict(), np.float32)


def test_asgd_average_starts_at_t0():
    p = flow.tensor(np.zeros(3, np.float32), requires_grad=True)
    opt = ASGD([p], lr=0.1, lambd=0.0, t0=3)
    values = []
    for k in range(8):
        p.grad = flow.full((3,), float(k + 1))
        opt.step()
        values.append(p.detach().numpy()[0])
    # mu of step t is 1 / max(1, t - 1 - t0): ax follows p up to step t0 + 2, then averages the parameters
    # from that step on
    ax = opt.state[p]["ax"].numpy()[0]
    assert ax == pytest.approx(np.mean(values[4:]), rel=1e-6)


def test_rprop_step_sizes_start_at_the_first_lr_only():
    p = flow.tensor(np.zeros(2, np.float32), requires_grad=True)
    opt = Rprop([p], lr=0.1, etas=(0.5, 2.0), step_sizes=(0.01, 0.3))
    p.grad = flow.ones(2)
    opt.step()
    opt.param_groups[0]["lr"] = 100.0  # ignored from now on
    for _ in range(3):
        p.grad = flow.ones(2)
        opt.step()
    # 0.1, then 0.2, then 0.3 (clamped) twice
    np.testing.assert_allclose(p.detach().numpy(), [-0.9, -0.9], rtol=1e-6)
    p.grad = -flow.ones(2)  # a sign change: the step size halves and this step is skipped
    opt.step()
    np.testing.assert_allclose(opt.state[p]["step_size"].numpy(), [0.15, 0.15], rtol=1e-6)
    np.testing.assert_allclose(opt.state[p]["prev"].numpy(), [0.0, 0.0])
    np.testing.assert_allclose(p.detach().numpy(), [-0.9, -0.9], rtol=1e-6)


# -- argument checks ----------------------------------------------------------------------------------


def _p():
    return [flow.zeros(2, requires_grad=True)]


@pytest.mark.parametrize(
    "make,err,match",
    [
        (lambda: flow.optim.Adadelta(_p(), lr=-1), OptimizerError, "Adadelta: Invalid learning rate: -1"),
        (lambda: flow.optim.Adadelta(_p(), rho=1.5), OptimizerError, "Invalid rho value: 1.5"),
        (lambda: flow.optim.Adadelta(_p(), eps=-1e-3), OptimizerError, "Invalid epsilon value"),
        (lambda: flow.optim.Adadelta(_p(), weight_decay=-1), OptimizerError, "Invalid weight_decay value"),
        (lambda: flow.optim.Adamax(_p(), betas=(1.0, 0.9)), OptimizerError, "beta parameter at index 0: 1.0"),
        (lambda: flow.optim.Adamax(_p(), betas=(0.9, -0.1)), OptimizerError, "beta parameter at index 1"),
        (lambda: flow.optim.Adamax(_p(), betas=0.9), OptimizerTypeError, "betas must be a tuple of 2"),
        (lambda: NAdam(_p(), momentum_decay=-0.1), OptimizerError, "Invalid momentum_decay value: -0.1"),
        (lambda: NAdam(_p(), decoupled_weight_decay=1), OptimizerTypeError, "decoupled_weight_decay must be a bool"),
        (lambda: RAdam(_p(), eps=float("nan")), OptimizerError, "Invalid epsilon value: nan"),
        (lambda: RAdam(_p(), lr="0.1"), OptimizerTypeError, "lr must be a real number"),
        (lambda: Rprop(_p(), etas=(1.2, 0.5)), OptimizerError, "Rprop: Invalid eta values: 1.2, 0.5"),
        (lambda: Rprop(_p(), etas=(0.5, 1.0)), OptimizerError, "Invalid eta values: 0.5, 1.0"),
        (lambda: Rprop(_p(), etas=(0.5,)), OptimizerTypeError, "etas must be a tuple of 2 floats"),
        (lambda: Rprop(_p(), step_sizes=(1.0, 0.1)), OptimizerError, "Invalid step_sizes: 1.0, 0.1"),
        (lambda: Rprop(_p(), step_sizes=(-1, 1)), OptimizerError, "Invalid step_sizes"),
        (lambda: Rprop(_p(), step_sizes=("a", 1)), OptimizerTypeError, r"step_sizes\[0\] must be a real number"),
        (lambda: ASGD(_p(), weight_decay=-0.5), OptimizerError, "ASGD: Invalid weight_decay value: -0.5"),
        (lambda: ASGD(_p(), t0=float("nan")), OptimizerError, "Invalid t0 value"),
        (lambda: ASGD(_p(), lambd=None), OptimizerTypeError, "lambd must be a real number"),
        (lambda: ASGD(_p(), alpha=float("inf")), OptimizerError, "Invalid alpha value: inf"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(make, err, match):
    with pytest.raises(err, match=match):
        make()


def test_defaults_and_checks_after_construction():
    assert flow.optim.Adadelta(_p()).defaults == dict(lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, maximize=False)
    assert flow.optim.Adamax(_p()).defaults["lr"] == 2e-3
    assert NAdam(_p()).defaults["momentum_decay"] == 4e-3 and NAdam(_p()).defaults["lr"] == 2e-3
    assert RAdam(_p()).defaults["decoupled_weight_decay"] is False
    assert Rprop(_p()).defaults["step_sizes"] == (1e-6, 50)
    assert ASGD(_p()).defaults == dict(lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0, maximize=False)
    ps = _p()
    opt = Rprop(ps)
    opt.param_groups[0]["etas"] = (0.5, 0.9)  # checked again before the next step, nothing updated
    ps[0].grad = flow.ones(2)
    with pytest.raises(OptimizerError, match="Invalid eta values"):
        opt.step()
    assert ps[0].detach().numpy().tolist() == [0.0, 0.0] and len(opt.state) == 0
    opt = NAdam(_p())
    with pytest.raises(OptimizerError, match="does not keep"):
        opt.load_state_dict(
            {
                "state": {0: {"step": 1, "momentum_buffer": np.zeros(2)}},
                "param_groups": [{**opt.param_groups[0], "params": [0]}],
            }
        )


# -- graph mode ------------------------------------------------------------------------------------------

GRAPH = [
    ("Adadelta", dict(lr=1.0, weight_decay=0.01)),
    ("Adamax", dict(lr=0.01)),
    ("NAdam", dict(lr=0.01, weight_decay=0.01, decoupled_weight_decay=True)),
    ("RAdam", dict(lr=0.01, betas=(0.5, 0.9))),
    ("Rprop", dict(lr=0.01)),
    ("ASGD", dict(lr=0.05, t0=2)),
]


@pytest.mark.parametrize("name,kw", GRAPH, ids=[g[0] for g in GRAPH])
def test_graph_training_step_agrees_with_eager(name, kw):
    """The update is the generic ``optimizer_update`` op, traced into the graph like any op."""

    def model():
        flow.manual_seed(1)
        return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))

    rng = np.random.default_rng(0)
    batches = [
        (
            flow.tensor(rng.standard_normal((5, 4)).astype(np.float32)),
            flow.tensor(rng.standard_normal((5, 2)).astype(np.float32)),
        )
        for _ in range(8)
    ]
    m1, m2 = model(), model()
    o1 = getattr(flow.optim, name)(m1.parameters(), **kw)
    o2 = getattr(flow.optim, name)(m2.parameters(), **kw)

    def eager(x, y):
        o1.zero_grad()
        loss = ((m1(x) - y) ** 2).mean()
        loss.backward()
        o1.step()
        return loss

    @flow.compile
    def compiled(x, y):
        o2.zero_grad()
        loss = ((m2(x) - y) ** 2).mean()
        loss.backward()
        o2.step()
        return loss

    for k, (x, y) in enumerate(batches):
        if k == 4:  # an lr change is fed to the graph, no retrace needed
            o1.param_groups[0]["lr"] = o2.param_groups[0]["lr"] = kw["lr"] / 2
        np.testing.assert_allclose(compiled(x, y).item(), eager(x, y).item(), rtol=1e-6)
    for a, b in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-6, atol=1e-7)
    _same_state(o2.state_dict(), _as_torchlike(o1.state_dict()), np.float32)
    assert compiled.ir.op_counts()["optimizer_update"] == 1


class _Train(nn.Graph):
    def __init__(self, model, opt, sched):
        super().__init__()
        self.model = model
        self.add_optimizer(opt, lr_sch=sched)

    def build(self, x, y):
        loss = ((self.model(x) - y) ** 2).mean()
        loss.backward()
        return loss


@pytest.mark.parametrize("name,kw", GRAPH, ids=[g[0] for g in GRAPH])
def test_nn_graph_training_step_with_a_scheduler_agrees_with_eager(name, kw):
    """nn.Graph steps the optimizer after build and the scheduler after each run; the lr is fed every run."""

    def model():
        flow.manual_seed(2)
        return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))

    rng = np.random.default_rng(1)
    batches = [
        (
            flow.tensor(rng.standard_normal((6, 4)).astype(np.float32)),
            flow.tensor(rng.standard_normal((6, 2)).astype(np.float32)),
        )
        for _ in range(6)
    ]
    m1, m2 = model(), model()
    o1 = getattr(flow.optim, name)(m1.parameters(), **kw)
    o2 = getattr(flow.optim, name)(m2.parameters(), **kw)
    s1, s2 = flow.optim.lr_scheduler.ExponentialLR(o1, 0.8), flow.optim.lr_scheduler.ExponentialLR(o2, 0.8)
    g = _Train(m2, o2, s2)
    for x, y in batches:
        o1.zero_grad()
        loss = ((m1(x) - y) ** 2).mean()
        loss.backward()
        o1.step()
        s1.step()
        np.testing.assert_allclose(g(x, y).item(), loss.item(), rtol=1e-6)
    assert o2.param_groups[0]["lr"] == pytest.approx(o1.param_groups[0]["lr"])
    assert g.ir.op_counts()["optimizer_update"] == 1
    for a, b in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-6, atol=1e-7)
    _same_state(o2.state_dict(), _as_torchlike(o1.state_dict()), np.float32)


def _as_torchlike(sd):
    class _T:
        def __init__(self, t):
            self.shape, self._a = tuple(t.shape), t.numpy()

        def numpy(self):
            return self._a

    return {
        "state": {k: {n: _T(v) for n, v in st.items()} for k, st in sd["state"].items()},
        **{"param_groups": sd["param_groups"]},
    }
