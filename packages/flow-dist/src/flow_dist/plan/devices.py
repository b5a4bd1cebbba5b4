"""Device profiles: peak compute, memory bandwidth and memory, with the efficiency reached in practice.

``H200``: NVIDIA's data sheet figures (989 TFLOP/s dense BF16 for the SXM part is the headline;
we use the 790 TFLOP/s dense figure of the 700 W configuration as peak) times the efficiency a
well-tuned transformer step reaches (about 45% model FLOPs utilisation for matmuls and 80% of
the HBM bandwidth, the figures Megatron-LM reports on H100-class parts). ``cpu_profile()``
measures this machine once (float64 GEMMs and a large copy) and caches the figures in
``~/.cache/flow/plan/cpu.json``; ``FLOW_PLAN_CPU_PROFILE`` overrides it (a JSON file path, or
``"GFLOPS,GBPS"``).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, fields

import numpy as np

CPU_PROFILE_ENV = "FLOW_PLAN_CPU_PROFILE"


@dataclass(frozen=True)
class DeviceProfile:
    """One accelerator (or CPU process): ``flops`` peak FLOP/s, ``mem_bandwidth`` bytes/s, ``memory`` bytes;
    ``flops_efficiency`` and ``bw_efficiency`` the fractions of peak a real step reaches.

    A calibrated profile also has ``gemm_curve`` (``(FLOPs of one matrix product, fraction of
    ``flops``)`` points: small products run far below peak), ``op_seconds`` (``(op name, seconds per
    element)``: measured throughput of the ops whose cost is not their memory traffic, such as a
    ``tanh``), the framework's fixed cost per op in eager and in graph mode, and ``slowdown`` (compute
    time multiplied by it: more ranks than cores, or a shared machine)."""

    name: str
    flops: float
    mem_bandwidth: float
    memory: float = float("inf")
    flops_efficiency: float = 1.0
    bw_efficiency: float = 1.0
    dtype_bytes: int = 4
    fuses_elementwise: bool = True  # a GPU kernel makes one pass; NumPy one per elementary operation
    gemm_curve: tuple = ()
    linear_curve: tuple = ()  # the same for ``linear`` (x @ w.T + b); empty: ``gemm_curve``
    op_seconds: tuple = ()
    eager_overhead: float = 0.0
    graph_overhead: float = 0.0
    slowdown: float = 1.0
    # an eager op on global tensors pays this on top of ``eager_overhead``: the SBP handler's signature
    # choice and layout bookkeeping (about 20x a local op's dispatch on this CPU)
    global_overhead: float = 0.0

    def __post_init__(self) -> None:
        for what in ("flops", "mem_bandwidth", "memory", "slowdown"):
            if not getattr(self, what) > 0:
                raise ValueError(f"DeviceProfile {self.name!r}: {what} must be > 0, got {getattr(self, what)}")
        for what in ("flops_efficiency", "bw_efficiency"):
            if not 0 < getattr(self, what) <= 1:
                raise ValueError(f"DeviceProfile {self.name!r}: {what} must be in (0, 1], got {getattr(self, what)}")
        for what in ("eager_overhead", "graph_overhead", "global_overhead"):
            if not getattr(self, what) >= 0:
                raise ValueError(f"DeviceProfile {self.name!r}: {what} must be >= 0, got {getattr(self, what)}")
        # JSON gives lists: store tuples so the profile stays hashable
        for what in ("gemm_curve", "linear_curve"):
            curve = tuple(sorted((float(f), float(e)) for f, e in getattr(self, what)))
            if any(not (f > 0 and 0 < e <= 1) for f, e in curve):
                raise ValueError(f"DeviceProfile {self.name!r}: {what} needs FLOPs > 0, efficiency in (0, 1]: {curve}")
            object.__setattr__(self, what, curve)
        ops = tuple((str(n), float(s)) for n, s in self.op_seconds)
        if any(not s > 0 for _, s in ops):
            raise ValueError(f"DeviceProfile {self.name!r}: op_seconds must be > 0 per element: {ops}")
        object.__setattr__(self, "op_seconds", ops)

    @classmethod
    def from_dict(cls, data: dict) -> "DeviceProfile":
        """A profile from its JSON form (``dataclasses.asdict``); a key it does not know is an error."""
        known = {f.name for f in fields(cls)}
        extra = sorted(set(data) - known)
        if extra:
            raise ValueError(f"DeviceProfile: unknown keys {extra}")
        return cls(**data)

    @property
    def effective_flops(self) -> float:
        return self.flops * self.flops_efficiency

    @property
    def effective_bandwidth(self) -> float:
        return self.mem_bandwidth * self.bw_efficiency

    def gemm_efficiency(self, matrix_flops: float, op: str = "matmul") -> float:
        """The fraction of ``flops`` one matrix product of ``matrix_flops`` reaches: ``gemm_curve``
        (``linear_curve`` for ``op="linear"`` when it has one) interpolated in log(FLOPs), flat beyond
        its ends; ``flops_efficiency`` without a curve."""
        c = self.linear_curve if op == "linear" and self.linear_curve else self.gemm_curve
        if not c:
            return self.flops_efficiency
        if matrix_flops <= c[0][0]:
            return c[0][1]
        if matrix_flops >= c[-1][0]:
            return c[-1][1]
        x = math.log(matrix_flops)
        for (f0, e0), (f1, e1) in zip(c, c[1:]):
            if matrix_flops <= f1:
                t = (x - math.log(f0)) / (math.log(f1) - math.log(f0))
                return e0 + t * (e1 - e0)
        return c[-1][1]  # not reached: the loop covers (c[0], c[-1])

    def seconds_per_element(self, op: str) -> float | None:
        """The measured seconds per element of ``op``, or None when it is not calibrated."""
        for name, s in self.op_seconds:
            if name == op:
                return s
        return None

    def op_overhead(self, mode: str) -> float:
        """The framework's fixed cost of one op in ``mode``: ``"eager"``, ``"graph"`` or ``"global"`` (eager
        on global tensors: every op goes through flow-dist's SBP handler)."""
        if mode not in ("eager", "graph", "global"):
            raise ValueError(f"DeviceProfile.op_overhead: mode must be 'eager', 'graph' or 'global', got {mode!r}")
        if mode == "global":
            return self.eager_overhead + self.global_overhead
        return self.eager_overhead if mode == "eager" else self.graph_overhead


H200 = DeviceProfile(
    "H200",
    flops=790e12,
    mem_bandwidth=4.3e12,
    memory=141e9,
    flops_efficiency=0.45,
    bw_efficiency=0.8,
    dtype_bytes=2,
    # assumptions, not measured here: cuBLAS BF16 on Hopper reaches ~45% of peak from products of
    # ~1e10 FLOPs up (Megatron-LM's figure), and falls off for small ones (a 128^3 product cannot fill
    # 132 SMs); attention's per-head products (1024 x 1024 x 64, 1.3e8 FLOPs) land near 15%
    gemm_curve=((4e6, 0.02), (3e8, 0.2), (2e9, 0.35), (1.5e10, 0.45)),
    # assumed: ~5 us per kernel launch plus the framework's dispatch, in eager and in graph mode alike
    # (flow's graph executor still launches every node; no CUDA graphs)
    eager_overhead=5e-6,
    graph_overhead=5e-6,
)
# H200 links: NVLink 4 (900 GB/s per GPU, both directions together: 450 GB/s each way) and one
# 400 Gb/s InfiniBand NIC per GPU; latencies are NCCL's typical per-hop figures
NVLINK_BW = 450e9
NVLINK_ALPHA = 3e-6
IB_BW = 400e9 / 8
IB_ALPHA = 8e-6


def _cache_path() -> str:
    base = os.environ.get("FLOW_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "flow")
    # a new name whenever the profile gains a measured field: older caches lack it (here global_overhead)
    return os.path.join(base, "plan", "cpu-calibrated-v2.json")


def measure_cpu(seconds: float = 0.5) -> DeviceProfile:
    """Measure this process's float64 GEMM rate and copy bandwidth: medians of repeats, since on a
    shared machine the typical rate (not the best one) is what a training step sees."""
    # a mix of square and tall-skinny products (tokens x features), as a transformer layer runs them:
    # BLAS reaches a lower rate on the skinny ones than on a square GEMM
    flops = gemm = 0.0
    for m, k, n in ((256, 256, 256), (1024, 128, 384), (1024, 512, 128)):
        a, b = np.random.rand(m, k), np.random.rand(k, n)
        a @ b  # warm up BLAS
        gemm += _repeat(lambda a=a, b=b: a @ b, seconds / 6)
        flops += 2.0 * m * k * n
    src = np.ones(8 << 20, dtype=np.float64)  # 64 MiB: well past the caches
    dst = np.empty_like(src)
    copy = _repeat(lambda: np.copyto(dst, src), seconds / 2)
    return DeviceProfile(
        "cpu",
        flops=flops / gemm,
        mem_bandwidth=2.0 * src.nbytes / copy,
        dtype_bytes=8,
        fuses_elementwise=False,
    )


def _repeat(fn, seconds: float) -> float:
    times: list = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 3:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def cpu_profile(refresh: bool = False) -> DeviceProfile:
    """This CPU's profile: ``FLOW_PLAN_CPU_PROFILE`` if set, else the cached measurement, else measured now."""
    env = os.environ.get(CPU_PROFILE_ENV)
    if env:
        if os.path.isfile(env):
            with open(env) as f:
                return DeviceProfile.from_dict(json.load(f))
        try:
            gflops, gbps = (float(x) for x in env.split(","))
        except ValueError:
            raise ValueError(
                f"{CPU_PROFILE_ENV}={env!r}: expected a JSON file or 'GFLOPS,GBPS' (e.g. '20,8')"
            ) from None
        return DeviceProfile("cpu", gflops * 1e9, gbps * 1e9, dtype_bytes=8, fuses_elementwise=False)
    path = _cache_path()
    if not refresh and os.path.isfile(path):
        try:
            with open(path) as f:
                return DeviceProfile.from_dict(json.load(f))
        except (ValueError, TypeError):
            pass  # a stale or corrupt cache: measure again
    from flow_dist.plan import calibrate

    prof = calibrate.calibrate_cpu()
    if not prof.global_overhead:
        return prof  # measured in a multi-process job, without the global dispatch cost: do not cache it
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(asdict(prof), f)
    except OSError:
        pass  # a read-only home: use the measurement without caching it
    return prof
