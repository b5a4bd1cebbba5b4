"""Property-based test of every op's contract: bad input is refused before the kernel, good input is right.

For every registered op, hypothesis takes one of the op's own samples and changes it: the dtypes of
its tensors, their layout (transposed and sliced views of the same values), their shapes (a dim
dropped, added, emptied or resized, so also broadcasting) and its attribute values (ints moved,
flags flipped, choices replaced). Each call must then either

- raise a flow exception (:class:`~flow.errors.FlowError`), never another one, and never the
  dispatcher's "failed for inputs ..." wrapper of a kernel error the meta rule did not foresee; an
  error the meta rule does not raise itself must come from the values (an index out of range); or
- succeed with outputs of the shapes and dtypes the meta rule gives, equal to the reference (NumPy
  generic) kernel's on contiguous copies of the inputs.

Ops that skip the eager meta step (elementwise ops) take inputs of one dtype, which their Python
functions arrange; the drawn dtypes respect that. The runs are reproducible: a derandomized,
database-less profile with a fixed number of examples per op (``FLOW_HYPOTHESIS_PROFILE=dev`` for a
longer, random search).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import flow
from flow._dispatch import _meta_inputs
from flow.errors import FlowError
from flow.plugins import ensure_loaded
from flow.registry import REGISTRY
from flow.testing import SampleInput
from flow.testing.checks import _reference, assert_close

ensure_loaded()
OPS = sorted(REGISTRY.ops)

_PROFILES = {
    # no shrinking: a failure is reported with the draws that found it, in bounded time
    "ci": settings(
        max_examples=12,
        derandomize=True,
        database=None,
        deadline=2000,
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=list(HealthCheck),
    ),
    "dev": settings(
        max_examples=300,
        database=None,
        deadline=None,
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=list(HealthCheck),
    ),
}
PROFILE = _PROFILES[os.environ.get("FLOW_HYPOTHESIS_PROFILE", "ci")]
DTYPES = (flow.float32, flow.float64, flow.int64, flow.int32, flow.uint8, flow.bool)
_TOL = {flow.float32: (1e-4, 1e-5), flow.float64: (1e-7, 1e-8)}


def _is_tensor(x) -> bool:
    return isinstance(x, flow.Tensor)


def _values(shape, dtype, rng) -> np.ndarray:
    if dtype is flow.bool:
        return rng.random(shape) > 0.5
    if dtype.is_floating_point:
        return rng.uniform(-2.0, 2.0, shape).astype(dtype.np)
    return rng.integers(0, 4, shape).astype(dtype.np)  # small, non-negative: mostly valid indices


def _layout(t, how: str):
    """``t``'s values in a tensor with other strides: a transposed or a sliced view."""
    a = t.numpy_host()
    if how == "transposed" and a.ndim >= 2:
        return flow.tensor(np.ascontiguousarray(np.swapaxes(a, -1, -2))).transpose(-1, -2)
    if how == "sliced" and a.ndim >= 1:
        big = np.zeros(a.shape[:-1] + (2 * a.shape[-1] + 1,), a.dtype)
        big[..., 1::2] = a
        return flow.tensor(big)[..., 1::2]
    return t


def _reshaped(shape: tuple, draw) -> tuple:
    kind = draw(st.sampled_from(["drop", "add", "empty", "resize"]))
    s = list(shape)
    if kind == "add" or not s:
        s.insert(draw(st.integers(0, len(s))), draw(st.sampled_from([1, 2])))
    elif kind == "drop":
        del s[draw(st.integers(0, len(s) - 1))]
    elif kind == "empty":
        s[draw(st.integers(0, len(s) - 1))] = 0
    else:
        k = draw(st.integers(0, len(s) - 1))
        s[k] = max(1, s[k] + draw(st.sampled_from([-1, 1, 2])))
    return tuple(s)


def _mutate_attr(a, value, draw):
    if a.choices is not None:
        return draw(st.sampled_from(list(a.choices) + ["__bogus__"]))
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + draw(st.integers(-3, 3))
    if isinstance(value, float):
        return draw(st.sampled_from([value, -value, 0.0, 0.5, 2.0, -1.0]))
    if isinstance(value, tuple) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        k = draw(st.integers(0, len(value) - 1))
        return value[:k] + (value[k] + draw(st.integers(-3, 3)),) + value[k + 1 :]
    return value


def _draw_call(op, draw):
    """A mutated copy of one of the op's samples: (args, kwargs)."""
    samples = [s for s in op.samples() if isinstance(s, SampleInput)]
    s = draw(st.sampled_from(samples))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    ins = op.schema.inputs
    shared = {}  # ops without an eager meta step: one dtype per dtype rule
    args = []
    for k, a in enumerate(s.args):
        spec = ins[k] if k < len(ins) else None
        seq = isinstance(a, (list, tuple)) and a and all(_is_tensor(t) for t in a)
        if not (_is_tensor(a) or seq):
            args.append(a)
            continue
        items = list(a) if seq else [a]
        out = []
        for t in items:
            t = t.detach()
            if op.eager_meta or spec is None:
                dt = draw(st.sampled_from(DTYPES)) if draw(st.integers(0, 3)) == 0 else None
            else:  # decided once per rule: these inputs share a dtype
                if spec.dtypes not in shared:
                    shared[spec.dtypes] = draw(st.sampled_from(DTYPES)) if draw(st.integers(0, 3)) == 0 else None
                dt = shared[spec.dtypes]
            if dt is not None:
                t = t.to(dt)
            if draw(st.integers(0, 4)) == 0:
                t = flow.tensor(_values(_reshaped(tuple(t.shape), draw), t.dtype, rng))
            t = _layout(t, draw(st.sampled_from(["same", "transposed", "sliced"])))
            out.append(t)
        args.append(type(a)(out) if seq else out[0])
    kwargs = dict(s.kwargs)
    for a in op.schema.attrs:
        if a.name in kwargs and draw(st.integers(0, 3)) == 0:
            kwargs[a.name] = _mutate_attr(a, kwargs[a.name], draw)
    return tuple(args), kwargs


def _host(args):
    out = []
    for a in args:
        if _is_tensor(a):
            out.append(flow.tensor(np.array(a.numpy_host())))
        elif isinstance(a, (list, tuple)) and a and all(_is_tensor(t) for t in a):
            out.append(type(a)(flow.tensor(np.array(t.numpy_host())) for t in a))
        else:
            out.append(a)
    return tuple(out)


def _meta(op, args, kwargs):
    try:
        m = op.meta(*_meta_inputs(args), **kwargs)
    except FlowError as e:
        return None, e
    return (m if isinstance(m, tuple) else (m,)), None


@pytest.mark.parametrize("op_name", OPS)
@PROFILE
@given(data=st.data())
def test_op_contract_holds_for_drawn_inputs(op_name, data):
    op = REGISTRY.ops[op_name]
    args, kwargs = _draw_call(op, data.draw)
    host = _host(args)  # before the call: in-place ops (optimizer updates) change their inputs
    metas, meta_err = _meta(op, args, kwargs)
    try:
        out = flow.ops.call(op_name, *args, **kwargs)
    except FlowError as e:
        assert "failed for inputs with shapes" not in str(e), f"{op_name}: a kernel error got through: {e}"
        if meta_err is None:  # only the values can tell: such errors come from the kernel, as flow errors
            assert not op.dynamic_shape
        return
    except Exception as e:  # noqa: BLE001 - the property: nothing but flow errors
        pytest.fail(f"{op_name}: raised {type(e).__name__} (not a flow error): {e}")
    assert meta_err is None, f"{op_name}: the call succeeded but the meta rule raises {meta_err!r}"
    outs = out if isinstance(out, tuple) else (out,)
    assert len(outs) == len(metas)
    for k, (o, m) in enumerate(zip(outs, metas)):
        assert (tuple(o.shape), o.dtype) == (tuple(m.shape), m.dtype), (
            f"{op_name} output {k}: {tuple(o.shape)} {o.dtype}, the meta rule says {tuple(m.shape)} {m.dtype}"
        )
    if op.nondeterministic:
        return
    with np.errstate(all="ignore"):
        ref = _reference(op, host, kwargs)
    for k, (o, r) in enumerate(zip(outs, ref)):
        rtol, atol = _TOL.get(o.dtype, (1e-2, 1e-2) if o.dtype.is_floating_point else (0, 0))
        assert_close(o, r, rtol=rtol, atol=atol, msg=f"{op_name} output {k}:")
