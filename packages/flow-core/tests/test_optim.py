"""flow.optim: step-by-step against the formulas and against torch.optim, flat fused storage, state dicts."""

from __future__ import annotations

import math

import numpy as np
import pytest

import flow
import flow.optim
from flow.backends.cpu import native
from flow.optim import LAMB, SGD, Adagrad, Adam, AdamW, RMSprop

SHAPES = [(3, 4), (5,), (), (2, 2, 2), (0,), (7, 1)]
STEPS = 6


def data(dtype=np.float32, seed=0, shapes=SHAPES, steps=STEPS):
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s).astype(dtype) for s in shapes]
    grads = [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(steps)]
    return init, grads


def tol(dtype):
    return dict(rtol=2e-5, atol=2e-6) if np.dtype(dtype) == np.float32 else dict(rtol=1e-10, atol=1e-12)


def flow_params(init):
    return [flow.tensor(a, requires_grad=True) for a in init]


def run_flow(cls, init, grads, skip=None, **kw):
    ps = flow_params(init)
    opt = cls(ps, **kw)
    for k, gs in enumerate(grads):
        for i, (p, g) in enumerate(zip(ps, gs)):
            p.grad = None if skip and (k, i) in skip else flow.tensor(g)
        opt.step()
    return [p.detach().numpy().copy() for p in ps], opt


@pytest.fixture(params=["native", "numpy"])
def backend(request, monkeypatch):
    if request.param == "native":
        assert native.HAVE_NATIVE, native.NATIVE_ERROR
    else:
        monkeypatch.setattr(native, "HAVE_NATIVE", False)
    return request.param


# -- against torch.optim ---------------------------------------------------------------------------
TORCH_CASES = [
    ("SGD", SGD, dict(lr=0.1)),
    ("SGD", SGD, dict(lr=0.1, momentum=0.9)),
    ("SGD", SGD, dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.01)),
    ("SGD", SGD, dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1, maximize=True)),
    ("Adam", Adam, dict(lr=0.1)),
    ("Adam", Adam, dict(lr=0.05, betas=(0.8, 0.99), weight_decay=0.1, amsgrad=True)),
    ("Adam", Adam, dict(lr=0.05, eps=1e-6, maximize=True)),
    ("AdamW", AdamW, dict(lr=0.1)),
    ("AdamW", AdamW, dict(lr=0.1, weight_decay=0.3, amsgrad=True, betas=(0.5, 0.9))),
    ("Adagrad", Adagrad, dict(lr=0.1)),
    ("Adagrad", Adagrad, dict(lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.2, maximize=True)),
    ("RMSprop", RMSprop, dict(lr=0.01)),
    ("RMSprop", RMSprop, dict(lr=0.01, momentum=0.9, centered=True, weight_decay=0.1)),
    ("RMSprop", RMSprop, dict(lr=0.01, alpha=0.9, centered=True, maximize=True)),
]


def run_torch(name, init, grads, skip=None, **kw):
    torch = pytest.importorskip("torch")
    ps = [torch.tensor(a, requires_grad=True) for a in init]
    opt = getattr(torch.optim, name)(ps, foreach=False, **kw)
    for k, gs in enumerate(grads):
        for i, (p, g) in enumerate(zip(ps, gs)):
            p.grad = None if skip and (k, i) in skip else torch.tensor(g)
        opt.step()
    return [p.detach().numpy() for p in ps], opt


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", TORCH_CASES, ids=lambda c: f"{c[0]}-{'-'.join(map(str, c[2].values()))}")
def test_matches_torch(case, dtype, backend):
    torch = pytest.importorskip("torch")
    name, cls, kw = case
    init, grads = data(dtype)
    skip = {(1, 0), (2, 0), (3, 3)}  # some parameters have no gradient at some steps: torch skips them
    fps, tps = flow_params(init), [torch.tensor(a, requires_grad=True) for a in init]
    fopt, topt = cls(fps, **kw), getattr(torch.optim, name)(tps, foreach=False, **kw)
    for k, gs in enumerate(grads):  # compared after every step
        for i, (p, q, g) in enumerate(zip(fps, tps, gs)):
            p.grad, q.grad = (None, None) if (k, i) in skip else (flow.tensor(g), torch.tensor(g))
        fopt.step()
        topt.step()
        for p, q in zip(fps, tps):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), **tol(dtype), err_msg=f"step {k}")


@pytest.mark.parametrize("case", TORCH_CASES[1::2], ids=lambda c: c[0])
def test_state_dict_matches_torch_and_loads_torch_state(case):
    torch = pytest.importorskip("torch")
    name, cls, kw = case
    init, grads = data(np.float64)
    _, topt = run_torch(name, init, grads[:3], **kw)
    _, fopt = run_flow(cls, init, grads[:3], **kw)
    tsd, fsd = topt.state_dict(), fopt.state_dict()
    assert sorted(tsd["state"]) == sorted(fsd["state"])
    for i in tsd["state"]:
        assert set(tsd["state"][i]) == set(fsd["state"][i])
        for k, v in tsd["state"][i].items():
            np.testing.assert_allclose(fsd["state"][i][k].numpy(), v.numpy(), rtol=1e-10, atol=1e-12)
    for tg, fg in zip(tsd["param_groups"], fsd["param_groups"]):
        assert tg["params"] == fg["params"]
        for k, v in fg.items():
            assert tg[k] == v, k
    # a torch state dict (tensors converted to flow) continues exactly like torch
    conv = {
        "state": {i: {k: flow.tensor(v.numpy()) for k, v in st.items()} for i, st in tsd["state"].items()},
        "param_groups": tsd["param_groups"],
    }
    tparams = [p.detach().numpy() for p in topt.param_groups[0]["params"]]
    ps = flow_params(tparams)
    opt2 = cls(ps, **kw)
    opt2.load_state_dict(conv)
    for gs in grads[3:]:
        for p, g in zip(ps, gs):
            p.grad = flow.tensor(g)
        opt2.step()
        for p, g in zip(topt.param_groups[0]["params"], gs):
            p.grad = torch.tensor(g)
        topt.step()
    for a, b in zip(ps, topt.param_groups[0]["params"]):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_param_groups_match_torch():
    torch = pytest.importorskip("torch")
    init, grads = data(np.float32)
    fps, tps = flow_params(init), [torch.tensor(a, requires_grad=True) for a in init]
    fopt = Adam([{"params": fps[:3]}, {"params": fps[3:], "lr": 0.01, "amsgrad": True}], lr=0.1)
    topt = torch.optim.Adam(
        [{"params": tps[:3]}, {"params": tps[3:], "lr": 0.01, "amsgrad": True}], lr=0.1, foreach=False
    )
    for gs in grads:
        for p, q, g in zip(fps, tps, gs):
            p.grad, q.grad = flow.tensor(g), torch.tensor(g)
        fopt.step()
        topt.step()
    for p, q in zip(fps, tps):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), **tol(np.float32))


# -- against the formulas (no torch) -----------------------------------------------------------------
def test_sgd_formula(backend):
    init, grads = data(np.float64)
    lr, mom, damp, wd = 0.1, 0.9, 0.1, 0.01
    got, _ = run_flow(SGD, init, grads, lr=lr, momentum=mom, dampening=damp, weight_decay=wd)
    for j, p0 in enumerate(init):
        p, buf = p0.copy(), None
        for gs in grads:
            d = gs[j] + wd * p
            buf = d.copy() if buf is None else mom * buf + (1 - damp) * d
            p = p - lr * buf
        np.testing.assert_allclose(got[j], p, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("decoupled", [False, True])
@pytest.mark.parametrize("amsgrad", [False, True])
def test_adam_formula(backend, decoupled, amsgrad):
    init, grads = data(np.float64)
    lr, (b1, b2), eps, wd = 0.05, (0.9, 0.99), 1e-8, 0.1
    cls = AdamW if decoupled else Adam
    got, opt = run_flow(cls, init, grads, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, amsgrad=amsgrad)
    for j, p0 in enumerate(init):
        p, m, v, vmax = p0.copy(), 0 * p0, 0 * p0, 0 * p0
        for t, gs in enumerate(grads, 1):
            g = gs[j]
            if decoupled:
                p = p * (1 - lr * wd)
            else:
                g = g + wd * p
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            vmax = np.maximum(vmax, v)
            vv = vmax if amsgrad else v
            p = p - lr / (1 - b1**t) * m / (np.sqrt(vv) / math.sqrt(1 - b2**t) + eps)
        np.testing.assert_allclose(got[j], p, rtol=1e-10, atol=1e-12)
    assert int(opt.state_dict()["state"][0]["step"].item()) == STEPS


def test_adagrad_formula():
    init, grads = data(np.float64)
    lr, decay, init_acc, eps = 0.1, 0.1, 0.3, 1e-10
    got, _ = run_flow(Adagrad, init, grads, lr=lr, lr_decay=decay, initial_accumulator_value=init_acc, eps=eps)
    for j, p0 in enumerate(init):
        p, s = p0.copy(), np.full_like(p0, init_acc)
        for t, gs in enumerate(grads, 1):
            s = s + gs[j] ** 2
            p = p - lr / (1 + (t - 1) * decay) * gs[j] / (np.sqrt(s) + eps)
        np.testing.assert_allclose(got[j], p, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("centered", [False, True])
def test_rmsprop_formula(centered):
    init, grads = data(np.float64)
    lr, alpha, eps, mom = 0.01, 0.9, 1e-8, 0.5
    got, _ = run_flow(RMSprop, init, grads, lr=lr, alpha=alpha, eps=eps, momentum=mom, centered=centered)
    for j, p0 in enumerate(init):
        p, sq, ga, buf = p0.copy(), 0 * p0, 0 * p0, 0 * p0
        for gs in grads:
            g = gs[j]
            sq = alpha * sq + (1 - alpha) * g * g
            ga = alpha * ga + (1 - alpha) * g
            avg = np.sqrt(sq - ga * ga if centered else sq) + eps
            buf = mom * buf + g / avg
            p = p - lr * buf
        np.testing.assert_allclose(got[j], p, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("bias_correction", [True, False])
def test_lamb_formula(bias_correction):
    init, grads = data(np.float64)
    init[1][:] = 0  # a zero parameter: trust ratio 1
    lr, (b1, b2), eps, wd = 0.01, (0.9, 0.999), 1e-6, 0.05
    got, opt = run_flow(
        LAMB, init, grads, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, bias_correction=bias_correction
    )
    for j, p0 in enumerate(init):
        p, m, v = p0.copy(), 0 * p0, 0 * p0
        for t, gs in enumerate(grads, 1):
            g = gs[j]
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            mh, vh = (m / (1 - b1**t), v / (1 - b2**t)) if bias_correction else (m, v)
            u = mh / (np.sqrt(vh) + eps) + wd * p
            wn, un = np.linalg.norm(p), np.linalg.norm(u)
            r = wn / un if wn > 0 and un > 0 else 1.0
            p = p - lr * r * u
        np.testing.assert_allclose(got[j], p, rtol=1e-10, atol=1e-12)
    assert set(opt.state_dict()["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}


# -- flat fused states, parameters in place ------------------------------------------------------------
def test_one_multi_tensor_call_per_group_and_dtype_and_params_stay_in_their_own_memory(monkeypatch):
    calls = []
    real = native.adam_update_multi
    monkeypatch.setattr(native, "adam_update_multi", lambda ps, *a: (calls.append(len(ps)), real(ps, *a)))
    init, grads = data(np.float32)
    ps = flow_params(init)
    arrays = [p._data for p in ps]
    extra = flow.tensor(np.ones(4), dtype=flow.float64, requires_grad=True)  # another dtype in group 1
    opt = Adam([{"params": ps[:4]}, {"params": ps[4:] + [extra], "lr": 0.01}])
    for gs in grads:
        for p, g in zip(ps, gs):
            p.grad = flow.tensor(g)
        extra.grad = flow.ones(4, dtype=flow.float64)
        opt.step()
    assert calls == [4, 2, 1] * len(grads)  # group 0; group 1 float32; group 1 float64
    assert all(p._data is a for p, a in zip(ps, arrays))  # updated where they are, never re-pointed


def test_param_data_reassignment_and_inplace_writes(backend):
    init, grads = data(np.float32)
    lr, mom = 0.1, 0.9
    fps = flow_params(init)
    opt = SGD(fps, lr=lr, momentum=mom)
    ref = [a.copy() for a in init]
    bufs = [None] * len(init)
    for k, gs in enumerate(grads):
        if k == 2:  # the user replaces a parameter's data: the optimizer re-flattens and keeps its state
            new = flow.tensor(np.full((3, 4), 0.5, np.float32))
            fps[0].data = new
            ref[0] = np.full((3, 4), 0.5, np.float32)
        if k == 4:  # an in-place write through the parameter's array
            fps[3]._data[...] = 2.0
            ref[3][...] = 2.0
        for j, (p, g) in enumerate(zip(fps, gs)):
            p.grad = flow.tensor(g)
            bufs[j] = g.copy() if bufs[j] is None else mom * bufs[j] + g
            ref[j] = ref[j] - lr * bufs[j]
        opt.step()
        for p, r in zip(fps, ref):
            np.testing.assert_allclose(p.detach().numpy(), r, **tol(np.float32))
        if k == 2:
            assert fps[0]._data is new._data  # the assigned tensor's memory is the parameter's from now on
            np.testing.assert_allclose(new.numpy(), ref[0], **tol(np.float32))


def test_shape_change_of_stateful_param_is_an_error():
    p = flow.tensor(np.ones(3, np.float32), requires_grad=True)
    opt = Adam([p])
    p.grad = flow.ones(3)
    opt.step()
    p.data = flow.ones(4)
    p.grad = flow.ones(4)
    with pytest.raises(ValueError, match=r"3 elements but param_groups\[0\]\['params'\]\[0\] has 4"):
        opt.step()


@pytest.mark.parametrize("dtype", [flow.float16, flow.bfloat16])
@pytest.mark.parametrize("cls", [SGD, Adam, RMSprop, LAMB])
def test_low_precision_params_are_updated_in_float32(dtype, cls):
    init, grads = data(np.float32)
    kw = dict(lr=0.01, momentum=0.9) if cls is SGD else dict(lr=0.01)
    ref, _ = run_flow(cls, [a.astype(dtype.np).astype(np.float32) for a in init], grads, **kw)
    ps = [flow.tensor(a, dtype=dtype, requires_grad=True) for a in init]
    opt = cls(ps, **kw)
    for gs in grads:
        for p, g in zip(ps, gs):
            p.grad = flow.tensor(g).to(dtype)
        opt.step()
    for p, r in zip(ps, ref):
        assert p.dtype is dtype
        np.testing.assert_allclose(p.detach().numpy().astype(np.float32), r, rtol=2e-2, atol=2e-2)
    for st in opt.state_dict()["state"].values():
        assert all(v.dtype is flow.float32 for k, v in st.items() if k != "step")


# -- API -------------------------------------------------------------------------------------------------
def test_zero_grad():
    p = flow.tensor([1.0, 2.0], requires_grad=True)
    opt = SGD([p], lr=0.1)
    p.grad = flow.tensor([1.0, 1.0])
    opt.zero_grad(set_to_none=False)
    assert p.grad.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert p.grad is None
    opt.step()  # no gradient: nothing happens
    assert p.tolist() == [1.0, 2.0]


def test_add_param_group_and_validation():
    a, b = flow.zeros(2, requires_grad=True), flow.zeros(3, requires_grad=True)
    opt = SGD([a], lr=0.1, momentum=0.5)
    opt.add_param_group({"params": b, "lr": 0.2})
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.2]
    assert opt.param_groups[1]["momentum"] == 0.5
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(ValueError, match="empty parameter list"):
        SGD([], lr=0.1)
    with pytest.raises(ValueError, match="learning rate"):
        Adam([a], lr=-1)
    with pytest.raises(ValueError, match="Nesterov"):
        SGD([a], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="beta"):
        Adam([a], betas=(1.0, 0.9))
    with pytest.raises(TypeError, match="ordered collections"):
        SGD({a}, lr=0.1)
    with pytest.raises(ValueError, match="non-leaf"):
        SGD([a * 2], lr=0.1)
    a.grad, b.grad = flow.ones(2), flow.ones(3)
    opt.step()
    np.testing.assert_allclose(b.detach().numpy(), -0.2)
    assert "Parameter Group 1" in repr(opt)


def test_state_access_and_adagrad_eager_state():
    p = flow.zeros(3, requires_grad=True)
    opt = Adagrad([p], initial_accumulator_value=0.5)
    st = opt.state[p]
    assert st["step"].item() == 0 and st["sum"].tolist() == [0.5] * 3
    adam = Adam([flow.zeros(2, requires_grad=True)])
    assert adam.state_dict()["state"] == {} and len(adam.state) == 0


def test_state_dict_round_trip_continues_identically(tmp_path):
    from flow.serialization import load, save

    init, grads = data(np.float32)
    full, _ = run_flow(Adam, init, grads, lr=0.05, amsgrad=True)
    half, opt = run_flow(Adam, init, grads[:3], lr=0.05, amsgrad=True)
    save(opt.state_dict(), tmp_path / "opt.flow")
    ps = flow_params(half)
    opt2 = Adam(ps, lr=1.0)
    opt2.load_state_dict(load(tmp_path / "opt.flow"))
    assert opt2.param_groups[0]["lr"] == 0.05 and opt2.param_groups[0]["params"] == ps
    for gs in grads[3:]:
        for p, g in zip(ps, gs):
            p.grad = flow.tensor(g)
        opt2.step()
    for p, r in zip(ps, full):
        np.testing.assert_allclose(p.detach().numpy(), r, rtol=1e-6, atol=1e-7)


def test_load_state_dict_validates_sizes():
    opt = SGD([flow.zeros(2, requires_grad=True)], lr=0.1)
    other = SGD([flow.zeros(2, requires_grad=True), flow.zeros(1, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="doesn't match"):
        opt.load_state_dict(other.state_dict())


def _train(cls, kw, x, y, steps=200):
    w = flow.zeros(3, 1, requires_grad=True)
    opt = cls([w], **kw)

    def closure():
        opt.zero_grad()
        d = x @ w - y
        loss = (d * d).mean()
        loss.backward()
        return loss

    first = float(opt.step(closure))
    for _ in range(steps):
        last = float(opt.step(closure))
    return first, last


def test_closure_and_training_converges():
    rng = np.random.default_rng(0)
    x = flow.tensor(rng.standard_normal((64, 3)).astype(np.float32))
    w_true = np.array([[1.0], [-2.0], [0.5]], np.float32)
    y = flow.tensor(x.numpy() @ w_true)
    for cls, kw in [
        (SGD, dict(lr=0.1, momentum=0.9)),
        (Adam, dict(lr=0.1)),
        (LAMB, dict(lr=0.05)),
        (RMSprop, dict(lr=0.01)),
        (Adagrad, dict(lr=0.5)),
        (AdamW, dict(lr=0.1, weight_decay=0.0)),
    ]:
        first, last = _train(cls, kw, x, y)
        assert last < first * 1e-2, cls.__name__


def test_package_exports():
    assert flow.optim.Lamb is LAMB
    assert issubclass(flow.optim.AdamW, flow.optim.Optimizer)


def test_with_nn_module_checkpoint_and_dtype_change(tmp_path):
    nn = flow.nn
    if not hasattr(nn, "Linear"):
        pytest.skip("flow.nn.Linear is not available")
    from flow.serialization import load, save

    rng = np.random.default_rng(0)
    x = flow.tensor(rng.standard_normal((16, 4)).astype(np.float32))

    def make():
        flow.manual_seed(0)
        m = nn.Linear(4, 2)
        return m, Adam(m.parameters(), lr=0.01)

    def train(m, opt, n, x=x):
        for _ in range(n):
            opt.zero_grad()
            (m(x) ** 2).mean().backward()
            opt.step()

    m1, o1 = make()
    train(m1, o1, 6)
    m2, o2 = make()
    train(m2, o2, 3)
    save({"model": m2.state_dict(), "opt": o2.state_dict()}, tmp_path / "ck.flow")
    m3, o3 = make()
    ck = load(tmp_path / "ck.flow")
    m3.load_state_dict(ck["model"])
    o3.load_state_dict(ck["opt"])
    train(m3, o3, 3)
    for a, b in zip(m1.parameters(), m3.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-7)
    m3.double()  # parameters get new float64 arrays: the optimizer re-flattens and casts its state
    train(m3, o3, 2, x.double())
    assert all(p.dtype is flow.float64 for p in m3.parameters())
    assert all(
        v.dtype is flow.float64 for st in o3.state_dict()["state"].values() for k, v in st.items() if k != "step"
    )


# runs of at most 10 elements over the shapes below: (3, 4) alone, (5,) alone, (9,) alone, then (2, 2) + (4,).
# The native SGD / AdamW read contiguous float32 gradients in place and update the parameters where they are:
# no scratch at all; LAMB gathers every run's gradients (the largest: 12) and the runs of several parameters
# (8 elements; a lone parameter is updated where it is).
@pytest.mark.parametrize(
    "make, scratch",
    [
        (lambda ps: SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01), (0, 0)),
        (lambda ps: AdamW(ps, lr=0.01), (0, 0)),
        (lambda ps: LAMB(ps, lr=0.01), (12, 8)),
    ],
    ids=["sgd", "adamw", "lamb"],
)
def test_updates_in_bounded_runs_are_the_same(monkeypatch, make, scratch):
    """Runs of at most GRAD_CHUNK elements (a larger parameter alone) give bit-identical updates, and the
    gradient scratch buffer holds one run, not the whole bucket."""
    from flow.optim import _flat, _foreach

    init, grads = data(shapes=[(3, 4), (5,), (9,), (2, 2), (4,)])

    def train(chunk):
        monkeypatch.setattr(_flat, "GRAD_CHUNK", chunk)
        monkeypatch.setattr(_foreach._LOCAL, "scratch", {})  # the update kernels' scratch, fresh
        ps = flow_params(init)
        opt = make(ps)
        for gs in grads:
            for p, g in zip(ps, gs):
                p.grad = flow.tensor(g)
            opt.step()
        return [p.detach().numpy().copy() for p in ps], _foreach.thread_scratch(np, np.float32)

    whole, b_whole = train(1 << 20)
    chunked, b_chunked = train(10)
    sizes = lambda s: (s.size("grad"), s.size("param"))  # noqa: E731
    assert sizes(b_whole) == ((34, 34) if scratch[0] else (0, 0)) and sizes(b_chunked) == scratch
    for a, c in zip(whole, chunked):
        assert np.array_equal(a, c)


@pytest.mark.parametrize(
    "cls, kw",
    [
        (SGD, dict(lr=0.1, momentum=0.9, maximize=True)),
        (SGD, dict(lr=0.1)),
        (AdamW, dict(lr=0.01)),
        (Adam, dict(lr=0.01, weight_decay=0.1, maximize=True)),
        (LAMB, dict(lr=0.01)),
    ],
)
def test_step_leaves_the_gradients_alone(cls, kw):
    """Whether a lone parameter's gradient is read in place or copied, step() never changes a .grad."""
    init, grads = data(shapes=[(40, 30), (7,)])
    ps = flow_params(init)
    opt = cls(ps, **kw)
    for gs in grads[:3]:
        for p, g in zip(ps, gs):
            p.grad = flow.tensor(g)
        opt.step()
        for p, g in zip(ps, gs):
            assert np.array_equal(p.grad.numpy(), g)
