"""Faults, row B: bad batch files. Every line of a questions file ends as its own report or as
a failure naming its line (and, for a clash, the other line), in `batch` and in `--emit-make`;
nothing is dropped without a word. See tests/fault_helpers.py.

Ids that would give one report file (the cleaning makes them equal, or they differ only in
case, which collide on macOS and Windows file systems) are an error on the later line rather
than two files with invented names: an id is the user's handle on a report (file name,
`--only`, make target), so it is never changed behind their back, and a clash is fixed in the
file in seconds while the other questions are answered.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.batch import read_questions
from fault_helpers import HONEYBEE, any_page_script, app_env, assert_one_line_error, cli

BASALT = "How do basalt columns form when lava cools?"

# A JSONL line whose question is not a string: (line, words of its failure)
NOT_A_QUESTION = {
    "number": ('{"id": "n", "question": 42}', '"question" is a number, not a string'),
    "null": ('{"id": "n", "question": null}', '"question" is null, not a string'),
    "list": ('{"id": "n", "question": ["What?"]}', '"question" is a list, not a string'),
    "object": ('{"id": "n", "question": {"text": "What?"}}', '"question" is an object, not a string'),
    "true": ('{"id": "n", "question": true}', '"question" is true/false, not a string'),
    "missing": ('{"id": "n", "text": "What?"}', 'no "question" field'),
    "not an object": ('["What?"]', "not a JSON object"),
    "not JSON": ("{question: What?}", "not valid JSON"),
}

# Two ids that would name one report: (first id, second id, words of the second line's failure)
CLASHING_IDS = {
    "cleaned alike": ("a/b", "a b", "'a b' gives the report name a-b.md, as line 1's id 'a/b' does"),
    "case only": ("Report", "report", "differ only in case"),
    "same after 80 characters": ("x" * 80 + "1", "x" * 80 + "2", "as line 1's id"),
    "same id": ("q7", "q7", "id 'q7' repeats line 1"),
    "the summary's name": ("batch", None, "batch.json"),
}


def write_questions(folder: Path, lines: list[str], name: str = "questions.jsonl") -> Path:
    path = folder / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", list(NOT_A_QUESTION))
def test_line_without_a_string_question_is_named_by_read_questions(kind, tmp_path):
    line, words = NOT_A_QUESTION[kind]
    items = read_questions(write_questions(tmp_path, [json.dumps({"question": HONEYBEE}), line]))
    assert len(items) == 2 and not items[0].error
    assert items[1].line == 2 and words in items[1].error, items[1].error


@pytest.mark.parametrize("kind", ["number", "missing", "not JSON"])
def test_emit_make_refuses_a_file_with_a_bad_line(kind, tmp_path):
    """--emit-make used to leave the line out of the makefile without a word, and exit 0."""
    line, words = NOT_A_QUESTION[kind]
    questions = write_questions(tmp_path, [json.dumps({"id": "ok", "question": HONEYBEE}), line])
    result = cli(["batch", str(questions), "--emit-make"], app_env(tmp_path / "home"))
    message = assert_one_line_error(result, 2, f"{questions}:2", words)
    assert "--emit-make" in message
    assert result.stdout == ""


@pytest.mark.searxng
def test_batch_answers_the_good_lines_and_fails_on_the_bad_one(tmp_path, searxng, cli_with_script):
    """A run answers every good line, lists the bad one as failed with its line and reason,
    and exits non-zero; batch.json has one entry per line."""
    cli_with_script(any_page_script())
    questions = write_questions(tmp_path, [json.dumps({"id": "bees", "question": HONEYBEE}),
                                           NOT_A_QUESTION["number"][0],
                                           json.dumps({"id": "basalt", "question": BASALT})])
    out = tmp_path / "out"
    result = cli(["batch", str(questions), "--out", str(out), "--profile", "quick",
                  "--searxng-url", searxng.url], app_env(tmp_path / "home"))
    assert result.exit_code == 1, result.output
    assert (out / "bees.md").is_file() and (out / "basalt.md").is_file()
    summary = json.loads((out / "batch.json").read_text(encoding="utf-8"))
    assert (summary["done"], summary["failed"]) == (2, 1) and len(summary["questions"]) == 3
    failed = summary["questions"][1]
    assert failed["line"] == 2 and "line 2" in failed["reason"] and "not a string" in failed["reason"]
    assert "line 2" in result.stdout and "not a string" in result.stdout


@pytest.mark.parametrize("kind", list(CLASHING_IDS))
def test_ids_that_name_one_report_fail_naming_both_lines(kind, tmp_path):
    first, second, words = CLASHING_IDS[kind]
    lines = [json.dumps({"id": first, "question": HONEYBEE})]
    if second is not None:
        lines.append(json.dumps({"id": second, "question": BASALT}))
    items = read_questions(write_questions(tmp_path, lines))
    bad = items[-1]
    assert words in bad.error, bad.error
    if second is not None:
        assert not items[0].error and "line 1" in bad.error
    result = cli(["batch", str(tmp_path / "questions.jsonl"), "--emit-make"], app_env(tmp_path / "home"))
    assert_one_line_error(result, 2, f":{len(lines)}", words)


@pytest.mark.searxng
def test_clashing_ids_never_lose_a_question(tmp_path, searxng, cli_with_script):
    """Three lines whose ids clash (cleaned alike, case only, repeated): the first is answered,
    the others fail naming the first line; none is silently merged into another's report
    (a repeated id used to vanish from the summary, and the run exited 0)."""
    cli_with_script(any_page_script())
    questions = write_questions(tmp_path, [json.dumps({"id": "Bees/1", "question": HONEYBEE}),
                                           json.dumps({"id": "bees 1", "question": BASALT}),
                                           json.dumps({"id": "Bees/1", "question": BASALT + " Really?"})])
    out = tmp_path / "out"
    result = cli(["batch", str(questions), "--out", str(out), "--profile", "quick",
                  "--searxng-url", searxng.url], app_env(tmp_path / "home"))
    assert result.exit_code == 1, result.output
    summary = json.loads((out / "batch.json").read_text(encoding="utf-8"))
    assert [q["outcome"] for q in summary["questions"]] == ["done", "failed", "failed"]
    assert all("line 1" in q["reason"] for q in summary["questions"][1:])
    report = json.loads((out / "Bees-1.json").read_text(encoding="utf-8"))
    assert report["question"] == HONEYBEE
    assert sorted(p.name for p in out.iterdir()) == [".started", "Bees-1.json", "Bees-1.md", "batch.json"]
    assert [p.name for p in (out / ".started").iterdir()] == ["Bees-1"]   # the start record of the one answered


def test_a_json_array_file_is_one_line(tmp_path):
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps([{"question": HONEYBEE}, {"question": BASALT}], indent=2), encoding="utf-8")
    result = cli(["batch", str(questions), "--emit-make"], app_env(tmp_path / "home"))
    assert_one_line_error(result, 2, str(questions), "one JSON record per line")


def test_ndjson_and_json_lines_are_records_not_question_text(tmp_path):
    for name in ("questions.ndjson", "questions.json"):
        items = read_questions(write_questions(tmp_path, [json.dumps({"id": "b", "question": HONEYBEE})], name))
        assert [(i.id, i.question) for i in items] == [("b", HONEYBEE)]


def test_a_question_keeps_the_date_it_was_first_started(tmp_path, monkeypatch):
    """The date an answer is for is recorded before its run begins and kept on a later day
    (so a batch resumed after midnight replays); --force starts it again as of today; a
    record that cannot be read is replaced, never a crash."""
    import datetime as dt

    import appliance.questions as questions_module
    from appliance.batch import BatchItem, item_today, start_dates

    out = tmp_path / "out"
    items = [BatchItem(id="a", question="What is A?"), BatchItem(id="b", question="What is B?")]
    monkeypatch.setattr(questions_module, "today", lambda: dt.date(2031, 5, 4))
    start_dates(out, items[:1])
    assert items[0].date == "2031-05-04" and item_today(items[0]) == dt.date(2031, 5, 4)
    assert (out / ".started" / "a").read_text(encoding="utf-8").split()[0] == "2031-05-04"

    monkeypatch.setattr(questions_module, "today", lambda: dt.date(2031, 5, 5))
    (out / ".started" / "b").write_text("not a date\n", encoding="utf-8")
    again = [BatchItem(id="a", question="What is A?"), BatchItem(id="b", question="What is B?")]
    start_dates(out, again)
    assert [i.date for i in again] == ["2031-05-04", "2031-05-05"]
    assert (out / ".started" / "b").read_text(encoding="utf-8").split()[0] == "2031-05-05"

    # The id now names another question (the file was edited): that one starts today.
    edited = [BatchItem(id="a", question="What is A, really?")]
    start_dates(out, edited)
    assert edited[0].date == "2031-05-05"

    forced = [BatchItem(id="a", question="What is A?")]
    start_dates(out, forced, force=True)
    assert forced[0].date == "2031-05-05"
    assert (out / ".started" / "a").read_text(encoding="utf-8").split()[0] == "2031-05-05"
    assert item_today(BatchItem(id="c", question="What is C?")) is None
