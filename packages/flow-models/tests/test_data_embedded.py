"""The embedded datasets (no files, no download) and their registration in the zoo."""

from __future__ import annotations

import numpy as np
import pytest

import flow_models
from flow_models.data import (
    DATASETS,
    DatasetSplits,
    cpython_docs_text,
    load_cpython_docs,
    load_digits,
    load_synthetic_recsys,
    load_synthetic_speech,
    load_synthetic_speech_ctc,
    register_datasets,
    split_indices,
)
from flow_models.train.metrics import roc_auc, unigram_entropy


def test_every_dataset_is_registered_in_the_zoo():
    assert set(DATASETS) <= set(flow_models.list_datasets())
    assert "digits" in flow_models.list_datasets("vision")
    assert flow_models.dataset_info("synthetic-recsys").family == "recsys"
    splits = flow_models.get_dataset("digits")
    assert isinstance(splits, DatasetSplits) and splits.name == "digits"


def test_register_datasets_calls_the_registry_once_per_dataset():
    calls = []

    class Recorder:
        def register_dataset(self, name, factory, family, doc, *, produces=None):
            calls.append((name, family, doc, produces))

    register_datasets(Recorder())
    assert [c[0] for c in calls] == list(DATASETS)
    assert all(doc and family in ("vision", "nlp", "recsys", "speech") for _, family, doc, _ in calls)
    assert all(callable(produces) for *_, produces in calls)  # every dataset declares what it produces


def test_split_indices_is_deterministic_and_disjoint():
    a, b = split_indices(100, 0.2, seed=3)
    c, d = split_indices(100, 0.2, seed=3)
    assert (a == c).all() and (b == d).all() and len(b) == 20
    assert sorted(np.concatenate([a, b]).tolist()) == list(range(100))
    assert not (split_indices(100, 0.2, seed=4)[1] == b).all()


def test_digits():
    s = load_digits()
    assert (len(s.train), len(s.test)) == (1438, 359)
    x, y = s.train[0]
    assert x.shape == (1, 8, 8) and x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
    xs, ys = s.train.arrays
    assert set(np.unique(ys)) == set(range(10)) and set(np.unique(s.test.arrays[1])) == set(range(10))
    again = load_digits()
    np.testing.assert_array_equal(again.test.arrays[0], s.test.arrays[0])
    from sklearn.datasets import load_digits as sk

    ref = sk()
    assert sorted(map(int, np.concatenate([ys, s.test.arrays[1]]))) == sorted(map(int, ref.target))


def test_cpython_docs_is_english_text_from_pydoc_data():
    from pydoc_data.topics import topics

    text = cpython_docs_text()
    assert len(text) > 200_000 and text.count("\n") > 1000
    assert topics["while"].strip()[:40] in text
    s = load_cpython_docs(block_size=64)
    assert s.task == "lm" and s.model_args["block_size"] == 64
    assert s.model_args["vocab_size"] == len(set(text))
    x, y = s.train[0]
    np.testing.assert_array_equal(x[1:], y[:-1])
    ids = s.train.ids
    h = unigram_entropy(ids)
    assert 2.5 < h < 4.0  # nats per character: what a model without context reaches
    small = load_cpython_docs(block_size=16, max_chars=5000)
    assert small.info["tokens"] == 5000


def test_synthetic_recsys_has_a_learnable_planted_signal():
    s = load_synthetic_recsys(samples=6000)
    dense, sparse, label = s.train[0]
    assert dense.shape == (13,) and sparse.shape == (26,) and label.dtype == np.float32
    d, sp, y = s.train.arrays
    sizes = s.model_args["table_sizes"]
    assert len(sizes) == 26 and (sp >= 0).all() and (sp < np.asarray(sizes)).all()
    assert 0.2 < y.mean() < 0.45
    assert s.info["bayes_auc"] >= 0.85
    # a signal a simple model can find: the first dense features alone rank clicks above chance
    w = np.linalg.lstsq(np.c_[d, np.ones(len(d))], y, rcond=None)[0]
    dt, _, yt = s.test.arrays
    assert roc_auc(yt, np.c_[dt, np.ones(len(dt))] @ w) > 0.6
    again = load_synthetic_recsys(samples=6000)
    np.testing.assert_array_equal(again.test.arrays[1], s.test.arrays[1])


def _band_energy(x, rate, freqs):
    spec = np.abs(np.fft.rfft(x, axis=-1))
    f = np.fft.rfftfreq(x.shape[-1], 1 / rate)
    return np.stack([spec[..., (f > lo * 0.9) & (f < lo * 1.1)].sum(-1) for lo in freqs], axis=-1)


def test_synthetic_speech_keywords_carry_their_signature():
    s = load_synthetic_speech(per_class=30)
    x, y = s.train[0]
    assert x.shape == (1, 4000) and x.dtype == np.float32 and s.info["classes"][:2] == ["yes", "no"]
    xs, ys = s.train.arrays
    assert np.bincount(ys).min() > 15
    sigs = np.asarray(s.info["signatures_hz"])
    # each class's two tones carry more energy in its own recordings than in the others'
    energy = _band_energy(xs[:, 0], 8000, sigs.ravel()).reshape(len(xs), len(sigs), 2).sum(-1)
    assert (energy.argmax(1) == ys).mean() > 0.8
    np.testing.assert_array_equal(load_synthetic_speech(per_class=30).test.arrays[0], s.test.arrays[0])


def test_synthetic_speech_ctc_samples():
    s = load_synthetic_speech_ctc(utterances=50, phones=6)
    feats, flen, targets, tlen = s.train[0]
    assert s.task == "ctc" and feats.ndim == 2 and feats.shape[0] == s.model_args["n_features"] == 129
    assert 0 < flen <= feats.shape[1] and 2 <= tlen <= 5
    assert (targets[:tlen] >= 1).all() and (targets[:tlen] <= 6).all() and (targets[tlen:] == 0).all()
    assert s.model_args["vocab_size"] == 7 and s.info["blank"] == 0
    assert (feats[:, flen:] == 0).all()
    wave = load_synthetic_speech_ctc(utterances=10, features="wave")
    assert wave.train[0][0].shape[0] == 1
    with pytest.raises(ValueError, match="features"):
        load_synthetic_speech_ctc(features="mfcc")
