"""`appliance eval`: scoring against hand-computed cases, and a real two-question eval in every
mode whose table is recomputable from its per-question JSONL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance.cli import main
from appliance.evaluation import scoring
from appliance.evaluation.runner import aggregate, passage_id, quote_faithfulness

from conftest import DEMO_DIR as BENCH


# ------------------------------------------------------------------ scoring, by hand

def test_normalisation_drops_case_punctuation_and_articles():
    assert scoring.normalize_answer("The  Anglican Communion!") == "anglican communion"
    assert scoring.normalize_answer("") == ""


def test_exact_match_uses_aliases():
    golds = ["G. Stanley Hall", "Stanley Hall"]
    assert scoring.exact_match("stanley hall", golds) == 1.0
    assert scoring.exact_match("Hall", golds) == 0.0
    assert scoring.exact_match("", golds) == 0.0


def test_token_f1_by_hand():
    # prediction "boeing b 29 bomber" vs gold "boeing b 29 superfortress bomber":
    # overlap 4, precision 4/4, recall 4/5 -> F1 = 2*1*0.8/1.8 = 0.888...
    assert scoring.token_f1("boeing b 29 bomber", ["boeing b 29 superfortress bomber"]) == pytest.approx(8 / 9)
    assert scoring.token_f1("Norway", ["Norway", "NO"]) == 1.0
    assert scoring.token_f1("", ["Norway"]) == 0.0
    assert scoring.token_f1("anything", []) == 0.0


def test_passage_recall_and_precision_by_hand():
    assert scoring.passage_recall(["p1", "p2", "p9"], ["p1", "p2", "p3"]) == pytest.approx(2 / 3)
    assert scoring.passage_precision(["p1", "p2", "p9"], ["p1", "p2", "p3"]) == pytest.approx(2 / 3)
    assert scoring.passage_recall([], ["p1"]) == 0.0
    assert scoring.passage_precision([], ["p1"]) is None
    assert scoring.passage_recall(["p1"], []) is None


def test_answer_read_finds_the_gold_as_whole_words_in_what_was_read():
    read = "[1] Velka River: The river joins the sea at Port Ardmore, as the Ardmore Herald says."
    assert scoring.answer_read(read, ["Port Ardmore"]) == 1.0
    assert scoring.answer_read(read, ["the port of Ardmore", "port ardmore"]) == 1.0  # an alias
    assert scoring.answer_read(read, ["Ardmore Harbour"]) == 0.0
    assert scoring.answer_read(read, ["Ard"]) == 0.0  # part of a word is not the answer
    assert scoring.answer_read(read, [""]) == 0.0
    assert scoring.answer_read(None, ["Port Ardmore"]) is None  # nothing read: closed-book


def test_bootstrap_interval_brackets_the_mean():
    values = [0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    lo, hi = scoring.bootstrap_ci(values)
    assert 0.0 <= lo <= 5 / 8 <= hi <= 1.0
    assert scoring.summarize([None, None]) == {"mean": None, "ci": None, "n": 0}
    assert scoring.summarize([1.0]) == {"mean": 1.0, "ci": (1.0, 1.0), "n": 1}


def test_passage_ids_and_faithfulness():
    assert passage_id("corpus://eval-x/p0006") == "p0006"
    assert passage_id("corpus://eval-x/doc.md#2") == "doc.md"
    report = {"sources": [{"url": "u1", "quotes": ["Hall, who was the first president", "made up words"]}]}
    found, total = quote_faithfulness(report, lambda url: "G. Stanley Hall, who was the  first president of it.")
    assert (found, total) == (1, 2)


# ------------------------------------------------------------------ a real eval

@pytest.fixture
def small_dataset(tmp_path):
    """Two musique questions with their supporting passages and 30 distractors."""
    questions = [json.loads(line) for line in (BENCH / "questions.jsonl").read_text().splitlines()][:2]
    wanted = {pid for q in questions for pid in q["supporting_ids"]}
    corpus = [json.loads(line) for line in (BENCH / "corpus.jsonl").read_text().splitlines()]
    keep = [p for p in corpus if p["id"] in wanted] + [p for p in corpus if p["id"] not in wanted][:30]
    folder = tmp_path / "mini"
    folder.mkdir()
    (folder / "questions.jsonl").write_text("\n".join(json.dumps(q) for q in questions) + "\n")
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(p) for p in keep) + "\n")
    return folder


def test_skip_and_limit_pick_a_slice_of_the_questions(small_dataset):
    """--skip N --limit M answers questions N+1..N+M (a held-out part without running the rest);
    skipping every question is a one-line usage error with exit 2, never an empty table."""
    from appliance.evaluation.runner import load_dataset

    every = [q["id"] for q in load_dataset(small_dataset).questions]
    assert [q["id"] for q in load_dataset(small_dataset, None, 1).questions] == every[1:]
    assert [q["id"] for q in load_dataset(small_dataset, 1, 0).questions] == every[:1]
    result = CliRunner().invoke(main, ["eval", str(small_dataset), "--skip", "2", "--mode", "closed-book"])
    assert result.exit_code == 2
    assert "--skip 2 leaves no question" in result.output and "holds 2" in result.output
    assert "Traceback" not in result.output


def table_modes(markdown: str) -> list[str]:
    """The column names of an eval.md table."""
    header = next(line for line in markdown.splitlines() if line.startswith("| metric |"))
    return [cell.strip() for cell in header.strip("|").split("|")][1:]


def test_corpus_lines_that_cannot_be_indexed_are_a_counted_warning(small_dataset, tmp_path, monkeypatch):
    """A dataset's corpus line that is not JSON is named in a warning with the count, never
    dropped without a word; the good lines are indexed and the eval goes on."""
    monkeypatch.setenv("APPLIANCE_HOME", str(tmp_path / "home"))
    corpus = small_dataset / "corpus.jsonl"
    lines = corpus.read_text().splitlines()
    corpus.write_text("\n".join(lines[:1] + ["{not json"] + lines[1:]) + "\n")
    result = CliRunner().invoke(main, ["eval", str(small_dataset), "--limit", "1", "--mode", "closed-book",
                                       "--out", str(tmp_path / "eval")])
    assert result.exit_code == 0, result.output
    assert f"{len(lines)} passages added" in result.stderr
    assert f"warning: 1 entry of {corpus} not indexed (the first: {corpus}:2: not valid JSON)" in result.stderr
    assert "# Eval: mini, 1 question, model" in result.stdout


@pytest.mark.slow
def test_a_later_eval_of_other_modes_shows_every_mode_of_the_folder(small_dataset, tmp_path, monkeypatch):
    """`eval --mode closed-book` after `--mode rag` into the same folder: eval.md, eval.json and
    eval.png show both modes side by side (they showed the last command's modes alone, while
    results.jsonl kept every row)."""
    monkeypatch.setenv("APPLIANCE_HOME", str(tmp_path / "home"))
    out = tmp_path / "eval"
    told = []
    for mode in ("rag", "closed-book"):
        result = CliRunner().invoke(main, ["eval", str(small_dataset), "--limit", "1", "--mode", mode,
                                           "--profile", "quick", "--out", str(out)])
        assert result.exit_code == 0, result.output
        told.append(result.stderr)
    # The corpus is indexed by the first command only, and the second says it is not indexed again.
    passages = len((small_dataset / "corpus.jsonl").read_text().splitlines())
    assert "indexing" in told[0] and f"{passages} passages added" in told[0], told[0]
    assert "indexing" not in told[1] and f"holds {small_dataset / 'corpus.jsonl'} already ({passages} passages)" in told[1], told[1]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["mode"] for r in rows) == ["closed-book", "rag"]
    assert table_modes((out / "eval.md").read_text()) == ["rag", "closed-book"]
    assert table_modes(result.stdout) == ["rag", "closed-book"]
    table = json.loads((out / "eval.json").read_text())
    assert table == json.loads(json.dumps(aggregate(rows, ["rag", "closed-book"])))
    # The same again with --limit 2: the table covers this command's questions only, so every
    # column counts the same questions.
    result = CliRunner().invoke(main, ["eval", str(small_dataset), "--limit", "2", "--mode", "closed-book",
                                       "--profile", "quick", "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = json.loads((out / "eval.json").read_text())
    assert {mode: column["questions"] for mode, column in table.items()} == {"rag": 1, "closed-book": 2}


@pytest.mark.slow
def test_eval_of_two_questions_in_every_mode(small_dataset, tmp_path, monkeypatch):
    """The baselines first, then the pipeline into the same folder; the table then holds all
    four modes, recomputable from results.jsonl, with the pipeline paired against each."""
    monkeypatch.setenv("APPLIANCE_HOME", str(tmp_path / "home"))
    out = tmp_path / "eval"
    first = CliRunner().invoke(main, ["eval", str(small_dataset), "--profile", "quick", "--out", str(out),
                                      "--mode", "rag", "--mode", "iterative", "--mode", "closed-book"])
    assert first.exit_code == 0, first.output
    result = CliRunner().invoke(main, ["eval", str(small_dataset), "--profile", "quick", "--out", str(out),
                                       "--mode", "pipeline"])
    assert result.exit_code == 0, result.output
    assert "| exact match |" in result.stdout and "pipeline" in result.stdout
    modes = ["pipeline", "rag", "iterative", "closed-book"]
    assert table_modes((out / "eval.md").read_text()) == modes
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted((r["id"], r["mode"]) for r in rows) == sorted(
        (q, m) for q in {r["id"] for r in rows} for m in modes)
    assert len(rows) == 8
    assert (out / "eval.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for other in ("rag", "iterative", "closed-book"):
        assert f"| pipeline - {other} |" in result.stdout
    table = json.loads((out / "eval.json").read_text())
    again = json.loads(json.dumps(aggregate(rows, modes)))
    assert again == table, "the table is recomputable from the per-question JSONL"
    small_questions = {q["id"]: q for q in (json.loads(line) for line in
                                            (small_dataset / "questions.jsonl").read_text().splitlines())}
    answered = {" ".join(r["question"].split()): r for r in (
        json.loads(p.read_text()) for p in (tmp_path / "home" / "runs").glob("*/answer.json"))}
    for row in rows:
        assert row["model_calls"] + row["cache_hits"] >= 1
        golds = [small_questions[row["id"]]["answer"], *small_questions[row["id"]].get("aliases", [])]
        if row["mode"] == "closed-book":
            assert row["sp_recall"] is None and row["cited"] == []
            assert row["gold_read"] is None and row["f1_read"] is None
        elif row["mode"] != "pipeline":
            # Whether the gold was in the passages the answer call read; the F1 where it was
            # read is the row's own.
            assert row["gold_read"] in (0.0, 1.0)
            assert row["f1_read"] == (row["f1"] if row["gold_read"] else None)
        if row["mode"] == "rag":
            assert row["cited"] and row["sp_recall"] is not None
            assert row["searches"] == [row["question"]]
        if row["mode"] == "iterative":
            # Its first search is the question; each later one is a step's own, never repeated.
            assert row["searches"][0] == row["question"] and 1 <= len(row["searches"]) <= 3
            assert len({s.lower() for s in row["searches"]}) == len(row["searches"])
            assert row["cited"] and len(set(row["cited"])) == len(row["cited"])
            assert row["model_calls"] + row["cache_hits"] >= len(row["searches"])
        if row["mode"] == "pipeline":
            # The run's final answer call, as the model gave it (answer.json of its run folder;
            # none when the run made no answer call).
            record = answered.get(" ".join(row["question"].split()))
            assert row["raw_answer"] == (record["raw"] if record else None)
            # ... and whether the gold was in the evidence that call read (None: no call).
            assert row["gold_read"] == scoring.answer_read(record["evidence"] if record else None, golds)
            assert row["f1_read"] == (row["f1"] if row["gold_read"] else None)
            if row["prediction"]:
                assert isinstance(row["raw_answer"], str) and row["raw_answer"].strip()
        if row["mode"] != "pipeline":
            # Every mode's answer passed the same checks: a checked answer is the raw one or
            # a part of it, never words the model did not give.
            assert row["raw_answer"] is not None
            assert " ".join(row["prediction"].lower().split()) in " ".join(row["raw_answer"].lower().split())
    md = (out / "eval.md").read_text()
    assert md.count("|") > 30

    # A rerun resumes: nothing is answered again.
    again_run = CliRunner().invoke(main, ["eval", str(small_dataset), "--profile", "quick", "--out", str(out)])
    assert again_run.exit_code == 0, again_run.output
    assert len((out / "results.jsonl").read_text().splitlines()) == 8

    # A check switched off: its own folder and rows (the calls replay from the cache).
    monkeypatch.setenv("APPLIANCE_OUTPUT_REPORTS_DIR", str(tmp_path / "reports"))
    without = CliRunner().invoke(main, ["eval", str(small_dataset), "--profile", "quick", "--limit", "1",
                                        "--mode", "closed-book", "--without", "answer-form"])
    assert without.exit_code == 0, without.output
    [folder] = (tmp_path / "reports").glob("eval-mini-quick-without-answer-form")
    [row] = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    assert row["without"] == ["answer-form"] and row["cache_hits"] == 1 and row["model_calls"] == 0
    unknown = CliRunner().invoke(main, ["eval", str(small_dataset), "--without", "answer-shape"])
    assert unknown.exit_code != 0 and "unknown check 'answer-shape'" in unknown.output

    # Ablation: all checks on, then one off; what the check did not change replays.
    ablated = CliRunner().invoke(main, ["ablate", str(small_dataset), "--limit", "1", "--profile", "quick",
                                        "--check", "answer-restates", "--out", str(tmp_path / "ablate")])
    assert ablated.exit_code == 0, ablated.output
    table = (tmp_path / "ablate" / "mini" / "ablation.md").read_text()
    assert "| all on |" in table and "| answer-restates |" in table and table in ablated.stdout
    base = [json.loads(line) for line in (tmp_path / "ablate" / "mini" / "all-on" / "results.jsonl").read_text().splitlines()]
    assert all(isinstance(r["checks_fired"], list) for r in base)
    fired = any("answer-restates" in r["checks_fired"] for r in base)
    # A check that fired on no answer is not run again: off, it would change nothing.
    assert (tmp_path / "ablate" / "mini" / "answer-restates").exists() is fired
    assert ("| answer-restates | never fired" in table) is not fired
    for label in ("all-on", "answer-restates") if fired else ("all-on",):
        rows = [json.loads(line) for line in (tmp_path / "ablate" / "mini" / label / "results.jsonl").read_text().splitlines()]
        assert sorted(r["mode"] for r in rows) == ["pipeline", "rag"]
        # What no check changes replays: all on is the eval above, and rag's prompt is the same.
        assert all(r["model_calls"] == 0 for r in rows if label == "all-on" or r["mode"] == "rag"), rows


def test_a_run_with_checks_off_keeps_its_reports_apart_in_one_out_folder(tmp_path):
    from appliance.config import load_settings
    from appliance.evaluation.runner import Dataset, EvalRun

    dataset = Dataset(name="mini", corpus_path=tmp_path / "corpus.jsonl", questions=[])

    def reports(disabled):
        settings = load_settings(env={"APPLIANCE_HOME": str(tmp_path / "home")},
                                 overrides={"checks.disabled": disabled})
        return EvalRun(settings, dataset, tmp_path / "out", models=None, fetcher=None, embedder=None,
                       backend=None).reports_dir

    assert reports([]) == tmp_path / "out" / "reports"
    assert reports(["page-gate", "answer-restates"]) == tmp_path / "out" / "reports" / "without-answer-restates+page-gate"


def test_an_ablation_skips_only_a_check_known_to_have_fired_on_nothing():
    from appliance.evaluation.ablation import never_fired

    rows = [{"mode": "pipeline", "checks_fired": ["answer-restates"]}, {"mode": "rag", "checks_fired": []}]
    assert never_fired("page-gate", rows)
    assert not never_fired("answer-restates", rows)
    # An answer recorded before rows named their checks: not known, so the check is run.
    assert not never_fired("page-gate", rows + [{"mode": "pipeline"}])


# ------------------------------------------------------------------ eval through SearXNG

def test_passage_ids_of_served_pages():
    assert passage_id("http://127.0.0.1:8890/corpus/eval-x/p0006") == "p0006"
    assert passage_id("http://127.0.0.1:8890/corpus/eval-x/notes%2Fa.md%232") == "notes/a.md"
    assert passage_id("http://example.org/pages/p0006.html") == "http://example.org/pages/p0006.html"


@pytest.mark.slow
@pytest.mark.searxng
def test_eval_through_searxng(small_dataset, tmp_path, monkeypatch):
    """Two questions in pipeline and rag mode, searched through a real SearXNG in front of the
    served dataset corpus: cited pages are HTTP URLs that map back to passage ids."""
    import sources_harness
    from conftest import make_settings
    from appliance.evaluation.runner import corpus_name_for, load_dataset
    from appliance.sources.corpus import Corpus
    from appliance.sources.serve import CorpusServer

    home = tmp_path / "home"
    monkeypatch.setenv("APPLIANCE_HOME", str(home))
    config = tmp_path / "eval.toml"
    config.write_text('[fetch]\nallow_hosts = ["127.0.0.1"]\n', encoding="utf-8")
    dataset = load_dataset(small_dataset)
    name = corpus_name_for(dataset)
    settings = make_settings(home)
    Corpus(settings, name).add([dataset.corpus_path])
    requests: list[str] = []
    server = CorpusServer(settings, name, port=0, log=requests.append).start()
    searxng = sources_harness.start_corpus_searxng(tmp_path / "searxng", server.url)
    try:
        out = tmp_path / "eval"
        base = ["--config", str(config), "eval", str(small_dataset), "--profile", "quick", "--out", str(out),
                "--mode", "pipeline", "--mode", "rag", "--backend", "searxng"]
        result = CliRunner().invoke(main, base + ["--searxng-url", searxng.url])
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        assert sorted(r["mode"] for r in rows) == ["pipeline", "pipeline", "rag", "rag"]
        corpus_ids = {json.loads(line)["id"] for line in dataset.corpus_path.read_text().splitlines()}
        for row in rows:
            assert row["cited"], row
            assert set(row["cited"]) <= corpus_ids, row["cited"]
            assert row["sp_recall"] is not None
        assert any(r["sp_recall"] > 0 for r in rows if r["mode"] == "rag")
        # Searches and page reads went over HTTP, through SearXNG and the corpus server.
        assert any(" GET /search?q=" in line for line in requests)
        assert any(f" GET /corpus/{name}/" in line and " 200" in line for line in requests)
        assert "search through SearXNG" in result.stdout

        # A SearXNG that does not search this dataset's corpus fails before any model work.
        other = make_settings(tmp_path / "other-home")
        Corpus(other, "unrelated").add([dataset.corpus_path])
        wrong = CorpusServer(other, "unrelated", port=0).start()
        wrong_searxng = sources_harness.start_corpus_searxng(tmp_path / "searxng-wrong", wrong.url)
        try:
            failed = CliRunner().invoke(main, base[:7] + [str(tmp_path / "eval-wrong")] + base[8:]
                                        + ["--searxng-url", wrong_searxng.url])
        finally:
            wrong_searxng.stop()
            wrong.stop()
        assert failed.exit_code == 5
        assert f"no passage of the dataset's corpus '{name}'" in failed.stderr
        assert f"appliance corpus serve {name}" in failed.stderr
    finally:
        searxng.stop()
        server.stop()


def test_the_ablation_table_counts_replayed_calls_as_calls_of_the_configuration():
    from appliance.evaluation.ablation import _row, render

    def rows(pairs):
        return [{"id": str(i), "f1": f1, "sp_recall": 0.5, "seconds": 10.0, "model_calls": made, "cache_hits": replayed}
                for i, (f1, made, replayed) in enumerate(pairs)]

    base = rows([(1.0, 12, 0), (0.0, 8, 0)])
    # Switched off, the check changed no answer but made its configuration call the model 3 more
    # times a question; most of those calls replay the all-on run's prompts.
    off = rows([(1.0, 4, 11), (0.0, 2, 9)])
    row = _row("some-check", off, base, base)
    assert row["calls"] == 13.0 and row["model_calls"] == 3.0
    assert _row("all on", base, base, base)["calls"] == 10.0
    table = render([_row("all on", base, base, base), row], "mini")
    assert "| calls/question | new calls/question |" in table
    line = next(l for l in table.splitlines() if l.startswith("| some-check |"))
    assert line.rstrip().endswith("| 13.0 | 3.0 |")
