"""Matrix products: matmul/mm/bmm, einsum, and products built on them (dot, outer, tensordot, addmm ...)."""

from __future__ import annotations

from flow import _dtype as D
from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.ops._grad_util import sum_to_shape
from flow.ops.composite import composite
from flow.registry.ops import NUMERIC, Attr


def _matmul_meta(a, b):
    dev = M.check_same_device("matmul", a, b)
    if a.dtype != b.dtype:
        raise OpTypeError("matmul", f"expected both inputs to have the same dtype, got {a.dtype} and {b.dtype}")
    sa, sb = tuple(a.shape), tuple(b.shape)
    if len(sa) == 0 or len(sb) == 0:
        raise OpError("matmul", f"both arguments need at least 1 dimension, got shapes {sa} and {sb}")
    ka = sa[-1]
    kb = sb[0] if len(sb) == 1 else sb[-2]
    if ka != kb:
        raise OpError("matmul", f"shapes {sa} and {sb} cannot be multiplied ({ka} != {kb})")
    if len(sa) == 1 and len(sb) == 1:
        return M.TensorMeta((), a.dtype, dev)
    if len(sb) == 1:
        return M.TensorMeta(sa[:-1], a.dtype, dev)
    if len(sa) == 1:
        return M.TensorMeta(sb[:-2] + sb[-1:], a.dtype, dev)
    batch = M.broadcast_shapes("matmul", sa[:-2], sb[:-2])
    return M.TensorMeta(batch + (sa[-2], sb[-1]), a.dtype, dev)


def _matmul_grad(ctx, g):
    a, b = ctx.inputs
    ga = gb = None
    if a.ndim == 1 and b.ndim == 1:
        ga = g * b if ctx.next[0][0] is not None else None
        gb = g * a if ctx.next[1][0] is not None else None
        return ga, gb
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    g2 = g
    if a.ndim == 1:
        g2 = g2.unsqueeze(-2)
    if b.ndim == 1:
        g2 = g2.unsqueeze(-1)
    if ctx.next[0][0] is not None:
        ga = matmul(g2, b2.transpose(-1, -2))
        ga = sum_to_shape(ga, a2.shape) if a.ndim > 1 else ga.reshape(-1, a.shape[0]).sum(0)
        ga = ga.reshape(a.shape)
    if ctx.next[1][0] is not None:
        gb = matmul(a2.transpose(-1, -2), g2)
        gb = sum_to_shape(gb, b2.shape) if b.ndim > 1 else gb.reshape(-1, b.shape[0]).sum(0)
        gb = gb.reshape(b.shape)
    return ga, gb


MATMUL = defop("matmul", ["input", "other"], meta=_matmul_meta, dtypes=NUMERIC, grad=_matmul_grad, save="inputs")


@kernel(MATMUL)
def _matmul_kernel(xp):
    if xp.__name__ != "numpy":
        return lambda a, b: xp.matmul(a, b)
    blas = (xp.dtype(xp.float32), xp.dtype(xp.float64))
    matmul_ = xp.matmul

    def run(a, b):
        # ndarray.dot is the same GEMM without the ufunc machinery: 0.5 us against matmul's 1.1 us for
        # small matrices, which is most of an eager matmul's overhead there
        if a.ndim == 2 and b.ndim == 2 and a.dtype is b.dtype and a.dtype in blas:
            return a.dot(b)
        return matmul_(a, b)

    return run


def matmul(input, other):
    """Matrix product with NumPy/PyTorch semantics for 1-d and batched inputs."""
    return call(MATMUL, input, other)


# -- linear: x @ w.T + b as one op (what nn.functional.linear runs) ----------------------------------
def _linear_meta(x, w, b=None):
    op = "linear"
    dev = M.check_same_device(op, x, w, b)
    M.check_ndim(op, x, 2)
    M.check_ndim(op, w, 2, "weight")
    if x.dtype != w.dtype or (b is not None and b.dtype != x.dtype):
        raise OpTypeError(
            op,
            f"expected input, weight and bias of one dtype, got {x.dtype}, {w.dtype}"
            + ("" if b is None else f" and {b.dtype}"),
        )
    if x.shape[1] != w.shape[1]:
        raise OpError(
            op,
            f"input of shape {tuple(x.shape)} does not match weight of shape {tuple(w.shape)} "
            f"({x.shape[1]} != {w.shape[1]} in_features)",
        )
    if b is not None and tuple(b.shape) != (w.shape[0],):
        raise OpError(op, f"'bias' must have shape ({w.shape[0]},), got {tuple(b.shape)}")
    return M.TensorMeta((x.shape[0], w.shape[0]), x.dtype, dev)


def _linear_grad(ctx, g):
    inputs = ctx.inputs
    x, w = inputs[0], inputs[1]
    nxt = ctx.next
    gx = matmul(g, w) if nxt[0][0] is not None else None
    gw = matmul(g.t(), x) if nxt[1][0] is not None else None  # (out, in) and C-contiguous, as .grad keeps it
    if len(inputs) == 2:
        return gx, gw
    gb = g.sum(0) if inputs[2] is not None and nxt[2][0] is not None else None
    return gx, gw, gb


LINEAR = defop(
    "linear", ["input", "weight", "bias?"], meta=_linear_meta, dtypes=NUMERIC, grad=_linear_grad, save="inputs"
)


@kernel(LINEAR)
def _linear_kernel(xp):
    def run(x, w, b=None):
        out = xp.matmul(x, w.T)
        if b is not None:
            out += b  # in place: the product is a fresh array
        return out

    return run


def linear2d(input, weight, bias=None):
    """``input @ weight.T + bias`` for a 2-d ``input`` (N, in), ``weight`` (out, in) and ``bias`` (out,) or None.

    One op and one autograd node: the weight's gradient is computed as ``grad.T @ input``, already in the
    weight's layout. ``nn.functional.linear`` folds leading dims into N and calls this.
    """
    return call(LINEAR, input, weight, bias)


def mm(input, mat2):
    """2-d matrix product."""
    if input.ndim != 2 or mat2.ndim != 2:
        raise OpError("mm", f"expects 2-d tensors, got shapes {tuple(input.shape)} and {tuple(mat2.shape)}")
    return matmul(input, mat2)


def bmm(input, mat2):
    """Batched matrix product of 3-d tensors."""
    if input.ndim != 3 or mat2.ndim != 3:
        raise OpError("bmm", f"expects 3-d tensors, got shapes {tuple(input.shape)} and {tuple(mat2.shape)}")
    if input.shape[0] != mat2.shape[0]:
        raise OpError("bmm", f"batch sizes differ: {input.shape[0]} vs {mat2.shape[0]}")
    return matmul(input, mat2)


# -- einsum ----------------------------------------------------------------------------------------
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _einsum_parse(equation: str, shapes: list) -> tuple:
    """Normalise an equation to explicit letters (no '...', with '->'); also each letter's size.

    Returns ``(equation, sizes, terms, out)``. Size-1 dims broadcast against larger ones of the
    same letter (the caller expands those operands before calling the op).
    """
    op = "einsum"
    if not isinstance(equation, str):
        raise OpTypeError(op, f"'equation' must be a string, got {type(equation).__name__}")
    eq = equation.replace(" ", "")
    bad = set(eq) - set(_LETTERS) - set(".,->")
    if bad:
        raise OpError(op, f"invalid characters {sorted(bad)} in equation {equation!r}; subscripts are letters")
    if eq.count("->") > 1 or ("-" in eq.replace("->", "")) or (">" in eq.replace("->", "")):
        raise OpError(op, f"malformed equation {equation!r}")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise OpError(op, f"the equation {equation!r} names {len(terms)} operands, got {len(shapes)} tensors")
    used = set(c for c in eq if c.isalpha())
    free = [c for c in _LETTERS if c not in used]
    n_ell = []
    for i, (t, s) in enumerate(zip(terms, shapes)):
        if "..." in t:
            if t.count("...") > 1 or "." in t.replace("...", "", 1):
                raise OpError(op, f"operand {i} subscripts {t!r}: at most one '...' and no other dots")
            k = len(s) - (len(t) - 3)
            if k < 0:
                raise OpError(op, f"operand {i} has {len(s)} dims but its subscripts {t!r} name more")
            n_ell.append(k)
        else:
            if "." in t:
                raise OpError(op, f"operand {i} subscripts {t!r}: a dot must be part of '...'")
            if len(t) != len(s):
                raise OpError(op, f"operand {i} has {len(s)} dims but its subscripts {t!r} name {len(t)}")
            n_ell.append(0)
    m = max(n_ell, default=0)
    if m > len(free):
        raise OpError(op, "too many dims under '...'")
    ell = "".join(free[:m])
    terms = [t.replace("...", ell[m - k :]) for t, k in zip(terms, n_ell)]
    if arrow:
        if "..." in rhs:
            if rhs.count("...") > 1 or "." in rhs.replace("...", "", 1):
                raise OpError(op, f"output subscripts {rhs!r}: at most one '...' and no other dots")
            out = rhs.replace("...", ell)
        elif "." in rhs:
            raise OpError(op, f"output subscripts {rhs!r}: a dot must be part of '...'")
        else:
            out = rhs
        lhs_letters = set("".join(terms))
        for c in out:
            if c not in lhs_letters:
                raise OpError(op, f"output subscript {c!r} does not appear in any operand")
        if len(set(out)) != len(out):
            raise OpError(op, f"output subscripts {rhs!r} repeat a letter")
    else:
        allin = "".join(terms)
        out = ell + "".join(sorted(c for c in set(allin) if allin.count(c) == 1 and c not in ell))
    sizes: dict = {}
    where: dict = {}
    for i, (t, s) in enumerate(zip(terms, shapes)):
        for k, (c, n) in enumerate(zip(t, s)):
            have = sizes.get(c)
            if have is None or have == 1:
                sizes[c] = n
                where[c] = (i, k)
            elif n != 1 and n != have:
                raise OpError(
                    op,
                    f"subscript {c!r} has size {have} (operand {where[c][0]}, dim {where[c][1]}) but "
                    f"{n} (operand {i}, dim {k}); shapes {[tuple(x) for x in shapes]}",
                )
    for i, (t, s) in enumerate(zip(terms, shapes)):
        for c, n in zip(t, s):
            if t.count(c) > 1 and n != sizes[c]:
                raise OpError(op, f"operand {i} repeats subscript {c!r} over dims of different sizes {tuple(s)}")
    return ",".join(terms) + "->" + out, sizes, terms, out


def _einsum_meta(operands, equation):
    if not operands:
        raise OpError("einsum", "expected at least one operand")
    dev = M.check_same_device("einsum", *operands)
    dt = operands[0].dtype
    for i, t in enumerate(operands):
        if t.dtype != dt:
            raise OpTypeError(
                "einsum", f"operands must have the same dtype after promotion, got {dt} and {t.dtype} (operand {i})"
            )
    shapes = [tuple(t.shape) for t in operands]
    _, sizes, terms, out = _einsum_parse(equation, shapes)
    for i, (t, s) in enumerate(zip(terms, shapes)):
        if tuple(sizes[c] for c in t) != s:
            raise OpError(
                "einsum",
                f"operand {i} of shape {s} must have the full sizes {tuple(sizes[c] for c in t)} (broadcast it first)",
            )
    return M.TensorMeta(tuple(sizes[c] for c in out), dt, dev)


def _einsum_grad(ctx, g):
    from flow._creation import eye, ones

    ops = ctx.inputs[0]
    eq = ctx.attrs["equation"]
    _, sizes, terms, out = _einsum_parse(eq, [tuple(t.shape) for t in ops])
    spare = [c for c in _LETTERS if c not in set(eq)]
    grads = []
    for i, t in enumerate(terms):
        if ctx.next[i][0] is None:
            grads.append(None)
            continue
        subs = [out] + [terms[j] for j in range(len(terms)) if j != i]
        args = [g] + [ops[j] for j in range(len(terms)) if j != i]
        target, seen, k = [], set(), 0
        for c in t:
            if c in seen:  # a repeated subscript (a diagonal): fresh letter tied by an identity matrix
                c2 = spare[k]
                k += 1
                subs.append(c + c2)
                args.append(eye(sizes[c], dtype=g.dtype, device=g.device))
                target.append(c2)
            else:
                seen.add(c)
                target.append(c)
        avail = set("".join(subs))
        for c in seen:
            if c not in avail:  # summed over in this operand only: the gradient is broadcast along it
                subs.append(c)
                args.append(ones(sizes[c], dtype=g.dtype, device=g.device))
        grads.append(call(EINSUM, args, equation=",".join(subs) + "->" + "".join(target)))
    return (grads,)


EINSUM = defop(
    "einsum",
    ["*operands"],
    [Attr("equation", str)],
    meta=_einsum_meta,
    dtypes=NUMERIC,
    grad=_einsum_grad,
    save="inputs",
)


@kernel(EINSUM)
def _einsum_kernel(xp):
    def run(operands, equation):
        r = xp.einsum(equation, *operands, optimize=len(operands) > 1)
        r = xp.asarray(r)
        if len(operands) == 1 or r.dtype != operands[0].dtype:  # never alias the input; keep the dtype
            r = r.astype(operands[0].dtype, copy=True)
        return r

    return run


def einsum(equation: str, *operands):
    """Einstein summation (``'ij,jk->ik'``), with '...' and implicit outputs, as ``torch.einsum``."""
    from flow._tensor import Tensor

    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    for i, t in enumerate(operands):
        if not isinstance(t, Tensor):
            raise OpTypeError("einsum", f"operand {i} must be a Tensor, got {type(t).__name__}")
    if not operands:
        raise OpError("einsum", "expected at least one operand")
    dt = operands[0].dtype
    for t in operands[1:]:
        dt = D.promote_types(dt, t.dtype)
    ops = [t if t.dtype is dt else t.to(dt) for t in operands]
    eq, sizes, terms, _ = _einsum_parse(equation, [tuple(t.shape) for t in ops])
    ops = [
        t if tuple(t.shape) == tuple(sizes[c] for c in s) else t.expand(*[sizes[c] for c in s])
        for t, s in zip(ops, terms)
    ]
    return call(EINSUM, ops, equation=eq)


# -- products written with other ops ----------------------------------------------------------------
def _check_nd(op, x, nd, arg):
    from flow._tensor import Tensor

    if not isinstance(x, Tensor):
        raise OpTypeError(op, f"'{arg}' must be a Tensor, got {type(x).__name__}")
    if x.ndim != nd:
        raise OpError(op, f"'{arg}' must be {nd}-d, got shape {tuple(x.shape)}")


@composite("dot")
def dot(input, other):
    """Dot product of two 1-d tensors of the same dtype and length."""
    _check_nd("dot", input, 1, "input")
    _check_nd("dot", other, 1, "other")
    if input.dtype is not other.dtype:
        raise OpTypeError("dot", f"expected both vectors to have the same dtype, got {input.dtype} and {other.dtype}")
    if input.shape[0] != other.shape[0]:
        raise OpError("dot", f"inconsistent sizes: 'input' has {input.shape[0]} elements, 'other' {other.shape[0]}")
    return matmul(input, other)


vdot = dot


def outer(input, vec2):
    """Outer product of two 1-d tensors (dtypes promoted)."""
    _check_nd("outer", input, 1, "input")
    _check_nd("outer", vec2, 1, "vec2")
    return input.reshape(-1, 1) * vec2.reshape(1, -1)


ger = outer


def inner(input, other):
    """Sum over the last dims of both (a product with a 0-d operand)."""
    if input.ndim == 0 or other.ndim == 0:
        return input * other
    if input.shape[-1] != other.shape[-1]:
        raise OpError("inner", f"the last dims must match, got shapes {tuple(input.shape)} and {tuple(other.shape)}")
    return tensordot(input, other, ([-1], [-1]))


def tensordot(a, b, dims=2):
    """Contract ``dims`` (an int: last of ``a`` with first of ``b``; or two lists of dims)."""
    if isinstance(dims, int):
        if dims < 0 or dims > min(a.ndim, b.ndim):
            raise OpError(
                "tensordot",
                f"dims={dims} must be in [0, {min(a.ndim, b.ndim)}] for shapes {tuple(a.shape)} and {tuple(b.shape)}",
            )
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
        if len(da) != len(db):
            raise OpError("tensordot", f"both dim lists must have the same length, got {da} and {db}")
        da = list(M.wrap_dims("tensordot", da, a.ndim))
        db = list(M.wrap_dims("tensordot", db, b.ndim))
    for i, j in zip(da, db):
        if a.shape[i] != b.shape[j]:
            raise OpError(
                "tensordot",
                f"contracted dims differ in size: dim {i} of 'a' {tuple(a.shape)} and dim {j} of 'b' {tuple(b.shape)}",
            )
    ra = [i for i in range(a.ndim) if i not in da]
    rb = [j for j in range(b.ndim) if j not in db]
    k = 1
    for i in da:
        k *= a.shape[i]
    am = a.permute(*(ra + da)).reshape(-1, k)
    bm = b.permute(*(db + rb)).reshape(k, -1)
    return matmul(am, bm).reshape(*[a.shape[i] for i in ra], *[b.shape[j] for j in rb])


@composite("mv")
def mv(input, vec):
    """Matrix-vector product."""
    _check_nd("mv", input, 2, "input")
    _check_nd("mv", vec, 1, "vec")
    return matmul(input, vec)


def _scaled_add(op, input, prod, beta, alpha):
    shape = tuple(prod.shape)
    try:
        ok = M.broadcast_shapes(op, tuple(input.shape), shape) == shape
    except OpError:
        ok = False
    if not ok:
        raise OpError(op, f"'input' of shape {tuple(input.shape)} cannot be broadcast to the product's shape {shape}")
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:
        return prod
    return prod + (input if beta == 1 else input * beta)


@composite("addmm")
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat1 @ mat2)`` (``input`` broadcast; ignored when ``beta == 0``)."""
    return _scaled_add("addmm", input, mm(mat1, mat2), beta, alpha)


def addmv(input, mat, vec, *, beta=1, alpha=1):
    return _scaled_add("addmv", input, mv(mat, vec), beta, alpha)


def addr(input, vec1, vec2, *, beta=1, alpha=1):
    return _scaled_add("addr", input, outer(vec1, vec2), beta, alpha)


@composite("baddbmm")
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    return _scaled_add("baddbmm", input, bmm(batch1, batch2), beta, alpha)


@composite("addbmm")
def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    return _scaled_add("addbmm", input, bmm(batch1, batch2).sum(0), beta, alpha)


# -- opcheck samples ------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def _mm_samples():
    yield SampleInput((S.uniform((3, 4), seed=1), S.uniform((4, 5), seed=2)))
    yield SampleInput((S.uniform((2, 3, 4), seed=3), S.uniform((4, 2), seed=4)))
    yield SampleInput((S.uniform((2, 1, 3, 4), seed=5), S.uniform((3, 4, 2), seed=6)))
    yield SampleInput((S.uniform((4,), seed=7), S.uniform((4, 3), seed=8)))
    yield SampleInput((S.uniform((3, 4), seed=9), S.uniform((4,), seed=10)))
    yield SampleInput((S.uniform((4,), seed=11), S.uniform((4,), seed=12)))
    yield SampleInput((S.ints((3, 4), -3, 3, seed=13), S.ints((4, 2), -3, 3, seed=14)))
    a = S.uniform((3, 4), seed=1)
    yield ErrorInput((a, S.uniform((5, 2))), {}, OpError, "cannot be multiplied (4 != 5)")
    yield ErrorInput((a, S.uniform(())), {}, OpError, "at least 1 dimension")
    yield ErrorInput((S.uniform((2, 3, 4)), S.uniform((3, 4, 2))), {}, OpError, "cannot be broadcast")
    yield ErrorInput((a, S.ints((4, 2))), {}, OpTypeError, "same dtype")


set_samples(MATMUL, _mm_samples)


def _linear_samples():
    yield SampleInput((S.uniform((3, 4), seed=1), S.uniform((5, 4), seed=2), S.uniform((5,), seed=3)))
    yield SampleInput((S.uniform((2, 3), seed=4), S.uniform((4, 3), seed=5)))
    yield SampleInput((S.uniform((1, 1), seed=6), S.uniform((2, 1), seed=7), S.uniform((2,), seed=8)))
    x, w, b = S.uniform((3, 4), seed=1), S.uniform((5, 4), seed=2), S.uniform((5,), seed=3)
    yield ErrorInput((x, S.uniform((5, 3)), b), {}, OpError, "does not match weight")
    yield ErrorInput((x, w, S.uniform((4,))), {}, OpError, "'bias' must have shape (5,)")
    yield ErrorInput((x[0], w, b), {}, OpError, "'input' must be 2-d")
    yield ErrorInput((x, w[0], b), {}, OpError, "'weight' must be 2-d")
    yield ErrorInput((x, w, S.ints((5,))), {}, OpTypeError, "of one dtype")


set_samples(LINEAR, _linear_samples)


def _einsum_samples():
    u = S.uniform
    yield SampleInput(([u((3, 4), seed=1), u((4, 5), seed=2)],), {"equation": "ij,jk->ik"})
    yield SampleInput(([u((2, 3, 4), seed=3), u((2, 4), seed=4)],), {"equation": "bij,bj->bi"})
    yield SampleInput(([u((3, 3), seed=5)],), {"equation": "ii->i"})
    yield SampleInput(([u((3, 3, 2), seed=6), u((4,), seed=7)],), {"equation": "iij,k->jk"})
    yield SampleInput(([u((2, 3), seed=8), u((3, 4), seed=9), u((4,), seed=10)],), {"equation": "ij,jk,k->"})
    yield SampleInput(([u((2, 5), seed=11)],), {"equation": "ij->ji"})
    a, b = u((3, 4), seed=1), u((4, 5), seed=2)
    yield ErrorInput(([a, b],), {"equation": "i1,jk->ik"}, OpError, "invalid characters")
    yield ErrorInput(([a, b],), {"equation": "ij->j"}, OpError, "names 1 operands, got 2 tensors")
    yield ErrorInput(([a, u((5, 5))],), {"equation": "ij,jk->ik"}, OpError, "subscript 'j' has size 4")
    yield ErrorInput(([a, b],), {"equation": "ijk,jk->ik"}, OpError, "has 2 dims but its subscripts")
    yield ErrorInput(([a, b],), {"equation": "ij,jk->iz"}, OpError, "does not appear in any operand")
    yield ErrorInput(([a, b],), {"equation": "ij,jk->ii"}, OpError, "repeat a letter")
    yield ErrorInput(([a, b],), {"equation": "i.j,jk->ik"}, OpError, "part of '...'")
    yield ErrorInput(([u((1, 3))],), {"equation": "ii->i"}, OpError, "different sizes")
    yield ErrorInput(([a, S.ints((4, 5))],), {"equation": "ij,jk->ik"}, OpTypeError, "same dtype")


set_samples(EINSUM, _einsum_samples)

__all__ = [
    "matmul",
    "mm",
    "bmm",
    "einsum",
    "dot",
    "vdot",
    "outer",
    "ger",
    "inner",
    "tensordot",
    "mv",
    "addmm",
    "addmv",
    "addr",
    "baddbmm",
    "addbmm",
]
