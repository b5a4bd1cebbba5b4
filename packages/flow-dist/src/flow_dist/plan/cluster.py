"""A cluster: ``devices`` identical accelerators, ``gpus_per_node`` per node, an intra- and an inter-node link.

Ranks are numbered node by node. A parallel group is ``size`` ranks ``stride`` apart (Megatron's
order: tensor-parallel ranks adjacent, then data-parallel, pipeline stages outermost), so a group
spans nodes when ``size * stride`` exceeds a node; its collectives are then hierarchical.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass

from flow_dist.plan import devices as D
from flow_dist.plan.collectives import Link, collective_time, hierarchical_time


@dataclass(frozen=True)
class Cluster:
    """``devices`` ranks of ``device`` (a :class:`DeviceProfile`); ``algorithm``: ring, tree or best."""

    devices: int
    gpus_per_node: int
    intra_link: Link
    inter_link: Link
    device: D.DeviceProfile = D.H200
    algorithm: str = "best"

    def __post_init__(self) -> None:
        if self.devices < 1 or self.gpus_per_node < 1:
            raise ValueError(
                f"Cluster: devices and gpus_per_node must be >= 1, got {self.devices}, {self.gpus_per_node}"
            )
        if self.devices > self.gpus_per_node and self.devices % self.gpus_per_node:
            raise ValueError(f"Cluster: {self.devices} devices do not fill nodes of {self.gpus_per_node}")

    @property
    def nodes(self) -> int:
        return max(1, math.ceil(self.devices / self.gpus_per_node))

    def group_shape(self, size: int, stride: int = 1) -> tuple[int, int]:
        """(ranks of the group per node, nodes it spans) for ``size`` ranks ``stride`` apart."""
        if size < 1 or stride < 1 or size * stride > self.devices:
            raise ValueError(f"group of {size} ranks {stride} apart does not fit {self.devices} devices")
        g = self.gpus_per_node
        local = max(1, min(size, g // stride)) if stride < g else 1
        return local, math.ceil(size / local)

    def collective(self, kind: str, nbytes: float, size: int, stride: int = 1) -> float:
        """Seconds of one collective of ``nbytes`` over a group of ``size`` ranks ``stride`` apart."""
        local, nodes = self.group_shape(size, stride)
        if kind == "send_recv":
            link = self.inter_link if stride >= self.gpus_per_node else self.intra_link
            return collective_time(kind, nbytes, 2, link)
        return hierarchical_time(kind, nbytes, local, nodes, self.intra_link, self.inter_link, self.algorithm)

    @classmethod
    def h200(cls, gpus: int, algorithm: str = "best") -> "Cluster":
        """``gpus`` H200s, 8 a node on NVLink, 400 Gb/s InfiniBand per GPU between nodes."""
        return cls(
            gpus,
            8,
            Link(D.NVLINK_ALPHA, D.NVLINK_BW),
            Link(D.IB_ALPHA, D.IB_BW),
            D.H200,
            algorithm,
        )

    @classmethod
    def local(
        cls,
        ranks: int,
        alpha_beta: str | dict | None = None,
        device: D.DeviceProfile | None = None,
        cpu_share: float | None = None,
    ) -> "Cluster":
        """This machine as ``ranks`` MPI processes: the link from benchmarks/mpi_alpha_beta.py's JSON
        (a path or the loaded dict: its all-reduce fit at ``ranks``, else the ping-pong fit), the
        device from :func:`cpu_profile`, each rank getting ``cpu_share`` of a core (default: all of
        one, or cores / ranks when there are more ranks than cores)."""
        link = Link(20e-6, 2e9)  # a shared-memory MPI's order of magnitude when nothing was measured
        if alpha_beta is not None:
            data = alpha_beta
            if isinstance(alpha_beta, str):
                with open(alpha_beta) as f:
                    data = json.load(f)
            try:
                ar = data.get("all_reduce", {}).get(str(ranks))
                if ar is not None and ranks > 1:
                    # the measured all-reduce fit A + n B read back as the ring formula's link:
                    # 2 (p-1) alpha = A, 2 (p-1)/p beta = B (oversubscribed cores make it far from ping-pong)
                    k = 2 * (ranks - 1)
                    link = Link(float(ar["alpha"]) / k, k / (ranks * float(ar["beta"])))
                else:
                    pp = data["ping_pong"]
                    link = Link(float(pp["alpha"]), 1.0 / float(pp["beta"]))
            except (KeyError, TypeError, ZeroDivisionError, AttributeError) as e:
                raise ValueError(f"alpha-beta JSON: expected {{'ping_pong': {{'alpha', 'beta'}}}}: {e}") from None
        dev = device or D.cpu_profile()
        if cpu_share is None:
            # oversubscribed: the ranks share the cores (and their memory bandwidth) in turn
            cpu_share = min(1.0, (os.cpu_count() or 1) / ranks)
        if not 0 < cpu_share <= 1:
            raise ValueError(f"Cluster.local: cpu_share must be in (0, 1], got {cpu_share}")
        if cpu_share < 1:
            dev = dataclasses.replace(dev, flops=dev.flops * cpu_share, mem_bandwidth=dev.mem_bandwidth * cpu_share)
        return cls(ranks, ranks, link, link, dev, "ring")
