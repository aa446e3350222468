"""Ablation: the dev set answered with each check switched off in turn, against all checks on.

Every configuration answers the same questions with the same models, corpus and call cache, so
a call whose prompt a check did not change replays from the cache; only what the check touched
is asked again. The pipeline is run in every configuration; the baselines too where the check
acts on answers (the answer checks apply to every mode alike).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..config import Settings
from ..pipeline.checks import BY_ID, SWITCHABLE, check_disabled
from . import scoring
from .runner import Dataset, EvalRun

# Checks whose switching off changes the baselines' answers too.
_ANSWER_PHASES = ("answer", "any")


def switchable_checks(ids: list[str]) -> list[str]:
    """``ids`` checked against the registry: UsageError naming one that is unknown or cannot be
    switched off."""
    from ..errors import UsageError

    try:
        return check_disabled(ids)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def paired(own: list[dict], other: list[dict], metric: str) -> dict | None:
    """``own`` minus ``other`` on the questions both answered: mean difference of ``metric``
    with its 95% bootstrap interval, wins / losses / ties; None when no question is shared."""
    mine = {r["id"]: r.get(metric) for r in own}
    diffs: list[float] = []
    for row in other:
        a, b = mine.get(row["id"]), row.get(metric)
        if a is not None and b is not None:
            diffs.append(float(a) - float(b))
    if not diffs:
        return None
    summary = scoring.summarize(list[float | None](diffs))
    wins = sum(1 for d in diffs if d > 0)
    losses = sum(1 for d in diffs if d < 0)
    return {"mean": summary["mean"], "ci": summary["ci"], "wins": wins, "losses": losses,
            "ties": len(diffs) - wins - losses}


def never_fired(check_id: str, rows: list[dict]) -> bool:
    """Whether ``check_id`` fired on none of ``rows`` (answers with all checks on); False when a
    row does not say which checks fired (an answer recorded before rows listed them)."""
    return all(r.get("checks_fired") is not None and check_id not in r["checks_fired"] for r in rows)


def rows_of(rows: list[dict], mode: str) -> list[dict]:
    return [r for r in rows if r["mode"] == mode]


def _mean(rows: list[dict], key: str) -> float | None:
    values = [float(r[key]) for r in rows if r.get(key) is not None]
    return sum(values) / len(values) if values else None


def ablate(settings: Settings, dataset: Dataset, out_root: Path, *, models, fetcher, embedder, backend,
           checks: list[str] | None = None, log: Callable[[str], None] = lambda s: None) -> list[dict]:
    """One row per configuration: all checks on first, then each of ``checks`` (default: every
    switchable one) off in turn, with F1, supporting-passage recall, seconds and model calls per
    question, and the paired F1 difference against all on. Answers resume from ``out_root``."""
    wanted = switchable_checks(checks) if checks else list(SWITCHABLE)

    def answer(disabled: list[str], modes: list[str]) -> list[dict]:
        configured = settings.with_overrides({"checks.disabled": sorted(set(settings.checks.disabled) | set(disabled))},
                                             origin="ablation")
        label = "+".join(disabled) or "all-on"
        runner = EvalRun(configured, dataset, out_root / label, models=models, fetcher=fetcher,
                         embedder=embedder, backend=backend, log=lambda s: log(f"{label} {s}"))
        return runner.run(modes)

    base_modes = ["pipeline", "rag"]
    base = answer([], base_modes)
    base_pipeline = [r for r in base if r["mode"] == "pipeline"]
    rows = [_row("all on", base_pipeline, base_pipeline, rows_of(base, "rag"))]
    for check_id in wanted:
        modes = base_modes if BY_ID[check_id].phase in _ANSWER_PHASES else ["pipeline"]
        if never_fired(check_id, [r for r in base if r["mode"] in modes]):
            # Switched off, a check that changed nothing gives the same answers: not run again.
            rows.append({**_row(check_id, base_pipeline, base_pipeline, rows_of(base, "rag")),
                         "never_fired": True})
            log(f"{check_id}: fired on no answer with all checks on; the same as all on")
            continue
        got = answer([check_id], modes)
        mine = [r for r in got if r["mode"] == "pipeline"]
        rag = rows_of(got, "rag") or rows_of(base, "rag")
        rows.append(_row(check_id, mine, base_pipeline, rag))
    return rows


def _row(label: str, rows: list[dict], base: list[dict], rag: list[dict]) -> dict:
    base_seconds = _mean(base, "seconds") or 0.0
    seconds = _mean(rows, "seconds")
    return {"without": label, "questions": len(rows), "f1": _mean(rows, "f1"),
            "f1_vs_all_on": paired(rows, base, "f1") if rows is not base else None,
            "f1_vs_rag": paired(rows, rag, "f1"),
            "sp_recall": _mean(rows, "sp_recall"),
            "seconds": seconds, "seconds_vs_all_on": (seconds / base_seconds) if seconds and base_seconds else None,
            # All the calls a configuration makes (new and replayed from the call cache), which is
            # what switching a check off costs; the new calls alone are what this run paid, less
            # wherever the configuration shares prompts with one run before it.
            "calls": _mean([{"calls": r["model_calls"] + r["cache_hits"]} for r in rows
                            if r.get("model_calls") is not None and r.get("cache_hits") is not None], "calls"),
            "model_calls": _mean(rows, "model_calls")}


def render(rows: list[dict], title: str) -> str:
    """The ablation table in markdown."""
    def num(value, fmt="{:.3f}"):
        return fmt.format(value) if value is not None else "n/a"

    def diff(p):
        if not p:
            return "n/a"
        lo, hi = p["ci"]
        return f"{p['mean']:+.3f} [{lo:+.3f}, {hi:+.3f}] {p['wins']}/{p['losses']}/{p['ties']}"

    lines = [f"## {title}", "",
             "| without | F1 | F1 - all on [95%] w/l/t | F1 - rag [95%] w/l/t | SP recall | s/question | x all on | calls/question | new calls/question |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if r.get("never_fired"):
            lines.append(f"| {r['without']} | never fired: the same as all on | | | | | | | |")
            continue
        lines.append(f"| {r['without']} | {num(r['f1'])} | {diff(r['f1_vs_all_on'])} | {diff(r['f1_vs_rag'])} | "
                     f"{num(r['sp_recall'])} | {num(r['seconds'], '{:.1f}')} | {num(r['seconds_vs_all_on'], '{:.2f}')} | "
                     f"{num(r.get('calls'), '{:.1f}')} | {num(r['model_calls'], '{:.1f}')} |")
    lines += ["", "calls/question counts every call of a configuration, made or replayed from the call cache; "
              "s/question and new calls/question count what this run paid (a replayed call takes no time)."]
    return "\n".join(lines) + "\n"
