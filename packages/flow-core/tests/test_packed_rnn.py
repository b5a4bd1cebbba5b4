"""flow.nn.utils.rnn (pad/pack/unpack of variable-length sequences) and RNN/LSTM/GRU on PackedSequence,
against PyTorch: the packed layout, outputs, h_n at each sequence's own last step, and gradients."""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow.nn.utils import rnn as R

torch = pytest.importorskip("torch")
TR = torch.nn.utils.rnn
LENS = [3, 5, 2, 5, 1]


def _seqs(feat=4, lens=LENS, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, feat)).astype(np.float32) for n in lens]


def _both(arrays, grad=True):
    return [flow.tensor(a, requires_grad=grad) for a in arrays], [torch.tensor(a, requires_grad=grad) for a in arrays]


def _close(f, t, tol=1e-5):
    np.testing.assert_allclose(f.detach().numpy(), t.detach().numpy(), rtol=tol, atol=tol)


def _same_packed(fp, tp):
    _close(fp.data, tp.data)
    assert fp.batch_sizes.tolist() == tp.batch_sizes.tolist()
    for a, b in ((fp.sorted_indices, tp.sorted_indices), (fp.unsorted_indices, tp.unsorted_indices)):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.tolist() == b.tolist()


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_sequence(batch_first, side):
    fs, ts = _both(_seqs())
    fo = R.pad_sequence(fs, batch_first, -1.0, side)
    to = TR.pad_sequence(ts, batch_first, -1.0, side)
    _close(fo, to)
    w = np.random.default_rng(1).standard_normal(tuple(to.shape)).astype(np.float32)
    (fo * flow.tensor(w)).sum().backward()
    (to * torch.tensor(w)).sum().backward()
    for f, t in zip(fs, ts):
        _close(f.grad, t.grad)


@pytest.mark.parametrize("batch_first", [False, True])
def test_pack_pad_round_trip(batch_first):
    padded = TR.pad_sequence([torch.tensor(a) for a in _seqs()], batch_first)
    fpadded = flow.tensor(padded.numpy(), requires_grad=True)
    tpadded = padded.clone().requires_grad_(True)
    fp = R.pack_padded_sequence(fpadded, flow.tensor(LENS), batch_first, enforce_sorted=False)
    tp = TR.pack_padded_sequence(tpadded, torch.tensor(LENS), batch_first, enforce_sorted=False)
    _same_packed(fp, tp)
    fo, fl = R.pad_packed_sequence(fp, batch_first, padding_value=0.5, total_length=7)
    to, tl = TR.pad_packed_sequence(tp, batch_first, padding_value=0.5, total_length=7)
    _close(fo, to)
    assert fl.tolist() == tl.tolist() == LENS and fl.dtype == flow.int64
    (fo * fo).sum().backward()
    (to * to).sum().backward()
    _close(fpadded.grad, tpadded.grad)
    for a, b in zip(R.unpack_sequence(fp), TR.unpack_sequence(tp)):
        _close(a, b)


def test_pack_sequence_sorted_and_errors():
    sorted_lens = sorted(LENS, reverse=True)
    fs, ts = _both(_seqs(lens=sorted_lens))
    _same_packed(R.pack_sequence(fs), TR.pack_sequence(ts))
    with pytest.raises(RuntimeError, match="must be sorted in decreasing order"):
        R.pack_sequence(_both(_seqs())[0])
    with pytest.raises(RuntimeError, match="length > 0"):
        R.pack_padded_sequence(flow.randn(3, 2, 1), [3, 0])
    with pytest.raises(ValueError, match="expected 2 lengths"):
        R.pack_padded_sequence(flow.randn(3, 2, 1), [3])
    with pytest.raises(ValueError, match="same trailing dims"):
        R.pad_sequence([flow.randn(2, 3), flow.randn(2, 4)])
    p = R.pack_sequence([flow.randn(3, 1), flow.randn(2, 1)])
    with pytest.raises(ValueError, match="total_length to be at least"):
        R.pad_packed_sequence(p, total_length=2)


@pytest.mark.parametrize(
    "name,kw",
    [
        ("LSTM", dict(num_layers=2, bidirectional=True)),
        ("LSTM", dict(proj_size=2)),
        ("GRU", dict(bidirectional=True)),
        ("GRU", dict(num_layers=2, batch_first=True)),
        ("RNN", dict(num_layers=2, nonlinearity="relu", bidirectional=True)),
    ],
)
@pytest.mark.parametrize("with_hx", [False, True])
def test_rnn_on_packed(name, kw, with_hx):
    tm = getattr(torch.nn, name)(4, 3, **kw)
    fm = getattr(flow.nn, name)(4, 3, **kw)
    assert list(fm.state_dict()) == list(tm.state_dict())
    fm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    fs, ts = _both(_seqs())
    fp, tp = R.pack_sequence(fs, enforce_sorted=False), TR.pack_sequence(ts, enforce_sorted=False)
    fh = th = None
    if with_hx:
        dirs, layers = (2 if kw.get("bidirectional") else 1), kw.get("num_layers", 1)
        hsz = kw.get("proj_size") or 3
        rng = np.random.default_rng(5)
        h0 = rng.standard_normal((dirs * layers, len(LENS), hsz)).astype(np.float32)
        (fh,), (th,) = _both([h0])
        if name == "LSTM":
            c0 = rng.standard_normal((dirs * layers, len(LENS), 3)).astype(np.float32)
            (fc,), (tc,) = _both([c0])
            fh, th = (fh, fc), (th, tc)
    fo, fstate = fm(fp, fh)
    to, tstate = tm(tp, th)
    assert isinstance(fo, R.PackedSequence)
    _same_packed(fo, to)
    fstate = fstate if isinstance(fstate, tuple) else (fstate,)
    tstate = tstate if isinstance(tstate, tuple) else (tstate,)
    for a, b in zip(fstate, tstate):
        _close(a, b)
    fpad, _ = R.pad_packed_sequence(fo)
    tpad, _ = TR.pad_packed_sequence(to)
    floss = (fpad * fpad).sum() + sum((s * s).sum() for s in fstate)
    tloss = (tpad * tpad).sum() + sum((s * s).sum() for s in tstate)
    floss.backward()
    tloss.backward()
    for f, t in zip(fs, ts):
        _close(f.grad, t.grad, 1e-4)
    fparams = dict(fm.named_parameters())
    for k, p in tm.named_parameters():
        _close(fparams[k].grad, p.grad, 1e-4)
    if with_hx:
        for f, t in zip(fh if isinstance(fh, tuple) else (fh,), th if isinstance(th, tuple) else (th,)):
            _close(f.grad, t.grad, 1e-4)


def test_packed_matches_per_sequence_runs():
    # each sequence alone through the same GRU gives its slice of the packed run (h_n at its own end)
    gru = flow.nn.GRU(4, 3)
    seqs = [flow.tensor(a) for a in _seqs()]
    with flow.no_grad():
        out, h = gru(R.pack_sequence(seqs, enforce_sorted=False))
        padded, lens = R.pad_packed_sequence(out)
    for b, s in enumerate(seqs):
        with flow.no_grad():
            o1, h1 = gru(s.unsqueeze(1))
        np.testing.assert_allclose(padded[: len(s), b].numpy(), o1[:, 0].numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(h[:, b].numpy(), h1[:, 0].numpy(), rtol=1e-5, atol=1e-6)
        assert not padded[len(s) :, b].numpy().any()


def test_packed_input_size_error():
    with pytest.raises(RuntimeError, match="input_size=4"):
        flow.nn.LSTM(4, 3)(R.pack_sequence([flow.randn(2, 5)]))
