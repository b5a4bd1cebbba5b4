"""flow.nn.MultiheadAttention and the transformer layers: torch's packed parameter layout (state dicts
interchangeable), masks, parity of outputs, attention weights and gradients with PyTorch, formula checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

import flow
import flow.nn as nn

RTOL, ATOL = 1e-4, 1e-5


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def parity(fm, tm, *inputs, kw=None, rtol=RTOL, atol=ATOL, copy=True):
    """Same weights, same inputs (NumPy) and keyword masks (NumPy -> each library): compare everything."""
    torch = pytest.importorskip("torch")
    if copy:
        fm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    kw = kw or {}
    tkw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    fkw = {k: flow.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    # the same array passed twice stays the same tensor (self-attention takes the packed path)
    tcache, fcache = {}, {}
    tin = [tcache.setdefault(id(a), torch.tensor(a, requires_grad=True)) for a in inputs]
    fin = [fcache.setdefault(id(a), flow.tensor(a, requires_grad=True)) for a in inputs]
    tout, fout = tm(*tin, **tkw), fm(*fin, **fkw)
    touts = [o for o in (tout if isinstance(tout, tuple) else (tout,)) if o is not None]
    fouts = [o for o in (fout if isinstance(fout, tuple) else (fout,)) if o is not None]
    assert len(touts) == len(fouts)
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
    for t, f in zip(tcache.values(), fcache.values()):
        np.testing.assert_allclose(f.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=atol)
    tp = dict(tm.named_parameters())
    for name, p in fm.named_parameters():
        if tp[name].grad is None:
            assert p.grad is None or not p.grad.numpy().any(), name
        else:
            np.testing.assert_allclose(p.grad.numpy(), tp[name].grad.numpy(), rtol=rtol, atol=atol, err_msg=name)
    return fouts


# -- MultiheadAttention -------------------------------------------------------------------------------------
def test_mha_state_dict_layout_matches_torch():
    torch = pytest.importorskip("torch")
    for kw in (dict(), dict(bias=False), dict(kdim=5, vdim=3), dict(add_bias_kv=True)):
        f, t = nn.MultiheadAttention(8, 2, **kw), torch.nn.MultiheadAttention(8, 2, **kw)
        assert [(k, tuple(v.shape)) for k, v in f.state_dict().items()] == [
            (k, tuple(v.shape)) for k, v in t.state_dict().items()
        ]
        assert repr(f) == repr(t)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(batch_first=True),
        dict(bias=False),
        dict(add_bias_kv=True),
        dict(add_zero_attn=True),
        dict(add_bias_kv=True, add_zero_attn=True),
    ],
)
def test_mha_self_attention_parity(kw):
    torch = pytest.importorskip("torch")
    f, t = nn.MultiheadAttention(8, 2, **kw), torch.nn.MultiheadAttention(8, 2, **kw)
    x = randn(5, 3, 8)
    parity(f, t, x, x, x)
    parity(f, t, x, x, x, kw={"average_attn_weights": False})
    parity(f, t, x, x, x, kw={"need_weights": False})


def test_mha_cross_attention_and_kdim_vdim():
    torch = pytest.importorskip("torch")
    f, t = nn.MultiheadAttention(8, 4), torch.nn.MultiheadAttention(8, 4)
    q, k, v = randn(4, 2, 8), randn(6, 2, 8, seed=1), randn(6, 2, 8, seed=2)
    parity(f, t, q, k, v)
    parity(f, t, q, k, k)
    f, t = (
        nn.MultiheadAttention(8, 2, kdim=5, vdim=3, batch_first=True),
        torch.nn.MultiheadAttention(8, 2, kdim=5, vdim=3, batch_first=True),
    )
    parity(f, t, randn(2, 4, 8), randn(2, 6, 5, seed=1), randn(2, 6, 3, seed=2))


def test_mha_masks():
    torch = pytest.importorskip("torch")
    f, t = nn.MultiheadAttention(8, 2, batch_first=True), torch.nn.MultiheadAttention(8, 2, batch_first=True)
    x = randn(3, 5, 8)
    causal = np.triu(np.ones((5, 5), bool), 1)
    kpm = np.zeros((3, 5), bool)
    kpm[0, 3:] = True
    kpm[2, 4] = True
    parity(f, t, x, x, x, kw={"attn_mask": causal})
    parity(f, t, x, x, x, kw={"key_padding_mask": kpm})
    parity(f, t, x, x, x, kw={"attn_mask": causal, "key_padding_mask": kpm})
    parity(f, t, x, x, x, kw={"attn_mask": causal, "key_padding_mask": kpm, "need_weights": False})
    parity(f, t, x, x, x, kw={"attn_mask": randn(5, 5, seed=3)})  # additive float mask
    parity(f, t, x, x, x, kw={"attn_mask": randn(6, 5, 5, seed=4)})  # per (batch * head) mask
    parity(f, t, x, x, x, kw={"attn_mask": causal, "is_causal": True})
    parity(f, t, x, x, x, kw={"key_padding_mask": np.where(kpm, -1e9, 0).astype(np.float32)})
    with pytest.raises(RuntimeError, match="2D attn_mask"):
        f(flow.tensor(x), flow.tensor(x), flow.tensor(x), attn_mask=flow.zeros(4, 5))
    with pytest.raises(RuntimeError, match="key_padding_mask"):
        f(flow.tensor(x), flow.tensor(x), flow.tensor(x), key_padding_mask=flow.zeros(3, 4, dtype=flow.bool))


def test_mha_unbatched_and_errors():
    torch = pytest.importorskip("torch")
    f, t = nn.MultiheadAttention(6, 3), torch.nn.MultiheadAttention(6, 3)
    x = randn(4, 6)
    parity(f, t, x, x, x)
    parity(f, t, x, x, x, kw={"key_padding_mask": np.array([False, False, True, False])})
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(6, 4)
    with pytest.raises(ValueError, match="embedding dimension"):
        f(flow.randn(4, 2, 5), flow.randn(4, 2, 5), flow.randn(4, 2, 5))


def test_mha_formula_without_torch():
    flow.manual_seed(0)
    m = nn.MultiheadAttention(4, 2, batch_first=True)
    x = randn(1, 3, 4).astype(np.float64)
    w = m.in_proj_weight.detach().numpy().astype(np.float64)
    b = m.in_proj_bias.detach().numpy().astype(np.float64)
    q, k, v = np.split(x[0] @ w.T + b, 3, axis=-1)
    heads, weights = [], []
    for h in range(2):
        sl = slice(2 * h, 2 * h + 2)
        s = q[:, sl] @ k[:, sl].T / math.sqrt(2)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        weights.append(a)
        heads.append(a @ v[:, sl])
    o = np.concatenate(heads, -1) @ m.out_proj.weight.detach().numpy().T + m.out_proj.bias.detach().numpy()
    xf = flow.tensor(x.astype(np.float32))
    out, att = m(xf, xf, xf)
    np.testing.assert_allclose(out.detach().numpy()[0], o, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(att.detach().numpy()[0], np.mean(weights, 0), rtol=1e-5, atol=1e-6)


def test_mha_dropout_only_in_training():
    flow.manual_seed(0)
    m = nn.MultiheadAttention(8, 2, dropout=0.5)
    x = flow.randn(4, 2, 8)
    m.eval()
    a = m(x, x, x)[0].detach().numpy()
    np.testing.assert_array_equal(a, m(x, x, x)[0].detach().numpy())
    m.train()
    assert not np.allclose(a, m(x, x, x)[0].detach().numpy())


# -- transformer layers -----------------------------------------------------------------------------------------
ENC_CONFIGS = [
    dict(),
    dict(activation="gelu"),
    dict(norm_first=True),
    dict(batch_first=True),
    dict(layer_norm_eps=1e-3, dim_feedforward=12),
    dict(bias=False),
]


@pytest.mark.parametrize("kw", ENC_CONFIGS)
def test_encoder_layer_parity(kw):
    torch = pytest.importorskip("torch")
    base = dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0)
    base.update(kw)
    f, t = nn.TransformerEncoderLayer(**base), torch.nn.TransformerEncoderLayer(**base)
    assert list(f.state_dict()) == list(t.state_dict())
    x = randn(5, 3, 8)
    n, s = (5, 3) if base.get("batch_first") else (3, 5)
    mask = np.triu(np.ones((s, s), bool), 1)
    kpm = np.zeros((n, s), bool)
    kpm[1, -1] = True
    parity(f, t, x)
    parity(f, t, x, kw={"src_mask": mask})
    parity(f, t, x, kw={"src_key_padding_mask": kpm})
    assert repr(f) == repr(t)


def test_encoder_layer_rejects_unknown_activation_and_takes_callables():
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="relu/gelu"):
        nn.TransformerEncoderLayer(8, 2, activation="swish")
    f = nn.TransformerEncoderLayer(8, 2, 16, 0.0, activation=nn.GELU())
    t = torch.nn.TransformerEncoderLayer(8, 2, 16, 0.0, activation=torch.nn.GELU())
    parity(f, t, randn(4, 2, 8))


def test_transformer_encoder_stack():
    torch = pytest.importorskip("torch")
    fl = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    tl = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    f = nn.TransformerEncoder(fl, num_layers=3, norm=nn.LayerNorm(8))
    t = torch.nn.TransformerEncoder(tl, num_layers=3, norm=torch.nn.LayerNorm(8), enable_nested_tensor=False)
    assert list(f.state_dict()) == list(t.state_dict())
    assert f.layers[0].linear1.weight is not f.layers[1].linear1.weight  # deep copies
    x = randn(2, 6, 8)
    parity(f, t, x)
    parity(f, t, x, kw={"mask": np.triu(np.ones((6, 6), bool), 1)})
    assert repr(f) == repr(t)


def test_decoder_and_full_transformer():
    torch = pytest.importorskip("torch")
    kw = dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0)
    f, t = nn.TransformerDecoderLayer(**kw), torch.nn.TransformerDecoderLayer(**kw)
    tgt, mem = randn(4, 2, 8), randn(6, 2, 8, seed=1)
    parity(f, t, tgt, mem, kw={"tgt_mask": np.triu(np.ones((4, 4), bool), 1)})
    f = nn.Transformer(num_encoder_layers=2, num_decoder_layers=2, batch_first=True, **kw)
    t = torch.nn.Transformer(num_encoder_layers=2, num_decoder_layers=2, batch_first=True, **kw)
    assert list(f.state_dict()) == list(t.state_dict())
    m = nn.Transformer.generate_square_subsequent_mask(4)
    np.testing.assert_array_equal(m.numpy(), torch.nn.Transformer.generate_square_subsequent_mask(4).numpy())
    parity(f, t, randn(2, 6, 8), randn(2, 4, 8, seed=1), kw={"tgt_mask": m.numpy()})


def test_encoder_trains():
    flow.manual_seed(0)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True), 2)
    head = nn.Linear(8, 1)
    x = flow.randn(8, 5, 8)
    y = x.mean(1).sum(1, keepdim=True)
    params = list(enc.parameters()) + list(head.parameters())
    losses = []
    for _ in range(30):
        loss = ((head(enc(x).mean(1)) - y) ** 2).mean()
        for p in params:
            p.grad = None
        loss.backward()
        with flow.no_grad():
            for p in params:
                p.sub_(p.grad * 0.05)
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]
