"""Faults, rows 9 and 10: hostile questions, and config and usage errors. See
tests/fault_helpers.py.
"""

from __future__ import annotations

import json
import re

import pytest

from appliance.config import load_settings
from appliance.questions import clean_question
from fault_helpers import (MANIFEST_ROLES, HONEYBEE, SAFE_REPORT_NAME, any_page_script, app_env, assert_one_line_error, cli,
                           files_under, report_path_from)


# ============================================================================ row 9: hostile questions

UNUSABLE_QUESTIONS = {
    "empty": "",
    "whitespace": " \t\n  \u3000 ",
    "100 KB": "Why? " * 20_000,
    "control characters only": "\x00\x01\x07\x1b\x7f",
}


@pytest.mark.parametrize("name", list(UNUSABLE_QUESTIONS))
def test_unusable_question_is_one_line(name, tmp_path):
    home = tmp_path / "home"
    result = cli(["research", "--", UNUSABLE_QUESTIONS[name]], app_env(home))
    assert_one_line_error(result, 2, "question")
    assert not home.exists()


HOSTILE_QUESTIONS = {
    "path-like": "../../etc/passwd",
    "absolute path": "/etc/passwd",
    "windows path": "..\\..\\Windows\\System32\\config",
    "shell metacharacters": "$(rm -rf ~); `id` && echo $HOME | tee /tmp/x; 'a' \"b\" > /dev/null",
    "control characters": "What is \x1b[31mred\x1b[0m text?\x07\x00",
    "right-to-left": "\u202eما هي عاصمة مصر؟\u202c",
    "emoji": "🔥🐝 How do bees 🐝 dance? 👨\u200d👩\u200d👧",
    "reserved name": "CON",
    "option-like": "--help",
    "long": "How " + "very " * 390 + "long?",
}


@pytest.mark.searxng
@pytest.mark.parametrize("name", list(HOSTILE_QUESTIONS))
def test_hostile_question_runs_with_safe_file_names(name, tmp_path, searxng, cli_with_script):
    """A normal run whatever the question holds; every file it writes has a safe name inside
    the report folder or the state folder, and the report's title stays one inert line."""
    cli_with_script(any_page_script())
    home, out = tmp_path / "home", tmp_path / "out"
    before = files_under(tmp_path)
    result = cli(["research", "--profile", "quick", "--searxng-url", searxng.url, "--out", str(out), "--",
                  HOSTILE_QUESTIONS[name]], app_env(home))
    assert result.exit_code == 0, result.output
    md_path = report_path_from(result)
    assert md_path.resolve().parent == out.resolve() and SAFE_REPORT_NAME.match(md_path.name), md_path
    new_files = files_under(tmp_path) - before
    assert new_files and all(p.resolve().is_relative_to(out.resolve()) or p.resolve().is_relative_to(home.resolve())
                             for p in new_files), new_files
    assert sorted(p.name for p in out.iterdir()) == sorted([md_path.name, md_path.with_suffix(".json").name])
    assert [p.name for p in (home / "runs").iterdir()] == [md_path.stem]
    title = md_path.read_text(encoding="utf-8").splitlines()[0]
    assert title.startswith("# Deep Dive: ") and not re.search(r"[\x00-\x1f\x7f\u202a-\u202e]", title)
    report = json.loads(md_path.with_suffix(".json").read_text(encoding="utf-8"))
    assert report["question"] == clean_question(HOSTILE_QUESTIONS[name])


def test_batch_ids_make_safe_file_names(tmp_path, searxng, cli_with_script):
    """Batch report names come from ids in the questions file: hostile ids still give names
    inside the output folder."""
    cli_with_script(any_page_script())
    ids = ["../../etc/passwd", "a/b\\c", "..", ".hidden", "CON", "x" * 300, "$(id)", "ok-id"]
    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(json.dumps({"id": i, "question": f"{HONEYBEE} ({n})"})
                                   for n, i in enumerate(ids)) + "\n", encoding="utf-8")
    home, out = tmp_path / "home", tmp_path / "out"
    result = cli(["batch", str(questions), "--out", str(out), "--profile", "quick",
                  "--searxng-url", searxng.url], app_env(home))
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in out.iterdir() if p.name != ".started")
    assert len(names) == 2 * len(ids) + 1 and "batch.json" in names
    for name in names:
        assert not name.startswith(".") and re.fullmatch(r"[A-Za-z0-9._-]+", name), name
    assert all(p.resolve().parent == out.resolve() for p in out.iterdir())
    # Each question's start record is named by the same safe id, inside the output folder.
    records = list((out / ".started").iterdir())
    assert sorted(p.name + ".md" for p in records) == sorted(n for n in names if n.endswith(".md"))
    assert all(p.resolve().parent == (out / ".started").resolve() for p in records)


# ============================================================================ row 10: config

CONFIG_FAULTS = {
    # name: (file text or None, extra environment, words the one line must hold)
    "unknown key": ("[fetch]\nbudgett = 3\n", {}, ["'fetch.budgett'", "{file}", "known keys of [fetch]"]),
    "unknown section": ("[fetchh]\nbudget = 3\n", {}, ["[fetchh]", "{file}"]),
    "wrong type": ('[fetch]\nbudget = "lots"\n', {}, ["'fetch.budget'", "{file}", "must be an integer"]),
    "float for int": ("[fetch]\nbudget = 2.5\n", {}, ["'fetch.budget'", "{file}"]),
    "list for text": ('[searxng]\nurl = ["a"]\n', {}, ["'searxng.url'", "{file}", "must be a string"]),
    "section not a table": ("fetch = 3\n", {}, ["'fetch'", "{file}", "[section] table"]),
    "not TOML": ("[fetch\nbudget = 3\n", {}, ["{file}", "not valid TOML", "line 1"]),
    "profile key": ("[profiles.quick.pipeline]\nvotez = 3\n", {}, ["'pipeline.votez'", "{file}"]),
    "unknown profile": ('[pipeline]\nprofile = "turbo"\n', {}, ["'turbo'", "{file}"]),
    "missing file (--config)": (None, {}, ["{file}", "does not exist"]),
    "missing file (APPLIANCE_CONFIG)": (None, {"APPLIANCE_CONFIG": "{file}"}, ["{file}", "does not exist"]),
    "env wrong type": ("", {"APPLIANCE_FETCH_BUDGET": "lots"},
                       ["'fetch.budget'", "environment variable APPLIANCE_FETCH_BUDGET"]),
    "env wrong bool": ("", {"APPLIANCE_LLM_CACHE": "maybe"}, ["'llm.cache'", "APPLIANCE_LLM_CACHE"]),
    "env unknown key": ("", {"APPLIANCE_FETCH_BUDGETT": "3"}, ["APPLIANCE_FETCH_BUDGETT"]),
    "env unknown profile": ("", {"APPLIANCE_PIPELINE_PROFILE": "turbo"},
                            ["'turbo'", "APPLIANCE_PIPELINE_PROFILE"]),
}


@pytest.mark.parametrize("name", list(CONFIG_FAULTS))
def test_config_error_names_key_and_origin(name, tmp_path):
    text, extra, words = CONFIG_FAULTS[name]
    config = tmp_path / "appliance.toml"
    if text is not None:
        config.write_text(text, encoding="utf-8")
    env = app_env(tmp_path / "home", **{k: v.format(file=config) for k, v in extra.items()})
    args = ["research", HONEYBEE] if "APPLIANCE_CONFIG" in extra else ["--config", str(config), "research", HONEYBEE]
    result = cli(args, env)
    assert_one_line_error(result, 2, *[w.format(file=config) for w in words])
    assert not (tmp_path / "home").exists()


USAGE_FAULTS = {
    # name: (arguments, words the one line must hold)
    "config is a folder": (["--config", "{tmp}", "research", HONEYBEE], ["'--config'", "is a directory",
                                                                        "'appliance --help'"]),
    "misspelt option": (["research", "--profil", "quick", HONEYBEE], ["--profil", "--profile",
                                                                     "'appliance research --help'"]),
    "missing question": (["research"], ["Missing argument 'QUESTION'"]),
    "bad choice": (["research", "--profile", "turbo", HONEYBEE], ["'turbo'", "quick"]),
    "bad number": (["batch", "q.txt", "--jobs", "many"], ["'many'", "'appliance batch --help'"]),
    "unknown command": (["reserch", HONEYBEE], ["reserch"]),
    "unknown subcommand": (["corpus", "ad", "x"], ["'ad'", "'appliance corpus --help'"]),
}


@pytest.mark.parametrize("name", list(USAGE_FAULTS))
def test_usage_error_is_one_line(name, tmp_path):
    """Click's own errors (options, arguments, values) are one line too, naming the --help to read."""
    args, words = USAGE_FAULTS[name]
    result = cli([a.format(tmp=tmp_path) for a in args], app_env(tmp_path / "home"))
    assert_one_line_error(result, 2, *words)
    assert not (tmp_path / "home").exists()


def test_help_and_version_still_work(tmp_path):
    for args in (["--help"], ["research", "--help"], ["--version"]):
        result = cli(args, app_env(tmp_path / "home"))
        assert result.exit_code == 0 and result.output.strip() and "error" not in result.output.lower()
    bare = cli([], app_env(tmp_path / "home"))  # no arguments at all: the help, as click gives it
    assert "Usage: " in bare.output and "research" in bare.output


def test_manifest_with_an_unknown_key_names_it(tmp_path):
    manifest = tmp_path / "models.toml"
    manifest.write_text('[[model]]\nname = "m"\nfile = "m.gguf"\nsha256 = "' + "0" * 64 +
                        '"\nn_ctx_train = 8192\nrolez = ["planner"]\n', encoding="utf-8")
    result = cli(["models", "list"], app_env(tmp_path / "home", APPLIANCE_MODELS_MANIFEST=str(manifest), **MANIFEST_ROLES))
    assert_one_line_error(result, 2, str(manifest), "entry 1", "rolez")


def test_profile_from_the_environment(tmp_path):
    """APPLIANCE_PIPELINE_PROFILE used to fail whatever its value (the variable's name was
    compared as part of the profile)."""
    settings = load_settings(env={"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_PIPELINE_PROFILE": "quick"})
    assert settings.pipeline.profile == "quick" and settings.pipeline.verify_top == 6
    assert settings.fetch.budget == 10


@pytest.mark.searxng
def test_a_pinned_date_names_the_run_and_is_the_date_its_prompts_carry(tmp_path, searxng, cli_with_script):
    """APPLIANCE_TODAY pins the date a run is for: its report name, its report's date and the
    "Today is" of every prompt (so a rerun on a later day replays its cached calls)."""
    seen: list[str] = []
    script = any_page_script()
    plan = script["plan"]
    script["plan"] = lambda m, s: (seen.append(m[0]["content"]), plan(m, s))[1]
    cli_with_script(script)
    home, out = tmp_path / "home", tmp_path / "out"
    result = cli(["research", "--profile", "quick", "--searxng-url", searxng.url, "--out", str(out), HONEYBEE],
                 app_env(home, APPLIANCE_TODAY="2031-02-28"))
    assert result.exit_code == 0, result.output
    md_path = report_path_from(result)
    assert md_path.name.startswith("2031-02-28-")
    assert json.loads(md_path.with_suffix(".json").read_text(encoding="utf-8"))["date"] == "2031-02-28"
    assert seen and all("Today is 2031-02-28." in system for system in seen)


@pytest.mark.parametrize("value", ["tomorrow", "2031-02-30", "31/01/2031"])
def test_a_pinned_date_that_is_no_date_is_one_line(value, tmp_path):
    home = tmp_path / "home"
    result = cli(["research", HONEYBEE], app_env(home, APPLIANCE_TODAY=value))
    assert_one_line_error(result, 2, "APPLIANCE_TODAY", repr(value), "unset it")
    assert not (home / "runs").exists()


# ============================================================================ row B: corpus files

UNREADABLE_CORPORA = {
    # name: {file: content}, words the one line must hold
    "every record unreadable": ({"bad.jsonl": '{"title": "a"}\n[1, 2]\nnot json\n{"text": 5}\n{"text": "  "}\n'},
                                ['5 skipped', 'bad.jsonl:1: no "text" field', "bad.jsonl:2: a JSON array",
                                 "bad.jsonl:3: not valid JSON", "and 2 more"]),
    "one JSON array": ({"array.jsonl": json.dumps([{"text": "a passage"}, {"text": "another"}])},
                       ["array.jsonl:1: a JSON array", "one record per line"]),
    "empty text file": ({"empty.txt": ""}, ["empty.txt: no text"]),
    "unsupported or damaged files only": ({"drawing.dwg": "AC1032", "notes.docx": "PK"},
                                          ["2 skipped", "drawing.dwg: unsupported file type",
                                           "notes.docx: not a DOCX"]),
}


@pytest.mark.parametrize("name", list(UNREADABLE_CORPORA))
def test_corpus_add_with_nothing_readable_is_one_line(name, tmp_path):
    """Nothing added: one line saying why the first records were skipped, a non-zero exit, and
    no empty corpus left behind (it used to report "1 skipped" and exit 0)."""
    files, words = UNREADABLE_CORPORA[name]
    folder = tmp_path / "docs"
    folder.mkdir()
    for file, text in files.items():
        (folder / file).write_text(text, encoding="utf-8")
    env = app_env(tmp_path / "home")
    paths = [str(folder / f) for f in files] if len(files) == 1 else [str(folder)]
    result = cli(["corpus", "add", *paths, "--name", "notes"], env)
    assert_one_line_error(result, 2, "nothing added to corpus 'notes'", *words)
    assert cli(["corpus", "list", "--json"], env).stdout.strip() == "[]"


def test_corpus_add_with_some_records_skipped_says_why_and_succeeds(tmp_path):
    good = {"id": "p1", "title": "Basalt", "text": "Columnar basalt forms when thick lava cools slowly."}
    path = tmp_path / "mixed.jsonl"
    path.write_text(json.dumps(good) + '\n{"text": 5}\n', encoding="utf-8")
    env = app_env(tmp_path / "home")
    result = cli(["corpus", "add", str(path), "--name", "notes"], env)
    assert result.exit_code == 0, result.output
    assert "1 added" in result.stdout and "1 skipped" in result.stdout
    assert 'mixed.jsonl:2: "text" is a number, not a string' in result.stderr
    again = cli(["corpus", "add", str(path), "--name", "notes"], env)  # nothing new, nothing wrong
    assert again.exit_code == 0 and "1 unchanged" in again.stdout
