"""Matrix products: matmul (more in this module as they are added)."""

from __future__ import annotations

from flow._dispatch import call
from flow.errors import OpError, OpTypeError
from flow.ops import meta as M
from flow.ops._define import defop, kernel
from flow.ops._grad_util import sum_to_shape


def _matmul_meta(a, b):
    dev = M.check_same_device("matmul", a, b)
    if a.dtype != b.dtype:
        raise OpTypeError("matmul", f"expected both inputs to have the same dtype, got {a.dtype} and {b.dtype}")
    if a.dtype.category == 0:
        raise OpTypeError("matmul", "bool tensors are not supported")
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


MATMUL = defop("matmul", ["input", "other"], meta=_matmul_meta, grad=_matmul_grad, save="inputs")


@kernel(MATMUL)
def _matmul_kernel(xp):
    def run(a, b):
        return xp.matmul(a, b)

    return run


def matmul(input, other):
    """Matrix product with NumPy/PyTorch semantics for 1-d and batched inputs."""
    return call(MATMUL, input, other)


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



# -- opcheck samples ------------------------------------------------------------------
from flow.ops import _samples as S  # noqa: E402
from flow.ops._define import set_samples  # noqa: E402
from flow.testing import SampleInput  # noqa: E402


def _mm_samples():
    yield SampleInput((S.uniform((3, 4), seed=1), S.uniform((4, 5), seed=2)))
    yield SampleInput((S.uniform((2, 3, 4), seed=3), S.uniform((4, 2), seed=4)))
    yield SampleInput((S.uniform((2, 1, 3, 4), seed=5), S.uniform((3, 4, 2), seed=6)))
    yield SampleInput((S.uniform((4,), seed=7), S.uniform((4, 3), seed=8)))
    yield SampleInput((S.uniform((3, 4), seed=9), S.uniform((4,), seed=10)))
    yield SampleInput((S.uniform((4,), seed=11), S.uniform((4,), seed=12)))


set_samples(MATMUL, _mm_samples)

__all__ = ["matmul", "mm", "bmm"]
