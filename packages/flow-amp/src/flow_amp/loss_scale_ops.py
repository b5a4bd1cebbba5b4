"""The loss-scaling ops: what :class:`flow_amp.grad_scaler.GradScaler` runs, in eager and in graph mode.

``amp_unscale(grads[], inv_scale) -> (grads[], found_inf)``: every gradient multiplied by
``inv_scale`` (a 1-element float32 tensor), and ``found_inf`` (shape ``(1,)``, float32) 1.0 when any
element of any gradient is inf or nan, else 0.0 (``torch._amp_foreach_non_finite_check_and_unscale_``).
One call covers all the gradients of an optimizer on one device: one kernel walks them, with no
per-tensor ``.item()``. With ``inplace=True`` (eager mode) the kernel writes each gradient in its own
array and returns those arrays; a compiled graph calls it functionally.

``amp_update_scale(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval)
-> (scale, growth_tracker)``: the dynamic loss-scale rule (``torch._amp_update_scale_``): on inf/nan
the scale is multiplied by ``backoff_factor`` and the tracker reset; otherwise the tracker counts
the clean step and, when it reaches ``growth_interval``, the scale is multiplied by
``growth_factor`` (kept only if finite) and the tracker reset. The factors are tensor inputs, not
attributes, so a compiled graph feeds them before each run and ``set_growth_factor`` needs no
recompilation.

flow-amp's plugin (:mod:`flow_amp.plugin`) declares them (:func:`register`, :func:`register_kernels`).
"""

from __future__ import annotations

import numpy as np

from flow import _dtype as D
from flow.errors import OpError, OpTypeError
from flow.ops.meta import TensorMeta
from flow.registry import FLOAT, Attr, schema
from flow.registry.ops import ANY, INTEGER

UNSCALE = "amp_unscale"
UPDATE_SCALE = "amp_update_scale"


# -- meta rules ---------------------------------------------------------------------------------
def _check_one(op: str, name: str, t, dtype=None) -> None:
    if tuple(t.shape) not in ((), (1,)):
        raise OpError(op, f"'{name}' must be a 1-element tensor, got shape {tuple(t.shape)}")
    if dtype is not None and t.dtype != dtype:
        raise OpTypeError(op, f"'{name}' must be {dtype}, got {t.dtype}")


def unscale_meta(grads, inv_scale, *, inplace: bool = False):
    """The gradients keep their metas; ``found_inf`` is a ``(1,)`` float32 tensor on ``inv_scale``'s device."""
    if not grads:
        raise OpError(UNSCALE, "expected at least one gradient")
    _check_one(UNSCALE, "inv_scale", inv_scale)
    for i, g in enumerate(grads):
        if g.device != inv_scale.device:
            raise OpError(UNSCALE, f"gradient {i} is on {g.device} but inv_scale is on {inv_scale.device}")
    out = tuple(TensorMeta(tuple(g.shape), g.dtype, g.device) for g in grads)
    return out + (TensorMeta((1,), D.float32, inv_scale.device),)


def update_scale_meta(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    """``(scale, growth_tracker)`` with the metas of the inputs (GradScaler's: ``(1,)`` float32 and int32)."""
    _check_one(UPDATE_SCALE, "scale", scale)
    _check_one(UPDATE_SCALE, "growth_tracker", growth_tracker)
    _check_one(UPDATE_SCALE, "found_inf", found_inf)
    for name, t in (("growth_factor", growth_factor), ("backoff_factor", backoff_factor)):
        _check_one(UPDATE_SCALE, name, t)
    _check_one(UPDATE_SCALE, "growth_interval", growth_interval)
    return (
        TensorMeta(tuple(scale.shape), scale.dtype, scale.device),
        TensorMeta(tuple(growth_tracker.shape), growth_tracker.dtype, growth_tracker.device),
    )


# -- kernels ------------------------------------------------------------------------------------
def _all_finite(xp, g) -> bool:
    # one reduction pass, no temporary: a sum is finite when every element is, except that finite
    # elements can overflow it, which the exact check then rules out (rare: only huge gradients pay)
    if g.size == 0:
        return True
    s = g.sum()
    if bool(xp.isfinite(s)):
        return True
    return bool(xp.isfinite(g).all())


def unscale_kernel(xp):
    """The kernel of ``amp_unscale`` for an array module ``xp`` (NumPy, CuPy)."""

    def amp_unscale(grads, inv_scale, *, inplace=False):
        inv = xp.asarray(inv_scale).reshape(())
        found = False
        outs = []
        with np.errstate(all="ignore"):  # inf/nan are what this op looks for, not an error
            for g in grads:
                scale = inv.astype(g.dtype)
                if inplace:
                    xp.multiply(g, scale, out=g)
                    out = g
                else:
                    out = g * scale
                found = found or not _all_finite(xp, out)
                outs.append(out)
        return tuple(outs) + (xp.full((1,), 1.0 if found else 0.0, dtype=xp.float32),)

    return amp_unscale


def update_scale_kernel(xp):
    """The kernel of ``amp_update_scale`` (in the scale's dtype: float32 as torch's)."""

    def amp_update_scale(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
        s = xp.array(scale, copy=True)
        t = xp.array(growth_tracker, copy=True)
        cast = s.dtype.type
        if float(xp.asarray(found_inf).reshape(-1)[0]):
            s *= cast(float(backoff_factor))
            t[...] = 0
            return s, t
        successful = int(t.reshape(-1)[0]) + 1
        if successful == int(growth_interval):
            with np.errstate(over="ignore"):  # an overflowing growth is dropped just below
                grown = s * cast(float(growth_factor))
            if bool(xp.isfinite(grown).all()):
                s = grown
            t[...] = 0
        else:
            t[...] = successful
        return s, t

    return amp_update_scale


# -- samples for opcheck --------------------------------------------------------------------------
def _unscale_samples():
    import flow
    from flow.testing import ErrorInput, SampleInput

    gs = [flow.tensor([[1.0, -2.0], [4.0, 8.0]], dtype=flow.float64), flow.tensor([0.5, 3.0], dtype=flow.float64)]
    inv = flow.tensor([0.25])
    yield SampleInput((gs, inv), {})
    yield SampleInput(([gs[0], flow.tensor([float("inf"), 1.0], dtype=flow.float64)], inv), {})
    yield ErrorInput(([], inv), {}, OpError, "at least one gradient")
    yield ErrorInput((gs, flow.tensor([0.5, 0.5])), {}, OpError, "1-element tensor")


def _update_samples():
    import flow
    from flow.testing import ErrorInput, SampleInput

    def args(found, tracker=0, scale=1024.0):
        return (
            flow.tensor([scale]),
            flow.tensor([tracker], dtype=flow.int32),
            flow.tensor([found]),
            flow.tensor(2.0, dtype=flow.float64),
            flow.tensor(0.5, dtype=flow.float64),
            flow.tensor(3, dtype=flow.int64),
        )

    yield SampleInput(args(0.0), {})
    yield SampleInput(args(0.0, tracker=2), {})
    yield SampleInput(args(1.0, tracker=2), {})
    bad = list(args(0.0))
    bad[1] = flow.tensor([0, 0], dtype=flow.int32)
    yield ErrorInput(tuple(bad), {}, OpError, "'growth_tracker' must be a 1-element tensor")


# -- plugin hooks ---------------------------------------------------------------------------------
def register(registry) -> None:
    """Declare the two ops (called by flow-amp's plugin, :mod:`flow_amp.plugin`)."""
    registry.register_op(
        schema(
            UNSCALE,
            ["*grads", "inv_scale"],
            [Attr("inplace", bool, False)],
            outputs=("grads", "found_inf"),
            dtypes=FLOAT,
        ),
        meta=unscale_meta,
        save="none",
        eager_meta=True,
        samples=_unscale_samples,
        doc="unscale gradients by inv_scale and flag inf/nan in one pass (GradScaler.unscale_)",
    )
    registry.register_op(
        schema(
            UPDATE_SCALE,
            ["scale", "growth_tracker", "found_inf", "growth_factor", "backoff_factor", "growth_interval"],
            [],
            outputs=("scale", "growth_tracker"),
            dtypes={
                "scale": FLOAT,
                "growth_tracker": INTEGER,
                "found_inf": FLOAT,
                "growth_factor": FLOAT,
                "backoff_factor": FLOAT,
                "growth_interval": ANY,
            },
        ),
        meta=update_scale_meta,
        save="none",
        eager_meta=True,
        samples=_update_samples,
        doc="the dynamic loss-scale update: back off on inf/nan, grow after growth_interval clean steps",
    )


def register_kernels(registry) -> None:
    registry.register_kernel(UNSCALE, "generic", unscale_kernel)
    registry.register_kernel(UPDATE_SCALE, "generic", update_scale_kernel)
