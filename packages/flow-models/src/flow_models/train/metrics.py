"""Evaluation metrics of flow-train, on NumPy arrays: accuracy, ROC AUC, perplexity, edit distance."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["accuracy", "roc_auc", "perplexity", "unigram_entropy", "edit_distance", "ctc_greedy_decode"]


def accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of rows whose arg-max equals the label."""
    if len(labels) == 0:
        return float("nan")
    return float((np.asarray(logits).argmax(-1) == np.asarray(labels)).mean())


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney U with tied scores sharing their mean rank).

    ``nan`` when only one class is present.
    """
    y = np.asarray(labels).ravel() > 0.5
    s = np.asarray(scores, dtype=np.float64).ravel()
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    sorted_s = s[order]
    ranks = np.empty(len(s), np.float64)
    # average ranks over runs of equal scores
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_s)) + 1]
    ends = np.r_[starts[1:], len(s)]
    avg = (starts + ends + 1) / 2.0  # ranks are 1-based
    ranks[order] = np.repeat(avg, ends - starts)
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def perplexity(mean_nll: float) -> float:
    """exp of the mean negative log-likelihood per token (nats); inf when it overflows."""
    try:
        return math.exp(mean_nll)
    except OverflowError:
        return float("inf")


def unigram_entropy(ids: np.ndarray) -> float:
    """Entropy (nats per token) of the tokens' frequency distribution: the loss a model without context reaches."""
    counts = np.bincount(np.asarray(ids).ravel())
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def edit_distance(a, b) -> int:
    """Levenshtein distance between two sequences."""
    a, b = list(a), list(b)
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    return prev[-1]


def ctc_greedy_decode(log_probs: np.ndarray, lengths: np.ndarray, blank: int = 0) -> list[list[int]]:
    """Best-path CTC decoding of (N, T, C) scores: arg-max per frame, repeats merged, blanks dropped."""
    best = np.asarray(log_probs).argmax(-1)
    out = []
    for row, n in zip(best, np.asarray(lengths)):
        seq, last = [], None
        for k in row[: int(n)]:
            if k != last and k != blank:
                seq.append(int(k))
            last = k
        out.append(seq)
    return out
