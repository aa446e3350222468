"""Eval outputs: a markdown table with the modes side by side, and a bar chart PNG.

The table shows every mode the output folder holds answers for, not only the modes of the
last command: `eval --mode rag` then `eval --mode pipeline` into one folder compares the two.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import scoring
from .runner import METRICS, MODES

CHART_METRICS = [("em", "exact match"), ("f1", "token F1"), ("sp_recall", "passage recall"),
                 ("faithfulness", "faithfulness")]


def folder_rows(results_path: Path, question_ids: list[str]) -> list[dict]:
    """The answers in ``results.jsonl`` to these questions, the latest per question and column.

    Lines cut by a kill are skipped (they are redone by the runner). The pipeline's answers
    depend on the profile; the one-call baselines' do not, so a baseline answered under two
    profiles counts once.
    """
    wanted = set(question_ids)
    latest: dict[tuple, dict] = {}
    if results_path.exists():
        for line in results_path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                key = (row["id"], row["mode"], row.get("model", ""),
                       row.get("profile", "") if row["mode"] == "pipeline" else "", _without(row))
            except (ValueError, KeyError, TypeError):
                continue
            if row["id"] in wanted:
                latest[key] = row
    return list(latest.values())


def columns(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows grouped into the table's columns, in the order pipeline, rag, closed-book.

    A column is a mode; it is also named by profile (pipeline) or model only where the folder
    holds more than one, so that two profiles or two models are never averaged together.
    """
    models = {r.get("model", "") for r in rows}
    profiles = {r.get("profile", "") for r in rows if r["mode"] == "pipeline"}
    grouped: dict[tuple, list[dict]] = {}
    for row in rows:
        profile = row.get("profile", "") if row["mode"] == "pipeline" and len(profiles) > 1 else ""
        model = row.get("model", "") if len(models) > 1 else ""
        grouped.setdefault((row["mode"], profile, model, _without(row)), []).append(row)
    order = {mode: i for i, mode in enumerate(MODES)}
    out: dict[str, list[dict]] = {}
    for key in sorted(grouped, key=lambda k: (order.get(k[0], len(order)), k[1], k[2], k[3])):
        mode, profile, model, without = key
        label = (mode + (f" {profile}" if profile else "") + (f" ({model})" if model else "")
                 + (f" without {without}" if without else ""))
        out[label] = grouped[key]
    return out


def _without(row: dict) -> str:
    """The checks a row's answer was given without (``eval --without``), "+"-joined."""
    return "+".join(sorted(row.get("without") or []))


def summarize_columns(grouped: dict[str, list[dict]]) -> dict[str, dict[str, Any]]:
    """Per column and metric: mean, 95% bootstrap interval and count (as runner.aggregate)."""
    table: dict[str, dict[str, Any]] = {}
    for label, rows in grouped.items():
        table[label] = {key: scoring.summarize([r.get(key) for r in rows]) for key, _ in METRICS}
        table[label]["questions"] = len(rows)
    return table


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


def paired_lines(grouped: dict[str, list[dict]], metric: str = "f1") -> str:
    """The pipeline against each other column on the same questions: the mean paired
    difference of ``metric`` with its 95% bootstrap interval, and wins / losses / ties. The
    columns' own intervals overlap far more than a paired difference's does."""
    from .ablation import paired

    pipelines = [label for label in grouped if label.startswith("pipeline")]
    lines: list[str] = []
    for mine in pipelines:
        for other, rows in grouped.items():
            if other.startswith("pipeline"):
                continue
            result = paired(grouped[mine], rows, metric)
            if result is None:
                continue
            lo, hi = result["ci"]
            lines.append(f"| {mine} - {other} | {result['mean']:+.3f} [{lo:+.3f}, {hi:+.3f}] | "
                         f"{result['wins']} / {result['losses']} / {result['ties']} |")
    if not lines:
        return ""
    return "\n".join(["", f"Paired on the same questions ({metric}):", "",
                      "| columns | mean difference [95%] | wins / losses / ties |", "| --- | --- | --- |"]
                     + lines) + "\n"


def render_chart(table: dict[str, dict[str, Any]], path: Path, title: str) -> Path:
    """Grouped bars: one group per headline metric, one bar per mode, with interval whiskers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(table)
    width = 0.8 / max(1, len(modes))
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    for i, mode in enumerate(modes):
        xs: list[float] = []
        heights: list[float] = []
        errs: list[list[float]] = [[], []]
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
