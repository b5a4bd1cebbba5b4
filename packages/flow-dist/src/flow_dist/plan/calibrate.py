"""Calibrate this CPU per op kind: GEMM efficiency by size, per-element throughput, dispatch cost.

The roofline of :mod:`.cost` (FLOPs at one GEMM rate, bytes at one copy bandwidth) missed a small
GPT's step on this machine by 20-30% on one process: small products run far below the rate of a
large one, a ``tanh`` costs more than a pass over memory, a native layer-norm backward less than
the 16 passes a NumPy composition makes, and every op pays the framework's fixed dispatch cost.
:func:`calibrate_cpu` measures each of those through flow's own kernels (``flow._dispatch.call``),
on operands of the sizes a small transformer step has (they fit in the caches, as the step's do),
and returns a :class:`DeviceProfile` that :meth:`OpCost.time` reads. Medians of repeats: on a
shared machine the typical time, not the best one, is what a step sees.
"""

from __future__ import annotations

import time

import numpy as np

from flow_dist.plan.devices import DeviceProfile

# (m, k, n) of 2-d products and (batch, m, k, n) of batched ones: a transformer layer's shapes
# (tokens x features, the attention's per-head products) and a few square ones to span the curve
GEMM_SHAPES = (
    (64, 64, 64),
    (128, 128, 128),
    (256, 256, 256),
    (512, 512, 512),
    (1024, 128, 128),
    (1024, 128, 384),
    (1024, 128, 512),
    (1024, 512, 128),
    (128, 1024, 384),
    (128, 1024, 512),
)
BATCHED_SHAPES = ((64, 64, 32, 64), (64, 64, 64, 32))
TOKENS, FEATURES = 1024, 128  # the elementwise ops' operands: 128 Ki elements


def _median_time(fn, seconds: float, min_repeats: int = 5) -> float:
    """The median CPU time of ``fn`` (one thread): on a shared machine the wall time measures the other
    jobs as much as the op, while CPU time measures the op; the load is modelled apart (``slowdown``)."""
    times: list = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < min_repeats:
        t = time.thread_time()
        fn()
        times.append(time.thread_time() - t)
    return float(np.median(times))


def runnable() -> int | None:
    """Threads runnable on the machine now (the kernel's count in ``/proc/loadavg``, this reader
    included), or None where there is no such file."""
    try:
        with open("/proc/loadavg") as f:
            return int(f.read().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return None


def background_load(samples, own: int) -> float:
    """Other jobs' runnable threads: the mean of ``samples`` of :func:`runnable` taken while a run of
    ``own`` processes went on, less those and the sampler itself (at least 0). ``Cluster.local``'s
    ``background``: on a shared machine the other jobs take their share of the cores too."""
    samples = [float(s) for s in samples]
    if not samples or own < 0:
        raise ValueError(f"background_load: need at least one sample and own >= 0, got {samples!r}, {own}")
    return max(0.0, sum(samples) / len(samples) - own - 1.0)


def eager_overhead(seconds: float = 0.2) -> float:
    """Seconds of one eager op on a 2-element tensor that records autograd: the fixed cost of a call."""
    import flow

    a = flow.ones(2, requires_grad=True)
    return _median_time(lambda: a + a, seconds, 50)


def global_overhead(seconds: float = 0.2) -> float:
    """Seconds an eager op on global tensors costs beyond a local one (:func:`eager_overhead`): the same
    2-element add on a one-rank placement, where no collective runs, so the difference is the SBP
    handler's work per call. Measured only in a one-process job (0.0 otherwise): a placement of
    every rank would make the calibration collective, and the ranks do not calibrate in step."""
    import flow

    if flow.env.get_world_size() > 1:
        return 0.0
    import flow_dist  # noqa: F401  (registers the global array kind)

    p = flow.placement("cpu", ranks=[0])
    a = flow.ones(2).to_global(p, (flow.sbp.broadcast,))
    a.requires_grad_(True)
    b = flow.ones(2, requires_grad=True)
    return max(0.0, _median_time(lambda: a + a, seconds / 2, 50) - _median_time(lambda: b + b, seconds / 2, 50))


def graph_overhead(seconds: float = 0.3, ops: int = 64) -> float:
    """Seconds per node of a compiled ``nn.Graph``: a chain of ``ops`` tiny adds against a chain of one."""
    import flow

    def chain(k: int):
        class Chain(flow.nn.Graph):
            def build(self, x):
                for _ in range(k):
                    x = x + 1.0
                return x

        g = Chain()
        x = flow.ones(2)
        g(x)  # compile
        return _median_time(lambda: g(x), seconds / 2, 10)

    return max(0.0, (chain(ops) - chain(1)) / (ops - 1))


def gemm_curve(overhead: float, seconds: float = 1.0, op: str = "matmul") -> tuple[float, tuple]:
    """(peak FLOP/s, ((FLOPs of one product, fraction of the peak), ...)) of flow's float64 ``op``
    (``"matmul"``, or ``"linear"``: ``x @ w.T + b`` on the 2-d shapes)."""
    import flow
    from flow._dispatch import call

    rng = np.random.default_rng(0)

    def t(*shape):
        return flow.tensor(rng.standard_normal(shape))

    cases = []
    for m, k, n in GEMM_SHAPES:
        if op == "linear":
            args = (t(m, k), t(n, k), t(n))
        else:
            args = (t(m, k), t(k, n))
        cases.append((1, 2.0 * m * k * n, args))
    if op == "matmul":
        # the attention's products read permuted views of q, k and v (sequence x heads x head size
        # laid out as heads x sequence), so time them on such views, not on contiguous copies
        for b, m, k, n in BATCHED_SHAPES:
            heads = 4
            x = t(b // heads, m, heads, k).permute(0, 2, 1, 3)
            y = t(b // heads, n, heads, k).permute(0, 2, 3, 1)
            cases.append((b, 2.0 * m * k * n, (x, y)))
    points = []
    for b, per, args in cases:
        call(op, *args)  # warm up BLAS
        sec = max(_median_time(lambda args=args: call(op, *args), seconds / len(cases)) - overhead, 1e-9)
        points.append((per, b * per / sec))
    peak = max(rate for _, rate in points)
    # several shapes share one size: average their efficiencies so that the curve is a function
    by: dict = {}
    for per, rate in points:
        by.setdefault(per, []).append(rate / peak)
    return peak, tuple(sorted((per, float(np.mean(e))) for per, e in by.items()))


def op_seconds(overhead: float, seconds: float = 1.5) -> tuple:
    """((op name, seconds per element of its largest operand), ...) through flow's kernels, less the
    fixed cost of a call; an optimizer update per parameter element of a GPT layer's arrays."""
    import flow
    from flow._dispatch import call

    rng = np.random.default_rng(0)

    def t(*shape):
        return flow.tensor(rng.standard_normal(shape))

    x, g, w, b = t(TOKENS, FEATURES), t(TOKENS, FEATURES), t(FEATURES), t(FEATURES)
    h, gh = t(TOKENS, 4 * FEATURES), t(TOKENS, 4 * FEATURES)  # the MLP's hidden activation
    att, gatt = t(64, 64, 64), t(64, 64, 64)  # heads x sequences, query x key
    idx = flow.tensor(rng.integers(0, FEATURES, TOKENS))
    table = t(256, FEATURES)
    sm = call("softmax", att, dim=-1)
    one = flow.tensor(1.0)
    mask = x > 0
    cases = {
        "add": (lambda: call("add", x, g), x),
        "mul": (lambda: call("mul", x, g), x),
        "where": (lambda: call("where", mask, x, g), x),
        "sum": (lambda: call("sum", x, dim=(0,)), x),
        "gelu": (lambda: call("gelu", h, approximate="tanh"), h),
        "gelu_backward": (lambda: call("gelu_backward", gh, h, approximate="tanh"), h),
        "softmax": (lambda: call("softmax", att, dim=-1), att),
        "softmax_backward": (lambda: call("softmax_backward", gatt, sm, dim=-1), att),
        "layer_norm": (lambda: call("layer_norm", x, w, b, normalized_shape=(FEATURES,)), x),
        "layer_norm_backward": (lambda: call("layer_norm_backward", g, x, w, normalized_shape=(FEATURES,)), x),
        "cross_entropy": (lambda: call("cross_entropy", x, idx, None), x),
        "cross_entropy_backward": (lambda: call("cross_entropy_backward", one, x, idx, None), x),
        "embedding": (lambda: call("embedding", table, idx), x),
        "embedding_backward": (lambda: call("embedding_backward", g, idx, num_weights=256), x),
    }
    out = []
    for name, (fn, big) in cases.items():
        fn()  # warm up
        sec = _median_time(fn, seconds / (len(cases) + 1))
        out.append((name, max(sec - overhead, 1e-9) / big.numel()))
    # AdamW over one GPT block's arrays (a multi-tensor update: its cost per element includes the
    # per-array work of the small bias and norm vectors, as a real model's update does)
    shapes = [(3 * FEATURES, FEATURES), (3 * FEATURES,), (FEATURES, FEATURES), (FEATURES,)]
    shapes += [(4 * FEATURES, FEATURES), (4 * FEATURES,), (FEATURES, 4 * FEATURES), (FEATURES,)] + [(FEATURES,)] * 4
    params = [flow.nn.Parameter(t(*s)) for s in shapes]
    for p in params:
        p.grad = flow.tensor(rng.standard_normal(tuple(p.shape)))
    opt = flow.optim.AdamW(params, lr=1e-3, weight_decay=0.1)
    opt.step()
    sec = _median_time(opt.step, seconds / (len(cases) + 1))
    n = sum(int(np.prod(s)) for s in shapes)
    out.append(("adam_update", sec / n))
    out.append(("adamw_update", sec / n))
    return tuple(out)


def calibrate_cpu(seconds: float = 3.0) -> DeviceProfile:
    """This process's calibrated float64 profile (run it with one BLAS thread, as a rank runs)."""
    import flow

    src = np.ones(8 << 20)  # 64 MiB: past the caches; the bandwidth of the ops without a measured rate
    dst = np.empty_like(src)
    bandwidth = 2.0 * src.nbytes / _median_time(lambda: np.copyto(dst, src), seconds / 6)
    with _Float64(flow):
        eager = eager_overhead(seconds / 15)
        graph = graph_overhead(seconds / 10)
        glob = global_overhead(seconds / 15)
        peak, curve = gemm_curve(eager, seconds / 4)
        linear_peak, linear = gemm_curve(eager, seconds / 8, "linear")
        ops = op_seconds(eager, seconds / 4)
    # one peak for both curves: the linear points as fractions of the matmul peak (capped at 1)
    peak = max(peak, linear_peak)
    linear = tuple((f, min(1.0, e * linear_peak / peak)) for f, e in linear)
    return DeviceProfile(
        "cpu",
        flops=peak,
        mem_bandwidth=bandwidth,
        dtype_bytes=8,
        fuses_elementwise=False,
        gemm_curve=curve,
        linear_curve=linear,
        op_seconds=ops,
        eager_overhead=eager,
        graph_overhead=graph,
        global_overhead=glob,
    )


class _Float64:
    """Float64 as the default dtype for the block (the ranks train in float64), restored after."""

    def __init__(self, flow) -> None:
        self.flow = flow

    def __enter__(self) -> None:
        self.old = self.flow.get_default_dtype()
        self.flow.set_default_dtype(self.flow.float64)

    def __exit__(self, *exc) -> None:
        self.flow.set_default_dtype(self.old)
