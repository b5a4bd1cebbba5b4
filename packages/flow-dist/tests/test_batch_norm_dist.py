"""The fused batch norm on global tensors: its SBP rules (which signatures each mode offers) in
one process, and ranks/batch_norm.py under mpiexec (batch, channel and spatial splits, a CNN
trained eagerly and compiled, against one process on the whole tensor)."""

from __future__ import annotations

import pytest
from _ranks import needs_mpi, run_ranks

import flow  # noqa: F401  (registers the ops)
from flow.registry import REGISTRY
from flow_dist.rules import B, P, RuleContext, S, as_sig, rule_for


def _sigs(name: str, shapes: list, training: bool) -> list:
    op = REGISTRY.ops[name]
    c = shapes[0][1] if name == "batch_norm" else shapes[1][1]
    outs = [shapes[0 if name == "batch_norm" else 1], (c,), (c,)]
    ctx = RuleContext(op, {"training": training}, shapes, outs, 2, [None] * len(shapes), False, [], [])
    return [as_sig(s) for s in rule_for(name)(ctx)]


X, V = (4, 3, 5, 5), (3,)


@pytest.mark.parametrize("training", [True, False])
def test_forward_signatures(training):
    sigs = {s.ins: s for s in _sigs("batch_norm", [X, V, V, V, V], training)}
    assert sigs[(B,) * 5].outs == (B, B, B)
    assert sigs[(S(1), S(0), S(0), S(0), S(0))].outs == (S(1), S(0), S(0))  # each rank its channels
    for d in (0, 2, 3):  # every other split normalises in place, with the statistics of the whole
        s = sigs[(S(d), B, B, B, B)]
        assert s.outs == (S(d), B, B)
        assert (s.local is not None) == training  # only batch statistics need the all-reduce
    assert len(sigs) == 5  # nothing partial: batch norm is not linear in its input


def test_forward_absent_vectors_stay_absent():
    sigs = _sigs("batch_norm", [X, None, V, None, None], True)
    assert all(s.ins[1] is None and s.ins[3] is None and s.ins[4] is None for s in sigs)


@pytest.mark.parametrize("training", [True, False])
def test_backward_signatures(training):
    sigs = {s.ins: s for s in _sigs("batch_norm_backward", [X, X, V, V, V, V, V], training)}
    assert sigs[(S(1), S(1)) + (S(0),) * 5].outs == (S(1), S(0), S(0))
    s = sigs[(S(0), S(0), B, B, B, B, B)]
    # training: the sums of the input gradient all-reduced, so the weight and bias gradients are whole;
    # evaluation: nothing to reduce for the input gradient, the others are sums over the pieces
    assert s.outs == ((S(0), B, B) if training else (S(0), P, P))
    assert (s.local is not None) == training
    assert sigs[(P, B, B, B, B, P, P)].outs == (P, P, P)  # linear in the cotangents together


def test_both_ops_are_in_the_rule_table():
    for name in ("batch_norm", "batch_norm_backward"):
        assert rule_for(name) is not None, name


@needs_mpi()
@pytest.mark.parametrize("n", [2, 4])  # 4: a 2x2 placement, batch split on one axis and channels on the other
def test_batch_norm_on_global_tensors_equals_one_process(n):
    out = run_ranks("batch_norm.py", n, timeout=120).stdout
    assert "batch norm ok" in out, out
