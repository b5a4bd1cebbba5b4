"""flow.distributed (torch.distributed's API) on several processes: ranks/torch_api.py runs every
collective, point-to-point, a subgroup and a torch-style DDP training script at 2 ranks (3 for
uneven pieces), and must print its "ok" line."""

from __future__ import annotations

import pytest
from _ranks import needs_mpi, run_ranks

pytestmark = needs_mpi()


@pytest.mark.parametrize("n", [2, 3])
def test_torch_distributed_api_on_ranks(n):
    assert "torch api ok" in run_ranks("torch_api.py", n, timeout=60).stdout


def test_a_torchrun_environment_without_mpi_is_refused(tmp_path):
    # torchrun starts plain processes with RANK / WORLD_SIZE: flow's ranks meet over MPI, so the
    # script must be told how to start instead of running as one process of one
    import os
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text("import flow.distributed as dist\ndist.init_process_group('gloo')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "PMIX_"))}
    env.update(RANK="1", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode != 0
    assert "flow-launch -n N" in p.stderr and "WORLD_SIZE=2" in p.stderr, p.stderr
