"""Fused (flash) attention on the CPU against the composite and PyTorch, at one thread.

Two workloads, each timed as the process's CPU time per iteration (median of ``--iters`` after a
warm-up), float32:

* ``attn``: ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` forward + backward alone,
  q, k, v of shape (8, 8, T, 32): the zoo GPT's attention at batch 8, 8 heads of 32;
* ``gpt``: one AdamW training step of a GPT (4 layers, 256 wide, 8 heads, block T, batch 8,
  vocabulary 512): flow's zoo GPT, and the same model written with torch.

Implementations: ``fused`` (flow, the flash_attention op), ``composite`` (flow with
``flow.backends.cpu.attention.enable_flash_sdp(False)``: matmul, mask, softmax, matmul), ``torch``
(PyTorch's CPU SDPA, its own fused kernel). Every measurement runs in a fresh process; the rounds
alternate the implementations (fused, composite, torch, fused, ...), and the table gives the median
over rounds with the range. Peak memory: flow's caching allocator's ``allocated_bytes.peak`` over
one iteration (blocks >= 64 KiB; flow only) and the process's max RSS.

    python benchmarks/attention.py                 # 3 rounds, T = 256 (a few minutes)
    python benchmarks/attention.py --rounds 5 --seq 512
    python benchmarks/attention.py --quick         # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # one thread for every pool, before NumPy / torch / flow load

IMPLS = ("fused", "composite", "torch")
B, H, HEAD, LAYERS, VOCAB = 8, 8, 32, 4, 512


def _timed(step, iters: int, warmup: int = 1) -> list:
    import time

    for _ in range(warmup):
        step()
    out = []
    for _ in range(iters):
        t0 = time.process_time()
        step()
        out.append(time.process_time() - t0)
    return out


def _flow_peak(flow, step) -> int:
    flow.cpu.reset_peak_memory_stats()
    base = flow.cpu.memory_allocated()
    step()
    return flow.cpu.max_memory_allocated() - base


def _torch_gpt(torch, T):
    nn, F = torch.nn, torch.nn.functional
    C = H * HEAD

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (z.reshape(b, t, H, HEAD).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, C))
            return x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(VOCAB, C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln_f = nn.LayerNorm(C)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            return self.ln_f(x) @ self.wte.weight.T  # tied head, as the zoo GPT's

    return GPT()


def child(kind: str, impl: str, T: int, iters: int) -> dict:
    """One measurement in this process; returns its figures."""
    import resource

    import numpy as np

    rng = np.random.default_rng(0)
    res: dict = {}
    if impl == "torch":
        import torch

        torch.set_num_threads(1)
        if kind == "attn":
            qkv = [torch.tensor(rng.standard_normal((B, H, T, HEAD)), dtype=torch.float32, requires_grad=True)]
            qkv += [torch.tensor(rng.standard_normal((B, H, T, HEAD)), dtype=torch.float32, requires_grad=True)]
            qkv += [torch.tensor(rng.standard_normal((B, H, T, HEAD)), dtype=torch.float32, requires_grad=True)]

            def step():
                torch.nn.functional.scaled_dot_product_attention(*qkv, is_causal=True).sum().backward()

        else:
            torch.manual_seed(0)
            model = _torch_gpt(torch, T)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            data = torch.tensor(rng.integers(0, VOCAB, (B, T + 1)))

            def step():
                logits = model(data[:, :-1])
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), data[:, 1:].reshape(-1))
                opt.zero_grad()
                loss.backward()
                opt.step()

    else:
        import flow
        import flow.nn.functional as F
        from flow.backends.cpu import native
        from flow.backends.cpu.attention import enable_flash_sdp

        native.set_num_threads(1)
        enable_flash_sdp(impl == "fused")
        if kind == "attn":
            qkv = [flow.tensor(rng.standard_normal((B, H, T, HEAD)), dtype=flow.float32, requires_grad=True)]
            qkv += [flow.tensor(rng.standard_normal((B, H, T, HEAD)), dtype=flow.float32, requires_grad=True)]
            qkv += [flow.tensor(rng.standard_normal((B, H, T, HEAD)), dtype=flow.float32, requires_grad=True)]

            def step():
                F.scaled_dot_product_attention(*qkv, is_causal=True).sum().backward()

        else:
            from flow_models.nlp.gpt import GPT, GPTConfig

            flow.manual_seed(0)
            cfg = GPTConfig(vocab_size=VOCAB, block_size=T, n_layer=LAYERS, n_head=H, n_embd=H * HEAD, dropout=0.0)
            model = GPT(cfg)
            opt = flow.optim.AdamW(model.parameters(), lr=1e-3)
            data = flow.tensor(rng.integers(0, VOCAB, (B, T + 1)))

            def step():
                loss = model.loss(model(data[:, :-1]), data[:, 1:])
                opt.zero_grad()
                loss.backward()
                opt.step()

        res["flow_peak_bytes"] = _flow_peak(flow, step)
    times = _timed(step, iters)
    res["cpu_s"] = statistics.median(times)
    res["max_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return res


def _fmt(vals, scale=1.0, unit="") -> str:
    vals = [v * scale for v in vals]
    return f"{statistics.median(vals):.1f}{unit} [{min(vals):.1f}-{max(vals):.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seq", type=int, default=256, help="sequence length T (the GPT's block)")
    ap.add_argument("--iters", type=int, default=3, help="timed iterations per process (after one warm-up)")
    ap.add_argument("--kinds", default="attn,gpt")
    ap.add_argument("--quick", action="store_true", help="1 round, T = 64, 1 iteration")
    ap.add_argument("--json", help="also write the raw figures here")
    ap.add_argument("--child", nargs=2, metavar=("KIND", "IMPL"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.seq, a.iters = 1, 64, 1
    if a.child:
        print(json.dumps(child(a.child[0], a.child[1], a.seq, a.iters)))
        return
    raw: dict = {}
    load0 = os.getloadavg()
    kinds = a.kinds.split(",")
    for r in range(a.rounds):
        for kind in kinds:
            for impl in IMPLS[r % 3 :] + IMPLS[: r % 3]:  # rotate the order each round
                cmd = [sys.executable, __file__, "--child", kind, impl, "--seq", str(a.seq), "--iters", str(a.iters)]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                raw.setdefault(kind, {}).setdefault(impl, []).append(json.loads(out.strip().splitlines()[-1]))
    load1 = os.getloadavg()
    print(f"T = {a.seq}, batch {B}, {H} heads of {HEAD}, float32, 1 thread; {a.rounds} rounds, separate processes")
    print(f"load average (1 min) before / after: {load0[0]:.2f} / {load1[0]:.2f}")
    for kind in kinds:
        title = "attention forward + backward" if kind == "attn" else f"GPT training step ({LAYERS} layers)"
        print(f"\n{title}: CPU ms median [range]; flow peak allocated MiB; max RSS MiB")
        for impl in IMPLS:
            rows = raw[kind][impl]
            peak = [x["flow_peak_bytes"] for x in rows if "flow_peak_bytes" in x]
            peak_s = _fmt(peak, 1 / 2**20) if peak else "-"
            rss = _fmt([x["max_rss_kib"] for x in rows], 1 / 1024)
            print(f"  {impl:10s} {_fmt([x['cpu_s'] for x in rows], 1e3):>24s}   {peak_s:>20s}   {rss}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"seq": a.seq, "load": [load0, load1], "raw": raw}, fh, indent=1)


if __name__ == "__main__":
    main()
