"""Matrix decompositions and solvers as ops (``linalg_inv``, ``linalg_det``, ``linalg_svd`` ...).

Each op works on the last two dims and batches over the leading ones, as ``torch.linalg``. The
kernels are NumPy's LAPACK wrappers; the gradients are the standard closed forms, written with flow
ops so they can be differentiated again. ``linalg_cholesky`` and ``linalg_eigh`` read the symmetric
part ``(A + A^T) / 2`` of their input: the same result as PyTorch (which reads one triangle) for
symmetric input, and a gradient that is the true one, so finite differences agree with it. The
Python API is in :mod:`flow.linalg`.
"""

from __future__ import annotations

import numpy as np

from flow._dispatch import call
from flow.errors import OpError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.ops._grad_util import sum_to_shape
from flow.registry.ops import Attr, dtypes

# As PyTorch on the CPU: LAPACK has no half-precision routines.
LINALG_FLOAT = dtypes(names=["float32", "float64"], text="a float32 or float64 tensor")


def _square_meta(op: str, a, arg: str = "A") -> tuple:
    s = tuple(a.shape)
    if len(s) < 2:
        raise OpError(op, f"'{arg}' must have at least 2 dimensions (a batch of matrices), got shape {s}")
    if s[-1] != s[-2]:
        raise OpError(op, f"'{arg}' must be a batch of square matrices, got shape {s}")
    return s


def _lapack(op: str, what: str, fn, *arrays):
    # LAPACK reports a failure (singular, not positive-definite) by raising; name the op and the cause
    try:
        return fn(*arrays)
    except np.linalg.LinAlgError as e:
        raise OpError(op, f"{what} ({e})") from None


def _mT(x):
    return x.transpose(-1, -2)


def _eye_like(x, n: int):
    from flow._creation import eye

    return eye(n, dtype=x.dtype, device=x.device)


# -- inverse ---------------------------------------------------------------------------------------
def _inv_meta(a):
    dev = M.check_same_device("linalg_inv", a)
    return M.TensorMeta(_square_meta("linalg_inv", a), a.dtype, dev)


def _inv_grad(ctx, g):
    it = _mT(ctx.outputs[0])
    return (-(it @ g @ it),)


LINALG_INV = defop("linalg_inv", ["A"], meta=_inv_meta, dtypes=LINALG_FLOAT, grad=_inv_grad, save="outputs")


@kernel(LINALG_INV)
def _inv_kernel(xp):
    def run(a):
        return _lapack("linalg_inv", "the matrix is singular", xp.linalg.inv, a)

    return run


# -- determinant, log-determinant ------------------------------------------------------------------
def _det_meta(a):
    dev = M.check_same_device("linalg_det", a)
    return M.TensorMeta(_square_meta("linalg_det", a)[:-2], a.dtype, dev)


def _det_grad(ctx, g):
    # d det(A) = det(A) tr(A^-1 dA): needs an invertible A (as the closed form does in PyTorch's non-singular path)
    a, d = ctx.inputs[0], ctx.outputs[0]
    return ((g * d).unsqueeze(-1).unsqueeze(-1) * _mT(call(LINALG_INV, a)),)


LINALG_DET = defop("linalg_det", ["A"], meta=_det_meta, dtypes=LINALG_FLOAT, grad=_det_grad, save="both")


@kernel(LINALG_DET)
def _det_kernel(xp):
    def run(a):
        return xp.asarray(xp.linalg.det(a)).astype(a.dtype, copy=False)

    return run


def _slogdet_meta(a):
    dev = M.check_same_device("linalg_slogdet", a)
    s = _square_meta("linalg_slogdet", a)[:-2]
    return M.TensorMeta(s, a.dtype, dev), M.TensorMeta(s, a.dtype, dev)


def _slogdet_grad(ctx, g_sign, g_logabs):
    # the sign is piecewise constant: only log|det A| carries a gradient, A^-T
    a = ctx.inputs[0]
    return (g_logabs.unsqueeze(-1).unsqueeze(-1) * _mT(call(LINALG_INV, a)),)


LINALG_SLOGDET = defop(
    "linalg_slogdet",
    ["A"],
    outputs=("sign", "logabsdet"),
    meta=_slogdet_meta,
    dtypes=LINALG_FLOAT,
    grad=_slogdet_grad,
    save="inputs",
)


@kernel(LINALG_SLOGDET)
def _slogdet_kernel(xp):
    def run(a):
        sign, logabs = xp.linalg.slogdet(a)
        return xp.asarray(sign).astype(a.dtype, copy=False), xp.asarray(logabs).astype(a.dtype, copy=False)

    return run


# -- solve -----------------------------------------------------------------------------------------
def _solve_meta(a, b):
    op = "linalg_solve"
    dev = M.check_same_device(op, a, b)
    sa = _square_meta(op, a)
    sb = tuple(b.shape)
    if a.dtype != b.dtype:
        raise OpError(op, f"expected 'A' and 'B' of one dtype, got {a.dtype} and {b.dtype}")
    if len(sb) < 2 or sb[-2] != sa[-1]:
        raise OpError(op, f"'B' of shape {sb} must be (..., {sa[-1]}, k) to match 'A' of shape {sa}")
    batch = M.broadcast_shapes(op, sa[:-2], sb[:-2])
    return M.TensorMeta(batch + sb[-2:], a.dtype, dev)


def _solve_grad(ctx, g):
    a, b = ctx.inputs
    x = ctx.outputs[0]
    gb = call(LINALG_SOLVE, _mT(a), g)  # A^T gB = g
    ga = -(gb @ _mT(x)) if ctx.next[0][0] is not None else None
    ga = sum_to_shape(ga, tuple(a.shape)) if ga is not None else None
    return ga, sum_to_shape(gb, tuple(b.shape))


LINALG_SOLVE = defop("linalg_solve", ["A", "B"], meta=_solve_meta, dtypes=LINALG_FLOAT, grad=_solve_grad, save="both")


@kernel(LINALG_SOLVE)
def _solve_kernel(xp):
    def run(a, b):
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a = xp.broadcast_to(a, batch + a.shape[-2:])
        b = xp.broadcast_to(b, batch + b.shape[-2:])
        return _lapack("linalg_solve", "the matrix 'A' is singular", xp.linalg.solve, a, b)

    return run


# -- Cholesky --------------------------------------------------------------------------------------
def _cholesky_meta(a, upper=False):
    dev = M.check_same_device("linalg_cholesky", a)
    return M.TensorMeta(_square_meta("linalg_cholesky", a), a.dtype, dev)


def _cholesky_grad(ctx, g):
    from flow.ops.shape_ops import tril

    out = ctx.outputs[0]
    upper = ctx.attrs.get("upper", False)
    lo = _mT(out) if upper else out
    gl = _mT(g) if upper else g
    # P = Phi(L^T gL) (lower triangle, half diagonal); S = L^-T P L^-1; gA = sym(S)
    p = tril(_mT(lo) @ gl)
    p = p - 0.5 * (p * _eye_like(p, p.shape[-1]))
    li = call(LINALG_INV, lo)
    s = _mT(li) @ p @ li
    return (0.5 * (s + _mT(s)),)


LINALG_CHOLESKY = defop(
    "linalg_cholesky",
    ["A"],
    [Attr("upper", bool, False)],
    meta=_cholesky_meta,
    dtypes=LINALG_FLOAT,
    grad=_cholesky_grad,
    save="outputs",
)


@kernel(LINALG_CHOLESKY)
def _cholesky_kernel(xp):
    def run(a, upper=False):
        sym = (a + xp.swapaxes(a, -1, -2)) * a.dtype.type(0.5)
        lo = _lapack("linalg_cholesky", "the input is not positive-definite", xp.linalg.cholesky, sym)
        return xp.ascontiguousarray(xp.swapaxes(lo, -1, -2)) if upper else lo

    return run


# -- QR --------------------------------------------------------------------------------------------
_QR_MODES = ("reduced", "complete", "r")


def _qr_meta(a, mode="reduced"):
    op = "linalg_qr"
    dev = M.check_same_device(op, a)
    s = tuple(a.shape)
    if len(s) < 2:
        raise OpError(op, f"'A' must have at least 2 dimensions, got shape {s}")
    if mode not in _QR_MODES:
        raise OpError(op, f"'mode' must be one of {_QR_MODES}, got {mode!r}")
    m, n = s[-2:]
    k = min(m, n)
    if mode == "r":
        return M.TensorMeta((0,), a.dtype, dev), M.TensorMeta(s[:-2] + (k, n), a.dtype, dev)
    kq = m if mode == "complete" else k
    return M.TensorMeta(s[:-2] + (m, kq), a.dtype, dev), M.TensorMeta(s[:-2] + (kq, n), a.dtype, dev)


def _qr_grad_tall(q, r, gq, gr):
    # m >= n: gA = Q (gR + tril(M) R^-T) + (gQ - Q Q^T gQ) R^-T with M = skew(Q^T gQ) + skew(R gR^T)
    from flow.ops.shape_ops import tril

    qdq = _mT(q) @ gq
    rdr = r @ _mT(gr)
    m = tril(qdq - _mT(qdq) + rdr - _mT(rdr))
    rit = _mT(call(LINALG_INV, r))
    return q @ (gr + m @ rit) + (gq - q @ qdq) @ rit


def _qr_grad(ctx, gq, gr):
    a = ctx.inputs[0]
    q, r = ctx.outputs
    mode = ctx.attrs.get("mode", "reduced")
    m, n = tuple(a.shape)[-2:]
    if mode == "r":
        raise OpError("linalg_qr", "the derivative of QR needs Q, which mode='r' does not compute")
    if mode == "complete" and m > n:
        raise OpError("linalg_qr", "QR is not differentiable with mode='complete' and more rows than columns")
    if m >= n:
        return (_qr_grad_tall(q, r, gq, gr),)
    # m < n: A = [X | Y] with X = Q U square; Y = Q V adds Q gV^T-like terms to Q's gradient
    from flow.ops.shape_ops import cat

    y = a[..., m:]
    u, gu, gv = r[..., :m], gr[..., :m], gr[..., m:]
    gx = _qr_grad_tall(q, u, gq + y @ _mT(gv), gu)
    return (cat([gx, q @ gv], dim=-1),)


LINALG_QR = defop(
    "linalg_qr",
    ["A"],
    [Attr("mode", str, "reduced")],
    outputs=("Q", "R"),
    meta=_qr_meta,
    dtypes=LINALG_FLOAT,
    grad=_qr_grad,
    save="both",
)


@kernel(LINALG_QR)
def _qr_kernel(xp):
    def run(a, mode="reduced"):
        if mode == "r":
            return xp.zeros((0,), a.dtype), xp.linalg.qr(a, mode="r").astype(a.dtype, copy=False)
        q, r = xp.linalg.qr(a, mode=mode)
        return q.astype(a.dtype, copy=False), r.astype(a.dtype, copy=False)

    return run


# -- symmetric eigendecomposition ------------------------------------------------------------------
def _eigh_meta(a):
    dev = M.check_same_device("linalg_eigh", a)
    s = _square_meta("linalg_eigh", a)
    return M.TensorMeta(s[:-1], a.dtype, dev), M.TensorMeta(s, a.dtype, dev)


def _inv_gaps(w):
    # F[i, j] = 1 / (w_j - w_i) off the diagonal, 0 on it (distinct eigen/singular values assumed)
    e = w.unsqueeze(-2) - w.unsqueeze(-1)
    eye = _eye_like(e, e.shape[-1])
    return (1.0 - eye) / (e + eye)


def _eigh_grad(ctx, gl, gv):
    from flow.ops.views import diag_embed

    w, v = ctx.outputs
    inner = diag_embed(gl) + _inv_gaps(w) * (_mT(v) @ gv)
    g = v @ inner @ _mT(v)
    return (0.5 * (g + _mT(g)),)


LINALG_EIGH = defop(
    "linalg_eigh",
    ["A"],
    outputs=("eigenvalues", "eigenvectors"),
    meta=_eigh_meta,
    dtypes=LINALG_FLOAT,
    grad=_eigh_grad,
    save="outputs",
)


@kernel(LINALG_EIGH)
def _eigh_kernel(xp):
    def run(a):
        sym = (a + xp.swapaxes(a, -1, -2)) * a.dtype.type(0.5)
        w, v = _lapack("linalg_eigh", "the eigenvalue iteration did not converge", xp.linalg.eigh, sym)
        return w.astype(a.dtype, copy=False), v.astype(a.dtype, copy=False)

    return run


# -- SVD -------------------------------------------------------------------------------------------
def _svd_meta(a, full_matrices=True):
    op = "linalg_svd"
    dev = M.check_same_device(op, a)
    s = tuple(a.shape)
    if len(s) < 2:
        raise OpError(op, f"'A' must have at least 2 dimensions, got shape {s}")
    b, (m, n) = s[:-2], s[-2:]
    k = min(m, n)
    ku, kv = (m, n) if full_matrices else (k, k)
    return (
        M.TensorMeta(b + (m, ku), a.dtype, dev),
        M.TensorMeta(b + (k,), a.dtype, dev),
        M.TensorMeta(b + (kv, n), a.dtype, dev),
    )


def _svd_grad(ctx, gu, gs, gvh):
    from flow.ops.views import diag_embed

    a = ctx.inputs[0]
    u, s, vh = ctx.outputs
    m, n = tuple(a.shape)[-2:]
    k = min(m, n)
    if ctx.attrs.get("full_matrices", True) and m != n:
        # the extra columns of U (or rows of Vh) are not unique: as PyTorch, no derivative through them
        u, vh, gu, gvh = u[..., :k], vh[..., :k, :], gu[..., :k], gvh[..., :k, :]
    v, gv = _mT(vh), _mT(gvh)
    f = _inv_gaps(s * s)
    j = f * (_mT(u) @ gu - _mT(gu) @ u)
    kk = f * (_mT(v) @ gv - _mT(gv) @ v)
    inner = j * s.unsqueeze(-2) + diag_embed(gs) + s.unsqueeze(-1) * kk
    ga = u @ inner @ vh
    sinv = 1.0 / s
    if m > k:  # the part of gU outside U's span
        ga = ga + (gu - u @ (_mT(u) @ gu)) @ (sinv.unsqueeze(-1) * vh)
    if n > k:  # the part of gV outside V's span
        ga = ga + (u * sinv.unsqueeze(-2)) @ _mT(gv - v @ (_mT(v) @ gv))
    return (ga,)


LINALG_SVD = defop(
    "linalg_svd",
    ["A"],
    [Attr("full_matrices", bool, True)],
    outputs=("U", "S", "Vh"),
    meta=_svd_meta,
    dtypes=LINALG_FLOAT,
    grad=_svd_grad,
    save="both",
)


@kernel(LINALG_SVD)
def _svd_kernel(xp):
    def run(a, full_matrices=True):
        u, s, vh = _lapack("linalg_svd", "the SVD did not converge", xp.linalg.svd, a, full_matrices)
        return u.astype(a.dtype, copy=False), s.astype(a.dtype, copy=False), vh.astype(a.dtype, copy=False)

    return run


# -- opcheck samples -------------------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import ErrorInput, SampleInput  # noqa: E402


def well_conditioned(shape, seed: int = 0):
    """Random square matrices plus ``n I``: far from singular, so finite differences are stable."""
    a = S.rng(seed).uniform(-1.0, 1.0, size=shape) + shape[-1] * np.eye(shape[-1])
    return S.t(a)


def spd(shape, seed: int = 0):
    """Symmetric positive-definite matrices with distinct eigenvalues."""
    a = S.rng(seed).uniform(-1.0, 1.0, size=shape)
    n = shape[-1]
    return S.t(a @ np.swapaxes(a, -1, -2) + np.diag(np.arange(1.0, n + 1.0)))


def _square_errors():
    yield ErrorInput((S.uniform((3, 4)),), {}, OpError, "square matrices")
    yield ErrorInput((S.uniform((3,)),), {}, OpError, "at least 2 dimensions")


def _singular():
    return S.t(np.array([[1.0, 2.0], [2.0, 4.0]]))


def _inv_samples():
    yield SampleInput((well_conditioned((3, 3), 1),))
    yield SampleInput((well_conditioned((2, 4, 4), 2),))
    yield from _square_errors()
    yield ErrorInput((_singular(),), {}, OpError, "singular", values=True)


def _det_samples():
    yield SampleInput((well_conditioned((3, 3), 1),))
    yield SampleInput((well_conditioned((2, 2, 2), 2),))
    yield SampleInput((S.t(-np.eye(3) + 0.1),))  # a negative determinant
    yield from _square_errors()


def _solve_samples():
    yield SampleInput((well_conditioned((3, 3), 1), S.uniform((3, 2), seed=2)))
    yield SampleInput((well_conditioned((2, 3, 3), 3), S.uniform((3, 1), seed=4)))
    yield SampleInput((well_conditioned((3, 3), 5), S.uniform((2, 3, 2), seed=6)))
    yield ErrorInput((S.uniform((3, 4)), S.uniform((3, 2))), {}, OpError, "square matrices")
    yield ErrorInput((well_conditioned((3, 3)), S.uniform((4, 2))), {}, OpError, "must be (..., 3, k)")
    yield ErrorInput((well_conditioned((2, 3, 3)), S.uniform((3, 3, 1))), {}, OpError, "cannot be broadcast")
    yield ErrorInput((_singular(), S.uniform((2, 1))), {}, OpError, "singular", values=True)


def _cholesky_samples():
    for upper in (False, True):
        yield SampleInput((spd((3, 3), 1),), {"upper": upper})
        yield SampleInput((spd((2, 4, 4), 2),), {"upper": upper})
    yield from _square_errors()
    yield ErrorInput((S.t(-np.eye(2)),), {}, OpError, "not positive-definite", values=True)


def _qr_samples():
    yield SampleInput((S.uniform((4, 3), seed=1),), {"mode": "reduced"})
    yield SampleInput((S.uniform((2, 3, 3), seed=2),), {"mode": "complete"})
    yield SampleInput((S.uniform((3, 5), seed=3),), {"mode": "reduced"})
    yield SampleInput((S.uniform((4, 3), seed=4),), {"mode": "r"}, grad=False)
    yield ErrorInput((S.uniform((3,)),), {}, OpError, "at least 2 dimensions")
    yield ErrorInput((S.uniform((3, 3)),), {"mode": "full"}, OpError, "'mode' must be one of")


def _eigh_samples():
    yield SampleInput((spd((3, 3), 1),))
    yield SampleInput((spd((2, 4, 4), 2),))
    yield from _square_errors()


def _svd_samples():
    yield SampleInput((S.uniform((4, 3), seed=1),), {"full_matrices": False})
    yield SampleInput((S.uniform((2, 3, 5), seed=2),), {"full_matrices": False})
    yield SampleInput((S.uniform((3, 3), seed=3),), {"full_matrices": True})
    yield SampleInput((S.uniform((4, 2), seed=4),), {"full_matrices": True}, grad=False)
    yield ErrorInput((S.uniform((3,)),), {}, OpError, "at least 2 dimensions")


set_samples(LINALG_INV, _inv_samples)
set_samples(LINALG_DET, _det_samples)
set_samples(LINALG_SLOGDET, _det_samples)
set_samples(LINALG_SOLVE, _solve_samples)
set_samples(LINALG_CHOLESKY, _cholesky_samples)
set_samples(LINALG_QR, _qr_samples)
set_samples(LINALG_EIGH, _eigh_samples)
set_samples(LINALG_SVD, _svd_samples)

__all__: list = []  # the Python API is flow.linalg (and the torch-style aliases in flow.ops.linalg_api)
