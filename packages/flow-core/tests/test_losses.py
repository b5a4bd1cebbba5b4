"""flow.nn losses: parity with PyTorch (outputs and gradients at float32 tolerance) and formula checks
that need no torch."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _layer_parity import _torch, check_parity, randn

import flow
import flow.nn as nn


# -- losses ------------------------------------------------------------------------------------------
def _loss_parity(name, inputs, kw=None, fkw=None, grad=True, grad_args=(0,)):
    torch = _torch()
    kw = kw or {}
    fkw = (
        fkw
        if fkw is not None
        else {k: (flow.tensor(v.numpy()) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    )
    for reduction in ("mean", "sum", "none"):
        check_parity(
            getattr(nn, name)(reduction=reduction, **fkw),
            getattr(torch.nn, name)(reduction=reduction, **kw),
            *inputs,
            grad=grad,
            grad_args=grad_args,
        )


def _probs(*shape, seed=0):
    return (1 / (1 + np.exp(-randn(*shape, seed=seed)))).astype(np.float32)


def test_regression_losses():
    x, y = randn(4, 5), randn(4, 5, seed=1)
    for name in ("MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss"):
        _loss_parity(name, (x, y), grad_args=(0, 1))  # these are differentiable in the target too
    _loss_parity("SoftMarginLoss", (x, np.sign(y)))
    _loss_parity("SmoothL1Loss", (x, y), {"beta": 0.5})
    _loss_parity("HuberLoss", (x, y), {"delta": 0.3})


def test_loss_formulas_without_torch():
    x, y = randn(4, 5), randn(4, 5, seed=1)
    fx, fy = flow.tensor(x), flow.tensor(y)
    assert nn.MSELoss()(fx, fy).item() == pytest.approx(((x - y) ** 2).mean(), rel=1e-5)
    assert nn.L1Loss(reduction="sum")(fx, fy).item() == pytest.approx(np.abs(x - y).sum(), rel=1e-5)
    logits, target = randn(3, 4), np.array([0, 3, 1])
    lse = np.log(np.exp(logits).sum(1))
    expected = (lse - logits[np.arange(3), target]).mean()
    assert nn.CrossEntropyLoss()(flow.tensor(logits), flow.tensor(target)).item() == pytest.approx(expected, rel=1e-5)
    assert nn.MSELoss(size_average=False).reduction == "sum"
    assert nn.MSELoss(reduce=False).reduction == "none"
    with pytest.raises(ValueError):
        nn.MSELoss(reduction="avg")


def test_bce_losses():
    torch = _torch()
    p, y = _probs(4, 3), (randn(4, 3, seed=2) > 0).astype(np.float32)
    _loss_parity("BCELoss", (p, y))
    w = torch.rand(3) + 0.5
    _loss_parity("BCELoss", (p, y), {"weight": w})
    logits = randn(4, 3) * 3
    _loss_parity("BCEWithLogitsLoss", (logits, y))
    _loss_parity("BCEWithLogitsLoss", (logits, y), {"pos_weight": torch.tensor([0.5, 2.0, 3.0])})
    _loss_parity("BCEWithLogitsLoss", (logits, _probs(4, 3, seed=5)), {"weight": w, "pos_weight": w * 2})
    m = nn.BCEWithLogitsLoss(pos_weight=flow.ones(3))
    assert "pos_weight" in dict(m.named_buffers())


def test_nll_and_cross_entropy():
    torch = _torch()
    logits = randn(5, 4)
    target = np.array([0, 3, 1, 1, 2])
    _loss_parity("CrossEntropyLoss", (logits, target))
    _loss_parity("CrossEntropyLoss", (logits, target), {"weight": torch.tensor([1.0, 2.0, 0.5, 1.5])})
    _loss_parity("CrossEntropyLoss", (logits, np.array([0, -100, 1, 1, -100])))
    _loss_parity("CrossEntropyLoss", (logits, np.array([0, 2, 1, 1, 2])), {"ignore_index": 2})
    _loss_parity("CrossEntropyLoss", (logits, target), {"label_smoothing": 0.1})
    _loss_parity("CrossEntropyLoss", (logits, _probs(5, 4)))  # probability targets
    _loss_parity("CrossEntropyLoss", (randn(2, 4, 3, 2), np.random.default_rng(0).integers(0, 4, (2, 3, 2))))
    logp = np.log(_probs(5, 4))
    _loss_parity("NLLLoss", (logp, target))
    _loss_parity("NLLLoss", (logp, target), {"weight": torch.tensor([1.0, 2.0, 0.5, 1.5]), "ignore_index": 1})


@pytest.mark.filterwarnings("ignore:reduction")
def test_kl_div_loss():
    logp = np.log(_probs(3, 4))
    q = _probs(3, 4, seed=3)
    for red in ("batchmean", "mean", "sum", "none"):
        check_parity(nn.KLDivLoss(reduction=red), _torch().nn.KLDivLoss(reduction=red), logp, q)
    _loss_parity("KLDivLoss", (logp, np.log(q)), {"log_target": True})


def test_ctc_loss():
    torch = _torch()

    # torch's CTC backward returns the gradient with respect to the logits under the log_softmax
    # (it assumes normalised inputs), so the comparison goes through log_softmax, where both agree.
    def through_log_softmax(lib, loss):
        class M(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.loss = loss

            def forward(self, logits, *rest):
                return self.loss(logits.log_softmax(2), *rest)

        return M()

    T, N, C = 12, 3, 5
    logits = randn(T, N, C)
    targets = np.array([[1, 2, 2, 3], [4, 1, 0, 0], [2, 3, 4, 1]])
    in_lens, tgt_lens = np.array([12, 10, 8]), np.array([4, 2, 3])
    for reduction in ("mean", "sum", "none"):
        check_parity(
            through_log_softmax(flow, nn.CTCLoss(reduction=reduction)),
            through_log_softmax(torch, torch.nn.CTCLoss(reduction=reduction)),
            logits,
            targets,
            in_lens,
            tgt_lens,
            rtol=1e-4,
            atol=1e-5,
        )
    short = np.array([12, 2, 8])  # sample 1 cannot fit its target: infinite loss, zeroed
    check_parity(
        through_log_softmax(flow, nn.CTCLoss(blank=4, zero_infinity=True)),
        through_log_softmax(torch, torch.nn.CTCLoss(blank=4, zero_infinity=True)),
        logits,
        np.array([[1, 2, 2, 3], [0, 1, 2, 0], [2, 3, 0, 1]]),
        short,
        np.array([4, 3, 3]),
        atol=1e-5,
    )


def test_other_losses():
    _torch()
    a, b, c = randn(4, 6), randn(4, 6, seed=1), randn(4, 6, seed=2)
    sign = np.array([1.0, -1.0, 1.0, -1.0], np.float32)
    _loss_parity("MarginRankingLoss", (randn(4), randn(4, seed=1), sign), {"margin": 0.2}, grad_args=(0, 1))
    _loss_parity("CosineEmbeddingLoss", (a, b, sign), {"margin": 0.1}, grad_args=(0, 1))
    _loss_parity("HingeEmbeddingLoss", (a, np.sign(b)), {"margin": 0.5})
    _loss_parity("TripletMarginLoss", (a, b, c), {"margin": 0.5}, grad_args=(0, 1, 2))
    _loss_parity("MultiLabelSoftMarginLoss", (a, (b > 0).astype(np.float32)))
    _loss_parity("PoissonNLLLoss", (a, np.abs(b)))
    _loss_parity("GaussianNLLLoss", (a, b, np.abs(c) + 0.1), grad_args=(0, 2))


def test_loss_repr_and_weight_buffer():
    torch = _torch()
    w = flow.ones(3)
    m = nn.CrossEntropyLoss(weight=w)
    assert m.weight is w and list(m.state_dict()) == ["weight"]
    assert repr(nn.MSELoss()) == repr(torch.nn.MSELoss())


def test_layers_train_with_gradients():
    """A small conv net with every common layer trains (loss decreases) with plain SGD."""
    flow.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, 16),
        nn.GELU(),
        nn.Dropout(0.1),
        nn.Linear(16, 3),
    )
    x = flow.randn(16, 1, 8, 8)
    y = flow.tensor(np.arange(16) % 3)
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    for _ in range(25):
        loss = loss_fn(net(x), y)
        net.zero_grad()
        loss.backward()
        with flow.no_grad():
            for p in net.parameters():
                p.sub_(p.grad * 0.1)
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    assert math.isfinite(losses[-1])
