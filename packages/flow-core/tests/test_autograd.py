"""Autograd: accumulation, seeds, retain_graph, higher order, flow.autograd.grad, grad modes,
hooks, custom Functions, deep graphs, and the errors for in-place changes."""

from __future__ import annotations

import numpy as np
import pytest

import flow
from flow.errors import FlowError
from flow.testing import gradcheck, gradgradcheck


def _t(values, **kw):
    return flow.tensor(values, dtype=flow.float64, requires_grad=True, **kw)


# -- basics ----------------------------------------------------------------------------------------


def test_gradients_accumulate_over_backward_calls():
    x = _t([1.0, 2.0, 3.0])
    (x * x).sum().backward()
    (x * x).sum().backward()
    assert x.grad.tolist() == [4.0, 8.0, 12.0]
    x.grad.zero_()
    (x * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0, 3.0]


def test_backward_with_an_explicit_gradient():
    x = _t([1.0, 2.0, 3.0])
    y = x * 2
    y.backward(gradient=flow.tensor([1.0, 0.5, 0.0], dtype=flow.float64))
    assert x.grad.tolist() == [2.0, 1.0, 0.0]
    x.grad = None
    flow.autograd.backward([x * 1, x * 2], [flow.ones(3, dtype=flow.float64), flow.ones(3, dtype=flow.float64)])
    assert x.grad.tolist() == [3.0, 3.0, 3.0]
    with pytest.raises(RuntimeError, match=r"implicitly created only for scalar outputs.*\(3,\)"):
        (x * 2).backward()
    with pytest.raises(RuntimeError, match=r"gradient has shape \(2,\) but the output has shape \(3,\)"):
        (x * 2).backward(flow.ones(2))


def test_the_gradient_passed_in_is_never_aliased_by_grad():
    g = flow.ones(2)
    a = flow.ones(2, requires_grad=True)
    (a + 0).backward(g)
    (a + 0).backward(g)
    assert g.tolist() == [1.0, 1.0] and a.grad.tolist() == [2.0, 2.0]


def test_two_leaves_fed_by_one_gradient_get_their_own_memory():
    a, b = flow.ones(2, requires_grad=True), flow.ones(2, requires_grad=True)
    (a + b).sum().backward()
    assert not np.shares_memory(a.grad.numpy(), b.grad.numpy())
    a.grad.mul_(10)
    assert b.grad.tolist() == [1.0, 1.0]


def test_backward_on_a_leaf_and_on_non_float_outputs():
    x = flow.ones(2, requires_grad=True)
    x.backward(flow.tensor([2.0, 3.0]))
    assert x.grad.tolist() == [2.0, 3.0]
    with pytest.raises(FlowError, match="does not require grad"):
        flow.ones(2).sum().backward()
    assert not (x > 0).requires_grad  # comparisons are not differentiable


def test_second_backward_without_retain_graph_is_an_error():
    x = _t([1.0, 2.0])
    y = (x.exp() * x).sum()
    y.backward()
    with pytest.raises(FlowError, match="backward through the graph a second time.*retain_graph=True"):
        y.backward()


def test_retain_graph_allows_a_second_backward():
    x = _t([1.0, 2.0])
    y = (x.exp() * x).sum()
    y.backward(retain_graph=True)
    first = x.grad.clone()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first.numpy())


def test_backward_inputs_accumulates_only_into_those():
    a, b = flow.ones(2, requires_grad=True), flow.ones(2, requires_grad=True)
    (a * b * 2).sum().backward(inputs=[a])
    assert a.grad.tolist() == [2.0, 2.0] and b.grad is None
    h = a * 3
    h.retain_grad()
    (h * b).sum().backward(inputs=[b])
    assert b.grad.tolist() == [3.0, 3.0] and a.grad.tolist() == [2.0, 2.0]


# -- higher order ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, f, d2",
    [
        ("mul", lambda t: t * t * t, lambda t: 6 * t),
        ("pow", lambda t: t**3, lambda t: 6 * t),
        ("div", lambda t: 1 / t, lambda t: 2 / t**3),
        ("exp", lambda t: t.exp(), lambda t: t.exp()),
        ("log", lambda t: t.log(), lambda t: -1 / t**2),
        ("sin", lambda t: t.sin(), lambda t: -t.sin()),
        ("cos", lambda t: t.cos(), lambda t: -t.cos()),
        ("tanh", lambda t: t.tanh(), lambda t: -2 * t.tanh() * (1 - t.tanh() ** 2)),
        ("sigmoid", lambda t: t.sigmoid(), lambda t: t.sigmoid() * (1 - t.sigmoid()) * (1 - 2 * t.sigmoid())),
        ("sqrt", lambda t: t.sqrt(), lambda t: -0.25 * t**-1.5),
        ("square", lambda t: t.square(), lambda t: 2 + 0 * t),
    ],
)
def test_second_derivatives_with_create_graph(name, f, d2):
    x = _t([0.5, 1.5, 2.0])
    (g,) = flow.autograd.grad(f(x).sum(), x, create_graph=True)
    assert g.requires_grad and g.grad_fn is not None
    (g2,) = flow.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(g2.numpy(), d2(x.detach()).numpy(), rtol=1e-10)


def test_third_order_and_gradgradcheck():
    x = _t([0.3, 0.7])
    (g1,) = flow.autograd.grad((x**4).sum(), x, create_graph=True)
    (g2,) = flow.autograd.grad(g1.sum(), x, create_graph=True)
    (g3,) = flow.autograd.grad(g2.sum(), x)
    np.testing.assert_allclose(g3.numpy(), 24 * x.detach().numpy())
    a, b = _t([[0.5, -1.0], [2.0, 0.1]]), _t([[1.5, 0.2], [-0.3, 0.8]])
    assert gradcheck(lambda p, q: (p @ q).tanh() * p, [a, b])
    assert gradgradcheck(lambda p, q: (p * q).exp().sum(), [a, b])


def test_backward_with_create_graph_builds_a_differentiable_grad():
    x = _t([1.0, 2.0])
    (x**3).sum().backward(create_graph=True)
    assert x.grad.requires_grad
    (gg,) = flow.autograd.grad(x.grad.sum(), x)
    assert gg.tolist() == [6.0, 12.0]


# -- flow.autograd.grad ------------------------------------------------------------------------------


def test_grad_returns_and_does_not_accumulate():
    a, b = _t([1.0]), _t([2.0])
    ga, gb = flow.autograd.grad((a * b).sum(), [a, b])
    assert ga.tolist() == [2.0] and gb.tolist() == [1.0] and a.grad is None and b.grad is None


def test_grad_allow_unused_and_materialize():
    a, b = _t([1.0]), _t([2.0])
    assert flow.autograd.grad((a * 2).sum(), [a, b], allow_unused=True)[1] is None
    with pytest.raises(FlowError, match=r"inputs\[1\] was not used.*allow_unused=True"):
        flow.autograd.grad((a * 2).sum(), [a, b])
    _, gb = flow.autograd.grad((a * 2).sum(), [a, b], materialize_grads=True)
    assert gb.tolist() == [0.0]


def test_grad_with_respect_to_intermediate_tensors():
    x = _t([1.0, 2.0])
    y = x * 2
    z = (y * y).sum()
    (gy,) = flow.autograd.grad(z, y, retain_graph=True)
    assert gy.tolist() == [4.0, 8.0]
    (gx, gy2) = flow.autograd.grad(z, [x, y])
    assert gx.tolist() == [8.0, 16.0] and gy2.tolist() == [4.0, 8.0]


def test_grad_only_runs_the_part_of_the_graph_it_needs():
    x, w = _t([1.0, 2.0]), _t([3.0, 4.0])
    a = x * w
    b = (w * w).exp()
    fired = []
    b.register_hook(lambda g: fired.append("b"))
    loss = (a + b).sum()
    b.sum().backward()  # frees b's part of the graph
    fired.clear()
    (gx,) = flow.autograd.grad(loss, x)  # needs only loss -> a -> x
    assert (
        gx.tolist() == [3.0, 4.0]
        and fired == []
        and w.grad.tolist() == pytest.approx((2 * w * (w * w).exp()).detach().tolist())
    )


def test_grad_input_checks():
    with pytest.raises(FlowError, match=r"inputs\[0\] does not require grad"):
        flow.autograd.grad((_t([1.0]) * 2).sum(), [flow.ones(1)])


# -- grad modes ------------------------------------------------------------------------------------


def test_no_grad_enable_grad_set_grad_enabled():
    a = flow.ones(2, requires_grad=True)
    with flow.no_grad():
        assert not flow.is_grad_enabled()
        y = a * 2
        with flow.enable_grad():
            z = a * 2
    assert not y.requires_grad and y.grad_fn is None and z.requires_grad and flow.is_grad_enabled()
    with flow.set_grad_enabled(False):
        assert not (a * 2).requires_grad
    assert flow.is_grad_enabled()
    flow.set_grad_enabled(False)
    try:
        assert not (a * 2).requires_grad
    finally:
        flow.set_grad_enabled(True)
    with flow.inference_mode():
        assert not (a * 2).requires_grad


def test_no_grad_as_decorator_and_restores_after_errors():
    @flow.no_grad()
    def f(t):
        return t * 2

    assert not f(flow.ones(1, requires_grad=True)).requires_grad
    with pytest.raises(ZeroDivisionError):
        with flow.no_grad():
            raise ZeroDivisionError
    assert flow.is_grad_enabled()


def test_requires_grad_and_requires_grad_():
    t = flow.ones(2)
    assert t.requires_grad_() is t and t.requires_grad
    (t * t).sum().backward()
    assert t.grad.tolist() == [2.0, 2.0]
    t.requires_grad_(False)
    assert not (t * 2).requires_grad
    y = flow.ones(2, requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="only leaf tensors"):
        y.requires_grad_(False)


# -- hooks -------------------------------------------------------------------------------------------


def test_retain_grad_keeps_grads_of_non_leaves():
    a = flow.tensor([1.0, 2.0], requires_grad=True)
    h = a * 2
    h.retain_grad()
    assert h.retains_grad
    (h * 3).sum().backward()
    assert h.grad.tolist() == [3.0, 3.0]
    k = a * 2
    (k * 3).sum().backward()
    assert k.grad is None


def test_leaf_hooks_see_the_summed_gradient_once():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(g.tolist()))
    (x * x).sum().backward()
    assert seen == [[2.0, 4.0]] and x.grad.tolist() == [2.0, 4.0]


def test_hooks_can_replace_gradients_and_be_removed():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    handle = h.register_hook(lambda g: g * 10)
    leaf = x.register_hook(lambda g: g + 1)
    (h * 1).sum().backward()
    assert x.grad.tolist() == [21.0, 21.0]
    handle.remove()
    leaf.remove()
    x.grad = None
    h2 = x * 2
    (h2 * 1).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_a_hook_that_keeps_the_gradient_does_not_see_it_change():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    kept = []
    y = x + 0
    y.register_hook(lambda g: kept.append(g))
    y.sum().backward()
    y2 = x + 0
    y2.sum().backward()  # accumulates into x.grad in place
    assert kept[0].tolist() == [1.0, 1.0] and x.grad.tolist() == [2.0, 2.0]


def test_post_accumulate_grad_hooks():
    t = flow.ones(2, requires_grad=True)
    seen = []
    t.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.tolist()))
    (t * 3).sum().backward()
    assert seen == [[3.0, 3.0]]
    with pytest.raises(RuntimeError, match="leaf"):
        (t * 2).register_post_accumulate_grad_hook(lambda p: None)


def test_hook_on_a_tensor_without_grad_is_an_error():
    with pytest.raises(RuntimeError, match="does not require grad"):
        flow.ones(1).register_hook(lambda g: g)


# -- custom functions -----------------------------------------------------------------------------------


class Exp(flow.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y


class ScaleBoth(flow.autograd.Function):
    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x * factor, x * (2 * factor)

    @staticmethod
    def backward(ctx, g1, g2):
        return g1 * ctx.factor + g2 * 2 * ctx.factor, None


def test_custom_function_forward_and_backward():
    x = _t([0.0, 1.0])
    y = Exp.apply(x)
    assert y.grad_fn is not None and y.grad_fn.name() == "ExpBackward"
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp([0.0, 1.0]))
    assert gradcheck(Exp.apply, [_t([0.2, -0.4])])


def test_custom_function_with_several_outputs_and_non_tensor_args():
    x = _t([1.0, 2.0])
    a, b = ScaleBoth.apply(x, 3.0)
    (a.sum() + b.sum()).backward()
    assert x.grad.tolist() == [9.0, 9.0]
    x.grad = None
    a, _ = ScaleBoth.apply(x, 3.0)
    a.sum().backward()  # the unused output's gradient comes in as zeros
    assert x.grad.tolist() == [3.0, 3.0]


def test_custom_function_saved_tensors_checks():
    x = _t([1.0])
    y = Exp.apply(x)
    s = y.sum()
    s.backward()
    with pytest.raises(FlowError, match="second time"):
        s.backward()
    z = Exp.apply(x)
    with flow.no_grad():
        z.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        z.sum().backward()


def test_custom_function_without_grad_inputs_records_nothing():
    y = Exp.apply(flow.ones(2))
    assert y.grad_fn is None and not y.requires_grad


# -- deep graphs ----------------------------------------------------------------------------------------


def test_a_ten_thousand_op_chain_backpropagates_without_recursion():
    x = flow.tensor([1.0], requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y * 1.0001
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0001**10_000], rtol=1e-3)
    del y  # freeing a deep graph must not overflow the stack either


def test_a_wide_diamond_graph_runs_each_node_once():
    x = flow.tensor([1.0], requires_grad=True)
    branches = [x * float(i) for i in range(200)]
    total = branches[0]
    for b in branches[1:]:
        total = total + b
    total.backward()
    assert x.grad.tolist() == [float(sum(range(200)))]


# -- in-place errors -------------------------------------------------------------------------------------


def test_modifying_a_tensor_saved_for_backward_is_an_error():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1
    z = y * y  # saves y
    y.add_(1)
    with pytest.raises(FlowError, match=r"needed for the gradient of 'mul' has been modified by an in-place operation"):
        z.sum().backward()


def test_modifying_a_saved_output_is_an_error():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp()  # exp saves its output
    y.mul_(2)
    with pytest.raises(FlowError, match="gradient of 'exp'.*in-place"):
        y.sum().backward()


def test_in_place_on_a_leaf_that_requires_grad_is_an_error():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(FlowError, match="add_: a leaf tensor that requires grad is being used in an in-place"):
        x.add_(1)
    with pytest.raises(FlowError, match="fill_: a leaf tensor"):
        x.fill_(0)
    with flow.no_grad():
        x.add_(1)  # allowed without grad
    assert x.tolist() == [2.0, 3.0]


def test_in_place_on_non_leaves_is_differentiated():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.add_(1)
    y.mul_(3)
    y.sum().backward()
    assert x.grad.tolist() == [6.0, 6.0]
    a = flow.tensor([1.0, 2.0], requires_grad=True)
    b = a * 1
    b.mul_(b)  # uses its own old value
    b.sum().backward()
    assert a.grad.tolist() == [2.0, 4.0]


def test_node_introspection():
    x = flow.ones(2, requires_grad=True)
    y = (x * 2).exp()
    assert y.grad_fn.name() == "expBackward" and repr(y.grad_fn) == "<expBackward>"
    ((mul_node, _),) = y.grad_fn.next_functions
    assert mul_node.name() == "mulBackward" and mul_node.next_functions == ((None, -1), (None, 0))


def test_set_grad_enabled_as_a_decorator_applies_inside_only():
    @flow.set_grad_enabled(False)
    def f(t):
        return t * 2

    assert flow.is_grad_enabled()
    assert not f(flow.ones(1, requires_grad=True)).requires_grad
    assert flow.is_grad_enabled()

    @flow.inference_mode()
    def g(t):
        return t * 2

    assert not g(flow.ones(1, requires_grad=True)).requires_grad
    with flow.inference_mode(False):
        assert flow.is_grad_enabled()


def test_fill_and_zero_on_a_non_leaf_keep_it_in_the_graph_with_zero_gradient():
    x = flow.ones(2, requires_grad=True)
    y = x * 3
    y.zero_()
    assert y.requires_grad and y.grad_fn is not None and y.tolist() == [0.0, 0.0]
    (y + x * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]
    z = x * 3
    z.fill_(5.0)
    z.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]
    with flow.no_grad():
        w = x * 3
    w.fill_(1.0)
    assert not w.requires_grad
