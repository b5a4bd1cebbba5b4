"""Views (flow.ops.views, flow.ops.movement), joining/rearranging (flow.ops.shape_ops) and pad (flow.ops.padding).

References: NumPy always, PyTorch (values and gradients) where importable, opcheck for every op.
"""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow.errors import FlowError, OpError, OpIndexError, OpTypeError
from flow.testing import gradcheck, opcheck

OPS = [
    "reshape",
    "permute",
    "expand",
    "basic_index",
    "basic_index_put",
    "split",
    "unbind",
    "diagonal",
    "diagonal_backward",
    "cat",
    "stack",
    "flip",
    "roll",
    "tril",
    "triu",
    "one_hot",
    "constant_pad",
]


def rand(shape, seed=0, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, size=shape)


def T(a, requires_grad=False, dtype=None):
    t = flow.tensor(np.asarray(a), dtype=dtype)
    return t.requires_grad_(True) if requires_grad else t


def N(t):
    return np.asarray(t.detach().numpy())


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def second_order(fn, a, seed=3):
    """gradcheck of x -> d<fn(x), w>/dx built with create_graph=True (checks the gradient's own gradient)."""
    w = flow.tensor(np.random.default_rng(seed).standard_normal(tuple(fn(a.detach()).shape)))

    def first(x):
        with flow.enable_grad():
            x2 = x if x.requires_grad else x.detach().requires_grad_(True)
            (g,) = flow.autograd.grad((fn(x2) * w).sum(), [x2], create_graph=True)
        return g

    return gradcheck(first, [a])


def check_vs_torch(torch, f_flow, f_torch, *arrays, grad=True, seed=7):
    """Same values and (float64) gradients from flow and PyTorch for inputs built from ``arrays``."""
    fa = [T(a, requires_grad=grad and np.asarray(a).dtype.kind == "f") for a in arrays]
    ta = [torch.tensor(np.asarray(a), requires_grad=grad and np.asarray(a).dtype.kind == "f") for a in arrays]
    fo, to = f_flow(*fa), f_torch(*ta)
    fo = list(fo) if isinstance(fo, (tuple, list)) else [fo]
    to = list(to) if isinstance(to, (tuple, list)) else [to]
    assert len(fo) == len(to)
    for a, b in zip(fo, to):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(N(a), b.detach().numpy(), rtol=1e-10, atol=1e-12)
    if not grad:
        return
    r = np.random.default_rng(seed)
    ws = [r.standard_normal(tuple(b.shape)) for b in to]
    fl = sum((o * flow.tensor(w)).sum() for o, w in zip(fo, ws) if o.requires_grad)
    tl = sum((o * torch.tensor(w)).sum() for o, w in zip(to, ws) if o.requires_grad)
    fl.backward()
    tl.backward()
    for x, y in zip(fa, ta):
        if y.requires_grad:
            gy = y.grad.numpy() if y.grad is not None else np.zeros(y.shape)
            gx = N(x.grad) if x.grad is not None else np.zeros(tuple(x.shape))
            np.testing.assert_allclose(gx, gy, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", OPS)
def test_opcheck(name):
    assert opcheck(name)["samples"] > 0


# ---------------------------------------------------------------------------------------------
# views share storage and the version counter
VIEWS = {
    "select": lambda x: x.select(1, -2),
    "narrow": lambda x: x.narrow(2, 1, 2),
    "split": lambda x: x.split([1, 2], 1)[1],
    "split_int": lambda x: x.split(2, 2)[1],
    "chunk": lambda x: x.chunk(2, 0)[0],
    "tensor_split": lambda x: x.tensor_split(2, 2)[1],
    "unbind": lambda x: x.unbind(2)[3],
    "unflatten": lambda x: x.unflatten(2, (2, 2)),
    "movedim": lambda x: x.movedim(0, -1),
    "diagonal": lambda x: x.diagonal(0, 1, 2),
    "getitem": lambda x: x[1, ::2, None, 1:],
    "getitem_int": lambda x: x[0, 1, 2],
    "ellipsis": lambda x: x[..., 1],
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_views_share_storage_and_version(name):
    x = T(rand((2, 3, 4)))
    base_np = N(x).copy()
    v = VIEWS[name](x)
    assert v._base is x
    assert v._version is x._version
    # write through the view: visible in the base
    v0 = x._version[0]
    v[...] = 42.0
    assert x._version[0] == v0 + 1
    got = N(x)
    assert (got == 42.0).sum() == v.numel()
    assert np.all((got == 42.0) | (got == base_np))
    # write into the base: visible in the view
    x[...] = -1.0
    assert np.all(N(v) == -1.0)
    assert v._version[0] == v0 + 2


def test_view_of_view_links_to_root_base():
    x = T(rand((4, 5)))
    v = x[1:][:, 2]
    assert v._base is x and v._version is x._version
    v.mul_(0.0)
    assert np.all(N(x)[1:, 2] == 0)
    assert x._version[0] == 1


def test_inplace_on_base_invalidates_saved_view_for_backward():
    a = T(rand((3, 4)), requires_grad=True)
    x = a * 1.0
    y = x[0]
    z = (y * y).sum()
    x.add_(1.0)  # bumps the version the mul node saved (through the view's shared counter)
    with pytest.raises(FlowError, match="modified by an in-place operation"):
        z.backward()


VIEW_CASES = [
    ("select", lambda x: x.select(0, 1), lambda x: x.select(0, 1)),
    ("select_neg", lambda x: flow.select(x, -1, -3), lambda x: x.select(-1, -3)),
    ("narrow", lambda x: x.narrow(1, 1, 2), lambda x: x.narrow(1, 1, 2)),
    ("narrow_neg", lambda x: flow.narrow(x, -1, -3, 3), lambda x: x.narrow(-1, -3, 3)),
    ("split_int", lambda x: x.split(2, 2), lambda x: x.split(2, 2)),
    ("split_list", lambda x: flow.split(x, [1, 0, 3], 1), lambda x: x.split([1, 0, 3], 1)),
    ("chunk", lambda x: x.chunk(3, -1), lambda x: x.chunk(3, -1)),
    ("chunk_more", lambda x: flow.chunk(x, 4, 0), lambda x: x.chunk(4, 0)),
    ("tensor_split_n", lambda x: x.tensor_split(3, 2), lambda x: x.tensor_split(3, 2)),
    ("tensor_split_idx", lambda x: x.tensor_split([1, 4, 2], 2), lambda x: x.tensor_split([1, 4, 2], 2)),
    ("unbind", lambda x: x.unbind(1), lambda x: x.unbind(1)),
    ("unbind_neg", lambda x: flow.unbind(x, -1), lambda x: x.unbind(-1)),
    ("unflatten", lambda x: x.unflatten(2, (-1, 1, 5)), lambda x: x.unflatten(2, (-1, 1, 5))),
    ("movedim", lambda x: x.movedim((0, 1), (2, 0)), lambda x: x.movedim((0, 1), (2, 0))),
    ("moveaxis", lambda x: flow.moveaxis(x, -1, 0), lambda x: x.movedim(-1, 0)),
    ("diagonal", lambda x: x.diagonal(), lambda x: x.diagonal()),
    ("diagonal_off", lambda x: x.diagonal(2, 2, 1), lambda x: x.diagonal(2, 2, 1)),
    ("diagonal_neg", lambda x: flow.diagonal(x, -1, -1, 0), lambda x: x.diagonal(-1, -1, 0)),
    ("diagonal_empty", lambda x: x.diagonal(7, 1, 2), lambda x: x.diagonal(7, 1, 2)),
    ("swapdims", lambda x: x.swapdims(0, 2), lambda x: x.swapdims(0, 2)),
]


@pytest.mark.parametrize("name,ff,tf", VIEW_CASES, ids=[c[0] for c in VIEW_CASES])
def test_views_vs_torch(torch, name, ff, tf):
    check_vs_torch(torch, ff, tf, rand((3, 4, 5), seed=3))


def test_views_vs_numpy():
    a = rand((3, 4, 5))
    x = T(a)
    np.testing.assert_array_equal(N(x.select(2, 1)), a[:, :, 1])
    np.testing.assert_array_equal(N(x.narrow(0, 1, 2)), a[1:3])
    for p, r in zip(x.split(2, 1), np.split(a, [2], 1)):
        np.testing.assert_array_equal(N(p), r)
    np.testing.assert_array_equal(N(x.diagonal(1, 0, 2)), np.diagonal(a, 1, 0, 2))
    np.testing.assert_array_equal(N(x.movedim(0, 2)), np.moveaxis(a, 0, 2))
    for p, r in zip(x.unbind(2), np.moveaxis(a, 2, 0)):
        np.testing.assert_array_equal(N(p), r)


def test_chunk_split_edge_cases(torch):
    x = T(np.arange(5.0))
    assert [tuple(c.shape) for c in x.chunk(3)] == [tuple(c.shape) for c in torch.arange(5.0).chunk(3)]
    assert [tuple(c.shape) for c in x.split(5)] == [(5,)]
    assert [tuple(c.shape) for c in x.split(7)] == [(5,)]
    assert len(T(np.zeros((0, 2))).unbind(0)) == 0
    assert [tuple(c.shape) for c in flow.zeros(0).chunk(3)] == [tuple(c.shape) for c in torch.zeros(0).chunk(3)]
    assert [tuple(c.shape) for c in flow.zeros(0).split(2)] == [tuple(c.shape) for c in torch.zeros(0).split(2)]


def test_view_errors():
    x = T(rand((3, 4)))
    with pytest.raises(OpIndexError, match="out of range for dim 1 with size 4"):
        x.select(1, 4)
    with pytest.raises(OpIndexError, match="dim"):
        x.select(2, 0)
    with pytest.raises(OpIndexError, match=r"start \(2\) \+ length \(3\) exceeds the size 4 of dim 1"):
        x.narrow(1, 2, 3)
    with pytest.raises(OpError, match="sum to the size 3"):
        x.split([1, 1], 0)
    with pytest.raises(OpError, match="split_size must be positive"):
        x.split(0)
    with pytest.raises(OpError, match="chunks must be a positive int"):
        x.chunk(0)
    with pytest.raises(OpError, match="do not multiply"):
        x.unflatten(1, (3, 2))
    with pytest.raises(OpError, match="same number of dims"):
        x.movedim((0, 1), (0,))
    with pytest.raises(OpError, match="dim1 and dim2 must differ"):
        x.diagonal(0, 1, -1)
    with pytest.raises(OpError, match="at least 2 dims"):
        T(rand(3)).diagonal()
    with pytest.raises(OpError, match="0-d"):
        T(1.0).unbind()


def test_view_gradients_second_order():
    a = T(rand((3, 4), seed=5), requires_grad=True)
    assert second_order(lambda x: (x.diagonal(1) ** 2).sum() + (x.split(1, 1)[2] ** 3).sum(), a)
    assert gradcheck(lambda x: x.unbind(1)[2] * x.narrow(0, 1, 1).reshape(-1)[:3], [a])


# ---------------------------------------------------------------------------------------------
# cat / stack
def test_cat_stack_vs_numpy_and_promotion():
    a, b = rand((2, 3), 1), rand((4, 3), 2)
    np.testing.assert_array_equal(N(flow.cat([T(a), T(b)])), np.concatenate([a, b]))
    np.testing.assert_array_equal(N(flow.concat((T(a.T), T(b.T)), dim=-1)), np.concatenate([a.T, b.T], -1))
    np.testing.assert_array_equal(N(flow.concatenate([T(a), T(b)], axis=0)), np.concatenate([a, b]))
    out = flow.cat([T(np.ones((2, 2), dtype=np.int64)), T(np.ones((1, 2), dtype=np.float32))])
    assert out.dtype is flow.float32
    assert flow.stack([T(np.ones(2, dtype=np.int32)), T(np.ones(2, dtype=np.int64))]).dtype is flow.int64
    assert flow.stack([T(np.array([True])), T(np.array([2.5]))]).dtype is flow.float64
    np.testing.assert_array_equal(N(flow.stack([T(a), T(a)], 1)), np.stack([a, a], 1))
    np.testing.assert_array_equal(N(flow.stack([T(a), T(a)], -1)), np.stack([a, a], -1))
    # PyTorch's legacy rule: empty 1-d tensors are skipped
    assert tuple(flow.cat([T(a), flow.zeros(0)]).shape) == (2, 3)
    c = flow.cat([T(a)])
    c[0, 0] = 100.0
    assert a[0, 0] != 100.0 and N(flow.cat([T(a)]))[0, 0] == a[0, 0]


def test_cat_stack_vs_torch(torch):
    check_vs_torch(
        torch,
        lambda a, b, c: flow.cat([a, b, c], 1),
        lambda a, b, c: torch.cat([a, b, c], 1),
        rand((2, 1, 3), 1),
        rand((2, 4, 3), 2),
        rand((2, 0, 3), 3),
    )
    check_vs_torch(
        torch,
        lambda a, b: flow.stack((a, b), -2),
        lambda a, b: torch.stack((a, b), -2),
        rand((2, 3), 1),
        rand((2, 3), 2),
    )
    check_vs_torch(torch, lambda a, b: flow.hstack([a, b]), lambda a, b: torch.hstack([a, b]), rand(3, 1), rand(2, 2))
    check_vs_torch(torch, lambda a, b: flow.vstack([a, b]), lambda a, b: torch.vstack([a, b]), rand(3, 1), rand(3, 2))
    check_vs_torch(
        torch, lambda a, b: flow.dstack([a, b]), lambda a, b: torch.dstack([a, b]), rand((2, 3), 1), rand((2, 3), 2)
    )
    check_vs_torch(
        torch,
        lambda a, b: flow.column_stack([a, b]),
        lambda a, b: torch.column_stack([a, b]),
        rand(3, 1),
        rand((3, 2), 2),
    )
    # an int tensor in the list gets no gradient, the float one does
    check_vs_torch(
        torch,
        lambda a, b: flow.cat([a, b]),
        lambda a, b: torch.cat([a, b]),
        rand((2, 2), 1),
        np.arange(4).reshape(2, 2),
    )


def test_cat_stack_errors():
    with pytest.raises(OpError, match=r"sizes of tensors must match except in dim 1.*tensor 1 has shape \(4, 4\)"):
        flow.cat([flow.zeros(2, 3), flow.zeros(4, 4)], 1)
    with pytest.raises(OpError, match="same number of dims"):
        flow.cat([flow.zeros(2, 3), flow.zeros(2, 3, 1)])
    with pytest.raises(OpError, match="non-empty"):
        flow.cat([])
    with pytest.raises(OpTypeError, match="single Tensor"):
        flow.cat(flow.zeros(2))
    with pytest.raises(OpError, match="zero-dimensional"):
        flow.cat([flow.tensor(1.0), flow.tensor(2.0)])
    with pytest.raises(OpIndexError, match="'dim'=2 is out of range"):
        flow.cat([flow.zeros(2, 3)], 2)
    with pytest.raises(OpError, match=r"stack: expects each tensor to have the same shape, got \(2, 3\).*\(3, 2\)"):
        flow.stack([flow.zeros(2, 3), flow.zeros(3, 2)])
    with pytest.raises(OpTypeError, match="element 1 is int"):
        flow.stack([flow.zeros(2), 3])


# ---------------------------------------------------------------------------------------------
# repeat / tile / flip / roll / tril / triu / rot90 / repeat_interleave
REARRANGE = [
    ("repeat", lambda x: x.repeat(2, 1, 3), lambda x: x.repeat(2, 1, 3)),
    ("repeat_more", lambda x: x.repeat(2, 1, 1, 2), lambda x: x.repeat(2, 1, 1, 2)),
    ("repeat_ones", lambda x: x.repeat(1, 1, 1), lambda x: x.repeat(1, 1, 1)),
    ("repeat_zero", lambda x: x.repeat(1, 0, 1), lambda x: x.repeat(1, 0, 1)),
    ("tile", lambda x: flow.tile(x, (2,)), lambda x: torch_mod().tile(x, (2,))),
    ("tile_method", lambda x: x.tile(2, 1, 1, 1), lambda x: x.tile(2, 1, 1, 1)),
    ("flip", lambda x: x.flip(0, 2), lambda x: x.flip(0, 2)),
    ("flip_fn", lambda x: flow.flip(x, [-1]), lambda x: torch_mod().flip(x, [-1])),
    ("fliplr", lambda x: x.fliplr(), lambda x: x.fliplr()),
    ("flipud", lambda x: flow.flipud(x), lambda x: x.flipud()),
    ("roll", lambda x: x.roll(1), lambda x: x.roll(1)),
    ("roll_dims", lambda x: flow.roll(x, (1, -2), (0, 2)), lambda x: x.roll((1, -2), (0, 2))),
    ("tril", lambda x: x.tril(), lambda x: x.tril()),
    ("tril_k", lambda x: flow.tril(x, -1), lambda x: x.tril(-1)),
    ("triu", lambda x: x.triu(1), lambda x: x.triu(1)),
    ("triu_neg", lambda x: flow.triu(x, -2), lambda x: x.triu(-2)),
    ("rot90", lambda x: x.rot90(1, (1, 2)), lambda x: x.rot90(1, (1, 2))),
    ("rot90_2", lambda x: flow.rot90(x, 2), lambda x: x.rot90(2)),
    ("rot90_3", lambda x: flow.rot90(x, -1, (0, 2)), lambda x: x.rot90(-1, (0, 2))),
    ("repeat_interleave", lambda x: x.repeat_interleave(2, 1), lambda x: x.repeat_interleave(2, 1)),
    ("repeat_interleave_flat", lambda x: flow.repeat_interleave(x, 2), lambda x: x.repeat_interleave(2)),
    (
        "repeat_interleave_t",
        lambda x: x.repeat_interleave(flow.tensor([1, 0, 2]), 1),
        lambda x: x.repeat_interleave(torch_mod().tensor([1, 0, 2]), 1),
    ),
    ("diagonal_embed", lambda x: flow.diag_embed(x), lambda x: torch_mod().diag_embed(x)),
    ("diag_embed_off", lambda x: x.diag_embed(-1, 0, 2), lambda x: x.diag_embed(-1, 0, 2)),
]


def torch_mod():
    import torch

    return torch


@pytest.mark.parametrize("name,ff,tf", REARRANGE, ids=[c[0] for c in REARRANGE])
def test_rearrange_vs_torch(torch, name, ff, tf):
    check_vs_torch(torch, ff, tf, rand((2, 3, 4), seed=4))


def test_rearrange_vs_numpy_and_copies():
    a = rand((2, 3), 1)
    x = T(a)
    np.testing.assert_array_equal(N(x.repeat(2, 2)), np.tile(a, (2, 2)))
    np.testing.assert_array_equal(N(flow.tile(x, (2, 1, 1))), np.tile(a, (2, 1, 1)))
    np.testing.assert_array_equal(N(x.flip(1)), a[:, ::-1])
    np.testing.assert_array_equal(N(x.roll(2, 1)), np.roll(a, 2, 1))
    np.testing.assert_array_equal(N(x.tril(1)), np.tril(a, 1))
    np.testing.assert_array_equal(N(x.triu(-1)), np.triu(a, -1))
    # the results are copies, never views of the input
    for out in (x.repeat(1, 1), x.flip(0), x.roll(1), x.tril(), T(rand(1)).repeat(3), x.rot90(0)):
        out[...] = 7.0
    np.testing.assert_array_equal(N(x), a)
    assert flow.repeat_interleave(flow.tensor([2, 0, 1])).tolist() == [0, 0, 2]


def test_tril_triu_inplace_and_int():
    x = T(np.arange(9).reshape(3, 3))
    assert flow.tril(x).dtype is flow.int64
    y = T(rand((3, 3)))
    y.triu_(1)
    assert N(y)[1, 0] == 0 and y._version[0] == 1
    y.tril_(-5)
    assert np.all(N(y) == 0)


def test_rearrange_errors():
    x = T(rand((2, 3)))
    with pytest.raises(OpError, match="can not be smaller"):
        x.repeat(2)
    with pytest.raises(OpError, match="non-negative"):
        x.repeat(2, -1)
    with pytest.raises(OpIndexError, match="out of range"):
        x.flip(2)
    with pytest.raises(OpError, match="names a dimension twice"):
        x.flip(0, 0)
    with pytest.raises(OpError, match="same length"):
        flow.roll(x, (1, 2), (0,))
    with pytest.raises(OpError, match="at least 2-d"):
        T(rand(3)).tril()
    with pytest.raises(OpError, match="1 or 3 elements"):
        x.repeat_interleave(flow.tensor([1, 2]), 1)


# ---------------------------------------------------------------------------------------------
# pad
PADS = [
    ((1, 2), "constant"),
    ((2, 1, 1, 0), "constant"),
    ((1, -1, -1, 2), "constant"),
    ((0, 0, 0, 0, 1, 1), "constant"),
    ((2, 1), "reflect"),
    ((1, 2, 2, 1), "reflect"),
    ((3, 0), "replicate"),
    ((1, 2, 3, 1), "replicate"),
    ((2, 3), "circular"),
    ((1, 2, 3, 0), "circular"),
]


@pytest.mark.parametrize("pad,mode", PADS)
def test_pad_vs_torch(torch, pad, mode):
    import torch.nn.functional as F

    kw = {"value": 1.5} if mode == "constant" else {}
    # PyTorch's non-constant modes want (N, C, *spatial) inputs with one spatial dim per padded dim
    shape = (2, 3, 4, 5) if mode == "constant" else (2, 3, 4, 5)[: 2 + len(pad) // 2]
    check_vs_torch(
        torch,
        lambda x: flow.pad(x, pad, mode=mode, **kw),
        lambda x: F.pad(x, pad, mode=mode, **kw),
        rand(shape, seed=6),
    )


@pytest.mark.parametrize("pad,mode", PADS[:2] + [((2, 1), "reflect"), ((3, 0), "replicate"), ((2, 3), "circular")])
def test_pad_vs_numpy(pad, mode):
    a = rand((3, 4), seed=2)
    widths = [(0, 0)] * (2 - len(pad) // 2) + [(pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)][::-1]
    npmode = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    np.testing.assert_array_equal(N(flow.pad(T(a), pad, mode=mode)), np.pad(a, widths, mode=npmode))


def test_pad_second_order_and_int():
    a = T(rand((3, 4), seed=2), requires_grad=True)
    assert second_order(lambda x: flow.pad(x, (1, 2), mode="reflect") ** 2, a)
    assert second_order(lambda x: flow.pad(x, (1, -1, 0, 2), value=0.5) ** 3, a)
    xi = flow.pad(flow.tensor([[1, 2]]), (1, 1), value=9)
    assert xi.dtype is flow.int64 and xi.tolist() == [[9, 1, 2, 9]]


def test_pad_errors():
    x = T(rand((2, 3)))
    with pytest.raises(OpError, match="even length"):
        flow.pad(x, (1, 2, 3))
    with pytest.raises(OpError, match="pads 3 dims but the input has only 2"):
        flow.pad(x, (1, 1, 1, 1, 1, 1))
    with pytest.raises(OpError, match="must be less than the size 3 of dim 1"):
        flow.pad(x, (3, 0), mode="reflect")
    with pytest.raises(OpError, match="wrap around more than once"):
        flow.pad(x, (4, 0), mode="circular")
    with pytest.raises(OpError, match="mode must be"):
        flow.pad(x, (1, 1), mode="wrap")
    with pytest.raises(OpError, match="negative size"):
        flow.pad(x, (-2, -2))
    with pytest.raises(OpError, match="only supported in constant mode"):
        flow.pad(x, (-1, 0), mode="replicate")


# ---------------------------------------------------------------------------------------------
# broadcast_to / broadcast_tensors / meshgrid / diag / one_hot
def test_broadcast_vs_numpy_and_views():
    a = rand((3, 1), 1)
    x = T(a)
    b = flow.broadcast_to(x, (2, 3, 4))
    np.testing.assert_array_equal(N(b), np.broadcast_to(a, (2, 3, 4)))
    assert b._base is x and b._version is x._version
    assert tuple(x.broadcast_to((-1, 5)).shape) == (3, 5)
    p, q = flow.broadcast_tensors(T(rand(4)), x)
    assert tuple(p.shape) == tuple(q.shape) == (3, 4)
    assert tuple(flow.broadcast_shapes((3, 1), (1, 4))) == (3, 4)
    with pytest.raises(OpError, match=r"broadcast_to: cannot broadcast shape \(3, 1\) to \(4, 2\)"):
        flow.broadcast_to(x, (4, 2))
    with pytest.raises(OpError, match="cannot be broadcast"):
        flow.broadcast_tensors(T(rand(3)), T(rand(4)))


def test_broadcast_vs_torch(torch):
    check_vs_torch(
        torch,
        lambda x, y: flow.broadcast_tensors(x, y),
        lambda x, y: torch.broadcast_tensors(x, y),
        rand((3, 1), 1),
        rand((2, 1, 4), 2),
    )
    check_vs_torch(
        torch, lambda x: flow.broadcast_to(x, (2, 3, 4)), lambda x: torch.broadcast_to(x, (2, 3, 4)), rand((3, 1), 1)
    )


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_vs_torch(torch, indexing):
    check_vs_torch(
        torch,
        lambda a, b, c: flow.meshgrid(a, b, c, indexing=indexing),
        lambda a, b, c: torch.meshgrid(a, b, c, indexing=indexing),
        rand(2, 1),
        rand(3, 2),
        rand(4, 3),
    )
    check_vs_torch(
        torch,
        lambda a, b: flow.meshgrid([a, b], indexing=indexing),
        lambda a, b: torch.meshgrid([a, b], indexing=indexing),
        rand(2, 1),
        rand(3, 2),
    )
    ga, gb = flow.meshgrid(T(np.arange(2.0)), T(np.arange(3.0)), indexing=indexing)
    na, nb = np.meshgrid(np.arange(2.0), np.arange(3.0), indexing=indexing)
    np.testing.assert_array_equal(N(ga), na)
    np.testing.assert_array_equal(N(gb), nb)
    with pytest.raises(OpError, match="indexing must be"):
        flow.meshgrid(T(rand(2)), indexing="ji")


def test_diag_vs_torch(torch):
    for k in (0, 2, -1):
        check_vs_torch(torch, lambda v, k=k: flow.diag(v, k), lambda v, k=k: torch.diag(v, k), rand(3, 1))
        check_vs_torch(torch, lambda m, k=k: m.diag(k), lambda m, k=k: m.diag(k), rand((3, 4), 2))
        check_vs_torch(torch, lambda m, k=k: flow.diagflat(m, k), lambda m, k=k: torch.diagflat(m, k), rand((2, 2)))
    np.testing.assert_array_equal(N(flow.diag(T(np.arange(3.0)), 1)), np.diag(np.arange(3.0), 1))
    with pytest.raises(OpError, match="1-d or 2-d"):
        flow.diag(T(rand((2, 2, 2))))


def test_one_hot(torch):
    import torch.nn.functional as F

    idx = np.array([[0, 3], [2, 1]])
    np.testing.assert_array_equal(N(flow.one_hot(T(idx))), F.one_hot(torch.tensor(idx)).numpy())
    out = flow.one_hot(T(idx), 6)
    assert out.dtype is flow.int64 and tuple(out.shape) == (2, 2, 6)
    np.testing.assert_array_equal(N(out), np.eye(6, dtype=np.int64)[idx])
    with pytest.raises(OpIndexError, match="class value 3 is out of range for num_classes=3"):
        flow.one_hot(T(idx), 3)
    with pytest.raises(OpIndexError, match="class value -1"):
        flow.one_hot(T(np.array([-1, 0])), 3)
    with pytest.raises(OpTypeError, match="int64 tensor"):
        flow.one_hot(T(rand(3)))
    with pytest.raises(OpError, match="empty tensor"):
        flow.one_hot(T(np.zeros(0, dtype=np.int64)))
