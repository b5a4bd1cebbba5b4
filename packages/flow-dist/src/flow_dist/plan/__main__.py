"""``python -m flow_dist.plan``: the best strategy per cluster size for a zoo GPT.

python -m flow_dist.plan --model gpt2 --cluster h200 --gpus 8,64,512,4096 --batch 512 --seq 1024
python -m flow_dist.plan --model gpt-1.3b --gpus 8 --memory-cap 16 --explain   # every dp x tp x pp shape
"""

from __future__ import annotations

import argparse
import sys

MODELS = {
    "gpt2": dict(n_layer=12, n_embd=768, n_head=12),
    "gpt-1.3b": dict(n_layer=24, n_embd=2048, n_head=16),
    "tiny": dict(n_layer=2, n_embd=32, n_head=4, vocab_size=64, block_size=16),
}


def main(argv: list | None = None) -> int:
    from flow_dist.plan.cluster import Cluster
    from flow_dist.plan.simulate import explore, search
    from flow_dist.plan.workload import gpt_workload

    try:
        from flow_models.nlp.gpt import GPTConfig
    except ImportError as e:  # the models come from the zoo, an optional package
        raise SystemExit(f"python -m flow_dist.plan: the model table needs flow-models: {e}") from e

    ap = argparse.ArgumentParser(prog="python -m flow_dist.plan", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt2", choices=sorted(MODELS))
    ap.add_argument("--cluster", default="h200", choices=["h200"])
    ap.add_argument("--gpus", default="8,64,512,4096", help="comma-separated cluster sizes")
    ap.add_argument("--batch", type=int, default=512, help="global batch, sequences")
    ap.add_argument("--seq", type=int, default=None, help="tokens per sequence (default: the model's block size)")
    ap.add_argument("--memory-cap", type=float, default=None, help="GiB per GPU (default: the device's memory)")
    ap.add_argument(
        "--explain", action="store_true", help="also list the best strategy of every dp x tp x pp shape searched"
    )
    a = ap.parse_args(argv)
    try:
        gpus = [int(g) for g in a.gpus.split(",")]
    except ValueError:
        ap.error(f"--gpus: expected comma-separated integers, got {a.gpus!r}")
    cfg = GPTConfig(**MODELS[a.model])
    work = gpt_workload(cfg, seq=a.seq, name=a.model)
    cap = a.memory_cap * 2**30 if a.memory_cap else None
    print(f"{a.model}: {work.params / 1e6:.1f}M parameters, batch {a.batch} x {work.seq} tokens, {a.cluster}")
    head = f"{'GPUs':>6} {'strategy':<24} {'step ms':>9} {'GiB/GPU':>8} {'tokens/s':>11} {'MFU':>6} {'scaling':>8}  top"
    print(head)
    print("-" * len(head))
    base = None
    for n in gpus:
        r = search(work, Cluster.h200(n), a.batch, cap)
        if r is None:
            print(f"{n:>6} {'(nothing fits)':<24}")
            if a.explain:
                c = Cluster.h200(n)
                _explain(explore(work, c, a.batch, cap), None, c.device.memory if cap is None else cap)
            continue
        if base is None:
            base = (n, r.step_time)
        eff = base[1] * base[0] / (r.step_time * n)  # strong scaling against the smallest cluster
        top = ", ".join(k for k, _ in r.critical_path[:3])
        print(
            f"{n:>6} {str(r.strategy):<24} {r.step_time * 1e3:>9.2f} {r.memory['total'] / 2**30:>8.2f} "
            f"{r.tokens_per_s:>11.3g} {r.mfu:>6.1%} {eff:>8.1%}  {top}"
        )
        if a.explain:
            c = Cluster.h200(n)
            _explain(explore(work, c, a.batch, cap), r, c.device.memory if cap is None else cap)
    return 0


def _explain(rows: list, chosen, cap) -> None:
    """The best strategy of each mesh shape, fastest first: its step, memory, bubble and largest items."""
    for r in rows:
        fits = r.fits(cap)
        mark = "*" if chosen is not None and r.strategy == chosen.strategy else " "
        why = "" if fits else "  (over the memory cap)"
        top = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in r.critical_path[:3])
        print(
            f"     {mark} {str(r.strategy):<24} {r.step_time * 1e3:>9.2f} {r.memory['total'] / 2**30:>8.2f} "
            f"bubble {r.bubble:>5.1%}  {top}{why}"
        )


if __name__ == "__main__":
    sys.exit(main())
