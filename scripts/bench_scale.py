#!/usr/bin/env python3
"""Benchmark batches on Dask against the in-process batch, on the same questions.

Modes, each in a fresh state folder holding the demo corpus (data/demo, ingested once), each
with a cold call cache:
  * in-process: `run_batch` in this process, one model, --threads llama.cpp threads;
  * local:1:    a LocalCluster with one worker process (same threads): the cluster path's cost;
  * local:2:    two worker processes, the threads split between them;
  * remote:     with --remote, the in-process batch with every role on a model server on
                loopback (llama-cpp-python's OpenAI-compatible server, the same model file and
                threads, started here): what a remote backend costs against the in-process model.
Reported: questions per hour of wall time (cluster start included), the median seconds of a
question's own run, and the cluster path's overhead per question: (local:1 wall - in-process
wall) / questions, as a share of an in-process question's time (goal < 3%).

Usage: python scripts/bench_scale.py [--model NAME] [--questions 4] [--threads N] [--corpus-from DIR] [--remote] [--json]
The default model is the manifest's default (the research model): on a shared machine pass
--model smollm2-135m. Not part of `make test`. Writes only a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.batch import BatchItem, question_id, run_batch  # noqa: E402
from appliance.cluster import ClusterSpec  # noqa: E402
from appliance.config import SettingsRecipe  # noqa: E402

DEMO = ROOT / "data" / "demo"
ROLES = ("planner", "extractor", "verifier", "writer")


def demo_questions(count: int) -> list[BatchItem]:
    texts = [json.loads(line)["question"] for line in (DEMO / "questions.jsonl").read_text().splitlines()
             if line.strip()]
    if count > len(texts):
        raise SystemExit(f"the demo set has {len(texts)} questions; ask for at most that many")
    return [BatchItem(id=question_id(t), question=t, line=n) for n, t in enumerate(texts[:count], start=1)]


def recipe(home: Path, model: str | None, threads: int, profile: str) -> SettingsRecipe:
    empty = home / "empty-config.toml"
    empty.parent.mkdir(parents=True, exist_ok=True)
    empty.write_text("", encoding="utf-8")
    overrides: dict[str, object] = {"state.home": str(home), "models.manifest": str(ROOT / "models" / "models.toml"),
                                    "llm.n_threads": threads, "search.backend": "corpus", "search.corpus": "default"}
    if model:
        overrides.update({f"models.{role}": model for role in ROLES})
    return SettingsRecipe(config_file=str(empty), profile=profile, overrides=tuple(sorted(overrides.items())))


def start_model_server(model: str | None, threads: int, folder: Path):
    """llama-cpp-python's OpenAI-compatible server on a free loopback port with the manifest
    model ``model``; (process, manifest path with a kind = "openai" entry named "remote")."""
    import socket
    import subprocess

    from appliance.config import load_settings
    from appliance.llm.manifest import load_manifest, resolve_model
    from appliance.llm.remote import wait_until_serving

    settings = load_settings(folder / "empty-config.toml", env={}, overrides={
        "models.manifest": str(ROOT / "models" / "models.toml"),
        **({f"models.{role}": model for role in ROLES} if model else {})})
    manifest = load_manifest(ROOT / "models" / "models.toml")
    entry = resolve_model(settings, "writer", manifest)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = (folder / "server.log").open("w")
    process = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(manifest.path_of(entry)),
                                "--model_alias", "bench", "--host", "127.0.0.1", "--port", str(port),
                                "--n_ctx", str(settings.llm.n_ctx), "--n_threads", str(threads),
                                "--verbose", "False"], stdout=log, stderr=subprocess.STDOUT)
    if not wait_until_serving(f"http://127.0.0.1:{port}", 120, process):
        process.kill()
        raise SystemExit("the model server did not start (see its log)")
    path = folder / "remote-models.toml"
    path.write_text("\n".join(['[[model]]', 'name = "remote"', 'kind = "openai"',
                               f'base_url = "http://127.0.0.1:{port}"', 'model = "bench"',
                               'response_format = "json_object"', f"n_ctx_train = {settings.llm.n_ctx}",
                               'roles = ["planner", "extractor", "verifier", "writer"]']) + "\n", encoding="utf-8")
    return process, path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model name of the manifest for every role (default: the manifest's)")
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="llama.cpp threads in all")
    parser.add_argument("--profile", default="quick")
    parser.add_argument("--corpus-from", type=Path,
                        help="a state folder whose corpus 'default' holds data/demo (copied, not re-embedded)")
    parser.add_argument("--remote", action="store_true",
                        help="also the in-process batch against a loopback model server with the same model")
    parser.add_argument("--only", action="append", help="run only this mode (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    # A fresh state for every mode; a pinned date (APPLIANCE_TODAY) stays, so two runs of this
    # script on different days ask the model the same prompts.
    for key in [k for k in os.environ if k.startswith("APPLIANCE_") and k != "APPLIANCE_TODAY"]:
        del os.environ[key]

    from appliance.sources.corpus import Corpus

    items = demo_questions(args.questions)
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        base = Path(tmp) / "corpus-home"
        if args.corpus_from:
            shutil.copytree(args.corpus_from / "lancedb", base / "lancedb")
        else:
            Corpus(recipe(base, args.model, args.threads, args.profile).build(), "default").add([DEMO / "corpus.jsonl"])
        modes = [("in-process", None, args.threads), ("local:1", ClusterSpec("local", 1), args.threads),
                 ("local:2", ClusterSpec("local", 2), max(1, args.threads // 2))]
        if args.remote:
            modes.append(("remote", None, args.threads))
        if args.only:
            modes = [m for m in modes if m[0] in args.only]
        figures: dict[str, dict[str, float]] = {}
        server = None
        for name, spec, threads in modes:
            home = Path(tmp) / name.replace(":", "-")
            shutil.copytree(base / "lancedb", home / "lancedb")
            run_recipe = recipe(home, args.model, threads, args.profile)
            if name == "remote":
                server, manifest = start_model_server(args.model, threads, home)
                run_recipe = SettingsRecipe(config_file=run_recipe.config_file, profile=run_recipe.profile,
                                            overrides=tuple(sorted({**dict(run_recipe.overrides),
                                                                    "models.manifest": str(manifest),
                                                                    **{f"models.{r}": "remote" for r in ROLES}}.items())))
            start = time.monotonic()
            try:
                results = run_batch(items, run_recipe, Path(tmp) / f"out-{name}", cluster=spec)
            finally:
                if server is not None:
                    server.terminate()
                    server.wait(30)
                    server = None
            wall = time.monotonic() - start
            failed = [r for r in results if r.outcome != "done"]
            if failed:
                log = home / "server.log"
                lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
                tail = "\n".join(line[:300] for line in lines if len(line) < 2000 and "::=" not in line)[-3000:]
                raise SystemExit(f"{name}: {failed[0].id} failed: {failed[0].reason}\n{tail}")
            figures[name] = {"wall_seconds": round(wall, 2),
                             "questions_per_hour": round(len(items) * 3600 / wall, 1),
                             "median_question_seconds": round(statistics.median(r.seconds for r in results), 2)}
            print(f"{name:<11} {figures[name]['questions_per_hour']:>8.1f} questions/h  "
                  f"wall {wall:7.1f} s  median question {figures[name]['median_question_seconds']:.1f} s",
                  file=sys.stderr)
        if "in-process" in figures and "local:1" in figures:
            per_question = figures["in-process"]["wall_seconds"] / len(items)
            overhead = (figures["local:1"]["wall_seconds"] - figures["in-process"]["wall_seconds"]) / len(items)
            figures["cluster_overhead"] = {"seconds_per_question": round(overhead, 2),
                                           "share_of_question": round(overhead / per_question, 4)}
            print(f"cluster path overhead: {overhead:.2f} s a question, {100 * overhead / per_question:.1f}% "
                  f"of an in-process question (goal < 3%)", file=sys.stderr)
    if args.json:
        print(json.dumps({"model": args.model or "default", "questions": len(items), "threads": args.threads,
                          "profile": args.profile, "figures": figures}, indent=2))


if __name__ == "__main__":
    main()
