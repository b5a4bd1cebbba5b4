"""The Tensor API: properties, printing, conversions, copies and views of memory, in-place ops
and version counters."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import flow
from flow.errors import FlowError, OpError, OpIndexError


@pytest.fixture
def x():
    return flow.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])


# -- properties ------------------------------------------------------------------------------------


def test_shape_size_ndim_numel(x):
    assert x.shape == (2, 3) and isinstance(x.shape, flow.Size) and repr(x.shape) == "flow.Size([2, 3])"
    assert x.size() == (2, 3) and x.size(0) == 2 and x.size(-1) == 3
    assert x.ndim == 2 and x.dim() == 2 and x.numel() == 6 and x.nelement() == 6 and flow.numel(x) == 6
    assert x.shape.numel() == 6 and isinstance(x.shape[0:1], flow.Size)
    assert x.dtype is flow.float32 and x.device == flow.device("cpu") and x.device is flow.device("cpu")
    assert x.element_size() == 4 and x.is_floating_point() and not x.is_cuda and not x.is_meta
    assert x.is_leaf and not x.requires_grad and x.grad is None and x.grad_fn is None
    assert len(x) == 2 and x.is_contiguous() and x.stride() == (3, 1) and x.stride(0) == 3
    s = flow.tensor(3.5)
    assert s.shape == () and s.ndim == 0 and s.numel() == 1


def test_size_of_a_bad_dim_names_the_range(x):
    with pytest.raises(OpIndexError, match=r"dim 2 is out of range for a 2-d tensor \(expected -2 <= dim < 2\)"):
        x.size(2)
    with pytest.raises(TypeError, match="len.. of a 0-d tensor"):
        len(flow.tensor(1.0))


def test_T_and_mT(x):
    assert x.T.tolist() == [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]
    assert flow.ones(2, 3, 4).T.shape == (4, 3, 2)
    assert flow.ones(5, 2, 3).mT.shape == (5, 3, 2)
    assert flow.tensor([1.0, 2.0]).T.tolist() == [1.0, 2.0]


# -- printing --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, text",
    [
        (
            lambda: flow.tensor([[4.0, 6.0, 8.0], [10.0, 12.0, 14.0]]),
            "tensor([[ 4.,  6.,  8.],\n        [10., 12., 14.]])",
        ),
        (lambda: flow.tensor([-1.5, 2.25]), "tensor([-1.5000,  2.2500])"),
        (lambda: flow.tensor([1e-5, 1.0]), "tensor([1.0000e-05, 1.0000e+00])"),
        (lambda: flow.tensor([float("nan"), 1.5]), "tensor([   nan, 1.5000])"),
        (lambda: flow.tensor(2.0), "tensor(2.)"),
        (lambda: flow.arange(5), "tensor([0, 1, 2, 3, 4])"),
        (lambda: flow.tensor([True, False]), "tensor([ True, False])"),
        (lambda: flow.ones(2, dtype=flow.float64), "tensor([1., 1.], dtype=flow.float64)"),
        (lambda: flow.ones(2, dtype=flow.bfloat16), "tensor([1., 1.], dtype=flow.bfloat16)"),
        (lambda: flow.tensor([1, 2], dtype=flow.int32), "tensor([1, 2], dtype=flow.int32)"),
        (lambda: flow.tensor([], dtype=flow.int64), "tensor([], dtype=flow.int64)"),
        (lambda: flow.zeros(0, 3), "tensor([], size=(0, 3))"),
        (lambda: flow.ones(2, requires_grad=True), "tensor([1., 1.], requires_grad=True)"),
        (lambda: flow.ones(2, requires_grad=True) * 2, "tensor([2., 2.], grad_fn=<mulBackward>)"),
    ],
)
def test_repr_like_pytorch(make, text):
    assert repr(make()) == text


def test_repr_matches_torch_on_mixed_values():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    for a in [rng.standard_normal((3, 4)), rng.standard_normal(5) * 1000, np.arange(6.0).reshape(2, 3) - 2]:
        a = a.astype(np.float32)
        assert repr(flow.tensor(a)) == repr(torch.tensor(a)).replace("torch.", "flow.")


def test_format_and_python_numbers():
    assert f"{flow.tensor(2.5):.2f}" == "2.50"
    assert float(flow.tensor([2.0])) == 2.0 and int(flow.tensor(3.7)) == 3 and bool(flow.tensor(1.0))
    assert [10, 20, 30][flow.tensor(1)] == 20
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(flow.ones(2))
    with pytest.raises(TypeError, match="integer tensors"):
        [1, 2][flow.tensor(1.0)]


# -- conversions -------------------------------------------------------------------------------------


def test_item_and_tolist(x):
    assert flow.tensor(3.5).item() == 3.5 and isinstance(flow.tensor(3).item(), int)
    assert flow.tensor([True]).item() is True
    assert flow.tensor(1.5, dtype=flow.bfloat16).item() == 1.5
    assert x.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    assert flow.ones(2, dtype=flow.bfloat16).tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="only one-element tensors"):
        x.item()


def test_numpy_shares_memory_both_ways():
    a = np.zeros(3, dtype=np.float32)
    t = flow.from_numpy(a)
    a[0] = 5.0
    assert t.tolist() == [5.0, 0.0, 0.0]
    t.add_(1)
    assert a.tolist() == [6.0, 1.0, 1.0]
    assert t.numpy() is a
    assert np.shares_memory(flow.as_tensor(a).numpy(), a)
    b = flow.ones(2)
    b.numpy()[1] = 7.0
    assert b.tolist() == [1.0, 7.0]
    with pytest.raises(RuntimeError, match="requires grad.*detach"):
        flow.ones(2, requires_grad=True).numpy()
    assert np.array(flow.ones(2)).tolist() == [1.0, 1.0]


def test_from_numpy_keeps_dtype_and_rejects_others():
    for dt in (np.float16, np.float64, np.int8, np.uint8, np.int32, np.bool_):
        assert flow.from_numpy(np.zeros(2, dt)).dtype.np == np.dtype(dt)
    with pytest.raises(TypeError, match="unsupported NumPy dtype complex128"):
        flow.from_numpy(np.zeros(2, np.complex128))
    with pytest.raises(TypeError, match="expected a NumPy array"):
        flow.from_numpy([1, 2])


def test_to_dtype_and_shorthands(x):
    assert x.to(flow.float16).dtype is flow.float16 and x.to("float64").dtype is flow.float64
    assert x.to(dtype=flow.int32).dtype is flow.int32 and x.to(np.float64).dtype is flow.float64
    assert x.half().dtype is flow.float16 and x.float().dtype is flow.float32 and x.double().dtype is flow.float64
    assert x.long().dtype is flow.int64 and x.int().dtype is flow.int32 and x.bool().dtype is flow.bool
    assert x.bfloat16().dtype is flow.bfloat16 and x.short().dtype is flow.int16 and x.byte().dtype is flow.uint8
    assert x.char().dtype is flow.int8
    assert flow.tensor([1.7, -1.7]).long().tolist() == [1, -1]
    assert x.to(flow.ones(1, dtype=flow.float64)).dtype is flow.float64  # like another tensor
    assert x.type() == "flow.FloatTensor" and x.type(flow.int64).dtype is flow.int64
    assert x.type_as(flow.ones(1, dtype=flow.int8)).dtype is flow.int8
    assert x.to(flow.float32) is x and x.to("cpu") is x and x.cpu() is x
    assert x.to(flow.float32, copy=True) is not x


def test_casts_are_differentiable_between_float_dtypes():
    a = flow.tensor([1.0, 2.0], requires_grad=True)
    a.double().sum().backward()
    assert a.grad.dtype is flow.float32 and a.grad.tolist() == [1.0, 1.0]


def test_pickle_and_deepcopy(x):
    y = pickle.loads(pickle.dumps(x))
    assert y.tolist() == x.tolist() and y.dtype is x.dtype
    z = copy.deepcopy(flow.ones(2, requires_grad=True))
    assert z.requires_grad and z.is_leaf


# -- clone / detach --------------------------------------------------------------------------------


def test_clone_copies_memory_and_keeps_history():
    a = flow.tensor([1.0, 2.0], requires_grad=True)
    c = a.clone()
    assert not np.shares_memory(c.detach().numpy(), a.detach().numpy())
    assert c.grad_fn is not None and c.requires_grad and not c.is_leaf
    (c * 3).sum().backward()
    assert a.grad.tolist() == [3.0, 3.0]
    d = flow.ones(2).clone()
    d.add_(1)
    assert d.tolist() == [2.0, 2.0]


def test_detach_shares_memory_and_version_but_drops_history():
    a = flow.tensor([1.0, 2.0], requires_grad=True)
    b = a * 2
    d = b.detach()
    assert np.shares_memory(d.numpy(), b.detach().numpy()) and not d.requires_grad and d.grad_fn is None and d.is_leaf
    d.add_(1)
    assert b.tolist() == [3.0, 5.0] and b._version[0] == 1  # in-place on the detached shows in b
    assert flow.ones(2).data.is_leaf


def test_detach_in_place():
    b = flow.ones(2, requires_grad=True) * 2
    assert b.detach_() is b and b.grad_fn is None and not b.requires_grad


def test_setting_data(x):
    x.data = flow.zeros(4, dtype=flow.float64)
    assert x.shape == (4,) and x.dtype is flow.float64
    with pytest.raises(TypeError, match="must be set to a Tensor"):
        x.data = [1, 2]


# -- in-place ops and versions ----------------------------------------------------------------------


def test_in_place_ops_bump_the_version_and_return_self():
    t = flow.zeros(3)
    v = t._version[0]
    for op in (
        lambda: t.add_(1),
        lambda: t.mul_(3),
        lambda: t.sub_(1),
        lambda: t.div_(2),
        lambda: t.zero_(),
        lambda: t.fill_(2.5),
        lambda: t.copy_(flow.ones(3)),
        lambda: t.clamp_(0, 0.5),
    ):
        assert op() is t
        v += 1
        assert t._version[0] == v
    assert t.tolist() == [0.5, 0.5, 0.5]
    t += 1
    t *= 2
    t -= 1
    t /= 2
    assert t.tolist() == [1.0, 1.0, 1.0] and t._version[0] == v + 4


def test_in_place_values():
    t = flow.tensor([1.0, 2.0])
    assert t.add_(flow.tensor([1.0, 1.0]), alpha=2).tolist() == [3.0, 4.0]
    assert t.mul_(flow.tensor(0.5)).tolist() == [1.5, 2.0]
    assert t.fill_(flow.tensor(7.0)).tolist() == [7.0, 7.0]
    assert t.zero_().tolist() == [0.0, 0.0]


def test_copy_broadcasts_casts_and_keeps_storage():
    t = flow.zeros(2, 3)
    data = t.numpy()
    t.copy_(flow.tensor([1.0, 2.0, 3.0]))
    assert t.tolist() == [[1.0, 2.0, 3.0]] * 2 and t.numpy() is data
    i = flow.zeros(2, dtype=flow.int64)
    assert i.copy_(flow.tensor([1.7, 2.2])).tolist() == [1, 2] and i.dtype is flow.int64
    assert flow.zeros(2).copy_([5, 6]).tolist() == [5.0, 6.0]


def test_in_place_results_must_fit():
    with pytest.raises(OpError, match=r"add_: the result of shape \(2, 3\) does not fit in-place into a tensor of sha"):
        flow.zeros(3).add_(flow.ones(2, 3))
    with pytest.raises(OpError, match="add_: result type flow.float32 cannot be cast to the in-place output type flow"):
        flow.zeros(3, dtype=flow.int64).add_(1.5)


def test_views_share_the_version_counter():
    base = flow.zeros(2, 3)
    v = base.reshape(6)
    t = base.t()
    v.add_(1)
    assert base._version is v._version is t._version and base._version[0] == 1
    assert base.tolist() == [[1.0] * 3] * 2 and t.tolist() == [[1.0, 1.0]] * 3


def test_fill_of_a_read_only_view_is_a_clear_error():
    e = flow.ones(1).expand(3)
    with pytest.raises(OpError, match="fill_"):
        e.fill_(2.0)


def test_hash_and_identity(x):
    assert {x: 1}[x] == 1 and hash(x) == id(x)
    assert isinstance(x == x, flow.Tensor)
    assert flow.is_tensor(x) and not flow.is_tensor([1])


def test_tensor_constructor():
    assert flow.Tensor(2, 3).shape == (2, 3) and flow.Tensor(2, 3).dtype is flow.float32
    assert flow.Tensor([1, 2]).dtype is flow.float32  # flow.Tensor(list) is float, as torch.Tensor
    assert flow.Tensor([1.0], requires_grad=True).requires_grad
    # flow.Tensor(data) has the default dtype whatever the data's (torch.Tensor is FloatTensor)
    for a in (np.ones(2, dtype=np.float64), np.ones(2, dtype=np.int64), np.ones(2, dtype=bool), [True], (1.5, 2)):
        t = flow.Tensor(a)
        assert t.dtype is flow.float32, type(a)
        np.testing.assert_array_equal(t.numpy(), np.asarray(a, dtype=np.float32))
    assert flow.Tensor(np.ones(2), dtype=flow.float64).dtype is flow.float64  # an explicit dtype wins
    assert flow.Tensor(flow.tensor([1, 2])).dtype is flow.int64  # a Tensor keeps its dtype, as in torch
    flow.set_default_dtype(flow.float64)
    try:
        assert flow.Tensor(np.ones(2, dtype=np.float32)).dtype is flow.float64
    finally:
        flow.set_default_dtype(flow.float32)


def test_requires_grad_attribute_follows_pytorchs_rules():
    from flow.errors import AutogradError

    for dt in (flow.int64, flow.int32, flow.uint8, flow.bool):
        x = flow.zeros(3, dtype=dt)
        with pytest.raises(AutogradError, match="only floating-point tensors can require gradients"):
            x.requires_grad = True
        assert x.requires_grad is False
        x.requires_grad = False  # turning it off is always fine
    with pytest.raises(AutogradError, match="expected a bool"):
        flow.zeros(2).requires_grad = 1
    leaf = flow.zeros(2)
    leaf.requires_grad = True
    y = leaf * 2
    for value in (True, False):
        with pytest.raises(AutogradError, match="only leaf tensors can change requires_grad"):
            y.requires_grad = value
    assert y.requires_grad_(True) is y and y.requires_grad  # a no-op on a computed tensor, as in torch
    with pytest.raises(AutogradError, match="only leaf"):
        y.requires_grad_(False)
    assert isinstance(AutogradError("x"), RuntimeError)  # what torch raises


def test_requires_grad_only_for_floating_point():
    with pytest.raises((FlowError, TypeError, RuntimeError), match="floating-point"):
        flow.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="floating-point"):
        flow.ones(2, dtype=flow.int64).requires_grad_()
