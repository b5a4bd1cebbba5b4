"""SBP rules of the movement and shape ops: which logical dim a split lands on.

Copies and casts keep any layout (``cast_like``'s second input, read only for its dtype, any
layout). ``permute`` moves the split with its dim; ``expand`` keeps a
split of a dim it does not grow; ``reshape`` keeps a split of a dim that survives (the products
of the dims before it agree, and its length is kept, or is merged or divided in a way the
pieces still line up: every piece a whole number of the rows that follow); indexing keeps splits
of dims it takes whole; ``cat``/``stack``/``split``/``unbind`` keep splits of other dims. They
are linear, so partial sums pass through (a pad only with zeros; not ``cast_like``, whose rule
cannot see the dtype it casts to).
"""

from __future__ import annotations

import math

from flow_dist.rules.base import B, P, RuleContext, S, Sig, same_layout


def _local_shape(attrs, in_shapes, out_shapes):
    a = dict(attrs)
    a["shape"] = tuple(out_shapes[0])
    return a


def copy_like(ctx: RuleContext) -> list:
    return same_layout(ctx, partial=ctx.op.name != "cast" or "float" in str(ctx.attr("dtype", "")))


def cast_like(ctx: RuleContext) -> list:
    """``x``'s layout passes through; ``other`` is read only for its dtype, so any layout of it
    will do. No partial sums: a rule does not see dtypes, and rounding each rank's partial piece
    to an integer dtype is not the rounding of their sum."""
    return same_layout(ctx, partial=False)


def permute(ctx: RuleContext) -> list:
    dims = [d % ctx.ndim(0) for d in ctx.attr("dims")]
    sigs = [Sig((B,), (B,)), Sig((P,), (P,))]
    for d in range(ctx.ndim(0)):
        sigs.append(Sig((S(d),), (S(dims.index(d)),)))
    return sigs


def expand(ctx: RuleContext) -> list:
    ins, out = ctx.shapes[0], ctx.out_shapes[0]
    off = len(out) - len(ins)
    sigs = [Sig((B,), (B,)), Sig((P,), (P,), local_attrs=_local_shape)]
    for d in range(len(ins)):
        if ins[d] == out[d + off]:
            sigs.append(Sig((S(d),), (S(d + off),), local_attrs=_local_shape))
    return sigs


def reshape(ctx: RuleContext) -> list:
    ins, out = tuple(ctx.shapes[0]), tuple(ctx.out_shapes[0])
    n = ctx.axis_size
    sigs = [Sig((B,), (B,)), Sig((P,), (P,), local_attrs=_local_shape)]
    for d in range(len(ins)):
        before = math.prod(ins[:d])
        for e in range(len(out)):
            if math.prod(out[:e]) != before:
                continue
            li, lo = ins[d], out[e]
            if li == 0 or lo == 0:
                continue
            if li == lo or (lo % li == 0 and li % n == 0) or (li % lo == 0 and lo % n == 0):
                # the same dim, a dim merged with the ones after it, or divided into several
                sigs.append(Sig((S(d),), (S(e),), local_attrs=_local_shape))
                break
    return sigs


def _walk_index(index: tuple, ndim: int) -> dict:
    """{input dim: output dim} for the dims a basic index takes whole."""
    full = {}
    d = o = 0
    for entry in index:
        if entry is None:
            o += 1
        elif isinstance(entry, tuple):
            start, stop, step = entry
            if (start in (None, 0)) and stop is None and step in (None, 1):
                full[d] = o
            d += 1
            o += 1
        else:  # an int: the dim goes away
            d += 1
    for rest in range(d, ndim):
        full[rest] = o + rest - d
    return full


def basic_index(ctx: RuleContext) -> list:
    full = _walk_index(ctx.attr("index"), ctx.ndim(0))
    sigs = [Sig((B,), (B,)), Sig((P,), (P,))]
    for d, o in full.items():
        sigs.append(Sig((S(d),), (S(o),)))
    return sigs


def basic_index_put(ctx: RuleContext) -> list:
    full = _walk_index(ctx.attr("index"), ctx.ndim(0))
    sigs = [Sig((B, B), (B,)), Sig((P, P), (P,))]
    for d, o in full.items():
        sigs.append(Sig((S(d), S(o)), (S(d),)))
    return sigs


def _other_dims(ctx: RuleContext, dim_in: int, shift) -> list:
    n = ctx.n
    n_out = len(ctx.out_shapes)
    sigs = [Sig((B,) * n, (B,) * n_out), Sig((P,) * n, (P,) * n_out)]
    for d in range(ctx.ndim(0)):
        if d != dim_in:
            sigs.append(Sig((S(d),) * n, (S(shift(d)),) * n_out))
    return sigs


def cat(ctx: RuleContext) -> list:
    dim = ctx.attr("dim", 0) % max(ctx.ndim(0), 1)
    return _other_dims(ctx, dim, lambda d: d)


def stack(ctx: RuleContext) -> list:
    dim = ctx.attr("dim", 0) % (ctx.ndim(0) + 1)
    return _other_dims(ctx, -1, lambda d: d if d < dim else d + 1)


def split(ctx: RuleContext) -> list:
    dim = ctx.attr("dim", 0) % max(ctx.ndim(0), 1)
    return _other_dims(ctx, dim, lambda d: d)


def unbind(ctx: RuleContext) -> list:
    dim = ctx.attr("dim", 0) % max(ctx.ndim(0), 1)
    return _other_dims(ctx, dim, lambda d: d if d < dim else d - 1)


def _not_dims(ctx: RuleContext, dims, partial: bool = True) -> list:
    nd = ctx.ndim(0)
    dims = {d % nd for d in dims} if nd else set()
    return same_layout(ctx, partial=partial, skip=tuple(dims))


def flip(ctx):
    return _not_dims(ctx, ctx.attr("dims"))


def roll(ctx):
    dims = ctx.attr("dims")
    return _not_dims(ctx, range(ctx.ndim(0)) if dims is None else dims)


def tril_triu(ctx):
    nd = ctx.ndim(0)
    return _not_dims(ctx, (nd - 2, nd - 1))


def constant_pad(ctx):
    pad = ctx.attr("pad")
    nd = ctx.ndim(0)
    padded = [nd - 1 - i // 2 for i in range(len(pad)) if pad[i]]
    return _not_dims(ctx, padded, partial=ctx.attr("value", 0) == 0)


def index_select(ctx: RuleContext) -> list:
    if ctx.ndim(0) == 0:
        return [Sig((B, B), (B,))]
    dim = ctx.attr("dim") % ctx.ndim(0)
    sigs = [Sig((B, B), (B,)), Sig((P, B), (P,)), Sig((B, S(0)), (S(dim),))]
    for d in range(ctx.ndim(0)):
        if d != dim:
            sigs.append(Sig((S(d), B), (S(d),)))
    return sigs


def gather(ctx: RuleContext) -> list:
    if ctx.ndim(0) == 0:
        return [Sig((B, B), (B,))]
    dim = ctx.attr("dim") % ctx.ndim(0)
    sigs = [Sig((B, B), (B,))]
    for d in range(ctx.ndim(0)):
        if d != dim and ctx.shapes[0][d] == ctx.shapes[1][d]:
            sigs.append(Sig((S(d), S(d)), (S(d),)))
    return sigs


def select_backward(ctx: RuleContext) -> list:
    """``select_along_dim_backward(grad, index)``: scatters along ``dim``; other dims split on both
    pass, and it is linear in the gradient."""
    nd = ctx.ndim(0)
    if nd == 0:
        return [Sig((B, B), (B,))]
    dim = ctx.attr("dim") % nd
    sigs = [Sig((B, B), (B,)), Sig((P, B), (P,))]
    for d in range(nd):
        if d != dim and d < ctx.ndim(1) and ctx.shapes[0][d] == ctx.shapes[1][d]:
            sigs.append(Sig((S(d), S(d)), (S(d),)))
    return sigs


def scatter(ctx: RuleContext) -> list:
    """``scatter(input, index, src)`` along ``dim``: a dim other than ``dim`` of the same length in
    all three splits on all three."""
    nd = ctx.ndim(0)
    if nd == 0:
        return [Sig((B, B, B), (B,))]
    dim = ctx.attr("dim") % nd
    sigs = [Sig((B, B, B), (B,))]
    for d in range(nd):
        if d != dim and all(len(s) > d and s[d] == ctx.shapes[0][d] for s in ctx.shapes):
            sigs.append(Sig((S(d), S(d), S(d)), (S(d),)))
    return sigs


def index_add(ctx: RuleContext) -> list:
    """``index_add(input, index, source)`` along ``dim``: other dims split on input and source
    (the index whole); linear in input and source together."""
    nd = ctx.ndim(0)
    if nd == 0:
        return [Sig((B, B, B), (B,))]
    dim = ctx.attr("dim") % nd
    sigs = [Sig((B, B, B), (B,)), Sig((P, B, P), (P,))]
    for d in range(nd):
        if d != dim and ctx.ndim(2) == nd and ctx.shapes[2][d] == ctx.shapes[0][d]:
            sigs.append(Sig((S(d), B, S(d)), (S(d),)))
    return sigs


def _kept_dims(ctx: RuleContext, nd: int) -> list:
    d1, d2 = ctx.attr("dim1", 0) % nd, ctx.attr("dim2", 1) % nd
    return [d for d in range(nd) if d not in (d1, d2)]


def diagonal(ctx: RuleContext) -> list:
    """The dims other than ``dim1``/``dim2`` keep their splits (renumbered: they come first); a
    diagonal is linear."""
    kept = _kept_dims(ctx, ctx.ndim(0))
    sigs = [Sig((B,), (B,)), Sig((P,), (P,))]
    for j, d in enumerate(kept):
        sigs.append(Sig((S(d),), (S(j),)))
    return sigs


def diagonal_backward(ctx: RuleContext) -> list:
    """The adjoint: the gradient's leading dims map back to the dims other than ``dim1``/``dim2``;
    ``shape`` (the input's) is then the local piece's."""
    kept = _kept_dims(ctx, len(ctx.out_shapes[0]))
    sigs = [Sig((B,), (B,)), Sig((P,), (P,), local_attrs=_local_shape)]
    for j, d in enumerate(kept):
        sigs.append(Sig((S(j),), (S(d),), local_attrs=_local_shape))
    return sigs


RULES = {
    "clone": copy_like,
    "contiguous": copy_like,
    "cast": copy_like,
    "cast_like": cast_like,
    "permute": permute,
    "expand": expand,
    "reshape": reshape,
    "basic_index": basic_index,
    "basic_index_put": basic_index_put,
    "cat": cat,
    "stack": stack,
    "split": split,
    "unbind": unbind,
    "flip": flip,
    "roll": roll,
    "tril": tril_triu,
    "triu": tril_triu,
    "constant_pad": constant_pad,
    "index_select": index_select,
    "gather": gather,
    "select_along_dim": gather,
    "select_along_dim_backward": select_backward,
    "scatter": scatter,
    "index_add": index_add,
    "diagonal": diagonal,
    "diagonal_backward": diagonal_backward,
}
