"""Eval outputs: a markdown table with the modes side by side, and a bar chart PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .runner import METRICS

CHART_METRICS = [("em", "exact match"), ("f1", "token F1"), ("sp_recall", "passage recall"),
                 ("faithfulness", "faithfulness")]


def _cell(summary: dict[str, Any], key: str) -> str:
    mean, ci = summary["mean"], summary["ci"]
    if mean is None:
        return "n/a"
    if key in ("seconds",) or key.startswith("tokens") or key == "model_calls":
        return f"{mean:.1f} [{ci[0]:.1f}, {ci[1]:.1f}]"
    return f"{mean:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def render_table(table: dict[str, dict[str, Any]], title: str) -> str:
    modes = list(table)
    lines = [f"# {title}", "",
             "Means with 95% bootstrap intervals; `n/a` where a metric does not apply.", "",
             "| metric | " + " | ".join(modes) + " |",
             "| --- | " + " | ".join("---" for _ in modes) + " |",
             "| questions | " + " | ".join(str(table[m]["questions"]) for m in modes) + " |"]
    for key, label in METRICS:
        lines.append(f"| {label} | " + " | ".join(_cell(table[m][key], key) for m in modes) + " |")
    return "\n".join(lines) + "\n"


def render_chart(table: dict[str, dict[str, Any]], path: Path, title: str) -> Path:
    """Grouped bars: one group per headline metric, one bar per mode, with interval whiskers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(table)
    width = 0.8 / max(1, len(modes))
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    for i, mode in enumerate(modes):
        xs, heights, errs = [], [], [[], []]
        for j, (key, _) in enumerate(CHART_METRICS):
            summary = table[mode][key]
            mean = summary["mean"] or 0.0
            lo, hi = summary["ci"] or (mean, mean)
            xs.append(j + (i - (len(modes) - 1) / 2) * width)
            heights.append(mean)
            errs[0].append(max(0.0, mean - lo))
            errs[1].append(max(0.0, hi - mean))
        bars = ax.bar(xs, heights, width, yerr=errs, capsize=3, label=mode)
        ax.bar_label(bars, labels=[f"{h:.2f}" for h in heights], fontsize=7, padding=2)
    ax.set_xticks(range(len(CHART_METRICS)), [label for _, label in CHART_METRICS])
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("score (mean, 95% CI)")
    ax.set_title(title, fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
