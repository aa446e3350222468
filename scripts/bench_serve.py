"""Latency of `appliance serve` under load, and what serving costs a run (not in `make test`).

Starts a real server on loopback in a fresh state folder with a three-document corpus,
submits one research run, and while it runs keeps ``--clients`` concurrent clients asking the
status endpoint (GET /api/runs/ID) and the history endpoint (GET /api/runs) as fast as they
are answered; prints p50/p95 of each. With ``--compare-cli`` it first runs the same question
with `appliance research` in its own fresh state folder (no shared cache) and prints both
runs' seconds.

    python scripts/bench_serve.py --model smollm2-135m [--clients 50] [--compare-cli] [--repeat 3]
                                  [--clients-nice 19]

The clients are this script's own thread, on the same machine as the server: their CPU is
what a browser on another machine spends, not serving. So by default that thread runs at the
lowest priority (nice +19, Linux), and the run's seconds measure the server's own cost;
``--clients-nice 0`` lets the clients compete with the run as equals (the worst case of a
busy machine that hosts both).

Both runs are compared on the run's own wall seconds (its report's stats.wall_seconds), so
the CLI's process start and imports do not count against it.

The default model is the manifest's research model: on a shared machine use the test model.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

QUESTION = "Who named Aurora Lake, and when?"
FINISHED = {"done", "failed", "cancelled"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


async def hammer(url: str, run_id: str, clients: int) -> tuple[dict[str, list[float]], collections.Counter, dict]:
    """Until the run finishes: ``clients`` loops, alternating status and history requests."""
    latencies: dict[str, list[float]] = {"status": [], "history": []}
    errors: collections.Counter[str] = collections.Counter()
    done = asyncio.Event()
    final: dict = {}

    async def client_loop(number: int, client: httpx.AsyncClient) -> None:
        turn = number
        while not done.is_set():
            kind = "status" if turn % 2 == 0 else "history"
            path = f"/api/runs/{run_id}" if kind == "status" else "/api/runs?limit=50"
            start = time.perf_counter()
            try:
                response = await client.get(path)
                if response.status_code != 200:
                    errors[f"{kind} {response.status_code}: {response.text[:120]}"] += 1
            except httpx.HTTPError as exc:
                errors[f"{kind} {type(exc).__name__}"] += 1
            latencies[kind].append(time.perf_counter() - start)
            turn += 1

    async def watch(client: httpx.AsyncClient) -> None:
        while True:
            job = (await client.get(f"/api/runs/{run_id}")).json()
            if job["status"] in FINISHED:
                final.update(job)
                done.set()
                return
            await asyncio.sleep(0.5)

    limits = httpx.Limits(max_connections=clients + 2)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        await asyncio.gather(watch(client), *(client_loop(n, client) for n in range(clients)))
    return latencies, errors, final


def hammer_in_thread(url: str, run_id: str, clients: int, niceness: int):
    """:func:`hammer` in a thread of its own at ``niceness`` (Linux gives each thread its own
    nice value), so the rest of this script, and what it starts later, keeps its priority."""
    box: dict = {}

    def body() -> None:
        try:
            if niceness and hasattr(os, "setpriority"):
                tid = threading.get_native_id()
                os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + niceness))
            box["result"] = asyncio.run(hammer(url, run_id, clients))
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=body, name="clients")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def cli_run(home: Path, model: str) -> tuple[float, float]:
    """The CLI run's wall seconds (process start included) and the run's own (its report's
    stats.wall_seconds, as a served run counts it)."""
    config = home / "empty-config.toml"
    env = {**os.environ, "APPLIANCE_HOME": str(home)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "appliance", "--config", str(config), "research", QUESTION,
                           "--profile", "quick", "--backend", "corpus", "--corpus", "tiny", "--model", model,
                           "--no-progress", "--json", "--out", str(home / "reports")], cwd=REPO, env=env,
                          check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    return wall, float(json.loads(done.stdout)["stats"]["wall_seconds"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="manifest model for every role (default: the manifest's)")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--compare-cli", action="store_true")
    parser.add_argument("--clients-nice", type=int, default=19,
                        help="how much nicer than the run the clients' thread is (0: as the run)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="served and CLI runs, alternating, each in a fresh state folder; medians reported")
    args = parser.parse_args()
    rounds = [one_round(args) for _ in range(max(1, args.repeat))]
    result = rounds[-1] if len(rounds) == 1 else {"rounds": rounds}
    if len(rounds) > 1 or args.compare_cli:
        served = [r["served_run_wall_seconds"] for r in rounds]
        summary: dict = {"served_run_wall_seconds_median": round(statistics.median(served), 3)}
        if args.compare_cli:
            cli = [r["cli_run_wall_seconds"] for r in rounds]
            summary["cli_run_wall_seconds_median"] = round(statistics.median(cli), 3)
            summary["served_over_cli_median"] = round(statistics.median(s / c for s, c in zip(served, cli)), 3)
        result = {**result, "summary": summary}
    print(json.dumps(result, indent=2))
    return 0 if all(r["run_status"] == "done" and not r["errors"] for r in rounds) else 1


def one_round(args) -> dict:
    """One served run under ``args.clients`` polling clients (and one CLI run), fresh state each."""
    from conftest import make_settings
    from serve_harness import Server, make_tiny_corpus

    model = args.model or "qwen2.5-coder-1.5b"
    with tempfile.TemporaryDirectory() as tmp:
        homes = {}
        for name in ("serve", "cli") if args.compare_cli else ("serve",):
            homes[name] = Path(tmp) / name
            make_tiny_corpus(make_settings(homes[name]), Path(tmp) / f"docs-{name}")
        cli_wall, cli_seconds = cli_run(homes["cli"], model) if args.compare_cli else (None, None)
        server = Server(homes["serve"]).start()
        try:
            with httpx.Client(base_url=server.url, timeout=30) as client:
                job = client.post("/api/runs", json={"question": QUESTION, "profile": "quick", "backend": "corpus",
                                                     "corpus": "tiny", "model": model}).json()
            latencies, errors, final = hammer_in_thread(server.url, job["id"], args.clients, args.clients_nice)
            with httpx.Client(base_url=server.url, timeout=30) as client:
                final = client.get(f"/api/runs/{job['id']}").json()
        finally:
            server.stop()
            log_errors = [line for line in server.log_text().splitlines() if " ERROR " in line][:5]
    result = {"clients": args.clients, "clients_nice": args.clients_nice, "model": model, "run_status": final.get("status"),
              "served_job_seconds": final.get("elapsed"),
              "served_run_wall_seconds": (final.get("stats") or {}).get("wall_seconds"),
              "cli_process_seconds": cli_wall, "cli_run_wall_seconds": cli_seconds, "errors": dict(errors)}
    result["server_errors"] = log_errors
    for kind, values in latencies.items():
        result[kind] = {"requests": len(values), "p50_ms": round(1000 * statistics.median(values), 1) if values else None,
                        "p95_ms": round(1000 * percentile(values, 0.95), 1) if values else None}
    return result


if __name__ == "__main__":
    sys.exit(main())
