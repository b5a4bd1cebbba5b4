"""Every op declares the dtypes it accepts, and ops behave as PyTorch's on integer and bool input.

For each op with a PyTorch counterpart, the table below calls the same public function in flow
and in torch (``call(m, *tensors)`` with ``m`` either module) on int64, int32, uint8 and bool
input, and checks that flow does what torch does: reject it (an OpTypeError naming the op), promote
it to the default float dtype, or compute in an integer or bool dtype — the same dtype as torch,
with the same values. It also checks that the op's declared rule (``Dtypes`` in its schema) says
so: torch rejects exactly what the rule neither accepts nor promotes, and promotes exactly what the
rule promotes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

import flow
from flow.errors import FlowError, OpTypeError
from flow.plugins import ensure_loaded
from flow.registry import REGISTRY

ensure_loaded()
PROBES = ("int64", "int32", "uint8", "bool")


@dataclass(frozen=True)
class V:
    """A varied input: given each probe dtype in turn (values low..3; 0/1 for bool)."""

    shape: tuple
    low: int = 0


@dataclass(frozen=True)
class F:
    """A fixed float32 input."""

    shape: tuple
    low: float = -1.0
    high: float = 1.0


@dataclass(frozen=True)
class I:  # noqa: E742
    """A fixed int64 input with values in [0, high)."""

    shape: tuple
    high: int = 3


@dataclass(frozen=True)
class B:
    """A fixed bool input."""

    shape: tuple


@dataclass(frozen=True)
class Case:
    op: str  # the registered op the function runs
    call: object  # call(m, *tensors) for m in (flow, torch)
    inputs: tuple
    vary: tuple = ()  # names of the op's inputs the V inputs are (for the declared-rule check)
    promotes: bool = True  # a float result from integer input means promotion (not so for casts, or float data)


def nnf(m):
    return m.nn.functional


def c(op, call, *inputs, vary=("input",), promotes=None):
    if promotes is None:
        promotes = not any(isinstance(i, F) for i in inputs)
    return Case(op, call, inputs, vary, promotes)


S = (3, 4)
# op -> cases; a key "op/arg" checks another input of the same op
TABLE = {
    # -- unary math: torch promotes integer and bool input to the default float dtype
    **{
        name: c(name, (lambda n: lambda m, x: getattr(m, n)(x))(name), V(S))
        for name in (
            "exp",
            "expm1",
            "log",
            "log2",
            "log10",
            "log1p",
            "sqrt",
            "rsqrt",
            "sin",
            "cos",
            "tan",
            "asin",
            "acos",
            "atan",
            "sinh",
            "cosh",
            "tanh",
            "sigmoid",
            "erf",
            "reciprocal",
        )
    },
    # -- unary ops that keep integer dtypes
    **{
        name: c(name, (lambda n: lambda m, x: getattr(m, n)(x))(name), V(S))
        for name in ("neg", "abs", "sign", "relu", "floor", "ceil", "round", "trunc", "square")
    },
    "gelu": c("gelu", lambda m, x: nnf(m).gelu(x), V(S)),
    "silu": c("silu", lambda m, x: nnf(m).silu(x), V(S)),
    "softplus": c("softplus", lambda m, x: nnf(m).softplus(x), V(S)),
    "clamp": c("clamp", lambda m, x: m.clamp(x, 1, 2), V(S)),
    "where": c("where", lambda m, cond, x, y: m.where(cond, x, y), B(S), V(S), V(S), vary=("input", "other")),
    "where/condition": c("where", lambda m, cond, x: m.where(cond, x, x), V(S), F(S), vary=("condition",)),
    # -- binary arithmetic
    **{
        name: c(name, (lambda n: lambda m, a, b: getattr(m, n)(a, b))(name), V(S), V(S), vary=("input", "other"))
        for name in ("add", "sub", "mul", "div", "maximum", "minimum", "atan2")
    },
    # (no zero divisors: integer division by zero is an error in torch)
    **{
        name: c(name, (lambda n: lambda m, a, b: getattr(m, n)(a, b))(name), V(S), V(S, 1), vary=("input", "other"))
        for name in ("remainder", "fmod", "floor_divide")
    },
    "pow": c("pow", lambda m, a, b: m.pow(a, b), V(S), V(S), vary=("input", "exponent")),
    **{
        name: c(name, (lambda n: lambda m, a, b: getattr(m, n)(a, b))(name), V(S), V(S), vary=("input", "other"))
        for name in (
            "eq",
            "ne",
            "lt",
            "le",
            "gt",
            "ge",
            "logical_and",
            "logical_or",
            "logical_xor",
            "bitwise_and",
            "bitwise_or",
            "bitwise_xor",
        )
    },
    "logical_not": c("logical_not", lambda m, x: m.logical_not(x), V(S)),
    "bitwise_not": c("bitwise_not", lambda m, x: m.bitwise_not(x), V(S)),
    **{name: c(name, (lambda n: lambda m, x: getattr(m, n)(x))(name), V(S)) for name in ("isnan", "isinf", "isfinite")},
    # -- reductions and scans
    **{
        name: c(name, (lambda n: lambda m, x: getattr(m, n)(x, 1))(name), V(S))
        for name in (
            "sum",
            "mean",
            "prod",
            "all",
            "any",
            "amax",
            "amin",
            "argmax",
            "argmin",
            "logsumexp",
            "cumsum",
            "cumprod",
        )
    },
    "var": c("var", lambda m, x: m.var(x, 1), V(S)),
    "std": c("std", lambda m, x: m.std(x, 1), V(S)),
    "norm": c("norm", lambda m, x: m.norm(x, dim=1), V(S)),
    "max_dim": c("max_dim", lambda m, x: m.max(x, 1).values, V(S)),
    "min_dim": c("min_dim", lambda m, x: m.min(x, 1).indices, V(S)),
    "sort": c("sort", lambda m, x: m.sort(x, 1).values, V(S)),
    "topk": c("topk", lambda m, x: m.topk(x, 2, 1).values, V(S)),
    "kthvalue": c("kthvalue", lambda m, x: m.kthvalue(x, 2, 1).values, V(S)),
    "median": c("median", lambda m, x: m.median(x, 1).values, V(S)),
    "nanmedian": c("nanmedian", lambda m, x: m.nanmedian(x, 1).values, V(S)),
    "mode": c("mode", lambda m, x: m.mode(x, 1).values, V(S)),
    "searchsorted": c(
        "searchsorted",
        lambda m, s, v: m.searchsorted(m.sort(s).values, v),
        V((5,)),
        V((3,)),
        vary=("sorted_sequence", "input"),
    ),
    # -- movement and views keep every dtype
    "reshape": c("reshape", lambda m, x: m.reshape(x, (4, 3)), V(S)),
    "permute": c("permute", lambda m, x: x.permute(1, 0), V(S)),
    "expand": c("expand", lambda m, x: x[:1].expand(2, 4), V(S)),
    "flip": c("flip", lambda m, x: m.flip(x, (0,)), V(S)),
    "roll": c("roll", lambda m, x: m.roll(x, 1, 1), V(S)),
    "tril": c("tril", lambda m, x: m.tril(x), V(S)),
    "triu": c("triu", lambda m, x: m.triu(x, 1), V(S)),
    "cat": c("cat", lambda m, a, b: m.cat([a, b], 1), V(S), V(S), vary=("tensors",)),
    "stack": c("stack", lambda m, a, b: m.stack([a, b]), V(S), V(S), vary=("tensors",)),
    "split": c("split", lambda m, x: m.split(x, [1, 3], 1)[1], V(S)),
    "unbind": c("unbind", lambda m, x: m.unbind(x, 1)[2], V(S)),
    "diagonal": c("diagonal", lambda m, x: m.diagonal(x, 1), V(S)),
    "basic_index": c("basic_index", lambda m, x: x[1:, 2], V(S)),
    "constant_pad": c("constant_pad", lambda m, x: nnf(m).pad(x, (1, 2)), V(S)),
    "clone": c("clone", lambda m, x: m.clone(x), V(S), vary=("x",)),
    "contiguous": c("contiguous", lambda m, x: x.t().contiguous(), V(S), vary=("x",)),
    "cast": c("cast", lambda m, x: x.to(m.float64), V(S), vary=("x",), promotes=False),
    "nonzero": c("nonzero", lambda m, x: m.nonzero(x), V(S)),
    # -- indexing: data of any dtype, indices of an integer dtype
    "gather": c("gather", lambda m, x, i: m.gather(x, 1, i), V(S), I((3, 2), 4)),
    "gather/index": c("gather", lambda m, x, i: m.gather(x, 1, i), F(S), V((3, 2)), vary=("index",)),
    "scatter": c(
        "scatter", lambda m, x, i, s: m.scatter(x, 1, i, s), V(S), I((3, 1), 4), V((3, 1)), vary=("input", "src")
    ),
    "scatter/index": c(
        "scatter", lambda m, x, i, s: m.scatter(x, 1, i, s), F(S), V((3, 1)), F((3, 1)), vary=("index",)
    ),
    "index_select": c("index_select", lambda m, x, i: m.index_select(x, 1, i), V(S), I((2,), 4)),
    "index_select/index": c("index_select", lambda m, x, i: m.index_select(x, 1, i), F(S), V((2,)), vary=("index",)),
    "index_add": c(
        "index_add", lambda m, x, i, s: m.index_add(x, 0, i, s), V(S), I((2,), 3), V((2, 4)), vary=("input", "source")
    ),
    "index_add/index": c(
        "index_add", lambda m, x, i, s: m.index_add(x, 0, i, s), F(S), V((2,)), F((2, 4)), vary=("index",)
    ),
    "index": c("index", lambda m, x, i: x[i], V(S), I((2,), 3)),
    "index_put": c(
        "index_put", lambda m, x, i, v: x.index_put((i,), v), V(S), I((2,), 3), V((4,)), vary=("input", "values")
    ),
    "one_hot": c("one_hot", lambda m, x: nnf(m).one_hot(x, 5), V(S)),
    "embedding": c("embedding", lambda m, i, w: nnf(m).embedding(i, w), I((2, 3), 5), V((5, 4)), vary=("weight",)),
    "embedding/input": c("embedding", lambda m, i, w: nnf(m).embedding(i, w), V((2, 3)), F((5, 4))),
    "embedding_bag/input": c(
        "embedding_bag",
        lambda m, i, w: nnf(m).embedding_bag(i, w, m.tensor([0, 3]).to(i.dtype)),
        V((6,)),
        F((5, 4)),
        vary=("input", "offsets"),
    ),
    # -- linear algebra: integers compute in their dtype, bool is rejected
    "matmul": c("matmul", lambda m, a, b: m.matmul(a, b), V(S), V((4, 2)), vary=("input", "other")),
    "linear": c("linear", lambda m, x, w: nnf(m).linear(x, w), V(S), V((2, 4)), vary=("input", "weight")),
    "einsum": c("einsum", lambda m, a, b: m.einsum("ij,jk->ik", a, b), V(S), V((4, 2)), vary=("operands",)),
    # -- nn ops: floating point only
    "softmax": c("softmax", lambda m, x: nnf(m).softmax(x, 1), V(S)),
    "log_softmax": c("log_softmax", lambda m, x: nnf(m).log_softmax(x, 1), V(S)),
    "layer_norm": c("layer_norm", lambda m, x: nnf(m).layer_norm(x, (4,)), V(S)),
    "conv2d": c(
        "conv2d", lambda m, x, w: nnf(m).conv2d(x, w), V((1, 2, 4, 4)), V((3, 2, 2, 2)), vary=("input", "weight")
    ),
    "max_pool2d": c("max_pool2d", lambda m, x: nnf(m).max_pool2d(x, 2), V((1, 2, 4, 4))),
    "avg_pool2d": c("avg_pool2d", lambda m, x: nnf(m).avg_pool2d(x, 2), V((1, 2, 4, 4))),
    "adaptive_max_pool2d": c("adaptive_max_pool2d", lambda m, x: nnf(m).adaptive_max_pool2d(x, 2), V((1, 2, 4, 4))),
    "cross_entropy": c("cross_entropy", lambda m, x, t: nnf(m).cross_entropy(x, t), V(S), I((3,), 4)),
    "cross_entropy/target": c(
        "cross_entropy", lambda m, x, t: nnf(m).cross_entropy(x, t), F(S), V((3,)), vary=("target",)
    ),
    "nll_loss": c("nll_loss", lambda m, x, t: nnf(m).nll_loss(x, t), V(S), I((3,), 4)),
    "nll_loss/target": c("nll_loss", lambda m, x, t: nnf(m).nll_loss(x, t), F(S), V((3,)), vary=("target",)),
    "binary_cross_entropy": c(
        "binary_cross_entropy", lambda m, x, t: nnf(m).binary_cross_entropy(x, t), V(S), V(S), vary=("input", "target")
    ),
    "ctc_loss": c(
        "ctc_loss",
        lambda m, lp, t: nnf(m).ctc_loss(lp, t, [5, 5], [2, 2]),
        V((5, 2, 3)),
        I((2, 2), 3),
        vary=("log_probs",),
    ),
}


def _array(spec, probe, seed):
    r = np.random.default_rng(seed)
    if isinstance(spec, V):
        a = r.integers(spec.low, 4, size=spec.shape)
        return (a % 2).astype(np.bool_) if probe == "bool" else a.astype(probe)
    if isinstance(spec, F):
        return r.uniform(spec.low, spec.high, size=spec.shape).astype(np.float32)
    if isinstance(spec, I):
        return r.integers(0, spec.high, size=spec.shape).astype(np.int64)
    return r.random(spec.shape) > 0.5


def _run(m, case: Case, probe: str):
    # torch.tensor copies; both frameworks get the same values
    tensors = [m.tensor(_array(s, probe, k)) for k, s in enumerate(case.inputs)]
    return case.call(m, *tensors)


def _outcome(case: Case, out, probe):
    """'promote' (a float result from integer/bool input) or the result's dtype name."""
    dt = str(out.dtype).split(".")[-1]
    return "promote" if case.promotes and dt.startswith("float") and not probe.startswith("float") else dt


def _declared(op_name: str, inputs, probe: str) -> str:
    """What the op's schema says about ``probe`` for the varied inputs: 'accept', 'promote' or 'reject'."""
    op = REGISTRY.ops[op_name]
    specs = {i.name: i for i in op.schema.inputs}
    dt = flow._dtype.as_dtype(probe)
    verdicts = set()
    for name in inputs:
        rule = specs[name].dtypes
        assert rule is not None, f"op '{op_name}' input '{name}' declares no dtypes"
        verdicts.add("accept" if rule.accepts(dt) else "promote" if rule.promote else "reject")
    return "reject" if "reject" in verdicts else "promote" if "promote" in verdicts else "accept"


def test_every_input_of_every_op_declares_its_dtypes():
    missing = [
        f"{name}.{i.name}" for name, op in sorted(REGISTRY.ops.items()) for i in op.schema.inputs if i.dtypes is None
    ]
    assert not missing, f"inputs without a declared dtype rule: {missing}"


def test_the_table_names_registered_ops_and_inputs():
    for key, case in TABLE.items():
        assert case.op in REGISTRY.ops, key
        names = {i.name for i in REGISTRY.ops[case.op].schema.inputs}
        assert set(case.vary) <= names, (key, case.vary, names)


@pytest.mark.parametrize("probe", PROBES)
@pytest.mark.parametrize("key", sorted(TABLE))
def test_integer_and_bool_input_as_torch(key, probe):
    torch = pytest.importorskip("torch")
    case = TABLE[key]
    try:
        want = _run(torch, case, probe)
        expected = _outcome(case, want, probe)
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        expected = "reject"
    declared = _declared(case.op, case.vary, probe)
    if expected == "reject":
        with pytest.raises(FlowError) as info:
            _run(flow, case, probe)
        assert isinstance(info.value, OpTypeError), f"{key} on {probe}: expected OpTypeError, got {info.value!r}"
        assert declared == "reject", f"op '{case.op}' accepts {probe} by its schema, but torch rejects it"
        return
    got = _run(flow, case, probe)
    assert _outcome(case, got, probe) == expected, f"{key} on {probe}: flow gives {got.dtype}, torch {want.dtype}"
    assert declared == ("promote" if expected == "promote" else "accept"), (
        f"op '{case.op}' {declared}s {probe} by its schema, but torch gives {want.dtype}"
    )
    a, b = got.numpy().astype(np.float64), want.numpy().astype(np.float64)
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_gelu_of_integers_is_rejected_naming_op_argument_and_dtype():
    with pytest.raises(OpTypeError, match=r"gelu: 'input' must be a floating-point tensor, got flow.int64"):
        flow.nn.functional.gelu(flow.tensor([1, 2, -1, 3]))


def test_exp_of_integers_promotes_to_the_default_dtype():
    y = flow.exp(flow.tensor([0, 1]))
    assert y.dtype is flow.float32
    assert math.isclose(y[1].item(), math.e, rel_tol=1e-6)
    try:
        flow.set_default_dtype(flow.float64)
        assert flow.exp(flow.tensor([0, 1])).dtype is flow.float64
    finally:
        flow.set_default_dtype(flow.float32)
