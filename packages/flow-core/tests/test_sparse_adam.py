"""flow.optim.SparseAdam (rows with a nonzero gradient) against torch.optim.SparseAdam on the sparse
gradients of torch's nn.Embedding(sparse=True), step for step."""

import numpy as np
import pytest

import flow
from flow.optim import OptimizerError

torch = pytest.importorskip("torch")


def _embedding_pair(n=10, dim=3, seed=0):
    w = np.random.default_rng(seed).standard_normal((n, dim))
    fe = flow.nn.Embedding(n, dim, dtype=flow.float64)
    te = torch.nn.Embedding(n, dim, sparse=True, dtype=torch.float64)
    with torch.no_grad():
        te.weight.copy_(torch.tensor(w))
    flow.nn.init._fill(fe.weight, w)
    return fe, te


@pytest.mark.parametrize("maximize", [False, True])
def test_embedding_steps_match_torch(maximize):
    fe, te = _embedding_pair()
    kw = dict(lr=0.1, betas=(0.8, 0.95), eps=1e-6, maximize=maximize)
    fo, to = flow.optim.SparseAdam(fe.parameters(), **kw), torch.optim.SparseAdam(te.parameters(), **kw)
    rng = np.random.default_rng(1)
    target = rng.standard_normal((4, 3))
    for _ in range(6):
        # each step looks up a few rows (some twice, rows 8 and 9 never): the others must not move
        idx = rng.integers(0, 8, 4)
        for e, o, lib in ((fe, fo, flow), (te, to, torch)):
            o.zero_grad()
            loss = ((e(lib.tensor(idx)) - lib.tensor(target)) ** 2).sum()
            loss.backward()
            o.step()
        np.testing.assert_allclose(fe.weight.detach().numpy(), te.weight.detach().numpy(), rtol=1e-12, atol=1e-15)
    fs, ts = fo.state_dict()["state"][0], to.state_dict()["state"][0]
    assert int(fs["step"]) == ts["step"] == 6
    np.testing.assert_allclose(fs["exp_avg"].numpy(), ts["exp_avg"].numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(fs["exp_avg_sq"].numpy(), ts["exp_avg_sq"].numpy(), rtol=1e-12, atol=1e-15)
    assert np.all(fs["exp_avg"].numpy()[8:] == 0)


def test_untouched_rows_keep_their_moments():
    # a row updated in step 1 and not in step 2 keeps its exp_avg (Adam would decay it and move the row)
    p = flow.nn.Parameter(flow.zeros(3, 2, dtype=flow.float64))
    opt = flow.optim.SparseAdam([p], lr=0.1)
    p.grad = flow.tensor([[1.0, 2.0], [0.0, 0.0], [0.0, 0.0]], dtype=flow.float64)
    opt.step()
    after1 = p.detach().numpy().copy()
    m1 = opt.state[p]["exp_avg"].numpy().copy()
    p.grad = flow.tensor([[0.0, 0.0], [0.0, 3.0], [0.0, 0.0]], dtype=flow.float64)
    opt.step()
    np.testing.assert_array_equal(p.detach().numpy()[0], after1[0])
    np.testing.assert_array_equal(opt.state[p]["exp_avg"].numpy()[0], m1[0])
    assert p.detach().numpy()[1, 0] == 0.0 and p.detach().numpy()[1, 1] != 0.0  # the whole row 1 takes part
    assert np.all(p.detach().numpy()[2] == 0)


def test_bad_options_raise():
    p = flow.nn.Parameter(flow.zeros(2))
    with pytest.raises(OptimizerError, match="learning rate"):
        flow.optim.SparseAdam([p], lr=-0.1)
    with pytest.raises(OptimizerError, match="beta"):
        flow.optim.SparseAdam([p], betas=(1.0, 0.9))
    with pytest.raises(OptimizerError, match="epsilon"):
        flow.optim.SparseAdam([p], eps=-1.0)
