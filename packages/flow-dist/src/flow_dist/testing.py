"""Parity of the SBP rule table, like ``flow.testing.opcheck``: for every op with a rule, each of
its samples and each signature the rule offers for them, the global result (and gradient) must
equal the single-process result.

Run it on every rank of a job (SPMD): ``flow_dist.testing.sbp_check()`` returns the failures
(an empty list when all agree) and what was checked. Inputs are laid out exactly as a signature
asks (a partial-sum input as random shares of its value that sum to it), the op is run with that
signature (:func:`flow_dist.handler.run_with_signature`), and outputs and input gradients are
compared through their logical values. An op with a rule but no samples is a failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from flow_dist import env

__all__ = ["sbp_check", "SbpCheckReport"]


@dataclass
class SbpCheckReport:
    failures: list = field(default_factory=list)
    checked: dict = field(default_factory=dict)  # op -> number of (sample, signature) pairs run
    skipped: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def _flat_tensors(args):
    import flow

    out = []
    for a in args:
        if isinstance(a, flow.Tensor) or a is None:
            out.append(a)
        elif isinstance(a, (list, tuple)) and a and all(isinstance(t, flow.Tensor) for t in a):
            out.extend(a)
    return out


def _same_everywhere(a: np.ndarray) -> np.ndarray:
    """``a`` as rank 0 has it (samples may draw random values)."""
    if env.get_world_size() == 1:
        return a
    from flow_dist.comm.backend import get_backend
    from flow_dist.layout import contiguous

    return np.asarray(get_backend("cpu", None).broadcast(contiguous(a), src=0)).reshape(a.shape)


def _lay_out(whole: np.ndarray, s, placement, rng) -> np.ndarray:
    from flow_dist.global_array import GlobalArray
    from flow_dist.sbp import PartialSum, broadcast

    ga = GlobalArray(whole, placement, (broadcast,), whole.shape)
    if s.__class__ is not PartialSum:
        return ga.piece_of(whole, (s,))
    # random shares summing to the value (drawn alike on every rank, each keeps its own)
    n = placement.size
    w = rng.random(n) + 0.5
    w /= w.sum()
    return (whole * w[ga.coord[0]]).astype(whole.dtype)


def sbp_check(op_names=None, *, rtol: float = 1e-5, atol: float = 1e-6, dtype=None) -> SbpCheckReport:
    """Check the rule of each op in ``op_names`` (default: every op in the ``"sbp"`` table)."""
    import flow
    from flow.registry import REGISTRY
    from flow.testing import error_inputs as E
    from flow_dist.rules import TABLE, RuleContext

    table = REGISTRY.get_table(TABLE)
    names = sorted(table) if op_names is None else list(op_names)
    placement = flow.placement("cpu", list(range(env.get_world_size())))
    report = SbpCheckReport()
    dt = flow.float64 if dtype is None else dtype
    for name in names:
        op = REGISTRY.ops.get(name)
        rule = table.get(name)
        if op is None or rule is None:
            continue
        if op.samples is None:
            report.failures.append(f"{name}: has an SBP rule but no samples")
            continue
        if op.nondeterministic:  # random ops: no single-process value to compare with
            report.skipped.append(f"{name}: random")
            continue
        samples, _ = E.split(list(op.samples()))
        count = 0
        for si, s in enumerate(samples):
            try:
                count += _check_sample(flow, op, rule, RuleContext, s, si, placement, dt, rtol, atol, report)
            except Exception as e:  # a rule or handler bug: name it and go on with the next
                report.failures.append(f"{name} sample {si}: {type(e).__name__}: {e}")
        report.checked[name] = count
        if count == 0 and not any(f.startswith(name) for f in report.failures):
            report.failures.append(f"{name}: no sample could be run with any signature")
    return report


def _plain(flow, a, dt):
    if isinstance(a, flow.Tensor):
        arr = _same_everywhere(np.asarray(a.detach().numpy()))
        t = flow.tensor(arr)
        if t.dtype.is_floating_point and dt is not None:
            t = t.to(dt)
        return t
    if isinstance(a, (list, tuple)) and a and all(isinstance(x, flow.Tensor) for x in a):
        return type(a)(_plain(flow, x, dt) for x in a)
    return a


def _check_sample(flow, op, rule, RuleContext, s, si, placement, dt, rtol, atol, report) -> int:
    from flow.errors import FlowError
    from flow_dist.handler import _flatten, _meta_outputs, run_with_signature
    from flow_dist.sbp import broadcast

    kwargs = dict(s.kwargs)
    args = tuple(_plain(flow, a, dt) for a in s.args)
    try:
        r = flow.ops.call(op.name, *args, **kwargs)
    except FlowError:  # a sample whose attributes fix its dtype (a fused program's float32)
        args = tuple(_plain(flow, a, flow.float32) for a in s.args)
        r = flow.ops.call(op.name, *args, **kwargs)
    if op.dynamic_shape:  # no meta rule without data: the shapes one process gives
        out_shapes = [None if o is None else tuple(o.shape) for o in (r if isinstance(r, tuple) else (r,))]
    else:
        out_shapes = [None if m is None else tuple(m.shape) for m in _meta_outputs(op, args, kwargs)]
    tensors, lengths, scalars = _flatten(op, args)
    shapes = [None if t is None else tuple(t.shape) for t in tensors]
    current = [None if t is None else broadcast for t in tensors]  # rules that follow the inputs: broadcast
    ctx = RuleContext(op, kwargs, shapes, out_shapes, placement.size, current, scalars, [], lengths)
    want_grad = s.grad and op.grad is not None
    ref_args = _requiring(flow, args, want_grad)
    ref_out = flow.ops.call(op.name, *ref_args, **kwargs)
    ref_outs = ref_out if isinstance(ref_out, tuple) else (ref_out,)
    rng = np.random.default_rng(1234 + si)
    seeds = [
        None
        if o is None or not o.dtype.is_floating_point
        else flow.tensor(rng.standard_normal(tuple(o.shape))).to(o.dtype)
        for o in ref_outs
    ]
    ref_grads = _grads(flow, ref_args, ref_outs, seeds) if want_grad else None
    done = 0
    from flow_dist.rules import as_sig

    for sig in map(as_sig, rule(ctx)):
        if not _runnable(sig, tensors):
            continue
        where = f"{op.name} sample {si} signature {_fmt(sig)}"
        g_args = _globalize(flow, args, sig, placement, rng, want_grad)
        out = run_with_signature(op, g_args, kwargs, [sig])
        outs = out if isinstance(out, tuple) else (out,)
        bad = _compare([None if r is None else o for o, r in zip(outs, ref_outs)], ref_outs, "output", rtol, atol)
        if bad is None and want_grad:
            # each output's gradient laid out like the output (a partial output's as broadcast)
            g_seeds = [
                None if g is None else g.to_global(placement, flow.sbp.broadcast).to_global(sbp=_seed_sbp(o))
                for g, o in zip(seeds, outs)
            ]
            bad = _compare(_grads(flow, g_args, outs, g_seeds), ref_grads, "gradient of input", rtol, atol)
        if bad is not None:
            report.failures.append(f"{where}: {bad}")
        done += 1
    return done


def _runnable(sig, tensors) -> bool:
    from flow_dist.sbp import PartialSum, Split

    for t, x in zip(tensors, sig.ins):
        if x is None or t is None:
            continue
        if x.__class__ is PartialSum and not t.dtype.is_floating_point:
            return False  # partial sums of integers or booleans: not a layout the data can have
        if x.__class__ is Split and not 0 <= x.dim < t.ndim:
            return False  # a split of a dim the tensor lacks: the handler never picks it
    return True


def _seed_sbp(out):
    import flow

    s = out.sbp[0]
    return flow.sbp.broadcast if s.is_partial() else s


def _compare(got: list, want: list, what: str, rtol: float, atol: float):
    """None when every pair agrees, else what differs."""
    for k, (g, r) in enumerate(zip(got, want)):
        if r is None and g is None:
            continue
        if (r is None) != (g is None):
            return f"{what} {k}: {'only the global run' if r is None else 'only one process'} gives one"
        gv, rv = g.detach().numpy(), r.detach().numpy()
        tol = _LOW_TOL.get(str(r.dtype), 0.0)  # a cast of partial sums to low precision rounds each share
        if tol:
            gv, rv = gv.astype(np.float64), rv.astype(np.float64)
        rt, at = max(rtol, tol), max(atol, tol)
        if gv.shape != rv.shape or not np.allclose(gv, rv, rtol=rt, atol=at, equal_nan=True):
            return f"{what} {k} differs (shapes {gv.shape} / {rv.shape}, max abs diff {_diff(gv, rv)})"
    return None


_LOW_TOL = {"flow.float16": 2e-3, "flow.bfloat16": 2e-2}


def _requiring(flow, args, want_grad):
    if not want_grad:
        return args
    out = []
    for a in args:
        if isinstance(a, flow.Tensor) and a.dtype.is_floating_point:
            out.append(a.detach().requires_grad_(True))
        elif isinstance(a, (list, tuple)) and a and isinstance(a[0], flow.Tensor):
            out.append(type(a)(x.detach().requires_grad_(x.dtype.is_floating_point) for x in a))
        else:
            out.append(a)
    return tuple(out)


def _globalize(flow, args, sig, placement, rng, want_grad):
    it = iter(sig.ins)
    out = []

    def one(t):
        s = next(it)
        if t is None:
            return None
        s = flow.sbp.broadcast if s is None else s
        local = _lay_out(np.asarray(t.detach().numpy()), s, placement, rng)
        g = flow.tensor(local).to(t.dtype).to_global(placement, s, shape=tuple(t.shape))
        g = g.detach()
        if want_grad and t.dtype.is_floating_point:
            g.requires_grad_(True)
        return g

    for a in args:
        if isinstance(a, flow.Tensor) or a is None:
            out.append(one(a))
        elif isinstance(a, (list, tuple)) and a and all(isinstance(x, flow.Tensor) for x in a):
            out.append(type(a)(one(x) for x in a))
        else:
            out.append(a)
    return tuple(out)


def _grads(flow, args, outs, seeds):
    leaves = _flat_tensors(args)
    pairs = [(o, g) for o, g in zip(outs, seeds) if o is not None and g is not None and o.requires_grad]
    if not pairs:
        return [None] * len(leaves)
    wanted = [t for t in leaves if t is not None and t.requires_grad]
    got = flow.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True)
    it = iter(got)
    return [next(it) if (t is not None and t.requires_grad) else None for t in leaves]


def _diff(a, b) -> str:
    try:
        return f"{float(np.nanmax(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)))):.3g}"
    except Exception:
        return "?"


def _fmt(sig) -> str:
    from flow_dist.sbp import short

    def f(x):
        return "-" if x is None else short(x)

    return "(" + ", ".join(f(x) for x in sig.ins) + ") -> (" + ", ".join(f(x) for x in sig.outs) + ")"
