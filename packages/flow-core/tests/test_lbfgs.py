"""flow.optim.LBFGS against torch.optim.LBFGS step for step (float64): a linear regression and the
Rosenbrock function, with and without the strong-Wolfe line search; state dicts; bad options."""

import numpy as np
import pytest

import flow
from flow.optim import OptimizerError, OptimizerTypeError

torch = pytest.importorskip("torch")


def _rosenbrock(lib, xy):
    x, y = xy[0], xy[1]
    return (1 - x) ** 2 + 100 * (y - x**2) ** 2


def _run_rosenbrock(lib, opt_kw, steps):
    p = lib.tensor([-1.5, 2.0], dtype=lib.float64, requires_grad=True)
    opt = lib.optim.LBFGS([p], **opt_kw)

    def closure():
        opt.zero_grad()
        loss = _rosenbrock(lib, p)
        loss.backward()
        return loss

    trace = []
    for _ in range(steps):
        loss = opt.step(closure)
        trace.append((float(loss.detach()), p.detach().numpy().copy()))
    return trace, opt


@pytest.mark.parametrize(
    "opt_kw",
    [
        dict(lr=1.0, max_iter=20, history_size=10, line_search_fn="strong_wolfe"),
        dict(lr=0.05, max_iter=5, history_size=3),
    ],
    ids=["strong_wolfe", "fixed_step"],
)
def test_rosenbrock_matches_torch(opt_kw):
    ft, fopt = _run_rosenbrock(flow, opt_kw, 6)
    tt, topt = _run_rosenbrock(torch, opt_kw, 6)
    for (fl, fp), (tl, tp) in zip(ft, tt):
        # near the minimum the loss is a difference of nearly equal terms: an absolute floor there
        np.testing.assert_allclose(fl, tl, rtol=1e-8, atol=1e-14)
        np.testing.assert_allclose(fp, tp, rtol=1e-8)
    fs, ts = fopt.state_dict()["state"][0], topt.state_dict()["state"][0]
    assert fs["func_evals"] == ts["func_evals"] and fs["n_iter"] == ts["n_iter"]
    assert len(fs["old_dirs"]) == len(ts["old_dirs"])
    if opt_kw.get("line_search_fn"):
        assert ft[-1][0] < 1e-6  # the strong-Wolfe search reaches the minimum (1, 1)


def _regression(lib, w0, b0, x, y, opt_kw, steps):
    w = lib.tensor(w0, requires_grad=True)
    b = lib.tensor(b0, requires_grad=True)
    opt = lib.optim.LBFGS([w, b], **opt_kw)
    xs, ys = lib.tensor(x), lib.tensor(y)

    def closure():
        opt.zero_grad()
        loss = ((xs @ w + b - ys) ** 2).mean()
        loss.backward()
        return loss

    losses = [float(opt.step(closure).detach()) for _ in range(steps)]
    return losses, w, b, opt


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_regression_matches_torch(line_search_fn):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 4))
    y = x @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.1 * rng.standard_normal(32)
    w0, b0 = rng.standard_normal(4), np.zeros(1)
    kw = dict(lr=0.5, max_iter=4, history_size=5, line_search_fn=line_search_fn)
    fl, fw, fb, _ = _regression(flow, w0, b0, x, y, kw, 4)
    tl, tw, tb, _ = _regression(torch, w0, b0, x, y, kw, 4)
    np.testing.assert_allclose(fl, tl, rtol=1e-8)
    np.testing.assert_allclose(fw.detach().numpy(), tw.detach().numpy(), rtol=1e-8)
    np.testing.assert_allclose(fb.detach().numpy(), tb.detach().numpy(), rtol=1e-8)
    assert fl[-1] < fl[0]


def test_state_dict_round_trip_continues_identically():
    kw = dict(lr=1.0, max_iter=3, history_size=4, line_search_fn="strong_wolfe")
    _, opt = _run_rosenbrock(flow, kw, 2)
    p = opt.param_groups[0]["params"][0]
    sd = opt.state_dict()
    p2 = flow.tensor(p.detach().numpy(), requires_grad=True)
    opt2 = flow.optim.LBFGS([p2], lr=0.1)  # options come back from the state dict too
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["lr"] == 1.0 and opt2.param_groups[0]["params"][0] is p2
    for q, o in ((p, opt), (p2, opt2)):

        def closure(q=q, o=o):
            o.zero_grad()
            loss = _rosenbrock(flow, q)
            loss.backward()
            return loss

        o.step(closure)
    np.testing.assert_array_equal(p.detach().numpy(), p2.detach().numpy())
    assert opt.state_dict()["state"][0]["n_iter"] == opt2.state_dict()["state"][0]["n_iter"]
    # the saved state is a copy: stepping on did not change it
    assert sd["state"][0]["n_iter"] < opt.state_dict()["state"][0]["n_iter"]


def test_bad_options_and_usage_raise():
    p = flow.zeros(2, requires_grad=True)
    with pytest.raises(OptimizerError, match="line_search_fn"):
        flow.optim.LBFGS([p], line_search_fn="armijo")
    with pytest.raises(OptimizerError, match="learning rate"):
        flow.optim.LBFGS([p], lr=-1.0)
    with pytest.raises(OptimizerTypeError, match="max_iter"):
        flow.optim.LBFGS([p], max_iter=2.5)
    with pytest.raises(OptimizerError, match="parameter groups"):
        flow.optim.LBFGS([{"params": [p]}, {"params": [flow.zeros(1, requires_grad=True)]}])
    opt = flow.optim.LBFGS([p])
    with pytest.raises(OptimizerTypeError, match="closure"):
        opt.step()
    q = flow.zeros(3, requires_grad=True)
    with pytest.raises(OptimizerError, match="parameters"):
        opt.load_state_dict(flow.optim.LBFGS([p, q]).state_dict())


def _quadratic_closure(opt, p, fail_at=None, bad_grad=False):
    """A closure of 0.5 * |p - 1|^2 that fails at evaluation ``fail_at``: raises, or gives a wrong-shape gradient."""
    calls = [0]

    def closure():
        calls[0] += 1
        opt.zero_grad()
        loss = ((p - 1.0) ** 2).sum() * 0.5
        loss.backward()
        if calls[0] == fail_at:
            if not bad_grad:
                raise RuntimeError("model blew up")
            p.grad = flow.zeros(p.numel() + 1, dtype=p.dtype)
        return loss

    return closure, calls


@pytest.mark.parametrize("bad_grad", [False, True], ids=["closure_raises", "wrong_gradient"])
@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_a_step_failing_part_way_leaves_parameters_and_state_unchanged(bad_grad, line_search_fn):
    p = flow.tensor([3.0, -2.0, 0.5], dtype=flow.float64, requires_grad=True)
    opt = flow.optim.LBFGS([p], lr=0.5, max_iter=6, line_search_fn=line_search_fn)
    closure, _ = _quadratic_closure(opt, p)
    opt.step(closure)
    before, sd = p.detach().numpy().copy(), opt.state_dict()
    closure, calls = _quadratic_closure(opt, p, fail_at=3, bad_grad=bad_grad)
    err, text = (OptimizerError, r"params'\]\[0\] of shape \(3,\) has a gradient of shape \(4,\)")
    if not bad_grad:
        err, text = RuntimeError, "blew up"
    with pytest.raises(err, match=text):
        opt.step(closure)
    assert calls[0] == 3  # the failure came after updates of this step
    np.testing.assert_array_equal(p.detach().numpy(), before)
    after = opt.state_dict()["state"][0]
    assert after["n_iter"] == sd["state"][0]["n_iter"] and after["func_evals"] == sd["state"][0]["func_evals"]
    assert len(after["old_dirs"]) == len(sd["state"][0]["old_dirs"])
    np.testing.assert_array_equal(after["d"].numpy(), sd["state"][0]["d"].numpy())
    # and the next step is the one a fresh copy of the optimizer takes
    q = flow.tensor(before, requires_grad=True)
    twin = flow.optim.LBFGS([q], lr=0.5, max_iter=6, line_search_fn=line_search_fn)
    twin.load_state_dict(sd)
    for o, x in ((opt, p), (twin, q)):
        o.step(_quadratic_closure(o, x)[0])
    np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())


def test_loads_torch_state_dict_and_continues_like_torch():
    kw = dict(lr=1.0, max_iter=3, history_size=4, line_search_fn="strong_wolfe")
    _, topt = _run_rosenbrock(torch, kw, 2)
    tp = topt.param_groups[0]["params"][0]
    tsd = topt.state_dict()

    def to_flow(v):
        if isinstance(v, torch.Tensor):
            return flow.tensor(v.detach().numpy())
        return [to_flow(x) for x in v] if isinstance(v, list) else v

    fsd = {"state": {0: {k: to_flow(v) for k, v in tsd["state"][0].items()}}, "param_groups": tsd["param_groups"]}
    fp = flow.tensor(tp.detach().numpy(), requires_grad=True)
    fopt = flow.optim.LBFGS([fp], lr=0.1)
    fopt.load_state_dict(fsd)
    for lib, o, x in ((flow, fopt, fp), (torch, topt, tp)):

        def closure(o=o, x=x, lib=lib):
            o.zero_grad()
            loss = _rosenbrock(lib, x)
            loss.backward()
            return loss

        o.step(closure)
    np.testing.assert_allclose(fp.detach().numpy(), tp.detach().numpy(), rtol=1e-10)
    assert fopt.state_dict()["state"][0]["n_iter"] == topt.state_dict()["state"][0]["n_iter"]


def test_max_eval_defaults_as_in_torch_for_every_int_kind():
    p = flow.zeros(2, requires_grad=True)
    for max_iter in (4, np.int64(4), 20):
        want = torch.optim.LBFGS([torch.zeros(2, requires_grad=True)], max_iter=int(max_iter)).defaults["max_eval"]
        assert flow.optim.LBFGS([p], max_iter=max_iter).param_groups[0]["max_eval"] == want
    with pytest.raises(OptimizerTypeError, match="LBFGS: max_iter must be an int, got float 2.5"):
        flow.optim.LBFGS([p], max_iter=2.5)
