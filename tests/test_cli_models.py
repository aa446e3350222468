"""`appliance models list/add/remove/verify` and `appliance doctor`, through click's runner, on
temporary manifests and copies of the real model (missing, not GGUF, truncated, wrong hash)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import MODEL_FILE, MODEL_MANIFEST, TEST_MODEL_ENV, require_model_file

from appliance.cli import main
from appliance.errors import ModelError
from appliance.llm import Engine, load_manifest, read_gguf
from appliance.llm.manifest import ModelEntry

GOOD_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """A state folder, an empty config and a manifest folder of this test's own."""
    require_model_file()
    models = tmp_path / "models"
    models.mkdir()
    config = tmp_path / "appliance.toml"
    config.write_text("", encoding="utf-8")
    # The manifest's own roles decide here: the suite's test-model variables are unset.
    return {"APPLIANCE_HOME": str(tmp_path / "home"), "APPLIANCE_CONFIG": str(config),
            "APPLIANCE_MODELS_MANIFEST": str(models / "models.toml"), "APPLIANCE_SEARXNG_URL": "",
            **{key: None for key in TEST_MODEL_ENV}}


def manifest_of(env) -> Path:
    return Path(env["APPLIANCE_MODELS_MANIFEST"])


def write_manifest(env, *, file: str, sha256: str = GOOD_SHA, size: int | None = None,
                   roles=("planner", "extractor", "verifier", "writer")) -> Path:
    lines = ["[[model]]", 'name = "smollm2-135m"', f"file = {json.dumps(file)}", f'sha256 = "{sha256}"',
             "n_ctx_train = 8192", 'chat_format = ""', "roles = [" + ", ".join(f'"{r}"' for r in roles) + "]"]
    if size is not None:
        lines.insert(4, f"size = {size}")
    manifest_of(env).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return manifest_of(env)


def run(env, *args):
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return result


def assert_clean_error(result, *fragments, code=3):
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def not_gguf(tmp_path) -> Path:
    path = tmp_path / "notes.gguf"
    path.write_text("this is a text file, not a model\n" * 100, encoding="utf-8")
    return path


def truncated(tmp_path, nbytes: int) -> Path:
    path = tmp_path / f"cut-{nbytes}.gguf"
    with open(MODEL_FILE, "rb") as src, open(path, "wb") as dst:
        dst.write(src.read(nbytes))
    return path


# ---------------------------------------------------------------- list


def test_committed_manifest_lists_the_default_model_and_the_test_model():
    manifest = load_manifest(MODEL_MANIFEST)
    default, small = manifest.models
    assert (default.name, default.file, default.size, default.file_type) == (
        "qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf", 1_117_320_768, 15)
    assert default.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert default.gguf_name == "Qwen2.5 Coder 1.5B Instruct GGUF"
    assert set(default.roles) == {"planner", "extractor", "verifier", "writer"}
    # The fast test model stays installed, serving no role unless a test or user names it.
    assert (small.name, small.file, small.sha256) == ("smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf", GOOD_SHA)
    assert small.roles == ()
    assert small.n_ctx_train == read_gguf(MODEL_FILE).context_length == 8192
    assert small.gguf_name == read_gguf(MODEL_FILE).name


def test_a_file_whose_metadata_differs_from_the_manifest_is_refused(env):
    """Right size and hash recorded, but the manifest expects another model's metadata (a
    hand-edited entry naming the wrong file): one line in `models verify` and `doctor`."""
    path = write_manifest(env, file=str(MODEL_FILE), size=MODEL_FILE.stat().st_size)
    path.write_text(path.read_text() + 'gguf_name = "Qwen2.5 Coder 1.5B Instruct GGUF"\n', encoding="utf-8")
    before = path.read_text()
    result = run(env, "models", "verify")
    assert result.exit_code == 3, result.output
    assert "Qwen2.5 Coder 1.5B Instruct GGUF" in result.stderr and "Traceback" not in result.output
    doctor = run(env, "doctor", "--skip-models")
    assert doctor.exit_code == 1
    assert any(line.startswith("FAIL  model smollm2-135m") and "GGUF metadata" in line
               for line in doctor.stdout.splitlines()), doctor.stdout
    assert path.read_text() == before


def test_list_shows_present_and_missing(env):
    write_manifest(env, file=str(MODEL_FILE))
    result = run(env, "models", "list")
    assert result.exit_code == 0
    header, row = result.stdout.splitlines()
    assert header.split() == ["NAME", "FILE", "SIZE", "ROLES", "CTX", "STATUS"]
    assert row.split()[0] == "smollm2-135m" and "present" in row and "8192" in row
    assert "planner,extractor,verifier,writer" in row

    write_manifest(env, file="gone.gguf")
    result = run(env, "models", "list", "--json")
    data = json.loads(result.stdout)
    assert data["models"][0]["status"] == "missing" and data["models"][0]["size"] is None


def test_list_without_manifest_is_one_line_error(env):
    assert_clean_error(run(env, "models", "list"), "does not exist", "models.manifest")


# ---------------------------------------------------------------- add


def test_add_registers_by_path_and_reads_metadata(env, tmp_path):
    write_manifest(env, file=str(MODEL_FILE))
    result = run(env, "models", "add", str(MODEL_FILE), "--name", "big", "--roles", "planner,writer")
    assert result.exit_code == 0, result.output
    assert "added big" in result.stdout and "context 8192" in result.stdout
    manifest = load_manifest(manifest_of(env))
    old, new = manifest.models
    assert new.file == str(MODEL_FILE.resolve()) and new.sha256 == GOOD_SHA
    assert new.n_ctx_train == 8192 and new.roles == ("planner", "writer")
    assert old.roles == ("extractor", "verifier")  # the roles moved to the new model
    assert not list(manifest_of(env).parent.glob("*.gguf"))  # registered in place, no copy
    listed = run(env, "models", "list").stdout
    assert "big" in listed and "planner,writer" in listed


def test_add_with_copy_puts_the_file_in_the_models_folder(env):
    write_manifest(env, file=str(MODEL_FILE))
    result = run(env, "models", "add", str(MODEL_FILE), "--name", "copy", "--copy")
    assert result.exit_code == 0, result.output
    entry = load_manifest(manifest_of(env)).get("copy")
    assert entry.file == MODEL_FILE.name
    assert (manifest_of(env).parent / MODEL_FILE.name).stat().st_size == MODEL_FILE.stat().st_size
    assert run(env, "models", "verify", "copy").exit_code == 0


def test_add_rejects_bad_files_with_one_line(env, tmp_path):
    write_manifest(env, file=str(MODEL_FILE))
    assert_clean_error(run(env, "models", "add", str(not_gguf(tmp_path))), "notes.gguf", "not a GGUF")
    assert_clean_error(run(env, "models", "add", str(truncated(tmp_path, 2_000_000))), "cut-2000000.gguf",
                       "truncated")
    assert_clean_error(run(env, "models", "add", str(truncated(tmp_path, 100))), "truncated")
    assert_clean_error(run(env, "models", "add", str(tmp_path / "nope.gguf")), "nope.gguf", code=2)
    assert_clean_error(run(env, "models", "add", str(MODEL_FILE), "--roles", "boss"), "boss", code=2)
    assert_clean_error(run(env, "models", "add", str(MODEL_FILE), "--name", "smollm2-135m"),
                       "already", code=2)
    assert len(load_manifest(manifest_of(env)).models) == 1  # nothing half-added


def test_remove_keeps_the_file(env):
    write_manifest(env, file=str(MODEL_FILE))
    run(env, "models", "add", str(MODEL_FILE), "--name", "other")
    result = run(env, "models", "remove", "other")
    assert result.exit_code == 0 and MODEL_FILE.is_file()
    assert [m.name for m in load_manifest(manifest_of(env)).models] == ["smollm2-135m"]
    assert_clean_error(run(env, "models", "remove", "other"), "no model named", code=2)


# ---------------------------------------------------------------- verify


def test_verify_passes_on_the_real_file(env):
    write_manifest(env, file=str(MODEL_FILE), size=MODEL_FILE.stat().st_size)
    result = run(env, "models", "verify")
    assert result.exit_code == 0 and result.stdout.startswith("ok")


def test_verify_missing_file(env):
    write_manifest(env, file="SmolLM2-135M-Instruct.Q4_1.gguf")
    result = run(env, "models", "verify")
    assert_clean_error(result, "SmolLM2-135M-Instruct.Q4_1.gguf", "missing", "make models")
    assert result.stdout.startswith("FAIL")


def test_verify_wrong_hash(env, tmp_path):
    write_manifest(env, file=str(MODEL_FILE), sha256="ab" * 32)
    assert_clean_error(run(env, "models", "verify"), str(MODEL_FILE), "sha256", "make models")


def test_verify_not_gguf_and_truncated(env, tmp_path):
    write_manifest(env, file=str(not_gguf(tmp_path)))
    assert_clean_error(run(env, "models", "verify"), "notes.gguf", "not a GGUF")
    cut = truncated(tmp_path, 50_000_000)
    write_manifest(env, file=str(cut))
    assert_clean_error(run(env, "models", "verify"), "cut-50000000.gguf", "truncated")
    # With the size in the manifest, a short file is named as such before any hashing.
    write_manifest(env, file=str(cut), size=MODEL_FILE.stat().st_size)
    assert_clean_error(run(env, "models", "verify"), "cut-50000000.gguf", "truncated")


def test_verify_reports_every_model(env, tmp_path):
    write_manifest(env, file=str(MODEL_FILE))
    copy = tmp_path / "copy.gguf"
    shutil.copyfile(MODEL_FILE, copy)
    run(env, "models", "add", str(copy), "--name", "copy")
    copy.write_bytes(copy.read_bytes()[:-10] + b"0123456789")  # same size, other content
    result = run(env, "models", "verify")
    assert result.exit_code == 3
    assert result.stdout.splitlines()[0].startswith("ok") and result.stdout.splitlines()[1].startswith("FAIL")
    assert "copy.gguf" in result.stderr and "sha256" in result.stderr


# ---------------------------------------------------------------- loading bad files never crashes


@pytest.mark.parametrize("kind", ["not_gguf", "truncated_header", "truncated_data", "missing"])
def test_engine_load_of_a_bad_file_is_a_model_error(tmp_path, kind):
    from conftest import llm_settings

    require_model_file()
    path = {"not_gguf": lambda: not_gguf(tmp_path), "truncated_header": lambda: truncated(tmp_path, 5000),
            "truncated_data": lambda: truncated(tmp_path, 90_000_000),
            "missing": lambda: tmp_path / "missing.gguf"}[kind]()
    manifest = load_manifest(MODEL_MANIFEST)
    manifest.path = tmp_path / "models.toml"
    entry = ModelEntry(name="bad", file=str(path), sha256=GOOD_SHA, n_ctx_train=8192)
    with pytest.raises(ModelError) as info:
        Engine.load(entry, manifest, llm_settings(tmp_path / "home"))
    assert path.name in info.value.one_line()


# ---------------------------------------------------------------- doctor


@pytest.mark.slow
def test_doctor_all_ok(env):
    write_manifest(env, file=str(MODEL_FILE))
    result = run(env, "doctor")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(line.startswith(("ok", "warn")) for line in lines), result.stdout
    text = result.stdout
    for name in ("python", "package llama_cpp", "package torch", "state folder", "model smollm2-135m",
                 "llama.cpp smollm2-135m", "embedding model", "searxng"):
        assert name in text
    assert "decodes a token" in text and "384 dimensions" in text


def test_doctor_fails_on_a_broken_model(env, tmp_path):
    write_manifest(env, file=str(not_gguf(tmp_path)))
    result = run(env, "doctor", "--skip-models")
    assert result.exit_code == 1
    fail = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert len(fail) == 1 and "notes.gguf" in fail[0] and "not a GGUF" in fail[0]
    assert result.stderr.strip().startswith("error: 1 check(s) failed: model smollm2-135m")


def test_doctor_reports_an_unreachable_searxng(env):
    write_manifest(env, file=str(MODEL_FILE))
    env = dict(env, APPLIANCE_SEARXNG_URL="http://127.0.0.1:9")
    result = run(env, "doctor", "--skip-models")
    assert result.exit_code == 1
    assert any(line.startswith("FAIL  searxng") for line in result.stdout.splitlines())
