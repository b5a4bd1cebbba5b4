"""Pipeline candidates of the auto-parallel search (:func:`flow_dist.auto_parallel.plan`).

Per (tp, pp > 1, ZeRO stage) over ``world`` ranks (``dp`` the rest): stages of whole blocks (as
:func:`flow_dist.pipeline.gpt_stages` cuts them), the micro-batch count (gradient accumulation over
1F1B) the simulator finds fastest among the divisors of the per-replica batch, preferring one
that fits the memory cap; its bubble and activation sends are :func:`flow_dist.plan.simulate`'s.
With ``tp > 1`` every allowed group is split (Megatron's plan). The candidates are scored, not
applied: ``AutoPlan.apply`` lays out DP and TP only.
"""

from __future__ import annotations

from flow_dist.auto_parallel import GROUPS, Candidate, _divisors, _score
from flow_dist.plan import Strategy, simulate

__all__ = ["pipeline_candidates"]

PP_NOTE = "scored only: enable_auto_parallel does not build pipelines; the best non-PP plan applies"


def pipeline_candidates(work, cluster, n: int, batch: int, cfg, counts: dict, zero_stages, groups, cap) -> list:
    """Per (tp, pp > 1, ZeRO stage): the pipeline candidate with the fastest micro-batch count, scored
    only (``AutoPlan.apply`` does not build pipelines)."""
    out = []
    for tp in _divisors(n):
        if tp > 1 and (cfg.n_head % tp or cfg.n_embd % tp or 4 * cfg.n_embd % tp):
            continue
        # a vocabulary that does not divide tp stays whole, as in plan()'s DP x TP candidates
        tp_groups = tuple(g for g in GROUPS if g in groups and not (g == "vocab" and cfg.vocab_size % tp))
        for pp in _divisors(n // tp)[1:]:
            dp = n // tp // pp
            if cfg.n_layer % pp or batch % dp or (tp > 1 and not tp_groups):
                continue
            for z in zero_stages:
                if z and dp == 1:
                    continue
                best = None
                for m in _divisors(batch // dp):  # gradient accumulation: the pipeline's micro-batches
                    c = Candidate(dp, tp, tp_groups if tp > 1 else (), z, pp=pp, micro_batches=m)
                    _score(work, cluster, c, batch, counts, simulate, Strategy)
                    c.fits = c.memory <= cap
                    if best is None or (c.fits, -c.step_time) > (best.fits, -best.step_time):
                        best = c
                best.applicable = False
                best.note = PP_NOTE
                out.append(best)
    return out
