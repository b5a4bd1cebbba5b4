"""What flow-train does with a batch, per task: how the model is called, the loss, the metrics.

- classification: ``(x, label)``; ``model(x) -> (N, C)``; cross-entropy; accuracy.
- lm: ``(tokens, next tokens)``; ``model(x) -> (N, T, V)``; cross-entropy per token; loss, perplexity.
- recsys: ``(dense, sparse, click)``; ``model(dense, sparse) -> (N,)`` or ``(N, 1)``; BCE with logits; AUC.
- ctc: ``(features (N, C, T), lengths, targets, target lengths)``; ``model(features) -> (N, T', V)``;
  CTC loss; token error rate.

A model may return its output alone, a tuple whose first item is the output (a CTC model may return
``(output, output_lengths)``) or a dict with ``"logits"``.
"""

from __future__ import annotations

import math

import numpy as np

import flow
import flow.nn.functional as F
from flow_models.train.metrics import accuracy, ctc_greedy_decode, edit_distance, perplexity, roc_auc

__all__ = ["Task", "make_task"]


def _ratio(total: float, count: int) -> float:
    """A mean over ``count`` items; nan (never a made-up 0) when there were none."""
    return total / count if count else float("nan")


def _output(out):
    if isinstance(out, dict):
        out = out["logits"] if "logits" in out else next(iter(out.values()))
    return out


def _first(out):
    out = _output(out)
    return out[0] if isinstance(out, (tuple, list)) else out


class Task:
    """One task's loss and metrics. ``metric`` names the headline metric; ``higher_is_better`` its direction."""

    name = ""
    metric = "loss"
    higher_is_better = False

    def loss(self, model, batch) -> tuple[flow.Tensor, int]:
        """(mean loss of the batch, number of samples in it)."""
        raise NotImplementedError

    def new_state(self) -> dict:
        return {"loss_sum": 0.0, "n": 0}

    def update(self, model, batch, state: dict) -> None:
        raise NotImplementedError

    def result(self, state: dict) -> dict:
        raise NotImplementedError


class Classification(Task):
    name = "classification"
    metric = "accuracy"
    higher_is_better = True

    def loss(self, model, batch):
        x, y = batch[0], batch[1]
        return F.cross_entropy(_first(model(x)), y), int(y.shape[0])

    def new_state(self):
        return {"loss_sum": 0.0, "n": 0, "correct": 0}

    def update(self, model, batch, state):
        x, y = batch[0], batch[1]
        logits = _first(model(x))
        n = int(y.shape[0])
        state["loss_sum"] += float(F.cross_entropy(logits, y).item()) * n
        state["correct"] += int(round(accuracy(logits.numpy(), y.numpy()) * n))
        state["n"] += n

    def result(self, state):
        n = state["n"]
        return {"loss": _ratio(state["loss_sum"], n), "accuracy": _ratio(state["correct"], n)}


class LanguageModel(Task):
    name = "lm"
    metric = "loss"

    @staticmethod
    def _loss(logits, y):
        v = logits.shape[-1]
        return F.cross_entropy(logits.reshape(-1, v), y.reshape(-1))

    def loss(self, model, batch):
        x, y = batch[0], batch[1]
        return self._loss(_first(model(x)), y), int(y.shape[0])

    def new_state(self):
        return {"loss_sum": 0.0, "n": 0, "correct": 0}

    def update(self, model, batch, state):
        x, y = batch[0], batch[1]
        logits = _first(model(x))
        tokens = int(np.prod(y.shape))
        state["loss_sum"] += float(self._loss(logits, y).item()) * tokens
        state["correct"] += int(round(accuracy(logits.numpy(), y.numpy()) * tokens))
        state["n"] += tokens

    def result(self, state):
        n = state["n"]
        loss = _ratio(state["loss_sum"], n)
        return {
            "loss": loss,
            "perplexity": perplexity(loss),
            "bits_per_token": loss / math.log(2),
            "accuracy": _ratio(state["correct"], n),
        }


class Recommendation(Task):
    name = "recsys"
    metric = "auc"
    higher_is_better = True

    @staticmethod
    def _logits(model, batch):
        out = _first(model(batch[0], batch[1]))
        return out.reshape(-1)

    def loss(self, model, batch):
        y = batch[2]
        return F.binary_cross_entropy_with_logits(self._logits(model, batch), y.float()), int(y.shape[0])

    def new_state(self):
        return {"scores": [], "labels": []}

    def update(self, model, batch, state):
        state["scores"].append(self._logits(model, batch).numpy().astype(np.float64))
        state["labels"].append(batch[2].numpy())

    def result(self, state):
        s = np.concatenate(state["scores"]) if state["scores"] else np.zeros(0)
        y = np.concatenate(state["labels"]) if state["labels"] else np.zeros(0)
        # log loss from logits, stably: softplus(s) - y * s
        logloss = float(np.mean(np.logaddexp(0.0, s) - y * s)) if len(s) else float("nan")
        return {"loss": logloss, "auc": roc_auc(y, s), "accuracy": float(((s > 0) == (y > 0.5)).mean())}


class CTC(Task):
    """CTC: the model maps features ``(N, C, T)`` to per-frame class scores, batch first ``(N, T', V)``, 0 the blank.

    The output lengths come from the model's ``output_lengths(lengths)`` when it has one.
    """

    name = "ctc"
    metric = "token_error_rate"

    @staticmethod
    def _forward(model, batch):
        feats, feat_len = batch[0], batch[1]
        out = _output(model(feats))
        lens = None
        if isinstance(out, (tuple, list)):
            out, lens = out[0], (out[1] if len(out) > 1 else None)
        t_out = int(out.shape[1])
        if lens is None:
            if hasattr(model, "output_lengths"):
                lens = model.output_lengths(feat_len)
            else:  # the model downsamples time uniformly: scale the lengths
                t_in = int(feats.shape[-1])  # features are channels first: (N, C, T)
                ratio = t_out / t_in
                lens = flow.tensor(np.minimum(np.ceil(feat_len.numpy() * ratio), t_out).astype(np.int64))
        lens = lens if isinstance(lens, flow.Tensor) else flow.tensor(np.asarray(lens, np.int64))
        return F.log_softmax(out, dim=-1), lens

    def loss(self, model, batch):
        log_probs, lens = self._forward(model, batch)
        loss = F.ctc_loss(log_probs.transpose(0, 1), batch[2], lens, batch[3], blank=0, zero_infinity=True)
        return loss, int(batch[2].shape[0])

    def new_state(self):
        return {"loss_sum": 0.0, "n": 0, "errors": 0, "tokens": 0, "exact": 0}

    def update(self, model, batch, state):
        log_probs, lens = self._forward(model, batch)
        n = int(batch[2].shape[0])
        loss = F.ctc_loss(log_probs.transpose(0, 1), batch[2], lens, batch[3], blank=0, zero_infinity=True)
        state["loss_sum"] += float(loss.item()) * n
        hyps = ctc_greedy_decode(log_probs.numpy(), lens.numpy())
        targets, tlen = batch[2].numpy(), batch[3].numpy()
        for hyp, tgt, k in zip(hyps, targets, tlen):
            ref = [int(t) for t in tgt[: int(k)]]
            d = edit_distance(hyp, ref)
            state["errors"] += d
            state["tokens"] += len(ref)
            state["exact"] += d == 0
        state["n"] += n

    def result(self, state):
        n = state["n"]
        return {
            "loss": _ratio(state["loss_sum"], n),
            "token_error_rate": _ratio(state["errors"], state["tokens"]),
            "accuracy": _ratio(state["exact"], n),
        }


_TASKS = {t.name: t for t in (Classification, LanguageModel, Recommendation, CTC)}


def make_task(name: str) -> Task:
    return _TASKS[name]()
