"""Drives local-deep-research (LDR) from Python for scripts/bench_peers.py.

Runs inside the peer's own virtual env (Python 3.12), never in the appliance's. LDR 1.10.7's
benchmark CLI ignores its model, endpoint and strategy flags and grades with a cloud model, so
the peer is driven here through its programmatic API: a settings snapshot
(``create_settings_snapshot(overrides=...)``) and ``quick_summary`` (its quick research
mode), one question after the other. Answers are graded by the appliance's scorer, not here.

  --check           build the settings snapshot, check every key against LDR's own defaults
                    and that the loopback guard is active; runs no model (for --dry-run)
  --questions FILE  answer these questions (JSON lines {id, question}); one JSON line per
                    answer to --out, with wall-clock start/end so model calls can be attributed
"""

from __future__ import annotations

import argparse
import importlib.abc
import json
import sys
import time
import traceback

# Keys of LDR's settings this driver sets; each must exist in LDR's own defaults (checked).
SNAPSHOT_KEYS = ("llm.provider", "llm.model", "llm.llamacpp.url", "llm.temperature", "llm.max_tokens",
                 "llm.local_context_window_size", "search.tool",
                 "search.engine.web.searxng.default_params.instance_url",
                 "search.engine.web.searxng.default_params.max_results", "search.snippets_only",
                 "search.iterations", "search.questions_per_iteration", "search.search_strategy")


class _NoTorch(importlib.abc.MetaPathFinder):
    """The peer's env has no torch (no CPU build for its Python here; the registry's pulls CUDA).
    Importing it fails at once and is recorded, so the report says if the quick mode wanted it."""

    wanted: list[str] = []

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            self.wanted.append(name)
            raise ImportError("torch is not installed in the peer's environment (benchmark set-up)")
        return None


def snapshot(args):
    """LDR's settings snapshot for this benchmark."""
    from local_deep_research.api.settings_utils import create_settings_snapshot

    overrides = {
        "llm.provider": "llamacpp",
        "llm.model": args.model,
        "llm.llamacpp.url": args.llm_url,
        "llm.temperature": args.temperature,
        # The server's context is n_ctx tokens; LDR's defaults assume 20k and 30k-token answers.
        "llm.local_context_window_size": args.n_ctx,
        "llm.max_tokens": args.max_tokens,
        "search.tool": "searxng",
        "search.engine.web.searxng.default_params.instance_url": args.searxng,
        "search.engine.web.searxng.default_params.max_results": args.max_results,
        "search.snippets_only": args.snippets_only,
        "search.iterations": args.iterations,
        "search.questions_per_iteration": args.questions_per_iteration,
        "search.search_strategy": args.strategy,
    }
    return overrides, create_settings_snapshot(overrides=overrides)


def check(args) -> int:
    from local_deep_research.api import quick_summary  # noqa: F401 - the import is the check
    from local_deep_research.api.settings_utils import get_default_settings_snapshot
    import local_deep_research

    defaults = get_default_settings_snapshot()
    missing = [k for k in SNAPSHOT_KEYS if k not in defaults]
    overrides, snap = snapshot(args)
    applied = all(snap[k]["value"] == v if isinstance(snap[k], dict) else snap[k] == v
                  for k, v in overrides.items())
    print(json.dumps({"ldr_version": getattr(local_deep_research, "__version__", "?"),
                      "python": sys.version.split()[0], "missing_keys": missing, "overrides_applied": applied,
                      "guard": "loopback_guard" in sys.modules, "torch_wanted": _NoTorch.wanted}))
    return 0 if not missing and applied and "loopback_guard" in sys.modules else 1


def _sources(result: dict) -> list[dict]:
    out = []
    for item in result.get("sources") or []:
        if isinstance(item, dict):
            out.append({"url": item.get("link") or item.get("url") or "", "title": item.get("title") or "",
                        "snippet": item.get("snippet") or item.get("content") or "",
                        "index": item.get("index")})
        elif isinstance(item, str):
            out.append({"url": item, "title": "", "snippet": "", "index": None})
    return out


def run(args) -> int:
    from local_deep_research.api import quick_summary

    overrides, snap = snapshot(args)
    questions = [json.loads(line) for line in open(args.questions, encoding="utf-8") if line.strip()]
    with open(args.out, "a", encoding="utf-8") as out:
        for item in questions:
            start = time.time()
            row = {"id": item["id"], "question": item["question"], "start": start}
            try:
                result = quick_summary(item["question"], settings_snapshot=snap, search_tool="searxng",
                                       search_strategy=args.strategy, iterations=args.iterations,
                                       questions_per_iteration=args.questions_per_iteration,
                                       temperature=args.temperature)
                row.update(answer=result.get("summary") or "", sources=_sources(result), status="ok")
            except Exception as exc:  # noqa: BLE001 - a failed question is a result, recorded
                row.update(answer="", sources=[], status=f"failed: {type(exc).__name__}: {exc}",
                           trace=traceback.format_exc()[-2000:])
            row["end"] = time.time()
            row["seconds"] = round(row["end"] - start, 3)
            row["torch_wanted"] = sorted(set(_NoTorch.wanted))
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            out.flush()
            print(f"peer: {item['id']} {row['status'][:80]} in {row['seconds']:.1f} s", file=sys.stderr, flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--questions")
    parser.add_argument("--out")
    parser.add_argument("--llm-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--searxng", required=True)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-results", type=int, default=10)
    parser.add_argument("--strategy", default="source_based")
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--questions-per-iteration", type=int, default=3)
    parser.add_argument("--snippets-only", type=lambda s: s.lower() == "true", default=False)
    parser.add_argument("--log", help="append LDR's own log (INFO and up) to this file")
    args = parser.parse_args()
    sys.meta_path.insert(0, _NoTorch())
    if args.log:
        from loguru import logger

        import local_deep_research  # noqa: F401 - it disables its own logging when imported

        logger.enable("local_deep_research")
        logger.add(args.log, level="INFO", backtrace=False, diagnose=False)
    return check(args) if args.check else run(args)


if __name__ == "__main__":
    sys.exit(main())
