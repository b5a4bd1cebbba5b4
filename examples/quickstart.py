"""Train a two-layer network on a synthetic two-spirals problem with flow's eager autograd.

Everything here is PyTorch's API under the name ``flow``: tensors, ops,
``backward()`` and ``no_grad()``. Run it with::

    python examples/quickstart.py [--steps 400] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import time

import flow
import flow.nn.functional as F


def two_spirals(n_per_class: int, generator: flow.Generator) -> tuple[flow.Tensor, flow.Tensor]:
    """Two interleaved spirals in the plane, labelled 0 and 1, with a little noise."""
    t = flow.rand(n_per_class, generator=generator) * 3 * math.pi + 0.5
    noise = flow.randn(2 * n_per_class, 2, generator=generator) * 0.15
    a = flow.stack([t * flow.cos(t), t * flow.sin(t)], dim=1)
    x = flow.cat([a, -a]) / 5.0 + noise
    y = flow.cat([flow.zeros(n_per_class, dtype=flow.int64), flow.ones(n_per_class, dtype=flow.int64)])
    return x, y


def init_params(sizes: list[int], generator: flow.Generator) -> list[flow.Tensor]:
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        bound = 1.0 / math.sqrt(fan_in)
        w = (flow.rand(fan_out, fan_in, generator=generator) * 2 - 1) * bound
        b = (flow.rand(fan_out, generator=generator) * 2 - 1) * bound
        params += [w.requires_grad_(), b.requires_grad_()]
    return params


def forward(params: list[flow.Tensor], x: flow.Tensor) -> flow.Tensor:
    h = x
    for i in range(0, len(params) - 2, 2):
        h = F.relu(F.linear(h, params[i], params[i + 1]))
    return F.linear(h, params[-2], params[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    g = flow.Generator().manual_seed(args.seed)
    x, y = two_spirals(500, g)
    perm = flow.randperm(len(y), generator=g)
    x, y = x[perm], y[perm]
    x_train, y_train, x_test, y_test = x[:800], y[:800], x[800:], y[800:]

    params = init_params([2, 64, 64, 2], g)
    momentum = [flow.zeros_like(p) for p in params]
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        loss = F.cross_entropy(forward(params, x_train), y_train)
        for p in params:
            p.grad = None
        loss.backward()
        with flow.no_grad():
            for p, m in zip(params, momentum):
                m.mul_(0.9).add_(p.grad)
                p.sub_(m * args.lr)
        if step % 100 == 0 or step == 1:
            print(f"step {step:4d}  loss {loss.item():.4f}")
    with flow.no_grad():
        acc = (forward(params, x_test).argmax(dim=1) == y_test).float().mean().item()
    print(f"trained {args.steps} steps in {time.perf_counter() - start:.1f}s; test accuracy {acc:.1%}")


if __name__ == "__main__":
    main()
