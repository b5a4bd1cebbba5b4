"""flow.optim updates parameters in their own memory: views, detach(), from_numpy sources, tied weights and
parameters that share a tensor all see every step, in eager and in graph mode, with PyTorch's values."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from _optim_drive import CLOSURE_DRIVEN, model_step, step_with, torch_opt, wrap_grad

import flow
import flow.nn as nn
import flow.optim
from flow.backends.cpu import native
from flow.optim import (
    ASGD,
    LAMB,
    LBFGS,
    SGD,
    Adadelta,
    Adagrad,
    Adam,
    Adamax,
    AdamW,
    NAdam,
    OptimizerTypeError,
    RAdam,
    RMSprop,
    Rprop,
    SparseAdam,
)

# (flow class, torch name or None, kwargs): every optimizer flow has, SGD in each of its modes
CASES = [
    (SGD, "SGD", dict(lr=0.1)),
    (SGD, "SGD", dict(lr=0.1, momentum=0.9)),
    (SGD, "SGD", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1)),
    (SGD, "SGD", dict(lr=0.05, momentum=0.9, dampening=0.2, weight_decay=0.01, maximize=True)),
    (Adam, "Adam", dict(lr=0.05)),
    (Adam, "Adam", dict(lr=0.05, weight_decay=0.1, amsgrad=True)),
    (AdamW, "AdamW", dict(lr=0.05, weight_decay=0.3)),
    (Adagrad, "Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.05)),
    (RMSprop, "RMSprop", dict(lr=0.01, momentum=0.5, centered=True)),
    (LAMB, None, dict(lr=0.02, weight_decay=0.01)),
    (Adadelta, "Adadelta", dict(lr=0.5, weight_decay=0.05)),
    (Adamax, "Adamax", dict(lr=0.02)),
    (NAdam, "NAdam", dict(lr=0.02, weight_decay=0.05, decoupled_weight_decay=True)),
    (RAdam, "RAdam", dict(lr=0.02, betas=(0.5, 0.9))),
    (Rprop, "Rprop", dict(lr=0.01)),
    (ASGD, "ASGD", dict(lr=0.05, t0=1)),
    (SparseAdam, "SparseAdam", dict(lr=0.05, betas=(0.8, 0.95))),
    (LBFGS, "LBFGS", dict(lr=0.5, max_iter=4, history_size=3)),
    (LBFGS, "LBFGS", dict(lr=1, max_iter=5, history_size=4, line_search_fn="strong_wolfe")),
]


def _dtype(cls):
    """The dtype a case compares in: LBFGS's line search branches on float32 dot products whose summation order
    differs from torch's (a far-reaching difference from one rounding), so it is compared in float64."""
    return np.float64 if cls.__name__ in CLOSURE_DRIVEN else np.float32


IDS = [f"{c[0].__name__}-{'-'.join(f'{k}={v}' for k, v in c[2].items())}" for c in CASES]
STEPS = 4


def tol(dtype=np.float32):
    return dict(rtol=1e-5, atol=1e-6) if np.dtype(dtype) == np.float32 else dict(rtol=1e-10, atol=1e-12)


@pytest.fixture(params=["native", "numpy"])
def backend(request, monkeypatch):
    if request.param == "native":
        assert native.HAVE_NATIVE, native.NATIVE_ERROR
    else:
        monkeypatch.setattr(native, "HAVE_NATIVE", False)
    return request.param


def test_cases_cover_every_optimizer():
    """A new optimizer in flow.optim must be added to CASES (and so gets every test below)."""
    exported = {getattr(flow.optim, n) for n in flow.optim.__all__}
    classes = {c for c in exported if inspect.isclass(c) and issubclass(c, flow.optim.Optimizer)}
    assert classes - {flow.optim.Optimizer} == {c[0] for c in CASES}


def _grads(shapes, seed=0, steps=STEPS, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(steps)]


def _reference(cls, tname, kw, inits, grads):
    """The parameters after each step, from plain (unaliased, contiguous) tensors: torch.optim where it has the
    optimizer, else flow on plain tensors (checked against the formulas in test_optim.py)."""
    if tname is not None:
        torch = pytest.importorskip("torch")
        ps = [torch.tensor(a, requires_grad=True) for a in inits]
        opt = torch_opt(torch, tname, ps, kw)
        wrap = wrap_grad(torch, tname)
    else:
        ps = [flow.tensor(a, requires_grad=True) for a in inits]
        opt = cls(ps, **kw)
        wrap = flow.tensor
    out = []
    for gs in grads:
        step_with(opt, ps, gs, wrap)
        out.append([p.detach().numpy().copy() for p in ps])
    return out


# -- one parameter and everything that aliases it ------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_views_detach_and_from_numpy_source_follow_every_step(case, backend):
    cls, tname, kw = case
    dt = _dtype(cls)
    a = np.random.default_rng(1).standard_normal((3, 4)).astype(dt)
    init = a.copy()
    p = nn.Parameter(flow.from_numpy(a))
    early = p.detach()  # taken before the optimizer exists
    opt = cls([p], **kw)
    aliases = {
        "view": (p.view(12), lambda x: x.reshape(12)),
        "slice": (p[1:, ::2], lambda x: x[1:, ::2]),
        "t": (p.t(), lambda x: x.T),
        "detach": (early, lambda x: x),
        "data": (p.data, lambda x: x),
    }
    grads = _grads([(3, 4)], dtype=dt)
    ref = _reference(cls, tname, kw, [init], grads)
    for k, (gs, want) in enumerate(zip(grads, ref)):
        step_with(opt, [p], gs, flow.tensor)
        np.testing.assert_allclose(p.detach().numpy(), want[0], **tol(dt), err_msg=f"step {k}")
        np.testing.assert_array_equal(a, p.detach().numpy())  # the from_numpy source is the parameter
        for name, (t, f) in aliases.items():
            np.testing.assert_array_equal(t.detach().numpy(), f(p.detach().numpy()), err_msg=f"{name} after step {k}")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_non_contiguous_parameter_from_a_transposed_tensor(case, backend):
    cls, tname, kw = case
    dt = _dtype(cls)
    a = np.random.default_rng(2).standard_normal((4, 3)).astype(dt)
    init = a.T.copy()
    p = nn.Parameter(flow.from_numpy(a).t())  # (3, 4), a transposed view of a
    assert not p._data.flags.c_contiguous
    opt = cls([p, nn.Parameter(flow.tensor(np.ones(5, dt)))], **kw)  # and a contiguous one in the same run
    grads = _grads([(3, 4), (5,)], seed=3, dtype=dt)
    ref = _reference(cls, tname, kw, [init, np.ones(5, dt)], grads)
    for gs, want in zip(grads, ref):
        step_with(opt, opt.param_groups[0]["params"], gs, flow.tensor)
        np.testing.assert_allclose(p.detach().numpy(), want[0], **tol(dt))
        np.testing.assert_array_equal(a.T, p.detach().numpy())
        assert not p._data.flags.c_contiguous  # still the view of a


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_parameters_that_are_views_of_one_tensor(case, backend):
    """Rows, interleaved columns and the same tensor twice: disjoint pieces are updated independently, and
    parameters that share memory one after the other (as torch.optim with foreach=False)."""
    torch = pytest.importorskip("torch")
    cls, tname, kw = case
    rng = np.random.default_rng(4)
    dt = _dtype(cls)
    base_np = rng.standard_normal((4, 6)).astype(dt)

    def pieces(base):
        return [base[0], base[1], base[2:, 0::2], base[2:, 1::2], base[3], base[3]]  # the last two: one row twice

    fb = flow.from_numpy(base_np.copy())
    fps = [nn.Parameter(t) for t in pieces(fb)]
    fopt = cls(fps, **kw)
    grads = _grads([tuple(t.shape) for t in fps], seed=5, dtype=dt)
    if tname is None:  # no torch LAMB: each piece on its own, in order, with flow on plain tensors
        ref_base = base_np.copy()
        ref_opts = None
    else:
        tb = torch.from_numpy(base_np.copy())
        tps = [torch.nn.Parameter(t) for t in pieces(tb)]
        topt = torch_opt(torch, tname, tps, kw)
    for k, gs in enumerate(grads):
        step_with(fopt, fps, gs, flow.tensor)
        if tname is None:
            if ref_opts is None:
                ref_ps = [flow.tensor(np.array(t), requires_grad=True) for t in pieces(ref_base)]
                ref_opts = [cls([q], **kw) for q in ref_ps]
            for j, (q, o, g) in enumerate(zip(ref_ps, ref_opts, gs)):  # sequentially, through the shared base
                q._data[...] = pieces(ref_base)[j]
                q.grad = flow.tensor(g)
                o.step()
                pieces(ref_base)[j][...] = q._data
            want = ref_base
        else:
            step_with(topt, tps, gs, wrap_grad(torch, tname))
            want = tb.numpy()
        np.testing.assert_allclose(fb.numpy(), want, **tol(dt), err_msg=f"step {k}")
        for p, t in zip(fps, pieces(fb)):
            np.testing.assert_array_equal(p.detach().numpy(), t.numpy())


def _tied(fw):
    class Tied(fw.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = fw.nn.Linear(4, 6, bias=False)
            self.dec = fw.nn.Linear(6, 4, bias=True)
            self.head = fw.nn.Linear(4, 6, bias=False)
            self.head.weight = self.enc.weight  # the same Parameter in two modules

        def forward(self, x):
            return self.head(self.dec(self.enc(x)).tanh())

    return Tied()


@pytest.mark.parametrize("case", [c for c in CASES if c[1] is not None], ids=[i for c, i in zip(CASES, IDS) if c[1]])
def test_weight_tying_matches_torch(case):
    torch = pytest.importorskip("torch")
    cls, tname, kw = case
    fm, tm = _tied(flow), _tied(torch)
    with torch.no_grad():
        for (_, fp), (_, tp) in zip(fm.named_parameters(), tm.named_parameters()):
            tp.copy_(torch.from_numpy(fp.detach().numpy().copy()))
    assert len(list(fm.parameters())) == len(list(tm.parameters())) == 3
    fopt, topt = cls(fm.parameters(), **kw), torch_opt(torch, tname, list(tm.parameters()), kw)
    x = np.random.default_rng(6).standard_normal((8, 4)).astype(np.float32)
    for _ in range(STEPS):
        for m, opt, lib in ((fm, fopt, flow), (tm, topt, torch)):
            model_step(opt, m, lib, tname, lambda m, t=lib.tensor(x): (m(t) ** 2).mean())
        assert fm.head.weight is fm.enc.weight
        for fp, tp in zip(fm.parameters(), tm.parameters()):
            np.testing.assert_allclose(fp.detach().numpy(), tp.detach().numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [flow.float16, flow.bfloat16])
@pytest.mark.parametrize("case", CASES[1::3], ids=IDS[1::3])
def test_low_precision_parameter_and_its_views(case, dtype):
    cls, _, kw = case
    a = np.random.default_rng(7).standard_normal((3, 4)).astype(dtype.np)
    p = nn.Parameter(flow.from_numpy(a))
    v, d = p.view(12), p.detach()
    opt = cls([p], **kw)
    for gs in _grads([(3, 4)], seed=8):
        before = p.detach().numpy().copy()
        step_with(opt, [p], gs, lambda g: flow.tensor(g).to(dtype))
        now = p.detach().numpy()
        assert now.dtype == dtype.np and not np.array_equal(now, before)
        np.testing.assert_array_equal(a, now)
        np.testing.assert_array_equal(v.detach().numpy(), now.reshape(12))
        np.testing.assert_array_equal(d.numpy(), now)


# -- what replaced re-pointing ------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_param_data_replaced_after_the_optimizer_was_built(case):
    """``p.data = x``: x's memory is the parameter's from then on (x and its views see the steps), and the
    optimizer's state carries on."""
    cls, tname, kw = case
    dt = _dtype(cls)
    init = np.random.default_rng(9).standard_normal(6).astype(dt)
    grads = _grads([(6,)], seed=10, dtype=dt)
    p = nn.Parameter(flow.tensor(init))
    opt = cls([p], **kw)
    step_with(opt, [p], grads[0], flow.tensor)
    src = np.array(p.detach().numpy())  # the same values in new memory
    x = flow.from_numpy(src)
    p.data = x
    xv = x.view(2, 3)
    ref = _reference(cls, tname, kw, [init], grads)
    for gs, want in zip(grads[1:], ref[1:]):
        step_with(opt, [p], gs, flow.tensor)
        np.testing.assert_allclose(p.detach().numpy(), want[0], **tol(dt))
        np.testing.assert_array_equal(src, p.detach().numpy())
        np.testing.assert_array_equal(xv.numpy().reshape(6), src)


def test_param_data_replaced_by_another_shape_rebuilds_and_keeps_aliases():
    p = nn.Parameter(flow.zeros(4))
    opt = SGD([p], lr=0.5)
    p.grad = flow.ones(4)
    opt.step()
    new = np.zeros((2, 3), np.float32)
    p.data = flow.from_numpy(new)
    p.grad = flow.ones(2, 3)
    opt.step()
    np.testing.assert_array_equal(new, -0.5)


def test_module_load_state_dict_then_steps_keep_views():
    m = nn.Linear(3, 2)
    opt = Adam(m.parameters(), lr=0.1)
    x = flow.randn(5, 3)
    (m(x) ** 2).mean().backward()
    opt.step()
    sd = {k: v.detach().clone() + 1 for k, v in m.state_dict().items()}
    m.load_state_dict(sd)
    w = m.weight.detach()
    opt.zero_grad()
    (m(x) ** 2).mean().backward()
    before = m.weight.detach().numpy().copy()
    opt.step()
    assert not np.array_equal(m.weight.detach().numpy(), before)
    np.testing.assert_array_equal(w.numpy(), m.weight.detach().numpy())


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_state_dict_round_trip_keeps_updating_in_place(case, tmp_path):
    cls, tname, kw = case
    dt = _dtype(cls)
    init = np.random.default_rng(11).standard_normal((2, 3)).astype(dt)
    grads = _grads([(2, 3)], seed=12, dtype=dt)
    p = nn.Parameter(flow.tensor(init))
    opt = cls([p], **kw)
    for gs in grads[:2]:
        step_with(opt, [p], gs, flow.tensor)
    flow.save(opt.state_dict(), tmp_path / "opt.flow")
    a = p.detach().numpy().copy()
    q = nn.Parameter(flow.from_numpy(a))
    v = q.view(6)
    opt2 = cls([q], **kw)
    opt2.load_state_dict(flow.load(tmp_path / "opt.flow"))
    ref = _reference(cls, tname, kw, [init], grads)
    for gs, want in zip(grads[2:], ref[2:]):
        step_with(opt2, [q], gs, flow.tensor)
        np.testing.assert_allclose(q.detach().numpy(), want[0], **tol(dt))
        np.testing.assert_array_equal(a, q.detach().numpy())
        np.testing.assert_array_equal(v.detach().numpy(), a.reshape(6))


def test_zero_grad_in_place_keeps_the_gradient_tensor_and_a_zero_step_changes_nothing():
    a = np.arange(6, dtype=np.float32)
    p = nn.Parameter(flow.from_numpy(a))
    opt = SGD([p], lr=0.1, momentum=0.9)
    p.grad = flow.ones(6)
    g = p.grad
    opt.step()
    opt.zero_grad(set_to_none=False)
    assert p.grad is g and g.tolist() == [0.0] * 6
    opt.step()  # momentum only: p -= lr * 0.9 * buf
    np.testing.assert_allclose(a, np.arange(6) - 0.1 - 0.1 * 0.9, rtol=1e-6)
    opt.zero_grad()
    assert p.grad is None
    before = a.copy()
    opt.step()
    np.testing.assert_array_equal(a, before)


@pytest.mark.parametrize("sparse", [False, True])
def test_embedding_gradients_update_the_table_in_place(sparse):
    torch = pytest.importorskip("torch")
    emb = nn.Embedding(10, 3, sparse=sparse)
    table = emb.weight.detach()
    row = emb.weight[2]
    temb = torch.nn.Embedding(10, 3)
    with torch.no_grad():
        temb.weight.copy_(torch.from_numpy(emb.weight.detach().numpy().copy()))
    opt, topt = SGD(emb.parameters(), lr=0.5, momentum=0.9), torch.optim.SGD(temb.parameters(), lr=0.5, momentum=0.9)
    idx = np.array([[2, 5, 2], [7, 5, 1]])
    for _ in range(3):
        opt.zero_grad()
        topt.zero_grad()
        emb(flow.tensor(idx)).sum().backward()
        temb(torch.tensor(idx)).sum().backward()
        opt.step()
        topt.step()
        np.testing.assert_allclose(emb.weight.detach().numpy(), temb.weight.detach().numpy(), rtol=1e-6)
        np.testing.assert_array_equal(table.numpy(), emb.weight.detach().numpy())
        np.testing.assert_array_equal(row.detach().numpy(), emb.weight.detach().numpy()[2])


def test_read_only_parameter_array_is_a_clear_error():
    a = np.ones(3, np.float32)
    a.flags.writeable = False
    with pytest.raises(flow.optim.OptimizerError, match="read-only"):
        SGD([nn.Parameter(flow.from_numpy(a))], lr=0.1)
    p = nn.Parameter(flow.zeros(3))
    opt = SGD([p], lr=0.1)
    p.data = flow.from_numpy(a)
    p.grad = flow.ones(3)
    with pytest.raises(flow.optim.OptimizerError, match="read-only"):
        opt.step()
    np.testing.assert_array_equal(a, 1.0)


# -- graph mode ----------------------------------------------------------------------------------
class _Net(nn.Module):
    def __init__(self, w, b):
        super().__init__()
        self.w = nn.Parameter(w)
        self.b = nn.Parameter(b)

    def forward(self, x):
        return x @ self.w + self.b


def _net_data():
    rng = np.random.default_rng(13)
    w = rng.standard_normal((4, 3)).astype(np.float32)  # stored transposed: the parameter is w.T, (3, 4)
    b = rng.standard_normal(4).astype(np.float32)
    batches = [
        (rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32))
        for _ in range(STEPS)
    ]
    return w, b, batches


def _loss(model, x, y):
    d = model(x) - y
    return (d * d).mean()


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_graph_mode_updates_parameters_in_place_like_eager(case):
    cls, tname, kw = case
    w_np, b_np, batches = _net_data()
    # eager, on plain contiguous parameters
    em = _Net(flow.tensor(w_np.T.copy()), flow.tensor(b_np))
    eopt = cls(em.parameters(), **kw)
    eager = []
    for x, y in batches:
        model_step(eopt, em, flow, tname, lambda m, x=flow.tensor(x), y=flow.tensor(y): _loss(m, x, y))
        eager.append([p.detach().numpy().copy() for p in em.parameters()])
    # graph, on a transposed from_numpy parameter with views taken before compiling
    w_src, b_src = w_np.copy(), b_np.copy()
    gm = _Net(flow.from_numpy(w_src).t(), flow.from_numpy(b_src))
    gopt = cls(gm.parameters(), **kw)
    views = [gm.w.detach(), gm.w.t(), gm.w[1:], gm.b.view(2, 2)]

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = gm
            self.add_optimizer(gopt)

        def build(self, x, y):
            loss = _loss(self.model, x, y)
            loss.backward()
            return loss

    step = Step()
    if cls.__name__ in CLOSURE_DRIVEN:  # nn.Graph steps optimizers without a closure: a clear error, no change
        with pytest.raises(OptimizerTypeError, match=rf"^{cls.__name__}: step\(\) needs a closure.*nn\.Graph"):
            step(flow.tensor(batches[0][0]), flow.tensor(batches[0][1]))
        np.testing.assert_array_equal(w_src, w_np)
        np.testing.assert_array_equal(b_src, b_np)
        assert not gopt.state and not np.array_equal(eager[-1][0], w_np.T)  # eager, with a closure, did train
        return
    for k, ((x, y), want) in enumerate(zip(batches, eager)):
        step(flow.tensor(x), flow.tensor(y))
        w, b = gm.w.detach().numpy(), gm.b.detach().numpy()
        np.testing.assert_allclose(w, want[0], **tol(), err_msg=f"step {k}")
        np.testing.assert_allclose(b, want[1], **tol(), err_msg=f"step {k}")
        np.testing.assert_array_equal(w_src.T, w)
        np.testing.assert_array_equal(b_src, b)
        for v, want_v in zip(views, (w, w.T, w[1:], b.reshape(2, 2))):
            np.testing.assert_array_equal(v.detach().numpy(), want_v)


def test_graph_mode_matches_torch_and_follows_param_data_replacement():
    torch = pytest.importorskip("torch")
    w_np, b_np, batches = _net_data()
    kw = dict(lr=0.05, momentum=0.9, weight_decay=0.01)
    gm = _Net(flow.from_numpy(w_np.copy()).t(), flow.tensor(b_np))
    gopt = SGD(gm.parameters(), **kw)
    tw = torch.nn.Parameter(torch.from_numpy(w_np.copy()).t())
    tb = torch.nn.Parameter(torch.from_numpy(b_np.copy()))
    topt = torch.optim.SGD([tw, tb], foreach=False, **kw)

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = gm
            self.add_optimizer(gopt)

        def build(self, x, y):
            loss = _loss(self.model, x, y)
            loss.backward()
            return loss

    step = Step()
    for k, (x, y) in enumerate(batches):
        if k == 2:  # replace the weight's memory between compiled steps
            fresh = gm.w.detach().numpy().copy()
            gm.w.data = flow.from_numpy(fresh)
        step(flow.tensor(x), flow.tensor(y))
        topt.zero_grad()
        d = torch.tensor(x) @ tw + tb - torch.tensor(y)
        (d * d).mean().backward()
        topt.step()
        np.testing.assert_allclose(gm.w.detach().numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gm.b.detach().numpy(), tb.detach().numpy(), rtol=1e-5, atol=1e-6)
        if k >= 2:
            np.testing.assert_array_equal(fresh, gm.w.detach().numpy())


@pytest.mark.parametrize("dtype", [flow.float16, flow.bfloat16])
def test_graph_mode_low_precision_parameter_and_its_view(dtype):
    a = np.random.default_rng(14).standard_normal((3, 4)).astype(dtype.np)
    m = _Net(flow.from_numpy(a), flow.zeros(4, dtype=dtype))
    v = m.w.view(12)
    opt = Adam(m.parameters(), lr=0.1)

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = m
            self.add_optimizer(opt)

        def build(self, x):
            loss = (self.model(x).float() ** 2).mean()
            loss.backward()
            return loss

    step, before = Step(), a.copy()
    for _ in range(2):
        step(flow.ones(2, 3, dtype=dtype))
    assert not np.array_equal(a, before)
    np.testing.assert_array_equal(v.detach().numpy(), a.reshape(12))
    assert all(
        s.dtype is flow.float32 for st in opt.state_dict()["state"].values() for k, s in st.items() if k != "step"
    )
