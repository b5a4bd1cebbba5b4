"""flow.nn.RNN / LSTM / GRU and the cells: torch's parameter names and gate orders, parity of outputs,
final states and all gradients with PyTorch, and NumPy formula checks that need no torch."""

from __future__ import annotations

import numpy as np
import pytest

import flow
import flow.nn as nn

RTOL, ATOL = 1e-4, 1e-5


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _flat(x) -> list:
    if isinstance(x, (tuple, list)):
        return [y for e in x for y in _flat(e)]
    return [x]


def _to(lib, x, grad: bool):
    if isinstance(x, (tuple, list)):
        return tuple(_to(lib, e, grad) for e in x)
    if x is None:
        return None
    return lib.tensor(x, requires_grad=grad)


def rnn_parity(fm, tm, x, hx=None, rtol=RTOL, atol=ATOL):
    torch = pytest.importorskip("torch")
    fm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    tx, fx = torch.tensor(x, requires_grad=True), flow.tensor(x, requires_grad=True)
    thx, fhx = _to(torch, hx, True), _to(flow, hx, True)
    touts = _flat(tm(tx, thx) if hx is not None else tm(tx))
    fouts = _flat(fm(fx, fhx) if hx is not None else fm(fx))
    rng = np.random.default_rng(1)
    tl, fl = 0, 0
    for t, f in zip(touts, fouts):
        assert tuple(f.shape) == tuple(t.shape)
        np.testing.assert_allclose(f.detach().numpy(), t.detach().numpy(), rtol=rtol, atol=atol)
        g = rng.standard_normal(tuple(t.shape)).astype(np.float32)
        tl = tl + (t * torch.tensor(g)).sum()
        fl = fl + (f * flow.tensor(g)).sum()
    tl.backward()
    fl.backward()
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=rtol, atol=atol)
    for th, fh in zip(_flat(thx), _flat(fhx)):
        if th is not None:
            np.testing.assert_allclose(fh.grad.numpy(), th.grad.numpy(), rtol=rtol, atol=atol)
    tp = dict(tm.named_parameters())
    for name, p in fm.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), tp[name].grad.numpy(), rtol=rtol, atol=atol, err_msg=name)


CONFIGS = [
    dict(),
    dict(num_layers=2),
    dict(bidirectional=True),
    dict(num_layers=2, bidirectional=True),
    dict(batch_first=True),
    dict(bias=False),
    dict(num_layers=3, batch_first=True, bidirectional=True),
]


@pytest.mark.parametrize("kw", CONFIGS)
@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN"])
def test_rnn_parity(cls, kw):
    torch = pytest.importorskip("torch")
    fm, tm = getattr(nn, cls)(5, 6, **kw), getattr(torch.nn, cls)(5, 6, **kw)
    x = randn(3, 4, 5) if not kw.get("batch_first") else randn(4, 3, 5)
    rnn_parity(fm, tm, x)
    assert list(fm.state_dict()) == list(tm.state_dict())
    assert repr(fm) == repr(tm)


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN"])
def test_rnn_initial_states(cls):
    torch = pytest.importorskip("torch")
    kw = dict(num_layers=2, bidirectional=True)
    fm, tm = getattr(nn, cls)(4, 3, **kw), getattr(torch.nn, cls)(4, 3, **kw)
    h0 = randn(4, 2, 3, seed=5)
    hx = (h0, randn(4, 2, 3, seed=6)) if cls == "LSTM" else h0
    rnn_parity(fm, tm, randn(5, 2, 4), hx)


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN"])
def test_rnn_unbatched(cls):
    torch = pytest.importorskip("torch")
    fm, tm = getattr(nn, cls)(4, 3, num_layers=2), getattr(torch.nn, cls)(4, 3, num_layers=2)
    rnn_parity(fm, tm, randn(6, 4))
    h0 = randn(2, 3, seed=2)
    rnn_parity(fm, tm, randn(6, 4), (h0, randn(2, 3, seed=3)) if cls == "LSTM" else h0)


@pytest.mark.filterwarnings("ignore:LSTM with projections")
def test_rnn_relu_and_lstm_proj():
    torch = pytest.importorskip("torch")
    rnn_parity(
        nn.RNN(3, 4, nonlinearity="relu", num_layers=2),
        torch.nn.RNN(3, 4, nonlinearity="relu", num_layers=2),
        randn(5, 2, 3),
    )
    fm = nn.LSTM(3, 6, proj_size=2, num_layers=2, bidirectional=True)
    tm = torch.nn.LSTM(3, 6, proj_size=2, num_layers=2, bidirectional=True)
    assert list(fm.state_dict()) == list(tm.state_dict())
    rnn_parity(fm, tm, randn(4, 2, 3))
    rnn_parity(fm, tm, randn(4, 2, 3), (randn(4, 2, 2, seed=1), randn(4, 2, 6, seed=2)))
    assert repr(fm) == repr(tm)


def test_dropout_between_layers():
    torch = pytest.importorskip("torch")
    fm, tm = nn.LSTM(4, 8, num_layers=3, dropout=0.5), torch.nn.LSTM(4, 8, num_layers=3, dropout=0.5)
    fm.eval()
    tm.eval()
    rnn_parity(fm, tm, randn(5, 2, 4))  # no dropout in eval mode
    fm.train()
    flow.manual_seed(0)
    x = flow.tensor(randn(5, 2, 4))
    train_out = fm(x)[0].detach().numpy()
    fm.eval()
    eval_out = fm(x)[0].detach().numpy()
    assert not np.allclose(train_out, eval_out)
    one = nn.GRU(4, 8, num_layers=1, dropout=0.5)  # one layer: nothing to drop between
    np.testing.assert_array_equal(one(x)[0].detach().numpy(), one.eval()(x)[0].detach().numpy())
    with pytest.raises(ValueError):
        nn.LSTM(2, 2, dropout=1.5)


# -- formulas without torch -----------------------------------------------------------------------
def _sig(x):
    return 1 / (1 + np.exp(-x))


def test_lstm_formula_gate_order():
    m = nn.LSTM(3, 2)
    p = {k: v.detach().numpy().astype(np.float64) for k, v in m.state_dict().items()}
    x = randn(4, 1, 3).astype(np.float64)
    h = np.zeros((1, 2))
    c = np.zeros((1, 2))
    outs = []
    for t in range(4):
        g = x[t] @ p["weight_ih_l0"].T + p["bias_ih_l0"] + h @ p["weight_hh_l0"].T + p["bias_hh_l0"]
        i, f, gg, o = np.split(g, 4, axis=1)  # torch's order: input, forget, cell, output
        c = _sig(f) * c + _sig(i) * np.tanh(gg)
        h = _sig(o) * np.tanh(c)
        outs.append(h)
    out, (hn, cn) = m(flow.tensor(x.astype(np.float32)))
    np.testing.assert_allclose(out.detach().numpy(), np.stack(outs), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hn.detach().numpy()[0], h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cn.detach().numpy()[0], c, rtol=1e-5, atol=1e-6)


def test_gru_formula_gate_order_and_reverse():
    m = nn.GRU(3, 2, bidirectional=True)
    p = {k: v.detach().numpy().astype(np.float64) for k, v in m.state_dict().items()}
    x = randn(4, 1, 3).astype(np.float64)

    def run(sfx, steps):
        h = np.zeros((1, 2))
        outs = {}
        for t in steps:
            gi = x[t] @ p["weight_ih_l0" + sfx].T + p["bias_ih_l0" + sfx]
            gh = h @ p["weight_hh_l0" + sfx].T + p["bias_hh_l0" + sfx]
            r = _sig(gi[:, :2] + gh[:, :2])  # torch's order: reset, update, new
            z = _sig(gi[:, 2:4] + gh[:, 2:4])
            n = np.tanh(gi[:, 4:] + r * gh[:, 4:])
            h = (1 - z) * n + z * h
            outs[t] = h
        return np.stack([outs[t] for t in range(4)]), h

    fwd, hf = run("", range(4))
    bwd, hb = run("_reverse", range(3, -1, -1))
    out, hn = m(flow.tensor(x.astype(np.float32)))
    np.testing.assert_allclose(out.detach().numpy(), np.concatenate([fwd, bwd], -1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hn.detach().numpy(), np.stack([hf, hb]), rtol=1e-5, atol=1e-6)


def test_parameter_names_and_shapes():
    m = nn.LSTM(3, 5, num_layers=2, bidirectional=True)
    names = [n for n, _ in m.named_parameters()]
    assert names[:8] == [
        "weight_ih_l0",
        "weight_hh_l0",
        "bias_ih_l0",
        "bias_hh_l0",
        "weight_ih_l0_reverse",
        "weight_hh_l0_reverse",
        "bias_ih_l0_reverse",
        "bias_hh_l0_reverse",
    ]
    assert m.weight_ih_l0.shape == (20, 3) and m.weight_ih_l1.shape == (20, 10) and m.weight_hh_l1.shape == (20, 5)
    assert nn.GRU(3, 5).weight_ih_l0.shape == (15, 3)
    assert len(nn.RNN(3, 5, bias=False)._flat_weights) == 2
    assert len(m.all_weights) == 4 and len(m.all_weights[0]) == 4
    m.flatten_parameters()


def test_rnn_errors():
    m = nn.LSTM(3, 4)
    with pytest.raises(RuntimeError, match="input_size"):
        m(flow.randn(2, 1, 5))
    with pytest.raises(RuntimeError, match="Expected hidden size"):
        m(flow.randn(2, 1, 3), (flow.zeros(1, 2, 4), flow.zeros(1, 2, 4)))
    with pytest.raises(TypeError):
        m(flow.randn(2, 1, 3), flow.zeros(1, 1, 4))
    with pytest.raises(ValueError):
        m(flow.randn(2, 1, 1, 3))
    with pytest.raises(ValueError):
        nn.RNN(2, 2, nonlinearity="gelu")
    with pytest.raises(ValueError, match="proj_size has to be smaller"):
        nn.LSTM(2, 4, proj_size=4)


# -- cells --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", ["LSTMCell", "GRUCell", "RNNCell"])
@pytest.mark.parametrize("with_state", [False, True])
def test_cell_parity(cls, with_state):
    torch = pytest.importorskip("torch")
    fm, tm = getattr(nn, cls)(4, 3), getattr(torch.nn, cls)(4, 3)
    hx = None
    if with_state:
        hx = (randn(2, 3, seed=1), randn(2, 3, seed=2)) if cls == "LSTMCell" else randn(2, 3, seed=1)
    rnn_parity(fm, tm, randn(2, 4), hx)
    rnn_parity(fm, tm, randn(4))  # unbatched
    assert repr(fm) == repr(tm)
    assert list(fm.state_dict()) == list(tm.state_dict())


def test_lstm_trains():
    flow.manual_seed(0)
    m = nn.LSTM(2, 8, batch_first=True)
    head = nn.Linear(8, 1)
    x = flow.randn(16, 6, 2)
    y = x.sum(1).sum(1, keepdim=True)  # the sum of the sequence
    params = list(m.parameters()) + list(head.parameters())
    losses = []
    for _ in range(60):
        out, (h, _) = m(x)
        loss = ((head(h[0]) - y) ** 2).mean()
        for p in params:
            p.grad = None
        loss.backward()
        with flow.no_grad():
            for p in params:
                p.sub_(p.grad * 0.05)
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
