"""Alpha-beta times of the collectives: ``alpha`` seconds per message, ``beta`` seconds per byte.

For ``p`` ranks and ``n`` bytes (the size of each rank's buffer; for all-gather the gathered size):

* ring all-reduce: ``2 (p-1) alpha + 2 (p-1)/p n beta`` (a reduce-scatter then an all-gather);
* ring reduce-scatter / all-gather / all-to-all: ``(p-1) alpha + (p-1)/p n beta``;
* tree all-reduce (pipelined binary trees, as NCCL): ``2 log2(p) alpha + 2 n beta``;
* tree reduce-scatter / all-gather: ``log2(p) alpha + (p-1)/p n beta`` (recursive halving/doubling);
* send/recv: ``alpha + n beta``.

``best`` takes the faster algorithm, as NCCL's tuner does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv")
ALGORITHMS = ("ring", "tree", "best")


@dataclass(frozen=True)
class Link:
    """A link class: ``alpha`` latency (s), ``bandwidth`` per rank and direction (bytes/s)."""

    alpha: float
    bandwidth: float

    def __post_init__(self) -> None:
        if not self.alpha >= 0 or not self.bandwidth > 0:
            raise ValueError(f"Link: need alpha >= 0 and bandwidth > 0, got {self.alpha}, {self.bandwidth}")

    @property
    def beta(self) -> float:
        return 1.0 / self.bandwidth


def collective_time(kind: str, nbytes: float, p: int, link: Link, algorithm: str = "best") -> float:
    """Seconds one ``kind`` collective of ``nbytes`` takes among ``p`` ranks joined by ``link``."""
    if kind not in COLLECTIVES:
        raise ValueError(f"unknown collective {kind!r}; expected one of {COLLECTIVES}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; expected one of {ALGORITHMS}")
    if p < 1 or nbytes < 0:
        raise ValueError(f"{kind}: need p >= 1 and nbytes >= 0, got p={p}, nbytes={nbytes}")
    if kind == "send_recv":
        return link.alpha + nbytes * link.beta if nbytes else 0.0
    if p == 1 or nbytes == 0:
        return 0.0
    a, b = link.alpha, link.beta
    frac = (p - 1) / p
    lg = math.ceil(math.log2(p))
    if kind == "all_reduce":
        ring = 2 * (p - 1) * a + 2 * frac * nbytes * b
        tree = 2 * lg * a + 2 * nbytes * b
    elif kind == "all_to_all":
        ring = tree = (p - 1) * a + frac * nbytes * b  # pairwise exchange either way
    else:
        ring = (p - 1) * a + frac * nbytes * b
        tree = lg * a + frac * nbytes * b
    if algorithm == "ring":
        return ring
    if algorithm == "tree":
        return tree
    return min(ring, tree)


def hierarchical_time(
    kind: str, nbytes: float, local: int, nodes: int, intra: Link, inter: Link, algorithm: str = "best"
) -> float:
    """A collective over ``local`` ranks on each of ``nodes`` nodes: within the node first, then across.

    all-reduce = reduce-scatter inside each node, all-reduce of the ``1/local`` shards across nodes
    (each rank over its own NIC, in parallel), all-gather inside the node. reduce-scatter and
    all-gather split the same way; all-to-all sends ``(nodes-1)/nodes`` of its data over the NICs.
    """
    if nodes <= 1:
        return collective_time(kind, nbytes, local, intra, algorithm)
    if local <= 1:
        return collective_time(kind, nbytes, nodes, inter, algorithm)
    shard = nbytes / local
    if kind == "all_reduce":
        return (
            collective_time("reduce_scatter", nbytes, local, intra, algorithm)
            + collective_time("all_reduce", shard, nodes, inter, algorithm)
            + collective_time("all_gather", nbytes, local, intra, algorithm)
        )
    if kind in ("reduce_scatter", "all_gather"):
        return collective_time(kind, nbytes, local, intra, algorithm) + collective_time(
            kind, shard, nodes, inter, algorithm
        )
    if kind == "all_to_all":
        return collective_time(kind, nbytes / nodes, local, intra, algorithm) + collective_time(
            kind, nbytes * (nodes - 1) / nodes, nodes, inter, algorithm
        )
    return collective_time(kind, nbytes, 2, inter, algorithm)


def fit_alpha_beta(sizes, seconds) -> Link:
    """Least-squares fit of ``t = alpha + n beta`` to measured (bytes, seconds) pairs."""
    sizes, seconds = list(map(float, sizes)), list(map(float, seconds))
    if len(sizes) != len(seconds) or len(sizes) < 2:
        raise ValueError(f"fit_alpha_beta needs >= 2 (size, time) pairs, got {len(sizes)} and {len(seconds)}")
    n = len(sizes)
    mx, my = sum(sizes) / n, sum(seconds) / n
    sxx = sum((x - mx) ** 2 for x in sizes)
    if sxx == 0:
        raise ValueError("fit_alpha_beta: the sizes must not all be equal")
    beta = sum((x - mx) * (y - my) for x, y in zip(sizes, seconds)) / sxx
    alpha = my - beta * mx
    return Link(alpha=max(alpha, 0.0), bandwidth=1.0 / max(beta, 1e-15))
