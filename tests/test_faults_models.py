"""Faults, rows 5 and 6: bad model files and contexts, and model output that is cut off or
invalid after its retries. See tests/fault_helpers.py.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

import sources_harness as harness
from appliance.config import load_settings
from appliance.contracts import Extraction, Hit, Plan, PlanNode, ShortAnswer
from appliance.embed import get_embedder
from appliance.errors import ModelOutputError
from appliance.llm.manifest import file_sha256
from appliance.pipeline import prompts
from appliance.pipeline.parts import Models
from appliance.pipeline.run import research
from conftest import make_settings, read_jsonl
from fakes import FakeBackend, FakeEngine, fail
from fault_helpers import (MANIFEST_ROLES, HONEYBEE, MANIFEST, MODEL_FILE, any_page_script, app_env, assert_one_line_error,
                           check_report_structure, cli, scripted_models, subprocess_env)


# ============================================================================ row 5: model files

def write_manifest(folder: Path, name: str, file: str, sha: str, size: int | None = None) -> Path:
    """A one-model manifest serving every role."""
    path = folder / f"{name}.toml"
    size_line = f"size = {size}\n" if size is not None else ""
    path.write_text(f'[[model]]\nname = "m"\nfile = "{file}"\nsha256 = "{sha}"\n{size_line}'
                    'n_ctx_train = 8192\nroles = ["planner", "extractor", "verifier", "writer"]\n',
                    encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def model_sha() -> str:
    if not MODEL_FILE.is_file():
        pytest.fail(f"{MODEL_FILE} is missing: run `make models`", pytrace=False)
    return file_sha256(MODEL_FILE)


def bad_model(kind: str, folder: Path, sha: str) -> Path:
    """A manifest whose model file is wrong in one way."""
    size = MODEL_FILE.stat().st_size
    if kind == "missing":
        return write_manifest(folder, kind, "nowhere.gguf", sha, size=size)
    if kind == "wrong hash":
        return write_manifest(folder, kind, str(MODEL_FILE), "1" * 64, size=size)
    if kind == "not GGUF":
        (folder / "text.gguf").write_text("this is not a model\n" * 500)
        return write_manifest(folder, kind, "text.gguf", file_sha256(folder / "text.gguf"))
    with MODEL_FILE.open("rb") as fh:
        (folder / "cut.gguf").write_bytes(fh.read(size // 2 if kind == "truncated download" else 4096))
    if kind == "truncated download":  # the manifest as shipped: the whole file's size and hash
        return write_manifest(folder, kind, "cut.gguf", sha, size=size)
    # Header only, registered with its own hash: only reading the GGUF header can tell.
    return write_manifest(folder, kind, "cut.gguf", file_sha256(folder / "cut.gguf"))


MODEL_FAULTS = {
    "missing": ("is missing", "make models"),
    "wrong hash": ("the manifest expects 111111111111", "models verify"),
    "not GGUF": ("is not a GGUF model file",),
    "truncated download": ("is truncated", "make models"),
    "truncated header": ("is truncated",),
}


@pytest.mark.parametrize("chunk", [None, 61])
def test_the_header_reader_skips_the_vocabulary_in_chunks_and_tells_every_cut(chunk, tmp_path, monkeypatch):
    """The tokenizer's strings are skipped a chunk at a time (``gguf._CHUNK``; here also a
    tiny one, so that lengths and strings straddle its edges): the header reads exactly as
    when every string is read, and a file cut anywhere in it is a truncated file."""
    from appliance.errors import ModelError
    from appliance.llm import gguf

    if chunk:
        monkeypatch.setattr(gguf, "_CHUNK", chunk)
    skipped = gguf.read_gguf(MODEL_FILE)
    kept = gguf.read_gguf(MODEL_FILE, keep_arrays=True)
    arrays = {k for k, v in kept.metadata.items() if isinstance(v, list)}
    assert any(len(kept.metadata[k]) > 10_000 for k in arrays)  # a vocabulary was skipped
    assert skipped.metadata == {k: None if k in arrays else v for k, v in kept.metadata.items()}
    assert (skipped.tensor_count, skipped.data_end) == (kept.tensor_count, kept.data_end) != (0, None)
    with MODEL_FILE.open("rb") as fh:
        head = fh.read(2 * gguf._CHUNK + 4096 if chunk is None else 200_000)
    cut = tmp_path / "cut.gguf"
    for at in sorted({4096, len(head) // 3, len(head) - 7, *(k * (chunk or gguf._CHUNK) + d
                                                                for k in (1, 2) for d in (-1, 0, 3))}):
        cut.write_bytes(head[:at])
        with pytest.raises(ModelError, match="is truncated"):
            gguf.read_gguf(cut)


@pytest.mark.searxng
@pytest.mark.parametrize("kind", list(MODEL_FAULTS))
def test_bad_model_file_fails_before_any_work(kind, searxng, tmp_path, model_sha):
    """In a child process, so that a file handed to llama.cpp by mistake could only kill the
    child: one line, exit code 3, no run folder, no report."""
    manifest = bad_model(kind, tmp_path, model_sha)
    home, out = tmp_path / "home", tmp_path / "out"
    env = subprocess_env(app_env(home, APPLIANCE_MODELS_MANIFEST=str(manifest), **MANIFEST_ROLES))
    result = subprocess.run([sys.executable, "-m", "appliance", "research", HONEYBEE, "--profile", "quick",
                             "--searxng-url", searxng.url, "--out", str(out)],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 3, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, result.stderr
    for word in MODEL_FAULTS[kind]:
        assert word in lines[0], (word, lines[0])
    assert not (home / "runs").exists() and not out.exists() and result.stdout == ""


@pytest.mark.searxng
def test_context_too_small_fails_before_any_work(searxng, tmp_path):
    """A context that cannot hold a prompt's fixed part and its output budget: one line before
    any work, naming the size that would do (it used to fail part-way, as an "error" report)."""
    home, out = tmp_path / "home", tmp_path / "out"
    result = cli(["research", HONEYBEE, "--profile", "quick", "--searxng-url", searxng.url, "--out", str(out)],
                 app_env(home, APPLIANCE_LLM_N_CTX="256"))
    line = assert_one_line_error(result, 4, "context of 256 tokens", "raise llm.n_ctx to")
    need = int(re.search(r"raise llm.n_ctx to (\d+)", line).group(1))
    assert 256 < need <= 4096
    assert not (home / "runs").exists() and not out.exists()


@pytest.mark.slow
def test_long_source_is_trimmed_to_the_context(tmp_path):
    """A source far longer than the context is trimmed (visibly) instead of overflowing."""
    from appliance.llm import ModelPool

    settings = make_settings(tmp_path / "home", **{"models.manifest": str(MANIFEST), "llm.n_ctx": 1400,
                                                   "llm.n_threads": 1, "llm.cache": False})
    records = []
    with ModelPool(settings) as pool:
        engine = pool.for_role("extractor")
        engine.add_listener(records.append)
        page = " ".join(harness.PAGES["vostok"][2]) * 60  # about 12,000 words
        ctx = prompts.Context(question="How old is the water of Lake Vostok?", today="2026-01-01")
        messages = prompts.extract(ctx, "How old is the water?", "", "Lake Vostok", None, page, 3)
        assert engine.count_prompt(messages) > engine.n_ctx
        try:
            engine.structured(messages, Extraction, max_tokens=prompts.EXTRACT_TOKENS, purpose="extract")
        except ModelOutputError:
            pass  # a clean failure is acceptable; an overflow or a crash is not
    assert len(records) == 1 and records[0].trimmed


@pytest.mark.slow
@pytest.mark.searxng
def test_corrupt_weights_fail_cleanly(searxng, tmp_path):
    """A file with an intact header but damaged weights, registered with its own hash, so no
    file check can tell. Its logits are NaN, on which llama.cpp's grammar sampler aborts the
    process (SIGABRT, seen before appliance/llm checked the logits): the run must end in a
    clean error instead, as a one-line error or an "error" report naming the damage."""
    data = bytearray(MODEL_FILE.read_bytes())
    noise = random.Random(1).randbytes(1000) * 20_000
    data[len(data) // 3: len(data) // 3 + len(noise)] = noise
    (tmp_path / "noisy.gguf").write_bytes(data)
    manifest = write_manifest(tmp_path, "noisy", "noisy.gguf", hashlib.sha256(data).hexdigest())
    home, out = tmp_path / "home", tmp_path / "out"
    env = subprocess_env(app_env(home, APPLIANCE_MODELS_MANIFEST=str(manifest), **MANIFEST_ROLES))
    env["GGML_NO_BACKTRACE"] = "1"  # were it to abort, ggml would spend half a minute in gdb
    result = subprocess.run([sys.executable, "-m", "appliance", "research", HONEYBEE, "--profile", "quick",
                             "--searxng-url", searxng.url, "--out", str(out), "--json"],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 3, f"exit {result.returncode}: {result.stderr[-2000:]}"
    errors = [line for line in result.stderr.strip().splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "damaged" in errors[0], result.stderr
    if result.stdout.strip():  # the damage showed inside the run: its report records it
        report = json.loads(result.stdout)
        assert report["status"] == "error" and "weights are damaged" in report["error"]


# ============================================================================ row 6: bad model output

def _flow_run(tmp_path: Path, engine, settings=None, models: Models | None = None):
    """A run on two short pages through the scripted engine (a fixed fetcher: no network)."""
    from fakes import FakeFetcher

    pages = {"http://a.test/one": "Alpha Corp was founded in 1901 by Jane Roe in Springfield. It makes pumps.",
             "http://b.test/two": "Jane Roe was born in 1870 in Lisbon and studied engineering at Porto."}
    # Two queries per node, so that every node asks the model for its search queries. No
    # relevance check: every page answers every query here, and what is counted is each step's
    # failure, not which claims bear on which node (tests/test_pipeline_flow.py tests that).
    # Every claim is voted on, the ones that are word for word their quote too: what fails
    # here is the votes. The writer's call on, so that every call kind of a run happens.
    settings = settings or load_settings(profile="quick", env={"APPLIANCE_HOME": str(tmp_path / "home")},
                                         overrides={"pipeline.gap_questions": 1, "pipeline.min_queries": 2,
                                                    "pipeline.max_queries": 2, "pipeline.relevance_threshold": 0.0,
                                                    "pipeline.name_check": False, "pipeline.vote_verbatim": True,
                                                    "pipeline.write_report": True})
    hits = [Hit(url=u, title=u, rank=i + 1) for i, u in enumerate(pages)]
    return research("Where was the founder of Alpha Corp born?", settings,
                    models=models or scripted_models(engine), backend=FakeBackend(hits),
                    fetcher=FakeFetcher(pages), embedder=get_embedder(settings), out_dir=tmp_path / "out")


def _two_node_plan(messages, seed):
    # q2 depends on q1: every call kind of a run happens.
    return Plan(effort=1, nodes=[PlanNode(id="q1", question="Who founded Alpha Corp?"),
                                 PlanNode(id="q2", question="Where was the founder born?", depends_on=["q1"])])


# failing step: (status of the report, stats that must record it, start of the report's error)
FAILING_STEPS = {
    "plan": ("plan_failed", {"model_calls": 1}, "planning failed"),
    "queries": ("complete", {"model_failures": 2}, None),
    "extract": ("no_evidence", {"extraction_failures": 2, "model_failures": 2}, None),
    "node-answer": ("complete", {"model_failures": 1}, None),
    "vote": ("inconclusive", {"votes_valid": 0, "confirmed": 0, "model_failures": 4, "votes_skipped": 2}, None),
    "answer": ("complete", {"model_failures": 1}, None),
    "gaps": ("complete", {"model_failures": 1}, None),
    "synthesize": ("synthesis_failed", {"confirmed": 2}, "synthesis failed"),
}


@pytest.mark.parametrize("step", list(FAILING_STEPS))
def test_failed_step_is_recorded_and_reported(step, tmp_path):
    """Output invalid after every retry, step by step: an abstention or a failed step on
    record, and still a report with its statistics."""
    answers = {"plan": _two_node_plan,
               "node-answer": lambda m, s: ShortAnswer(answer="unknown"),
               step: lambda m, s: fail(step)}
    engine = FakeEngine(any_page_script(**answers))
    result = _flow_run(tmp_path, engine)
    status, recorded, error = FAILING_STEPS[step]
    assert result.status == status
    assert (result.report["error"] or "").startswith(error) if error else not result.report["error"]
    assert step in [p for p, _ in engine.calls], "the step was reached"
    stats = result.report["stats"]
    for key, value in recorded.items():
        assert stats[key] == value, (key, stats[key])
    assert result.markdown_path.is_file() and result.json_path.is_file()
    check_report_structure(result.markdown_path.read_text(encoding="utf-8"))
    if step == "vote":
        votes = read_jsonl(result.run_dir / "votes.jsonl")
        assert votes and all(not v["valid"] and v["reason"].startswith("failed:") for v in votes)
        # Two failed votes leave too few for two supporting ones: the third is not cast.
        assert stats["votes_invalid"] == 2 * stats["verified"] > 0 and stats["votes_skipped"] == stats["verified"]


class CutOffBackend:
    """Stands in for llama.cpp: every answer is cut off by the output budget."""

    n_ctx = 4096

    def tokenize(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def detokenize(self, tokens) -> str:
        return bytes(tokens).decode("utf-8", errors="ignore")

    def render(self, messages):
        return self.tokenize("".join(m["content"] for m in messages)), []

    def check_grammar(self, grammar: str, schema_name: str) -> None:
        pass

    def complete(self, tokens, *, grammar, max_tokens, temperature, top_p, seed, stop):
        from appliance.llm.native import Completion

        return Completion(text='{"reason": "the quote sa', finish_reason="length", prompt_tokens=len(tokens),
                          prompt_evaluated=len(tokens), generated_tokens=max_tokens, seconds=0.0)

    def close(self) -> None:
        pass


def test_cut_off_votes_are_abstentions(tmp_path):
    """The real engine class on a backend whose every output is cut off: each vote ends, after
    its retries, as a recorded failed vote, never as support."""
    from appliance.llm import Engine, ModelEntry

    settings = load_settings(profile="quick", env={"APPLIANCE_HOME": str(tmp_path / "home")},
                             overrides={"llm.cache": False, "pipeline.vote_verbatim": True})
    verifier = Engine(CutOffBackend(), ModelEntry(name="cut-off", file="none.gguf", sha256="0" * 64,
                                                  n_ctx_train=4096), settings)
    fake = FakeEngine(any_page_script(plan=_two_node_plan))
    models = Models(planner=fake, extractor=fake, verifier=verifier, writer=fake)
    result = _flow_run(tmp_path, fake, settings=settings, models=models)
    stats = result.report["stats"]
    assert result.status == "inconclusive" and stats["verified"] > 0 and stats["confirmed"] == 0
    # Two abstentions leave too few votes to confirm: the third is not cast.
    assert stats["votes_invalid"] == 2 * stats["verified"] and stats["votes_valid"] == 0
    assert stats["votes_skipped"] == stats["verified"]
    calls = [c for c in read_jsonl(result.run_dir / "calls.jsonl") if c["purpose"] == "vote"]
    assert len(calls) == 2 * stats["verified"]
    assert all(not c["ok"] and c["truncations"] == c["attempts"] == 3 for c in calls)
    assert all("cut off" in v["reason"] for v in read_jsonl(result.run_dir / "votes.jsonl"))


@pytest.mark.slow
@pytest.mark.searxng
def test_real_model_cut_off_is_a_recorded_failure(searxng, tmp_path, monkeypatch):
    """With the real model and a plan budget of 3 tokens, the plan is cut off on every try:
    a plan_failed report and a failed call on record, not a crash."""
    monkeypatch.setattr(prompts, "PLAN_TOKENS", 3)
    home, out = tmp_path / "home", tmp_path / "out"
    result = cli(["research", HONEYBEE, "--profile", "quick", "--searxng-url", searxng.url, "--out", str(out),
                  "--json"], app_env(home))
    assert result.exit_code == 4, result.output  # the report is written, the failure still shows
    report = json.loads(result.stdout)
    assert report["status"] == "plan_failed" and "cut off" in report["error"]
    calls = read_jsonl(home / "runs" / report["run_id"] / "calls.jsonl")
    assert [c["purpose"] for c in calls] == ["plan"]
    assert calls[0]["ok"] is False and calls[0]["truncations"] == calls[0]["attempts"] == 3
    check_report_structure((out / f"{report['run_id']}.md").read_text(encoding="utf-8"))
