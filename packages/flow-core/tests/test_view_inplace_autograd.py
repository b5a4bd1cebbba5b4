"""Gradients through in-place writes into views (the base's history is rebased, stale views re-read it).

Every in-place entry point (constant fills, copies of values with history, arithmetic, random fills,
index-family writes, item assignment) is run on every kind of view (basic index, strided slice,
transpose, diagonal, reshape, split, unbind, narrow, permute), and the gradients of every tensor
that requires grad are compared with PyTorch's running the same code (or both refuse it).
"""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow.errors import AutogradError

torch = pytest.importorskip("torch")

VIEWS = {
    "select": "y[1]",
    "slice_step": "y[:, ::2]",
    "transpose": "y.t()[1:3]",
    "diagonal": "y.diagonal()",
    "reshape": "y.reshape(12)[2:8]",
    "view_of_view": "y[1:][0, 1:]",
    "split": "y.split(1, dim=0)[2]",
    "unbind": "y.unbind(1)[3]",
    "narrow": "y.narrow(1, 1, 2)",
    "permute": "y.permute(1, 0)[2]",
}
# PyTorch refuses writes into the outputs of split/unbind (views of a multi-output function); flow
# tracks them like any view, so they are compared with the same elements taken by indexing.
TORCH_VIEWS = {"split": "y[2:3]", "unbind": "y[:, 3]"}

WRITES = {
    "fill_": "v.fill_(0.5)",
    "zero_": "v.zero_()",
    "copy_": "v.copy_(w.expand_as(v) * 3)",
    "copy_const": "v.copy_(lib.ones_like(v) * 7)",
    "mul_": "v.mul_(w.expand_as(v))",
    "add_": "v.add_(v * w.expand_as(v))",
    "div_scalar": "v.div_(4)",
    "clamp_": "v.clamp_(min=1.5)",
    "exp_": "v.exp_()",
    "setitem": "v[...] = w.expand_as(v) ** 2",
    "masked_fill_": "v.masked_fill_(v > 1.7, 0.0)",
}


def _run(lib, view: str, write: str):
    lib.manual_seed(0)
    base = lib.linspace(0.5, 2.5, 12, dtype=lib.float64).reshape(3, 4)
    a = base.clone().requires_grad_(True)
    w = lib.tensor([1.5], dtype=lib.float64, requires_grad=True)
    y = a * 2
    v = eval(view, {"y": y})
    exec(write, {"v": v, "w": w, "lib": lib})
    loss = (y * y).sum() + (v * 3).sum()
    loss.backward()
    return y.detach().numpy(), a.grad.numpy(), None if w.grad is None else w.grad.numpy()


@pytest.mark.parametrize("write", sorted(WRITES))
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_writes_into_views_give_pytorchs_gradients(view, write):
    try:
        want = _run(torch, TORCH_VIEWS.get(view, VIEWS[view]), WRITES[write])
    except RuntimeError as e:  # a saved input was overwritten: flow must refuse it as well
        assert "modified by an inplace operation" in str(e)
        with pytest.raises(AutogradError, match="modified by an in-place operation"):
            _run(flow, VIEWS[view], WRITES[write])
        return
    got = _run(flow, VIEWS[view], WRITES[write])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    if want[2] is None or not want[2].any():
        assert got[2] is None or not got[2].any()
    else:
        np.testing.assert_allclose(got[2], want[2], rtol=1e-12)


def test_zeroed_rows_pass_no_gradient():
    a = flow.ones(2, 3, requires_grad=True)
    y = a * 2
    y[0].zero_()
    y.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [[0, 0, 0], [2, 2, 2]])


def test_a_write_into_a_view_of_a_constant_brings_the_value_s_history():
    w = flow.ones(3, requires_grad=True)
    buf = flow.zeros(2, 3)
    buf[0].copy_(w * 3)
    assert buf.requires_grad
    buf.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [3, 3, 3])


def test_a_view_taken_before_the_base_was_written_reads_the_new_base():
    a = flow.ones(2, 3, requires_grad=True)
    y = a * 2
    v = y[0]
    y.mul_(2)
    v.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [[4, 4, 4], [0, 0, 0]])


def test_backward_from_a_stale_view_itself():
    a = flow.ones(2, 3, requires_grad=True)
    y = a * 2
    v = y[1]
    y.mul_(3)
    v.backward(flow.ones(3))
    np.testing.assert_array_equal(a.grad.numpy(), [[0, 0, 0], [6, 6, 6]])


def test_sibling_views_see_each_others_writes():
    a = flow.ones(2, 3, requires_grad=True)
    y = a * 2
    col = y[:, 0]
    y[0].mul_(5)
    col.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [[10, 0, 0], [2, 0, 0]])


def test_double_backward_through_a_write_into_a_view():
    x = flow.tensor([1.0, 2.0, 3.0], dtype=flow.float64, requires_grad=True)
    y = x * 1
    y[1:].mul_(x[1:])  # y = [x0, x1^2, x2^2]
    (g,) = flow.autograd.grad((y**2).sum(), x, create_graph=True)  # [2 x0, 4 x1^3, 4 x2^3]
    np.testing.assert_allclose(g.detach().numpy(), [2, 32, 108])
    (h,) = flow.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(h.numpy(), [2, 48, 108])


@pytest.mark.parametrize(
    "write",
    [
        "p[0].fill_(5)",
        "p[0].zero_()",
        "p[:, 1].copy_(flow.ones(2))",
        "p[0].mul_(2)",
        "p[1].normal_()",
        "p.t()[0].add_(1)",
    ],
)
def test_a_view_of_a_leaf_that_requires_grad_is_refused_before_anything_changes(write):
    p = flow.nn.Parameter(flow.arange(6.0).reshape(2, 3))
    before = p.detach().numpy().copy()
    with pytest.raises(AutogradError, match="a view of a leaf tensor that requires grad"):
        exec(write, {"p": p, "flow": flow})
    np.testing.assert_array_equal(p.detach().numpy(), before)
    assert p.is_leaf and p.grad_fn is None
    with flow.no_grad():
        exec(write, {"p": p, "flow": flow})  # initialisation code does this under no_grad
    assert p.is_leaf and p.requires_grad


def test_an_expanded_view_is_refused_as_in_pytorch():
    a = flow.ones(1, 3, requires_grad=True)
    y = a * 2
    v = y.expand(4, 3)
    with pytest.raises(AutogradError, match="more than one element of the written-to view"):
        v.mul_(2)


def test_a_detached_alias_is_no_differentiable_view():
    a = flow.ones(2, 3, requires_grad=True)
    y = a * 2
    y.detach()[0].zero_()  # writes the storage; y's history is left as it is (as in PyTorch)
    w = flow.ones(3, requires_grad=True)
    history = y.grad_fn
    d = y.detach()
    d[1].copy_(w * 4)
    assert y.grad_fn is history and d.requires_grad  # the alias took the write's history, not y
    y.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.full((2, 3), 2.0))
    assert w.grad is None


def test_no_grad_writes_keep_the_history():
    a = flow.ones(2, 3, requires_grad=True)
    y = a * 2
    with flow.no_grad():
        y[0].fill_(0)
    y.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.full((2, 3), 2.0))  # PyTorch gives the same


def test_a_base_in_fortran_order():
    y = flow.from_numpy(np.asfortranarray(np.arange(12.0).reshape(3, 4)))
    assert not y._data.flags.c_contiguous  # positions are read through the base's own strides
    w = flow.tensor([1.0, 2.0, 3.0], dtype=flow.float64, requires_grad=True)
    y[:, 1].copy_(w * 2)
    coef = flow.arange(12.0, dtype=flow.float64).reshape(3, 4)
    (y * coef).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), 2 * coef.numpy()[:, 1])
    np.testing.assert_array_equal(y.detach().numpy()[:, 1], [2, 4, 6])
