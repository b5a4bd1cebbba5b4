"""The PNG of a run's curves: training and test loss on the left, the test metrics on the right."""

from __future__ import annotations

import io

from flow_models.train.runfiles import atomic_write

__all__ = ["plot_metrics"]

_METRICS = ("accuracy", "auc", "token_error_rate", "perplexity")


def plot_metrics(records: list[dict], path: str, title: str = "") -> str:
    """Draw ``metrics.jsonl`` records (``kind`` train / eval) into ``path`` (PNG, matplotlib's Agg backend),
    replacing it atomically."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    train = [r for r in records if r.get("kind") == "train"]
    evals = [r for r in records if r.get("kind") == "eval"]
    fig, (ax_loss, ax_metric) = plt.subplots(1, 2, figsize=(10, 4))
    try:
        if train:
            ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], label="train", lw=1)
        if evals:
            ax_loss.plot([r["step"] for r in evals], [r["loss"] for r in evals], "o-", label="test")
        ax_loss.set_xlabel("step")
        ax_loss.set_ylabel("loss")
        ax_loss.set_title("loss")
        ax_loss.grid(alpha=0.3)
        if train or evals:
            ax_loss.legend()
        shown = [m for m in _METRICS if any(m in r for r in evals)][:2]
        for m in shown:
            pts = [(r["step"], r[m]) for r in evals if m in r]
            ax_metric.plot(*zip(*pts), "o-", label=f"test {m.replace('_', ' ')}")
        ax_metric.set_xlabel("step")
        ax_metric.set_title(", ".join(m.replace("_", " ") for m in shown) or "metrics")
        ax_metric.grid(alpha=0.3)
        if shown:
            ax_metric.legend()
        if title:
            fig.suptitle(title)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        atomic_write(path, buf.getvalue())
    finally:
        plt.close(fig)
    return path
