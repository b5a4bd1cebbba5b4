"""Cost model and simulator: predict the step time and memory of a training step on a cluster.

* :mod:`.cost`: FLOPs and bytes per op of a traced step (a formula table, a generic fallback);
* :mod:`.devices`: device profiles (this CPU calibrated once and cached, an H200 with stated assumptions);
* :mod:`.calibrate`: the CPU's calibration per op kind (GEMM efficiency by size, per-element rates,
  dispatch cost per op in eager and graph mode) and the probe of other jobs' load;
* :mod:`.cluster` and :mod:`.collectives`: a topology and alpha-beta times of the collectives;
* :mod:`.workload`: a model + input spec traced into per-layer costs;
* :mod:`.tp_trace`: one rank's share of a tensor-parallel GPT step, traced (what TP is costed from);
* :mod:`.simulate`: ``simulate(workload, cluster, Strategy(dp, tp, pp, micro_batches, zero_stage))``,
  ``search`` (the fastest that fits) and ``explore`` (the best of every dp x tp x pp shape);
* ``python -m flow_dist.plan``: the best strategy per cluster size for a zoo model.

See ``docs/scaling.md``.
"""

from flow_dist.plan.calibrate import calibrate_cpu
from flow_dist.plan.cluster import Cluster, oversubscription
from flow_dist.plan.collectives import Link
from flow_dist.plan.cost import OpCost, StepCost, op_cost, step_cost
from flow_dist.plan.devices import CPU_PROFILE_ENV, H200, DeviceProfile, cpu_profile
from flow_dist.plan.simulate import Report, Strategy, explore, search, simulate
from flow_dist.plan.tp_trace import tp_workload
from flow_dist.plan.workload import Workload, gpt_workload, trace_step, workload_from_ir

__all__ = [
    "CPU_PROFILE_ENV",
    "Cluster",
    "DeviceProfile",
    "H200",
    "Link",
    "OpCost",
    "Report",
    "StepCost",
    "Strategy",
    "Workload",
    "calibrate_cpu",
    "cpu_profile",
    "explore",
    "gpt_workload",
    "op_cost",
    "oversubscription",
    "search",
    "simulate",
    "step_cost",
    "tp_workload",
    "trace_step",
    "workload_from_ir",
]
