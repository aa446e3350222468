"""Remote model backends (kind = "openai"): a real llama-cpp-python server on loopback with the
135M model (structured calls, research end to end, replay with 0 remote calls), and small
loopback HTTP servers for the control flow a real server will not show on demand: a server
that ignores the schema, 429 with back-off, timeouts, a server that is down."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from pydantic import BaseModel

from appliance.errors import ModelError, ModelOutputError
from appliance.llm.cache import CallCache
from appliance.llm.manifest import load_manifest
from appliance.llm.remote import RemoteEngine, wait_until_serving
from conftest import MODEL_FILE, REPO, make_settings, require_model_file

ROLES = ("planner", "extractor", "verifier", "writer")


class Pick(BaseModel):
    colour: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


REPO_MODELS = REPO / "models"


def _manifest(tmp: Path, url: str, **extra: object) -> Path:
    lines = ['[[model]]', 'name = "remote"', 'kind = "openai"', f'base_url = "{url}"',
             'model = "smollm2-135m"', 'roles = ["planner", "extractor", "verifier", "writer"]']
    lines += [f"{k} = {json.dumps(v)}" for k, v in {"n_ctx_train": 2048, **extra}.items()]
    path = tmp / "models.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _engine(tmp: Path, url: str, cache: bool = False, **extra: object) -> RemoteEngine:
    manifest = load_manifest(_manifest(tmp, url, **extra))
    settings = make_settings(tmp / "home")
    return RemoteEngine(manifest.get("remote"), settings,
                        cache=CallCache.for_settings(settings) if cache else None,
                        sleep=lambda _s: None)


# ---------------------------------------------------------------- a scripted loopback server

class _Script:
    def __init__(self, answers: list, *, ignore_schema: bool = False, delay: float = 0.0,
                 total_slots: int | None = None):
        self.answers = answers            # status codes (int) to send before answering
        self.ignore_schema = ignore_schema
        self.delay = delay
        self.total_slots = total_slots    # what /props says (None: no /props, as most servers)
        self.completions = 0
        self.bodies: list[dict] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.lock = threading.Lock()


def _serve(script: _Script):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_):
            pass

        def _send(self, status: int, payload: dict, headers: dict | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": "smollm2-135m", "owned_by": "test"}]})
            elif self.path == "/props" and script.total_slots is not None:
                self._send(200, {"total_slots": script.total_slots, "model_path": "/models/smollm2.gguf"})
            else:
                self._send(404, {"detail": "Not Found"})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            script.bodies.append(body)
            if script.answers:
                self._send(script.answers.pop(0), {"error": "busy"}, {"retry-after": "0"})
                return
            with script.lock:
                script.in_flight += 1
                script.most_in_flight = max(script.most_in_flight, script.in_flight)
            time.sleep(script.delay)
            with script.lock:
                script.in_flight -= 1
            script.completions += 1
            schema = body["response_format"]["json_schema"]["schema"]
            if script.ignore_schema:
                content = "The sea is calm tonight."
            elif "pick" in schema["properties"]:
                content = json.dumps({"pick": schema["properties"]["pick"]["enum"][0]})
            else:
                content = json.dumps({"colour": "blue"})
            self._send(200, {"choices": [{"message": {"role": "assistant", "content": content},
                                          "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": 10, "completion_tokens": 5}})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def scripted():
    servers = []

    def start(script: _Script) -> str:
        server, url = _serve(script)
        servers.append(server)
        return url

    yield start
    for server in servers:
        server.shutdown()


MSGS = [{"role": "user", "content": "Name a colour."}]


def test_the_schema_goes_to_the_server_and_a_second_call_replays(scripted, tmp_path):
    script = _Script([])
    engine = _engine(tmp_path, scripted(script), cache=True)
    assert engine.structured(MSGS, Pick).colour == "blue"
    sent = script.bodies[-1]["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["schema"]["required"] == ["colour"]
    assert script.completions == 2  # the probe, then the call
    again = _engine(tmp_path, engine.spec.base_url, cache=True)
    assert again.structured(MSGS, Pick).colour == "blue"
    assert script.completions == 2 and again.remote_calls == 0  # replay: 0 remote calls
    assert again.accounting.cache_hits == 1


def test_the_server_gets_the_contract_without_string_lengths_and_the_answer_is_checked_against_them(
        scripted, tmp_path):
    """A string's maxLength, which llama.cpp's servers expand past their grammar limit inside
    bounded lists, is not sent; enums, required keys and item counts are. An answer over the
    length is invalid here, and retried."""
    from pydantic import Field

    from appliance.contracts import ReportDraft
    from appliance.llm.grammar import schema_json
    from appliance.llm.remote import server_schema

    full = json.loads(schema_json(ReportDraft))
    sent = server_schema(full)
    assert "maxLength" in json.dumps(full) and "maxLength" not in json.dumps(sent)
    assert json.dumps(sent).count("maxItems") == json.dumps(full).count("maxItems")
    assert sent["required"] == full["required"]

    class Short(BaseModel):
        colour: str = Field(max_length=3)

    script = _Script([])
    engine = _engine(tmp_path, scripted(script))
    with pytest.raises(ModelOutputError):
        engine.structured(MSGS, Short)   # the scripted server always says "blue"
    assert "maxLength" not in json.dumps(script.bodies[-1]["response_format"])
    assert len(script.bodies) == 1 + 1 + engine.settings.llm.max_retries  # the probe, the tries


def test_enum_values_with_double_quotes_or_backslashes_are_sent_safe_and_read_back(scripted, tmp_path):
    """A quote's source sentence may hold a double quote or a backslash; llama-cpp-python's
    server escapes them wrongly in its grammar and dies of the parse error. The server is sent
    them with single quotes and slashes, and the answer is read back as the contract's own
    value; a value whose safe form is another value already is not offered to the server."""
    from typing import Literal

    from appliance.llm.remote import restore_enums, server_enums

    class Quoted(BaseModel):
        pick: Literal['He called it "the end".', "Plain sentence.", "C:\\temp holds it."]

    script = _Script([])
    engine = _engine(tmp_path, scripted(script))
    assert engine.structured(MSGS, Quoted).pick == 'He called it "the end".'
    sent = script.bodies[-1]["response_format"]["json_schema"]["schema"]["properties"]["pick"]["enum"]
    assert sent == ["He called it 'the end'.", "Plain sentence.", "C:/temp holds it."]

    schema, renamed = server_enums({"enum": ['a "b"', "a 'b'", "c"]})
    assert schema == {"enum": ["a 'b'", "c"]} and renamed == {}
    schema, renamed = server_enums({"const": 'x "y"'})
    assert schema == {"const": "x 'y'"} and restore_enums('{"k": "x \'y\'"}', renamed) == '{"k": "x \\"y\\""}'
    assert restore_enums("not json", {"a": "b"}) == "not json"


def test_a_greedy_call_retries_invalid_answers_from_the_server_sampled_with_new_seeds(scripted, tmp_path):
    """A server that does not hold the answer to the contract gives a greedy call the same
    invalid answer again unless the retry samples: each retry asks at least the retry
    temperature, with a seed of its own."""
    from pydantic import Field

    from appliance.llm.engine import RETRY_TEMPERATURE

    class Short(BaseModel):
        colour: str = Field(max_length=3)

    script = _Script([])
    engine = _engine(tmp_path, scripted(script))
    with pytest.raises(ModelOutputError):
        engine.structured(MSGS, Short, temperature=0.0)   # the scripted server always says "blue"
    tries = script.bodies[1:]   # after the probe
    assert [b["temperature"] for b in tries] == [0.0] + [RETRY_TEMPERATURE] * engine.settings.llm.max_retries
    assert len({b["seed"] for b in tries}) == len(tries)


def test_no_valid_output_from_the_server_is_cached_and_a_rerun_replays_it(scripted, tmp_path):
    """A call whose tries all fail validation is stored as failed: a second engine (a rerun)
    raises the same failure with 0 remote calls. A server that is down is not stored."""
    from pydantic import Field

    class Short(BaseModel):
        colour: str = Field(max_length=3)

    script = _Script([])
    url = scripted(script)
    with pytest.raises(ModelOutputError) as first:
        _engine(tmp_path, url, cache=True).structured(MSGS, Short)
    asked = script.completions
    again = _engine(tmp_path, url, cache=True)
    with pytest.raises(ModelOutputError) as replayed:
        again.structured(MSGS, Short)
    assert script.completions == asked and again.remote_calls == 0
    assert replayed.value.one_line() == first.value.one_line() and again.accounting.cache_hits == 1
    (tmp_path / "down").mkdir()
    down = _engine(tmp_path / "down", f"http://127.0.0.1:{_free_port()}", cache=True, http_retries=0)
    for _ in range(2):
        with pytest.raises(ModelError):
            down.structured(MSGS, Short)
    assert down.cache is not None and down.cache.count() == 0


def test_a_server_that_ignores_the_schema_is_refused(scripted, tmp_path):
    url = scripted(_Script([], ignore_schema=True))
    with pytest.raises(ModelError) as info:
        _engine(tmp_path, url).structured(MSGS, Pick)
    line = info.value.one_line()
    assert "\n" not in line and url in line and "schema_check" in line and "response_format" in line


def test_validate_only_accepts_such_a_server_and_retries_on_invalid_output(scripted, tmp_path):
    from appliance.errors import ModelOutputError

    script = _Script([], ignore_schema=True)
    engine = _engine(tmp_path, scripted(script), schema_check="validate")
    assert engine.probe() is False
    with pytest.raises(ModelOutputError):
        engine.structured(MSGS, Pick)
    assert script.completions == 1 + 3  # the probe, then 1 + llm.max_retries attempts


def test_429_and_503_are_retried_with_back_off(scripted, tmp_path):
    script = _Script([429, 503, 429])
    engine = _engine(tmp_path, scripted(script))
    assert engine.structured(MSGS, Pick).colour == "blue"
    assert len(engine.notes) == 3 and "429" in engine.notes[0] and "503" in engine.notes[1]


def test_busy_past_the_retries_is_one_line(scripted, tmp_path):
    engine = _engine(tmp_path, scripted(_Script([429] * 10)), http_retries=2)
    with pytest.raises(ModelError) as info:
        engine.structured(MSGS, Pick)
    assert "429" in info.value.one_line() and "gave up after 3 tries" in info.value.one_line()


def test_a_timeout_is_one_line(scripted, tmp_path):
    engine = _engine(tmp_path, scripted(_Script([], delay=2.0)), timeout=0.3, http_retries=1)
    with pytest.raises(ModelError) as info:
        engine.structured(MSGS, Pick)
    assert "timed out after 0.3 s" in info.value.one_line()


def test_a_server_that_is_down_is_one_line(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(ModelError) as info:
        _engine(tmp_path, url, http_retries=1).structured(MSGS, Pick)
    assert url in info.value.one_line() and "cannot be reached" in info.value.one_line()


@pytest.mark.parametrize("told,configured,expected", [(3, 0, 3), (3, 2, 2), (None, 0, 1), (None, 4, 4)],
                         ids=["the server's slots", "the entry's slots", "one where the server does not say",
                              "the entry's where the server does not say"])
def test_requests_in_flight_follow_the_servers_slots(scripted, tmp_path, told, configured, expected):
    """Calls from several threads (a run's nodes) go to the server at once, as many as it has
    slots (llama-server's /props total_slots) or the entry's slots say; never more."""
    from concurrent.futures import ThreadPoolExecutor

    script = _Script([], delay=0.3, total_slots=told)
    engine = _engine(tmp_path, scripted(script), **({"slots": configured} if configured else {}))
    engine.probe()
    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(lambda n: engine.structured(MSGS, Pick, seed=n), range(6)))
    assert [a.colour for a in answers] == ["blue"] * 6
    assert engine.slots == expected and script.most_in_flight == expected
    assert engine.remote_calls == 7  # the probe and six calls


def test_manifest_rejects_a_server_entry_without_base_url(tmp_path):
    from appliance.errors import ConfigError

    path = tmp_path / "models.toml"
    path.write_text('[[model]]\nname = "r"\nkind = "openai"\nmodel = "m"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="base_url"):
        load_manifest(path)
    for bad in (-1, True, "four", 1000):
        with pytest.raises(ConfigError, match="slots must be a count"):
            load_manifest(_manifest(tmp_path, "http://127.0.0.1:1", slots=bad))


# ---------------------------------------------------------------- the real server

def _start_llama_server(port: int, log: Path, model: Path = MODEL_FILE) -> subprocess.Popen:
    """llama-cpp-python's OpenAI-compatible server on loopback ``port`` with the 135M model
    (or ``model``, served under the same name), once it answers /v1/models."""
    with log.open("a") as out:
        process = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(model),
                                    "--model_alias", "smollm2-135m", "--host", "127.0.0.1",
                                    "--port", str(port), "--n_ctx", "4096", "--verbose", "False"],
                                   stdout=out, stderr=subprocess.STDOUT)
    if wait_until_serving(f"http://127.0.0.1:{port}", 60, process):
        return process
    process.kill()
    pytest.fail(f"llama_cpp.server did not start: {log.read_text()[-500:]}")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    """llama-cpp-python's OpenAI-compatible server on loopback with the 135M model."""
    require_model_file()
    port = _free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    process = _start_llama_server(port, log)
    yield f"http://127.0.0.1:{port}", log
    process.terminate()
    process.wait(10)


@pytest.fixture(scope="module")
def default_model_server(tmp_path_factory):
    """The same server with the default model, the one a whole research run is meant for."""
    model = REPO_MODELS / "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf"
    if not model.is_file():
        pytest.fail(f"{model} is missing: run `make models` (or `make install`)", pytrace=False)
    port = _free_port()
    log = tmp_path_factory.mktemp("llama-server-default") / "server.log"
    process = _start_llama_server(port, log, model)
    yield f"http://127.0.0.1:{port}", log
    process.terminate()
    process.wait(10)


def _completions(log: Path) -> int:
    return log.read_text(errors="replace").count("POST /v1/chat/completions")


def test_the_real_server_honours_the_schema_in_json_object_form(llama_server, tmp_path):
    url, _ = llama_server
    engine = _engine(tmp_path, url, response_format="json_object")
    assert engine.probe() is True
    assert isinstance(engine.structured(MSGS, Pick).colour, str)


def test_the_real_server_refuses_the_json_schema_form_in_one_line(llama_server, tmp_path):
    url, _ = llama_server
    with pytest.raises(ModelError) as info:
        _engine(tmp_path, url).probe()
    # It answers 500 with a validation error: refused in one line that names the setting.
    assert "answered 500" in info.value.one_line() and "response_format" in info.value.one_line()


@pytest.mark.slow
def test_research_end_to_end_through_the_server_and_replay(default_model_server, musique_corpus, tmp_path,
                                                           monkeypatch):
    from click.testing import CliRunner

    from appliance.cli import main

    url, log = default_model_server
    settings, corpus = musique_corpus
    manifest = _manifest(tmp_path, url, response_format="json_object", n_ctx_train=4096)
    monkeypatch.setenv("APPLIANCE_HOME", str(settings.home))
    monkeypatch.setenv("APPLIANCE_MODELS_MANIFEST", str(manifest))
    for role in ROLES:
        monkeypatch.setenv(f"APPLIANCE_MODELS_{role.upper()}", "remote")
    # This server holds answers to JSON form only, not to the contract's string lengths, which
    # the engine checks: the 135M model names its plan's sub-questions with over-long ids on
    # every try, greedy or sampled, depending on the CPU's arithmetic (it planned, sampled, with
    # an AVX-512 build and not with an AVX2-only one). The default model plans within them.
    args = ["research", "Who founded the company that makes the Xbox?", "--profile", "quick",
            "--corpus", corpus, "--backend", "corpus", "--out", str(tmp_path / "reports"), "--json"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    before = _completions(log)
    assert before > 0
    second = CliRunner().invoke(main, args)
    assert second.exit_code == 0, second.output
    time.sleep(0.5)
    assert _completions(log) == before  # replay of a finished run: 0 remote calls


def test_doctor_probes_a_server_entry(scripted, tmp_path):
    from appliance.cli.doctor import check_models

    good, bad = scripted(_Script([])), scripted(_Script([], ignore_schema=True))
    for url, ok in ((good, True), (bad, False)):
        settings = make_settings(tmp_path / f"home-{ok}",
                                 **{"models.manifest": str(_manifest(tmp_path, url))},
                                 **{f"models.{role}": "remote" for role in ROLES})
        checks = {c.name: c for c in check_models(settings)}
        assert checks["model remote"].ok is ok, checks["model remote"].detail
        assert ("schema enforced" if ok else "schema_check") in checks["model remote"].detail


def test_a_server_killed_mid_call_and_restarted_is_waited_for(tmp_path):
    """The real server SIGKILLed while a call is in flight and started again on its port: the
    call is retried with back-off (one note per try) and answers; a call after it needs no retry."""
    import threading

    require_model_file()
    port, log = _free_port(), tmp_path / "server.log"
    url = f"http://127.0.0.1:{port}"
    process = _start_llama_server(port, log)
    manifest = load_manifest(_manifest(tmp_path, url, response_format="json_object", n_ctx_train=4096,
                                       http_retries=8))
    engine = RemoteEngine(manifest.get("remote"), make_settings(tmp_path / "home"))
    restarted: list[subprocess.Popen] = []
    try:
        assert isinstance(engine.structured(MSGS, Pick).colour, str)
        long = [{"role": "user", "content": "Name a colour, and say why in a long sentence. " * 20}]
        # On a fast machine the call may answer before the kill lands: then the kill (and the
        # restart) come after it, and the next try kills sooner. Each try's call is a new one.
        for attempt, delay in enumerate((0.2, 0.05, 0.0)):
            current = restarted[-1] if restarted else process
            answered_first: list[bool] = []
            done: list[bool] = []

            def kill_then_restart(victim=current, wait=delay, done=done, answered_first=answered_first) -> None:
                time.sleep(wait)
                answered_first.append(bool(done))
                victim.kill()
                victim.wait(10)
                time.sleep(1.0)
                restarted.append(_start_llama_server(port, log))

            killer = threading.Thread(target=kill_then_restart, daemon=True)
            killer.start()
            assert isinstance(engine.structured(long, Pick, max_tokens=200, seed=attempt).colour, str)
            done.append(True)
            killer.join(120)
            if answered_first == [False]:
                break
        assert answered_first == [False], "every call answered before the server was killed"
        assert any("cannot be reached" in note or "timed out" in note for note in engine.notes), engine.notes
        tries = len(engine.notes)
        assert isinstance(engine.structured(MSGS, Pick, seed=7).colour, str)
        assert len(engine.notes) == tries
    finally:
        engine.close()
        for proc in [process, *restarted]:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(10)


# ---------------------------------------------------------------- llama.cpp's own llama-server

LLAMA_SERVER = Path(__file__).resolve().parent.parent / ".build" / "llama-server" / "bin" / "llama-server"


@pytest.mark.slow
@pytest.mark.skipif(not LLAMA_SERVER.is_file(), reason="llama-server is not built (make llama-server)")
def test_research_through_llama_server_with_two_slots(musique_corpus, tmp_path, monkeypatch):
    """What GPU sites run: llama.cpp's llama-server (built by `make llama-server`) with two
    slots enforces the json_schema form (the probe), tells its slots (two requests in flight),
    and serves a research run end to end; a rerun replays every call from the cache."""
    from click.testing import CliRunner

    from appliance.cli import main

    require_model_file()
    port, log = _free_port(), tmp_path / "llama-server.log"
    with log.open("w") as out:
        process = subprocess.Popen([str(LLAMA_SERVER), "--model", str(MODEL_FILE), "--alias", "smollm2-135m",
                                    "--host", "127.0.0.1", "--port", str(port), "--ctx-size", "8192",
                                    "--parallel", "2", "--threads", "2"], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_until_serving(url, 60, process):
            pytest.fail(f"llama-server did not start: {log.read_text()[-500:]}")
        engine = _engine(tmp_path, url, n_ctx_train=4096)
        assert engine.probe() is True   # the json_schema form, enforced
        assert isinstance(engine.structured(MSGS, Pick).colour, str) and engine.slots == 2

        settings, corpus = musique_corpus
        manifest = _manifest(tmp_path, url, n_ctx_train=4096)
        monkeypatch.setenv("APPLIANCE_HOME", str(settings.home))
        monkeypatch.setenv("APPLIANCE_MODELS_MANIFEST", str(manifest))
        for role in ROLES:
            monkeypatch.setenv(f"APPLIANCE_MODELS_{role.upper()}", "remote")
        args = ["research", "Who was the first president of the association which published Journal of "
                "Psychotherapy Integration?", "--profile", "quick", "--corpus", corpus, "--backend", "corpus",
                "--out", str(tmp_path / "reports"), "--json"]
        first = CliRunner().invoke(main, args)
        assert first.exit_code == 0, first.output
        report = json.loads(first.stdout)
        assert report["stats"]["model_calls"] > 0
        second = CliRunner().invoke(main, args)
        assert second.exit_code == 0, second.output
        again = json.loads(second.stdout)["stats"]
        # Calls that found no valid output are cached as failed too: a rerun through two slots
        # asks nothing again (it re-asked 4 of 9 calls before they were).
        assert again["cache_hits"] > 0 and again["model_calls"] == 0, again
    finally:
        process.terminate()
        process.wait(10)
