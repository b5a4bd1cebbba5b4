"""Training parity with PyTorch: one training script, two frameworks, the same losses.

Each script below is written once against a namespace ``ns`` (the module ``torch`` or ``flow``):
it builds a model from ``ns.nn``, an optimizer from ``ns.optim`` and runs 20 training steps on
fixed NumPy data. The PyTorch model's initial weights are copied into the flow model (through
``state_dict`` / ``load_state_dict``, so the parameter and buffer names must match too), then
both run and their losses must agree step by step to float32 accuracy (``rtol=1e-4``), as must
the trained parameters. The GPT and DLRM models of ``benchmarks/models.py`` (one definition for both
frameworks) are trained the same way at small sizes.
"""

from __future__ import annotations

import numpy as np
import pytest

import flow

torch = pytest.importorskip("torch")

STEPS = 20
LOSS_RTOL, LOSS_ATOL = 1e-4, 1e-6
PARAM_RTOL, PARAM_ATOL = 1e-3, 1e-5


# -- the scripts: (model, optimizer, data, loss) written once against ``ns`` ---------------------------------
def mlp_classifier(ns):
    nn, F = ns.nn, ns.nn.functional
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 5))
    opt = ns.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    rng = np.random.default_rng(1)
    data = (rng.standard_normal((32, 20), dtype=np.float32), rng.integers(0, 5, 32))
    return model, opt, None, data, lambda out, y: F.cross_entropy(out, y)


def cnn_batchnorm(ns):
    nn, F = ns.nn, ns.nn.functional

    class SmallCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)  # a bias before BatchNorm gets ~0 gradient
            self.bn1 = nn.BatchNorm2d(8)
            self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(16)
            self.pool = nn.MaxPool2d(2)
            self.fc = nn.Linear(16 * 2 * 2, 4)

        def forward(self, x):
            x = F.relu(self.bn1(self.conv1(x)))
            x = self.pool(x)
            x = F.relu(self.bn2(self.conv2(x)))
            x = F.adaptive_avg_pool2d(x, 2)
            return self.fc(x.flatten(1))

    model = SmallCNN()
    opt = ns.optim.Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(2)
    data = (rng.standard_normal((16, 3, 12, 12), dtype=np.float32), rng.integers(0, 4, 16))
    return model, opt, None, data, lambda out, y: F.cross_entropy(out, y)


def transformer_classifier(ns):
    nn, F = ns.nn, ns.nn.functional

    class TinyTransformer(nn.Module):
        def __init__(self, vocab=50, d_model=32, classes=3):
            super().__init__()
            self.emb = nn.Embedding(vocab, d_model)
            layer = nn.TransformerEncoderLayer(d_model, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, classes)

        def forward(self, idx):
            h = self.encoder(self.emb(idx))
            return self.head(self.norm(h.mean(dim=1)))

    model = TinyTransformer()
    opt = ns.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = ns.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.7)
    rng = np.random.default_rng(3)
    data = (rng.integers(0, 50, (8, 10)), rng.integers(0, 3, 8))
    return model, opt, sched, data, lambda out, y: F.cross_entropy(out, y)


def lstm_regressor(ns):
    nn, F = ns.nn, ns.nn.functional

    class LSTMRegressor(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(input_size=4, hidden_size=16, num_layers=2, batch_first=True)
            self.out = nn.Linear(16, 1)

        def forward(self, x):
            y, _ = self.lstm(x)
            return self.out(y[:, -1])

    model = LSTMRegressor()
    opt = ns.optim.RMSprop(model.parameters(), lr=5e-3)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((12, 7, 4), dtype=np.float32)
    y = (x.sum(axis=(1, 2)) / 4).astype(np.float32)[:, None]
    return model, opt, None, (x, y), lambda out, y: F.mse_loss(out, y)


SCRIPTS = [mlp_classifier, cnn_batchnorm, transformer_classifier, lstm_regressor]


def train(ns, model, opt, sched, data, loss_fn, steps: int = STEPS) -> list[float]:
    """The training loop, also written once: the same lines run on torch and on flow."""
    x, y = (ns.from_numpy(a.copy()) for a in data)
    model.train()
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        losses.append(loss.item())
    return losses


def _numpy_state(module) -> dict:
    return {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}


def _comparable(key: str, value: np.ndarray) -> np.ndarray:
    """The part of a trained parameter that the data determine. The key projection's bias of an attention
    layer gets an exactly-zero gradient (adding one vector to every key shifts a query's scores by a constant,
    which softmax ignores), so Adam turns rounding noise into steps of ``lr`` there: leave it out."""
    if key.endswith("self_attn.in_proj_bias"):
        d = value.shape[0] // 3
        return np.concatenate([value[:d], value[2 * d :]])
    return value


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.__name__)
def test_same_losses_as_torch(script):
    torch.manual_seed(0)
    tm, topt, tsched, data, tloss = script(torch)
    fm, fopt, fsched, _, floss = script(flow)
    t_init = _numpy_state(tm)
    assert sorted(_numpy_state(fm)) == sorted(t_init), "flow's state_dict names differ from torch's"
    fm.load_state_dict({k: v.copy() for k, v in t_init.items()})

    t_losses = train(torch, tm, topt, tsched, data, tloss)
    f_losses = train(flow, fm, fopt, fsched, data, floss)

    assert np.all(np.isfinite(t_losses))
    assert t_losses[-1] < t_losses[0], "the script should actually train"
    np.testing.assert_allclose(
        f_losses,
        t_losses,
        rtol=LOSS_RTOL,
        atol=LOSS_ATOL,
        err_msg=f"{script.__name__}: flow's losses differ from torch's",
    )
    t_final, f_final = _numpy_state(tm), _numpy_state(fm)
    for k, tv in t_final.items():
        np.testing.assert_allclose(
            _comparable(k, f_final[k]),
            _comparable(k, tv),
            rtol=PARAM_RTOL,
            atol=PARAM_ATOL,
            err_msg=f"{script.__name__}: '{k}' differs after {STEPS} steps",
        )


# -- the benchmark models (benchmarks/models.py), written once against ``nn`` / ``F``, small sizes ----------
def _benchmark_models():
    import importlib.util
    import os
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "models.py"
    if not path.is_file():
        pytest.skip("benchmarks/models.py is not in this checkout")
    env, sys_path = dict(os.environ), list(sys.path)
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location("flow_benchmark_models", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:  # importing the benchmark helpers sets thread-count defaults: not the tests' business
        sys.path[:] = sys_path
        os.environ.clear()
        os.environ.update(env)
    return mod


def _gpt_script(ns):
    bm = _benchmark_models()
    nn, F = ns.nn, ns.nn.functional
    model = bm.make_gpt(nn, F, vocab=40, d_model=32, n_heads=4, n_layers=2, seq_len=12, dropout=0.0)
    opt = ns.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    rng = np.random.default_rng(5)
    idx, y = rng.integers(0, 40, (4, 12)), rng.integers(0, 40, 4 * 12)
    loss = lambda logits, t: F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t)
    return model, opt, (ns.from_numpy(idx), ns.arange(12)), ns.from_numpy(y), loss


def _dlrm_script(ns):
    bm = _benchmark_models()
    nn, F = ns.nn, ns.nn.functional
    model = bm.make_dlrm(nn, F, ns, num_tables=3, rows=50, dim=8)
    opt = ns.optim.SGD(model.parameters(), lr=0.05)
    rng = np.random.default_rng(6)
    b, bag = 16, 3
    inputs = (
        ns.from_numpy(rng.standard_normal((b, 13), dtype=np.float32)),
        [ns.from_numpy(rng.integers(0, 50, b * bag)) for _ in range(3)],
        ns.from_numpy(np.arange(b, dtype=np.int64) * bag),
    )
    y = ns.from_numpy(rng.integers(0, 2, (b, 1)).astype(np.float32))
    return model, opt, inputs, y, F.binary_cross_entropy_with_logits


@pytest.mark.parametrize("script", [_gpt_script, _dlrm_script], ids=["gpt", "dlrm"])
def test_benchmark_models_train_the_same(script):
    """benchmarks/models.py's GPT and DLRM, built by the same code in both frameworks, train to the same losses."""
    torch.manual_seed(0)
    tm, topt, tin, ty, tloss = script(torch)
    fm, fopt, fin, fy, floss = script(flow)
    t_init = _numpy_state(tm)
    assert sorted(_numpy_state(fm)) == sorted(t_init)
    fm.load_state_dict({k: v.copy() for k, v in t_init.items()})
    losses = {}
    for name, m, opt, inputs, y, loss_fn in (("torch", tm, topt, tin, ty, tloss), ("flow", fm, fopt, fin, fy, floss)):
        out = []
        for _ in range(8):
            opt.zero_grad()
            loss = loss_fn(m(*inputs), y)
            loss.backward()
            opt.step()
            out.append(loss.item())
        losses[name] = out
    assert losses["torch"][-1] < losses["torch"][0]
    np.testing.assert_allclose(losses["flow"], losses["torch"], rtol=LOSS_RTOL, atol=LOSS_ATOL)
