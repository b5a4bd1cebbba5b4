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
    cores: int | None = None  # CPU cores the ranks share (Cluster.local); None: one device per rank
    p2p_link: Link | None = None  # send/recv's link when it differs from the collectives' (measured apart)

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
            return collective_time(kind, nbytes, 2, self.p2p_link or link)
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
        cores: int | None = None,
        background: float = 0.0,
    ) -> "Cluster":
        """This machine as ``ranks`` MPI processes on ``cores`` cores (default: this machine's), with
        ``background`` other runnable jobs: the link from benchmarks/mpi_alpha_beta.py's JSON (a path
        or the loaded dict; its all-reduce and ping-pong fits at ``ranks``, measured under the same
        oversubscription), the device from :func:`cpu_profile`, compute slowed by
        :func:`oversubscription` (``cpu_share`` of a core per rank overrides it)."""
        cores = cores or os.cpu_count() or 1
        link = p2p = Link(20e-6, 2e9)  # a shared-memory MPI's order of magnitude when nothing was measured
        if alpha_beta is not None:
            link, p2p = _measured_links(alpha_beta, ranks)
        dev = device or D.cpu_profile()
        if cpu_share is None:
            cpu_share = 1.0 / oversubscription(ranks, cores, background)
        if not 0 < cpu_share <= 1:
            raise ValueError(f"Cluster.local: cpu_share must be in (0, 1], got {cpu_share}")
        if cpu_share < 1:
            # the ranks take turns on the cores: every op (and its dispatch) takes 1 / share as long
            dev = dataclasses.replace(dev, slowdown=dev.slowdown / cpu_share)
        return cls(ranks, ranks, link, link, dev, "ring", cores=cores, p2p_link=p2p)


def oversubscription(ranks: int, cores: int, background: float = 0.0) -> float:
    """How much longer compute takes when ``ranks`` busy processes and ``background`` other runnable
    jobs share ``cores`` cores: ``(ranks + background) / cores``, at least 1 (a fair scheduler gives
    each runnable process ``cores / runnable`` of a core)."""
    if ranks < 1 or cores < 1 or background < 0:
        raise ValueError(
            f"oversubscription: need ranks >= 1, cores >= 1, background >= 0; got {ranks}, {cores}, {background}"
        )
    return max(1.0, (ranks + background) / cores)


def _measured_links(alpha_beta: str | dict, ranks: int) -> tuple:
    """(collective link, point-to-point link) at ``ranks`` from mpi_alpha_beta.py's JSON."""
    data = alpha_beta
    if isinstance(alpha_beta, str):
        with open(alpha_beta) as f:
            data = json.load(f)
    try:
        pp = data.get("ping_pong_by_ranks", {}).get(str(ranks)) or data["ping_pong"]
        p2p = Link(float(pp["alpha"]), 1.0 / float(pp["beta"]))
        ar = data.get("all_reduce", {}).get(str(ranks))
        if ar is not None and ranks > 1:
            # the measured all-reduce fit A + n B read back as the ring formula's link:
            # 2 (p-1) alpha = A, 2 (p-1)/p beta = B (oversubscribed cores make it far from ping-pong)
            k = 2 * (ranks - 1)
            link = Link(float(ar["alpha"]) / k, k / (ranks * float(ar["beta"])))
        else:
            link = p2p
    except (KeyError, TypeError, ZeroDivisionError, AttributeError) as e:
        raise ValueError(f"alpha-beta JSON: expected {{'ping_pong': {{'alpha', 'beta'}}}}: {e}") from None
    return link, p2p
