"""Op-by-op dtype parity of ``flow.autocast("cpu")`` with ``torch.autocast("cpu")``.

Each row runs one call (written once, for both libraries: flow mirrors torch's API) on the same
inputs inside each library's autocast region, bfloat16 and float16, and compares the dtype of
every output, then backpropagates and compares the dtype of the gradient of every floating leaf
input. The rows cover the ops torch's CPU autocast runs low (matmuls, convolutions, attention),
keeps in float32 (losses, ``prod``), promotes (``cat``, ``stack``) or leaves alone (the rest),
with float32 inputs and with mixed low/float32 inputs.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import pytest

import flow

torch = pytest.importorskip("torch")

DTYPES = ("bfloat16", "float16")


# -- input specs: what a row is called on -----------------------------------------------------------------
FLOATS = ("normal", "pos", "prob", "pm1")


@dataclass(frozen=True)
class In:
    """One input of a row: its values (``kind``), shape, and whether it is a leaf requiring grad
    and is held in the region's low dtype (else float32).

    normal: standard normal; pos / prob: uniform in (0.5, 2) / (0.05, 0.95); pm1: +-1 labels;
    idx: int64 in [0, high); labels: int64 in [1, high) (CTC targets, 0 is the blank);
    mask: bool; ints: the int64 ``values``.
    """

    kind: str
    shape: tuple = ()
    grad: bool = False
    low: bool = False
    high: int = 0
    values: tuple = ()


def f(*shape):
    return In("normal", shape, grad=True)


def lo(*shape):
    return In("normal", shape, grad=True, low=True)


def pos(*shape):
    return In("pos", shape, grad=True)


def prob(*shape):
    return In("prob", shape, grad=True)


def const(*shape):
    return In("normal", shape)


def pm1(*shape):
    return In("pm1", shape)


def idx(high, *shape):
    return In("idx", shape, high=high)


def labels(high, *shape):
    return In("labels", shape, high=high)


def mask(*shape):
    return In("mask", shape)


def ints(*values):
    return In("ints", (len(values),), values=values)


def low(spec: In) -> In:
    """``spec`` held in the low dtype (floating specs only)."""
    return replace(spec, low=True) if spec.kind in FLOATS else spec


def _values(spec: In, rng: np.random.Generator) -> np.ndarray:
    k, shape = spec.kind, spec.shape
    if k == "normal":
        return rng.standard_normal(shape).astype(np.float32)
    if k == "pos":
        return rng.uniform(0.5, 2.0, shape).astype(np.float32)
    if k == "prob":
        return rng.uniform(0.05, 0.95, shape).astype(np.float32)
    if k == "pm1":
        return np.where(rng.random(shape) > 0.5, 1.0, -1.0).astype(np.float32)
    if k == "idx":
        return rng.integers(0, spec.high, shape).astype(np.int64)
    if k == "labels":
        return rng.integers(1, spec.high, shape).astype(np.int64)
    if k == "mask":
        return rng.random(shape) > 0.5
    if k == "ints":
        return np.array(spec.values, dtype=np.int64)
    raise ValueError(f"unknown input kind {k!r}")


def _build(lib, spec: In, value: np.ndarray, low_dtype):
    t = lib.tensor(value)
    if spec.low:
        t = t.to(low_dtype)
    return t.requires_grad_() if spec.grad else t


# -- the rows ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    id: str
    fn: Callable  # fn(lib, F, *inputs) with lib flow or torch and F its nn.functional
    inputs: tuple
    xfail: str = ""  # why flow differs from torch (a strict xfail: it turns red once fixed)


# Where flow differs from torch, and why: flow's version of the function is a Python composite of
# primitive ops (flow/nn/functional, flow/ops/linalg.py), so autocast sees only the primitives.
# A loss made of subtractions and means on low-precision inputs then runs low where torch's
# autocast, which sees the whole loss, runs it in float32; a product written as matmul + add
# promotes to float32 where torch runs the whole op low.


def _rows() -> list[Row]:
    rows = [
        # -- run low (torch's CPU lower_precision_fp list) --
        Row("matmul", lambda m, F, a, b: m.matmul(a, b), (f(3, 4), f(4, 5))),
        Row("matmul-batched", lambda m, F, a, b: m.matmul(a, b), (f(2, 3, 4), f(4, 5))),
        Row("matmul-vector", lambda m, F, a, b: m.matmul(a, b), (f(3, 4), f(4))),
        Row("tensor-matmul-operator", lambda m, F, a, b: a @ b, (f(3, 4), f(4, 5))),
        Row("mm", lambda m, F, a, b: m.mm(a, b), (f(3, 4), f(4, 5))),
        Row("bmm", lambda m, F, a, b: m.bmm(a, b), (f(2, 3, 4), f(2, 4, 5))),
        Row("addmm", lambda m, F, c, a, b: m.addmm(c, a, b), (f(3, 5), f(3, 4), f(4, 5))),
        Row(
            "baddbmm",
            lambda m, F, c, a, b: m.baddbmm(c, a, b),
            (f(2, 3, 5), f(2, 3, 4), f(2, 4, 5)),
        ),
        Row(
            "addbmm",
            lambda m, F, c, a, b: m.addbmm(c, a, b),
            (f(3, 5), f(2, 3, 4), f(2, 4, 5)),
        ),
        Row("dot", lambda m, F, a, b: m.dot(a, b), (f(4), f(4))),
        Row("mv", lambda m, F, a, b: m.mv(a, b), (f(3, 4), f(4))),
        Row("outer", lambda m, F, a, b: m.outer(a, b), (f(3), f(4))),
        Row("addmv", lambda m, F, c, a, v: m.addmv(c, a, v), (f(3), f(3, 4), f(4))),
        Row("addr", lambda m, F, c, a, b: m.addr(c, a, b), (f(3, 4), f(3), f(4))),
        Row("tensordot", lambda m, F, a, b: m.tensordot(a, b, dims=1), (f(3, 4), f(4, 5))),
        Row("linear", lambda m, F, x, w, b: F.linear(x, w, b), (f(3, 4), f(5, 4), f(5))),
        Row("linear-no-bias", lambda m, F, x, w: F.linear(x, w), (f(2, 3, 4), f(5, 4))),
        Row("conv1d", lambda m, F, x, w, b: F.conv1d(x, w, b, padding=1), (f(2, 3, 7), f(4, 3, 3), f(4))),
        Row("conv2d", lambda m, F, x, w, b: F.conv2d(x, w, b, stride=2), (f(1, 2, 6, 6), f(3, 2, 3, 3), f(3))),
        Row("conv2d-no-bias", lambda m, F, x, w: F.conv2d(x, w, padding=1), (f(1, 2, 5, 5), f(3, 2, 3, 3))),
        Row("conv_transpose1d", lambda m, F, x, w: F.conv_transpose1d(x, w), (f(1, 2, 5), f(2, 3, 3))),
        Row("conv_transpose2d", lambda m, F, x, w: F.conv_transpose2d(x, w, stride=2), (f(1, 2, 3, 3), f(2, 3, 2, 2))),
        Row("einsum", lambda m, F, a, b: m.einsum("bij,bjk->bik", a, b), (f(2, 3, 4), f(2, 4, 5))),
        Row("einsum-implicit-output", lambda m, F, a, b: m.einsum("ij,jk", a, b), (f(3, 4), f(4, 5))),
        Row("einsum-ellipsis", lambda m, F, a, b: m.einsum("...ij,...jk->...ik", a, b), (f(2, 3, 4), f(2, 4, 5))),
        Row("einsum-dot", lambda m, F, a, b: m.einsum("i,i->", a, b), (f(4), f(4))),
        Row(
            "einsum-three-operands",
            lambda m, F, a, b, c: m.einsum("ij,jk,kl->il", a, b, c),
            (f(2, 3), f(3, 4), f(4, 2)),
        ),
        # no index summed across operands: torch's einsum runs no matrix product, so no low precision
        Row("einsum-diagonal", lambda m, F, a: m.einsum("ii->i", a), (f(3, 3),)),
        Row("einsum-transpose", lambda m, F, a: m.einsum("ij->ji", a), (f(3, 4),)),
        Row("einsum-sum", lambda m, F, a: m.einsum("ij->", a), (f(3, 4),)),
        Row("einsum-outer", lambda m, F, a, b: m.einsum("i,j->ij", a, b), (f(3), f(4))),
        Row("einsum-hadamard", lambda m, F, a, b: m.einsum("ij,ij->ij", a, b), (f(3, 4), f(3, 4))),
        Row("einsum-batch-broadcast", lambda m, F, a, b: m.einsum("bij,bjk->bijk", a, b), (f(2, 3, 4), f(2, 4, 5))),
        Row(
            "scaled_dot_product_attention",
            lambda m, F, q, k, v: F.scaled_dot_product_attention(q, k, v),
            (f(1, 2, 4, 8), f(1, 2, 5, 8), f(1, 2, 5, 8)),
        ),
        Row(
            "scaled_dot_product_attention-causal",
            lambda m, F, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            (f(2, 4, 8), f(2, 4, 8), f(2, 4, 8)),
        ),
        Row("prelu", lambda m, F, x, w: F.prelu(x, w), (f(2, 3, 4), f(3))),
        Row("bilinear", lambda m, F, a, b, w, bias: F.bilinear(a, b, w, bias), (f(3, 4), f(3, 5), f(2, 4, 5), f(2))),
        # -- float32 (torch's CPU fp32 list) --
        Row("prod", lambda m, F, x: m.prod(x), (f(2, 3),)),
        Row("prod-dim", lambda m, F, x: x.prod(1), (f(2, 3),)),
        Row("prod-low-input", lambda m, F, x: x.prod(1), (lo(2, 3),)),
        Row("cumprod", lambda m, F, x: m.cumprod(x, 1), (f(2, 3),)),
        Row("cumprod-low-input", lambda m, F, x: m.cumprod(x, 1), (lo(2, 3),)),
        Row("cumsum-low-input", lambda m, F, x: m.cumsum(x, 0), (lo(2, 3),)),
    ]
    rows += _loss_rows()
    rows += [
        # -- untouched: run in the dtype they get (float32 here) --
        Row("softmax", lambda m, F, x: F.softmax(x, dim=-1), (f(3, 5),)),
        Row("log_softmax", lambda m, F, x: F.log_softmax(x, dim=1), (f(3, 5),)),
        Row("tensor.softmax", lambda m, F, x: x.softmax(0), (f(3, 5),)),
        Row("layer_norm", lambda m, F, x, w, b: F.layer_norm(x, (5,), w, b), (f(3, 5), f(5), f(5))),
        Row("layer_norm-no-affine", lambda m, F, x: F.layer_norm(x, (4, 5)), (f(2, 4, 5),)),
        Row("group_norm", lambda m, F, x, w, b: F.group_norm(x, 2, w, b), (f(2, 4, 3), f(4), f(4))),
        Row(
            "batch_norm-eval",
            lambda m, F, x, rm, rv, w, b: F.batch_norm(x, rm, rv.abs() + 0.5, w, b, training=False),
            (f(4, 3, 2), const(3), const(3), f(3), f(3)),
        ),
        Row(
            "batch_norm-train",
            lambda m, F, x, rm, rv, w, b: F.batch_norm(x, rm, rv.abs() + 0.5, w, b, training=True),
            (f(4, 3), const(3), const(3), f(3), f(3)),
        ),
        Row("instance_norm", lambda m, F, x: F.instance_norm(x), (f(2, 3, 5),)),
        Row("rms_norm", lambda m, F, x, w: F.rms_norm(x, (5,), w), (f(3, 5), f(5))),
        Row("gelu", lambda m, F, x: F.gelu(x), (f(3, 4),)),
        Row("gelu-tanh", lambda m, F, x: F.gelu(x, approximate="tanh"), (f(3, 4),)),
        Row("relu", lambda m, F, x: F.relu(x), (f(3, 4),)),
        Row("silu", lambda m, F, x: F.silu(x), (f(3, 4),)),
        Row("tanh", lambda m, F, x: m.tanh(x), (f(3, 4),)),
        Row("sigmoid", lambda m, F, x: m.sigmoid(x), (f(3, 4),)),
        Row("exp", lambda m, F, x: m.exp(x), (f(3, 4),)),
        Row("log", lambda m, F, x: m.log(x), (pos(3, 4),)),
        Row("pow", lambda m, F, x: x.pow(2.5), (pos(3, 4),)),
        Row("sum", lambda m, F, x: m.sum(x), (f(3, 4),)),
        Row("sum-dim", lambda m, F, x: x.sum(1, keepdim=True), (f(3, 4),)),
        Row("mean", lambda m, F, x: m.mean(x, 0), (f(3, 4),)),
        Row("logsumexp", lambda m, F, x: m.logsumexp(x, 1), (f(3, 4),)),
        Row("norm", lambda m, F, x: x.norm(), (f(3, 4),)),
        Row("norm-dim", lambda m, F, x: m.norm(x, dim=1), (f(3, 4),)),
        Row("cat", lambda m, F, a, b: m.cat([a, b], 0), (f(2, 3), f(1, 3))),
        Row("stack", lambda m, F, a, b: m.stack([a, b]), (f(2, 3), f(2, 3))),
        Row("where", lambda m, F, c, a, b: m.where(c, a, b), (mask(2, 3), f(2, 3), f(2, 3))),
        Row("embedding", lambda m, F, i, w: F.embedding(i, w), (idx(5, 2, 3), f(5, 4))),
        Row("dropout-eval", lambda m, F, x: F.dropout(x, p=0.5, training=False), (f(3, 4),)),
        Row("max_pool2d", lambda m, F, x: F.max_pool2d(x, 2), (f(1, 2, 4, 4),)),
        Row("avg_pool2d", lambda m, F, x: F.avg_pool2d(x, 2), (f(1, 2, 4, 4),)),
        Row(
            "interpolate-nearest",
            lambda m, F, x: F.interpolate(x, scale_factor=2.0),
            (f(1, 2, 3, 3),),
        ),
        Row("add", lambda m, F, a, b: a + b, (f(2, 3), f(2, 3))),
        Row("mul-scalar", lambda m, F, a: a * 3.0, (f(2, 3),)),
        Row("reshape-transpose", lambda m, F, a: a.reshape(3, 2).t(), (f(2, 3),)),
        # -- mixed low / float32 inputs --
        Row("mixed-add", lambda m, F, a, b: a + b, (lo(2, 3), f(2, 3))),
        Row("mixed-mul", lambda m, F, a, b: a * b, (f(2, 3), lo(2, 3))),
        Row("mixed-cat", lambda m, F, a, b: m.cat([a, b], 1), (lo(2, 3), f(2, 2))),
        Row("mixed-cat-low-first-last", lambda m, F, a, b, c: m.cat([a, b, c]), (lo(1, 3), f(2, 3), lo(1, 3))),
        Row("mixed-stack", lambda m, F, a, b: m.stack([a, b], 1), (f(2, 3), lo(2, 3))),
        Row("mixed-where", lambda m, F, c, a, b: m.where(c, a, b), (mask(2, 3), lo(2, 3), f(2, 3))),
        Row("mixed-matmul", lambda m, F, a, b: m.matmul(a, b), (lo(3, 4), f(4, 5))),
        Row("mixed-linear", lambda m, F, x, w, b: F.linear(x, w, b), (lo(3, 4), f(5, 4), f(5))),
        Row("mixed-layer_norm", lambda m, F, x, w, b: F.layer_norm(x, (5,), w, b), (lo(3, 5), f(5), f(5))),
        Row("mixed-group_norm", lambda m, F, x, w, b: F.group_norm(x, 2, w, b), (lo(2, 4, 3), f(4), f(4))),
        Row(
            "mixed-batch_norm-eval",
            lambda m, F, x, rm, rv, w, b: F.batch_norm(x, rm, rv.abs() + 0.5, w, b, training=False),
            (lo(4, 3), const(3), const(3), f(3), f(3)),
        ),
        Row(
            "mixed-batch_norm-train",
            lambda m, F, x, rm, rv, w, b: F.batch_norm(x, rm, rv.abs() + 0.5, w, b, training=True),
            (lo(4, 3), const(3), const(3), f(3), f(3)),
        ),
        Row("mixed-embedding-low-weight", lambda m, F, i, w: F.embedding(i, w), (idx(5, 3), lo(5, 4))),
        Row("low-softmax", lambda m, F, x: F.softmax(x, dim=-1), (lo(3, 5),)),
        Row("low-log_softmax", lambda m, F, x: F.log_softmax(x, dim=-1), (lo(3, 5),)),
        Row("low-gelu", lambda m, F, x: F.gelu(x), (lo(3, 5),)),
        Row("low-exp", lambda m, F, x: m.exp(x), (lo(3, 5),)),
        Row("low-sum", lambda m, F, x: x.sum(), (lo(3, 5),)),
        Row("low-mean", lambda m, F, x: x.mean(1), (lo(3, 5),)),
        Row("low-max_pool2d", lambda m, F, x: F.max_pool2d(x, 2), (lo(1, 1, 4, 4),)),
        Row("low-avg_pool2d", lambda m, F, x: F.avg_pool2d(x, 2), (lo(1, 1, 4, 4),)),
        Row("low-logsumexp", lambda m, F, x: m.logsumexp(x, 0), (lo(3, 5),)),
        Row(
            "low-scaled_dot_product_attention",
            lambda m, F, q, k, v: F.scaled_dot_product_attention(q, k, v),
            (lo(2, 4, 8), f(2, 4, 8), f(2, 4, 8)),
            "flow's F.scaled_dot_product_attention requires one dtype for query, key and value before any "
            "op runs (flow/nn/functional/attention.py, _check); torch's autocast casts all three low first",
        ),
    ]
    return rows


def _loss(name: str, fn: Callable, inputs: tuple) -> list[Row]:
    """Rows of one loss: on float32 inputs; on a low-precision prediction (the first input) with
    float32 targets; and with every floating input low. flow writes many losses as composites
    (flow.ops.composite), which autocast colours as a whole, as torch's autocast colours its ops."""
    pred = (low(inputs[0]),) + tuple(inputs[1:])
    every = tuple(low(x) for x in inputs)
    rows = [Row(name, fn, inputs), Row(f"{name}-low-prediction", fn, pred)]
    if every != pred:
        rows.append(Row(f"{name}-low-inputs", fn, every))
    return rows


def _loss_rows() -> list[Row]:
    """Every loss of flow.nn.functional."""
    ce = lambda m, F, x, t: F.cross_entropy(x, t)
    return [
        *_loss("cross_entropy", ce, (f(4, 5), idx(5, 4))),
        *_loss("cross_entropy-probs", ce, (f(4, 5), prob(4, 5))),
        *_loss(
            "cross_entropy-smoothing",
            lambda m, F, x, t: F.cross_entropy(x, t, label_smoothing=0.1),
            (f(4, 5), idx(5, 4)),
        ),
        *_loss("nll_loss", lambda m, F, x, t: F.nll_loss(x, t), (f(4, 5), idx(5, 4))),
        *_loss("mse_loss", lambda m, F, x, t: F.mse_loss(x, t), (f(3, 4), f(3, 4))),
        *_loss("l1_loss", lambda m, F, x, t: F.l1_loss(x, t), (f(3, 4), f(3, 4))),
        *_loss("smooth_l1_loss", lambda m, F, x, t: F.smooth_l1_loss(x, t), (f(3, 4), f(3, 4))),
        *_loss("huber_loss", lambda m, F, x, t: F.huber_loss(x, t), (f(3, 4), f(3, 4))),
        *_loss("binary_cross_entropy", lambda m, F, x, t: F.binary_cross_entropy(x, t), (prob(3, 4), prob(3, 4))),
        *_loss(
            "binary_cross_entropy_with_logits",
            lambda m, F, x, t: F.binary_cross_entropy_with_logits(x, t),
            (f(3, 4), prob(3, 4)),
        ),
        *_loss("kl_div", lambda m, F, x, t: F.kl_div(x, t, reduction="batchmean"), (f(3, 4), prob(3, 4))),
        *_loss(
            "margin_ranking_loss",
            lambda m, F, a, b, y: F.margin_ranking_loss(a, b, y, margin=0.1),
            (f(5), f(5), pm1(5)),
        ),
        *_loss("soft_margin_loss", lambda m, F, x, y: F.soft_margin_loss(x, y), (f(3, 4), pm1(3, 4))),
        *_loss("hinge_embedding_loss", lambda m, F, x, y: F.hinge_embedding_loss(x, y), (f(3, 4), pm1(3, 4))),
        *_loss("poisson_nll_loss", lambda m, F, x, t: F.poisson_nll_loss(x, t), (f(3, 4), pos(3, 4))),
        *_loss("gaussian_nll_loss", lambda m, F, x, t, v: F.gaussian_nll_loss(x, t, v), (f(3, 4), f(3, 4), pos(3, 4))),
        *_loss(
            "cosine_embedding_loss", lambda m, F, a, b, y: F.cosine_embedding_loss(a, b, y), (f(3, 4), f(3, 4), pm1(3))
        ),
        *_loss(
            "triplet_margin_loss", lambda m, F, a, p, n: F.triplet_margin_loss(a, p, n), (f(3, 4), f(3, 4), f(3, 4))
        ),
        *_loss(
            "multilabel_soft_margin_loss", lambda m, F, x, t: F.multilabel_soft_margin_loss(x, t), (f(3, 4), prob(3, 4))
        ),
        *_loss(
            "ctc_loss",
            lambda m, F, lp, t, il, tl: F.ctc_loss(F.log_softmax(lp, 2), t, il, tl),
            (f(6, 2, 4), labels(4, 2, 3), ints(6, 5), ints(3, 2)),
        ),
        # decompositions and solvers: float32 (LAPACK has no low-precision kernels), as torch's linalg_*
        *(
            Row(f"linalg.{name}{tag}", fn, (spec(3, 3),))
            for name, fn in (
                ("inv", lambda m, F, a: m.linalg.inv(a + 4 * m.eye(3))),
                ("solve", lambda m, F, a: m.linalg.solve(a + 4 * m.eye(3), a)),
                ("cholesky", lambda m, F, a: m.linalg.cholesky(a @ a.mT + 4 * m.eye(3))),
                ("qr", lambda m, F, a: m.linalg.qr(a)),
                ("eigh", lambda m, F, a: m.linalg.eigh(a + a.mT)),
                ("svd", lambda m, F, a: m.linalg.svd(a, full_matrices=False)),
            )
            for tag, spec in (("", f), ("-low-input", lo))
        ),
        Row("linalg.det", lambda m, F, a: m.linalg.det(a), (f(3, 3),)),
        # composites (flow.ops.composite) torch keeps in float32
        *(
            Row(name, fn, (lo(3, 4),))
            for name, fn in (
                ("cdist-low-input", lambda m, F, a: m.cdist(a, a)),
                ("trace-low-input", lambda m, F, a: m.trace(a)),
                ("quantile-low-input", lambda m, F, a: m.quantile(a, 0.5)),
            )
        ),
    ]


ROWS = _rows()


def _params():
    out = []
    for row in ROWS:
        for dt in DTYPES:
            marks = [pytest.mark.xfail(strict=True, reason=row.xfail)] if row.xfail else []
            out.append(pytest.param(row, dt, id=f"{row.id}-{dt}", marks=marks))
    return out


def _make(lib, row: Row, low_name: str, seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [_build(lib, spec, _values(spec, rng), getattr(lib, low_name)) for spec in row.inputs]


def _tensors(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _name(dtype) -> str:
    return str(dtype).split(".")[-1]


def _run(lib, row: Row, low_name: str, seed: int):
    """Output dtypes and the grad dtype of each input (None: no grad) of ``row`` under lib's autocast."""
    inputs = _make(lib, row, low_name, seed)
    F = lib.nn.functional
    with lib.autocast("cpu", dtype=getattr(lib, low_name)):
        out = _tensors(row.fn(lib, F, *inputs))
    outs = [_name(o.dtype) for o in out]
    diff = [o for o in out if o.dtype.is_floating_point and o.requires_grad]
    if diff:
        loss = sum(o.float().sum() for o in diff)
        loss.backward()
    grads = [
        (_name(x.grad.dtype) if x.grad is not None else None) if x.dtype.is_floating_point else "-" for x in inputs
    ]
    return outs, grads


@pytest.mark.parametrize("row, low", _params())
def test_output_and_grad_dtypes_match_torch_autocast(row: Row, low: str):
    seed = zlib.crc32(row.id.encode())
    want_out, want_grads = _run(torch, row, low, seed)
    got_out, got_grads = _run(flow, row, low, seed)
    assert got_out == want_out, f"{row.id}: output dtypes {got_out}, torch.autocast gives {want_out}"
    assert got_grads == want_grads, f"{row.id}: input grad dtypes {got_grads}, torch.autocast gives {want_grads}"


# -- whole models and custom Functions -------------------------------------------------------------------------
def _mlp_step(lib, weights: dict, x: np.ndarray, y: np.ndarray, low_name: str | None):
    """Loss and parameter gradients of linear -> layer_norm -> gelu -> linear -> cross_entropy,
    under lib's autocast (or none)."""
    F = lib.nn.functional
    p = {k: lib.tensor(v).requires_grad_() for k, v in weights.items()}
    region = lib.autocast("cpu", dtype=getattr(lib, low_name)) if low_name else lib.autocast("cpu", enabled=False)
    with region:
        h = F.gelu(F.layer_norm(F.linear(lib.tensor(x), p["w1"], p["b1"]), (32,), p["g"], p["beta"]))
        loss = F.cross_entropy(F.linear(h, p["w2"], p["b2"]), lib.tensor(y))
    loss.backward()
    return float(loss.item()), _name(h.dtype), {k: t.grad.numpy() for k, t in p.items()}


@pytest.mark.parametrize("low, rtol", [("bfloat16", 2e-2), ("float16", 2e-3)])
def test_mlp_loss_and_gradients_agree_with_torch_autocast_within_the_low_dtypes_precision(low, rtol):
    rng = np.random.default_rng(0)
    weights = {
        "w1": 0.3 * rng.standard_normal((32, 16)),
        "b1": 0.1 * rng.standard_normal(32),
        "g": 1.0 + 0.1 * rng.standard_normal(32),
        "beta": 0.1 * rng.standard_normal(32),
        "w2": 0.3 * rng.standard_normal((10, 32)),
        "b2": 0.1 * rng.standard_normal(10),
    }
    weights = {k: v.astype(np.float32) for k, v in weights.items()}
    x, y = rng.standard_normal((8, 16)).astype(np.float32), rng.integers(0, 10, 8)
    loss, h_dtype, grads = _mlp_step(flow, weights, x, y, low)
    want, want_h_dtype, want_grads = _mlp_step(torch, weights, x, y, low)
    full, _, _ = _mlp_step(flow, weights, x, y, None)
    assert h_dtype == want_h_dtype == low
    assert loss == pytest.approx(want, rel=rtol)
    assert loss != full  # it did run in low precision
    for k, g in grads.items():
        scale = np.abs(want_grads[k]).max()
        np.testing.assert_allclose(g, want_grads[k], atol=2 * rtol * scale, err_msg=k)


def _function(lib, seen: dict, **fwd_kwargs):
    class Product(lib.autograd.Function):
        @staticmethod
        @lib.amp.custom_fwd(device_type="cpu", **fwd_kwargs)
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            seen["forward"] = (_name(a.dtype), _name(b.dtype), lib.is_autocast_enabled("cpu"))
            return a.matmul(b)

        @staticmethod
        @lib.amp.custom_bwd(device_type="cpu")
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            ga = g.matmul(b.t())
            seen["backward"] = (_name(g.dtype), lib.is_autocast_enabled("cpu"), _name(ga.dtype))
            return ga, a.t().matmul(g)

    return Product


@pytest.mark.parametrize("cast_inputs", [None, "float32", "bfloat16"])
@pytest.mark.parametrize("low_a", [False, True], ids=["fp32-a", "low-a"])
def test_custom_fwd_and_custom_bwd_behave_as_torchs(cast_inputs, low_a):
    def run(lib):
        seen = {}
        kwargs = {"cast_inputs": getattr(lib, cast_inputs)} if cast_inputs else {}
        fn = _function(lib, seen, **kwargs)
        a = lib.tensor(np.ones((3, 4), np.float32))
        a = (a.to(lib.bfloat16) if low_a else a).requires_grad_()
        b = lib.tensor(np.ones((4, 2), np.float32)).requires_grad_()
        with lib.autocast("cpu", dtype=lib.float16):
            out = fn.apply(a, b)
        out.float().sum().backward()
        return seen, _name(out.dtype), _name(a.grad.dtype), _name(b.grad.dtype)

    assert run(flow) == run(torch)
