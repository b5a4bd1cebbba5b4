"""Run under mpiexec: flow_dist.testing.sbp_check over every op in the SBP rule table (each
sample, each signature: outputs and gradients against one process). Prints "sbp rules ok N M"."""

import warnings

import flow
from flow_dist.testing import sbp_check

warnings.simplefilter("ignore")  # the ops a gradient formula calls that have no rule yet warn once
report = sbp_check()
if flow.env.get_rank() == 0:
    for f in report.failures:
        print("FAIL", f, flush=True)
    assert report.ok, f"{len(report.failures)} failures"
    print("sbp rules ok", len(report.checked), sum(report.checked.values()), flush=True)
