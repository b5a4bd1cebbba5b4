"""Array kinds whose process holds only part of the logical array (as a global tensor's rank does):
optimizer states shaped like the ``storage`` and handed over as arrays of the kind
(``with_storage``), and ``grad_for`` laying out a leaf's gradient before it is accumulated."""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow import array_kinds as K
from flow.interceptors import run_op


class PieceArray:
    """A logical array of which this process stores rows ``[0, len(local))`` only."""

    def __init__(self, local: np.ndarray, rows: int) -> None:
        self.local = local
        self.shape = (rows,) + local.shape[1:]
        self.ndim, self.dtype = local.ndim, local.dtype
        self.size = int(np.prod(self.shape))

    @property
    def storage(self):
        return self.local

    def with_storage(self, array):
        return PieceArray(array, self.shape[0])

    def copy(self):
        return PieceArray(self.local.copy(), self.shape[0])

    def __setitem__(self, key, value):
        if isinstance(value, PieceArray):
            value = value.local
        elif np.shape(value)[:1] == self.shape[:1]:  # the logical value: this process's rows of it
            value = np.asarray(value)[: len(self.local)]
        self.local[key] = value

    def grad_for(self, g):
        GRAD_FOR.append(type(g._data).__name__)
        if isinstance(g._data, PieceArray):
            return g
        return K.wrap(PieceArray(np.asarray(g._data)[: len(self.local)].copy(), self.shape[0]), g.device)


GRAD_FOR: list = []


def _local(x):
    if isinstance(x, flow.Tensor) and isinstance(x._data, PieceArray):
        return K.wrap(x._data.local, x.device)
    if x.__class__ in (list, tuple):
        return [_local(t) for t in x]
    return x


def piece_handler(op, inputs, attrs):
    """Every op runs on the stored rows (right for the elementwise and update ops used here)."""
    out = run_op(op, [_local(x) for x in inputs], attrs)
    meta = op.meta(*inputs, **attrs)
    metas = meta if isinstance(meta, tuple) else (meta,)
    outs = out if isinstance(out, tuple) else (out,)
    wrapped = tuple(K.wrap(PieceArray(o._data, m.shape[0]), o.device) for o, m in zip(outs, metas))
    r = wrapped if isinstance(out, tuple) else wrapped[0]
    K.record(op, inputs, attrs, r)
    return r


@pytest.fixture
def pieces():
    K.register_array_kind(PieceArray, piece_handler)
    GRAD_FOR.clear()
    try:
        yield
    finally:
        K.unregister_array_kind(PieceArray)


def test_grad_for_lays_out_the_gradient_before_accumulation(pieces):
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    x = K.wrap(PieceArray(a[:2].copy(), 3), requires_grad=True)
    y = x * x
    y.backward(K.wrap(PieceArray(np.ones((2, 2), np.float32), 3)))
    assert GRAD_FOR == ["PieceArray"]
    np.testing.assert_allclose(x.grad._data.local, 2 * a[:2])
    x.grad = None
    x.backward(flow.ones(3, 2))  # a plain gradient: grad_for turns it into the kind
    assert GRAD_FOR[-1] == "ndarray" and isinstance(x.grad._data, PieceArray)
    np.testing.assert_allclose(x.grad._data.local, np.ones((2, 2)))


@pytest.mark.parametrize("make", [lambda p: flow.optim.SGD(p, lr=0.1, momentum=0.9), lambda p: flow.optim.Adam(p)])
def test_optimizer_states_are_shaped_like_the_storage_and_of_the_kind(pieces, make):
    a = np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2)
    x = K.wrap(PieceArray(a[:2].copy(), 4), requires_grad=True)
    ref = flow.tensor(a[:2].copy(), requires_grad=True)
    opt, ref_opt = make([x]), make([ref])
    for _ in range(3):
        (x * x).backward(K.wrap(PieceArray(np.ones((2, 2), np.float32), 4)))
        opt.step()
        opt.zero_grad()
        (ref * ref).backward(flow.ones(2, 2))
        ref_opt.step()
        ref_opt.zero_grad()
    assert isinstance(x._data, PieceArray) and x.shape == (4, 2)
    np.testing.assert_allclose(x._data.local, ref.detach().numpy(), rtol=1e-6)
    for state in opt.state[x].values():
        if state.ndim:
            assert tuple(
                np.asarray(state._data.local if isinstance(state._data, PieceArray) else state._data).shape
            ) == (2, 2)


def _trained(make, a):
    x = K.wrap(PieceArray(a[:2].copy(), 4), requires_grad=True)
    opt = make([x])
    for _ in range(2):
        (x * x).backward(K.wrap(PieceArray(np.ones((2, 2), np.float32), 4)))
        opt.step()
        opt.zero_grad()
    return x, opt


@pytest.mark.parametrize("make", [lambda p: flow.optim.SGD(p, lr=0.1, momentum=0.9), lambda p: flow.optim.Adam(p)])
def test_state_dict_of_a_kind_parameter_round_trips(pieces, make):
    a = np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2)
    x, opt = _trained(make, a)
    sd = opt.state_dict()
    states = {k: v for k, v in sd["state"][0].items() if k != "step"}
    for v in states.values():  # laid out like the parameter: logical shape, this process's piece
        assert isinstance(v._data, PieceArray) and v.shape == (4, 2) and v._data.local.shape == (2, 2)
    y = K.wrap(PieceArray(x._data.local.copy(), 4), requires_grad=True)
    other = make([y])
    other.load_state_dict(sd)
    for k, v in states.items():
        np.testing.assert_array_equal(other.state[y][k]._data.local, v._data.local)
    # the logical value works too: this process keeps its rows
    logical = {k: np.concatenate([v._data.local, np.full((2, 2), 7.0, np.float32)]) for k, v in states.items()}
    third = make([K.wrap(PieceArray(x._data.local.copy(), 4), requires_grad=True)])
    third.load_state_dict({**sd, "state": {0: {**sd["state"][0], **logical}}})
    for k, v in states.items():
        np.testing.assert_array_equal(next(iter(third.state.values()))[k]._data.local, v._data.local)


def test_state_of_a_kind_parameter_with_the_wrong_shape_is_refused(pieces):
    a = np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2)
    x, opt = _trained(lambda p: flow.optim.SGD(p, lr=0.1, momentum=0.9), a)
    sd = opt.state_dict()
    bad = {**sd, "state": {0: {"momentum_buffer": np.zeros((3, 2), np.float32)}}}
    with pytest.raises(flow.optim.OptimizerError, match=r"has shape \(3, 2\), but the parameter has shape \(4, 2\)"):
        opt.load_state_dict(bad)
