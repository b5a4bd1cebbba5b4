"""Compiled graphs on tensors of an array kind that gives storage / with_storage / layout.

The test kind ("tagged") is the simplest such kind: an array with a tag (its layout), every op run
on the storage by its handler and tagged like its first tagged input. A graph takes tagged inputs
and states (its values are their storages, the tag is on the IR values and in the cache key),
runs the kind's handler while tracing (its calls on the symbolic storages are recorded), and
wraps the outputs in the kind again.
"""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow import array_kinds as K
from flow import nn
from flow.interceptors import run_op


class TaggedArray:
    __slots__ = ("storage", "tag")

    def __init__(self, storage, tag: str) -> None:
        self.storage = storage
        self.tag = tag

    shape = property(lambda self: self.storage.shape)
    dtype = property(lambda self: self.storage.dtype)
    ndim = property(lambda self: len(self.storage.shape))
    size = property(lambda self: self.storage.size)

    def with_storage(self, array) -> "TaggedArray":
        return TaggedArray(array, self.tag)

    def layout(self) -> dict:
        return {"tag": self.tag}

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.storage, dtype=dtype)

    def copy(self) -> "TaggedArray":
        return TaggedArray(self.storage.copy(), self.tag)

    def like(self, host) -> "TaggedArray":
        return TaggedArray(np.array(host), self.tag)

    def __setitem__(self, key, val) -> None:
        self.storage[key] = val.storage if isinstance(val, TaggedArray) else val


CALLS: list = []


def _unwrap(x):
    if isinstance(x, flow.Tensor) and x._data.__class__ is TaggedArray:
        return K.wrap(x._data.storage, x.device, dtype=x.dtype)
    if x.__class__ in (list, tuple):
        return x.__class__(_unwrap(t) for t in x)
    return x


def _tag_of(inputs) -> str:
    for x in inputs:
        for t in x if x.__class__ in (list, tuple) else (x,):
            if isinstance(t, flow.Tensor) and t._data.__class__ is TaggedArray:
                return t._data.tag
    raise AssertionError("no tagged input")


def tagged_handler(op, inputs, attrs):
    CALLS.append(op.name)
    tag = _tag_of(inputs)
    with flow.no_grad():
        r = run_op(op, [_unwrap(x) for x in inputs], attrs)

    def wrap(o):
        if isinstance(o, flow.Tensor):
            if attrs.get("inplace") and any(o is p for p in (inputs[0] if op.name.endswith("update") else ())):
                return o
            return K.wrap(TaggedArray(o._data, tag), o.device, dtype=o.dtype)
        return o

    out = wrap(r) if not isinstance(r, (tuple, list)) else tuple(wrap(o) for o in r)
    K.record(op, inputs, attrs, out)
    return out


@pytest.fixture(autouse=True)
def tagged_kind():
    K.register_array_kind(TaggedArray, tagged_handler)
    yield
    K.unregister_array_kind(TaggedArray)


def tag(t: flow.Tensor, name: str = "t") -> flow.Tensor:
    t.data = K.wrap(TaggedArray(t.detach().numpy().copy(), name), t.device)
    return t


def _model():
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def _batches():
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((5, 4)).astype(np.float32), rng.integers(0, 3, 5)) for _ in range(3)]


def test_a_graph_trains_on_tensors_of_the_kind_like_eager():
    ref_model = _model()
    ref_opt = flow.optim.SGD(ref_model.parameters(), lr=0.1, momentum=0.9)
    ref = []
    for x, y in _batches():
        ref_opt.zero_grad()
        loss = nn.functional.cross_entropy(ref_model(flow.tensor(x)), flow.tensor(y))
        loss.backward()
        ref_opt.step()
        ref.append(loss.item())

    m = _model()
    for p in m.parameters():
        tag(p, "w")
    opt = flow.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = m
            self.add_optimizer(opt)

        def build(self, x, y):
            loss = nn.functional.cross_entropy(self.m(x), y)
            loss.backward()
            return loss

    g = Step()
    got = []
    CALLS.clear()
    for x, y in _batches():
        loss = g(tag(flow.tensor(x), "x"), tag(flow.tensor(y), "x"))
        assert loss._data.__class__ is TaggedArray and loss._data.tag == "x"  # wrapped in the kind again
        got.append(float(np.asarray(loss._data)))
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    assert "linear" in CALLS and "sgd_update" in CALLS  # the handler answered while tracing
    for p, r in zip(m.parameters(), ref_model.parameters()):
        assert p._data.__class__ is TaggedArray  # the states were updated in their storage
        np.testing.assert_allclose(p._data.storage, r.detach().numpy(), rtol=1e-5, atol=1e-6)
    n_traced = len(CALLS)
    for x, y in _batches():
        g(tag(flow.tensor(x), "x"), tag(flow.tensor(y), "x"))
    assert len(CALLS) == n_traced and g.compiles == 1  # compiled: the handler is not called again
    text = str(g.ir)
    assert "{tag='x'} = input input0" in text and "{tag='w'} = state m.0.weight" in text, text
    bwd = [n for n in g.ir.nodes if n.tags.get("phase") == "backward"]
    assert len(bwd) >= 4  # the gradients recorded by the kind's autograd are backward nodes


def test_the_layout_is_part_of_the_signature():
    lin = nn.Linear(3, 2)
    tag(lin.weight, "w")

    class Fwd(nn.Graph):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def build(self, x):
            return self.lin(x)

    g = Fwd()
    x = np.ones((2, 3), dtype=np.float32)
    a = g(tag(flow.tensor(x), "a"))
    b = g(tag(flow.tensor(x), "b"))
    g(tag(flow.tensor(x), "a"))
    assert (a._data.tag, b._data.tag) == ("a", "b") and g.compiles == 2


def test_a_kind_without_storage_is_refused_clearly():
    from flow.graph.symbolic import GraphTraceError

    class Opaque:  # an array kind with the eager protocol only
        def __init__(self, a) -> None:
            self.a = a

        shape = property(lambda self: self.a.shape)
        dtype = property(lambda self: self.a.dtype)

    opaque = Opaque(np.ones((1, 3), dtype=np.float32))
    K.register_array_kind(Opaque, tagged_handler)
    try:

        class G(nn.Graph):
            def build(self, x):
                return x * 2

        x = K.wrap(opaque)
        with pytest.raises(GraphTraceError, match="input 0 is a tensor of array kind Opaque"):
            G()(x)
    finally:
        K.unregister_array_kind(Opaque)
