"""Reports for their readers (issue 26, item 5): a real run of the test model on the demo corpus
exports its report as HTML, PDF, BibTeX, RIS and CSL-JSON, each parsed back; a copy of that
report with hostile text and a local PDF source checks escaping and page locations; bad input
gets one-line errors."""

from __future__ import annotations

import copy
import json
import shutil
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance import export as export_mod
from appliance.cli import main
from appliance.errors import ApplianceError
from fault_helpers import assert_one_line_error

QUESTION = "Who was the first president of the association which published Journal of Psychotherapy Integration?"
HOSTILE_QUOTE = 'It said <script>alert("x")</script> & <img src="https://example.net/t.png"> plainly.'
HOSTILE_TITLE = "Costs {2020} rose 40% & fell_back #3 $5 ^ ~ \\end"
PDF_URL = "file:///srv/docs/annual%20report%202024.pdf#page=19"
PDF_TITLE = "annual report 2024.pdf, p. 17"


def _pdf_skip_reason() -> str | None:
    try:
        export_mod.pdf_engine()
    except ApplianceError as exc:
        return f"no PDF renderer here: {exc.one_line()}"
    return None


# ---------------------------------------------------------------- a real run, exported by research --export

@pytest.fixture(scope="module")
def real_run(musique_corpus, tmp_path_factory):
    """One research run of the test model with every export asked for; (report JSON path, result)."""
    settings, corpus = musique_corpus
    # A state folder of its own with the session's corpus: sharing the session's call cache
    # would make the end-to-end tests' run of the same question a replay.
    home = tmp_path_factory.mktemp("export-home")
    shutil.copytree(settings.home / "lancedb", home / "lancedb")
    out = tmp_path_factory.mktemp("export-reports")
    formats = ["html", "bibtex", "ris", "csl-json"] + ([] if _pdf_skip_reason() else ["pdf"])
    args = ["research", QUESTION, "--profile", "quick", "--corpus", corpus, "--backend", "corpus",
            "--out", str(out)]
    for fmt in formats:
        args += ["--export", fmt]
    result = CliRunner().invoke(main, args, env={"APPLIANCE_HOME": str(home)})
    assert result.exit_code == 0, result.output
    md_path = Path(result.stdout.strip().splitlines()[-1])
    return md_path.with_suffix(".json"), result, formats


@pytest.fixture(scope="module")
def real_report(real_run) -> dict:
    report = json.loads(real_run[0].read_text(encoding="utf-8"))
    assert report["sources"], "the test model's run cites at least one source (the exports need one)"
    return report


@pytest.fixture
def hostile_report(real_report, tmp_path) -> Path:
    """The real report with hostile text in a source and its quotes, and a local PDF page cited
    by the first finding: the shapes a run over documents and strange pages produces."""
    report = copy.deepcopy(real_report)
    first = report["sources"][0]
    first["title"] = HOSTILE_TITLE
    first["quotes"] = [HOSTILE_QUOTE] + first["quotes"]
    for claim in report["claims"]:
        for ref in claim["quotes"]:
            if ref["source_url"] == first["url"]:
                ref["quote"] = HOSTILE_QUOTE
    n = max(s["n"] for s in report["sources"]) + 1
    report["sources"].append({"n": n, "url": PDF_URL, "title": PDF_TITLE, "quality": "primary",
                              "published": "2024", "quotes": ["Revenue grew to 4.2 million."]})
    report["claims"].append({"id": "pdf1", "text": "Revenue grew.", "quotes": [
        {"source_url": PDF_URL, "quote": "Revenue grew to 4.2 million."}], "verdict": {"confirmed": True}})
    report["findings"].append({"theme": "From the annual report", "statements": [
        {"text": "Revenue grew <b>a lot</b>.", "claim_ids": ["pdf1"], "citations": [n]}]})
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(report), encoding="utf-8")
    return path


def test_research_export_writes_every_format_beside_the_report(real_run):
    json_path, result, formats = real_run
    for fmt in formats:
        path = export_mod.default_output(json_path, fmt)
        assert path.is_file() and path.stat().st_size > 0, fmt
        assert f"exported {fmt}: {path}" in result.stderr
    assert json_path.with_suffix(".md").is_file()


# ---------------------------------------------------------------- HTML

class PageParser(HTMLParser):
    """Every tag and attribute, the text, and each citation's quotes and source line."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.style = ""
        self.cites: list[dict] = []
        self._stack: list[str] = []
        self._cite: dict | None = None
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "a" and "cite" in (a.get("class") or "").split():
            self._cite = {"href": a.get("href"), "described": a.get("aria-describedby"), "quotes": [], "where": ""}
        elif self._cite is not None and tag == "q":
            self._in = "q"
            self._cite["quotes"].append("")
        elif self._cite is not None and tag == "span" and a.get("class") == "where":
            self._in = "where"
        elif self._cite is not None and tag == "span" and a.get("class") == "tip":
            self._cite["tip_id"] = a.get("id")
        if tag == "style":
            self._in = "style"

    def handle_endtag(self, tag):
        if tag == "a" and self._cite is not None:
            self.cites.append(self._cite)
            self._cite = None
        if tag in ("q", "span", "style"):
            self._in = None

    def handle_data(self, data):
        self.text.append(data)
        if self._in == "style":
            self.style += data
        elif self._in == "q" and self._cite is not None:
            self._cite["quotes"][-1] += data
        elif self._in == "where" and self._cite is not None:
            self._cite["where"] += data


def parse_page(text: str) -> PageParser:
    page = PageParser()
    page.feed(text)
    page.close()
    return page


def check_self_contained(page: PageParser, report: dict) -> None:
    """Nothing is loaded from anywhere: no src at all, no script, link, frame or object, no
    url() or @import in the styles, a CSP that forbids every fetch; the only links are in-page
    anchors and the cited sources themselves."""
    ids = {a["id"] for _, a in page.tags if "id" in a}
    source_urls = {s["url"] for s in report["sources"]}
    for tag, attrs in page.tags:
        assert tag not in ("script", "link", "iframe", "object", "embed", "img", "base"), tag
        assert "src" not in attrs and "srcset" not in attrs, (tag, attrs)
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)
        href = attrs.get("href")
        if href is not None:
            assert (href.startswith("#") and href[1:] in ids) or href in source_urls, href
    assert "url(" not in page.style and "@import" not in page.style
    csp = [a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]


def test_html_is_self_contained_and_every_citation_shows_its_quote(real_run, real_report):
    html_path = export_mod.default_output(real_run[0], "html")
    page = parse_page(html_path.read_text(encoding="utf-8"))
    check_self_contained(page, real_report)
    by_n = {s["n"]: s for s in real_report["sources"]}
    cited = {n for f in real_report["findings"] for st in f["statements"] for n in st["citations"]}
    cited |= set(real_report["answer_citations"])
    assert len(page.cites) >= len(cited) > 0
    for cite in page.cites:
        n = int(cite["href"].removeprefix("#src-"))
        source = by_n[n]
        assert cite["quotes"] and all(q in source["quotes"] for q in cite["quotes"]), (cite, source["quotes"])
        assert cite["where"].startswith(f"[{n}] ") and source["title"].strip() in cite["where"]
        assert cite["described"] == cite["tip_id"]  # the tooltip is the link's description
    # Hover and keyboard focus both show it, and print hides it (the sources list the quotes).
    assert ".cite:hover .tip" in page.style and ".cite:focus .tip" in page.style
    text = "".join(page.text)
    assert real_report["question"] in text
    for source in real_report["sources"]:
        for quote in source["quotes"]:
            assert quote in text


def test_hostile_text_comes_out_as_text(hostile_report):
    report = json.loads(hostile_report.read_text(encoding="utf-8"))
    out = hostile_report.with_suffix(".html")
    result = CliRunner().invoke(main, ["export", str(hostile_report), "--format", "html", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(out)
    page = parse_page(out.read_text(encoding="utf-8"))
    check_self_contained(page, report)
    assert HOSTILE_QUOTE in "".join(page.text)
    hostile = [c for c in page.cites if HOSTILE_QUOTE in c["quotes"]]
    assert hostile and all(HOSTILE_TITLE in c["where"] for c in hostile)
    pdf_cite = [c for c in page.cites if c["quotes"] == ["Revenue grew to 4.2 million."]]
    assert pdf_cite and pdf_cite[0]["where"].endswith("annual report 2024.pdf, p. 17")
    assert "Revenue grew <b>a lot</b>." in "".join(page.text)


# ---------------------------------------------------------------- PDF

def test_pdf_is_a_pdf_of_the_report(real_run, real_report):
    reason = _pdf_skip_reason()
    if reason:
        pytest.skip(reason)
    from pypdf import PdfReader

    pdf_path = export_mod.default_output(real_run[0], "pdf")
    assert pdf_path.read_bytes().startswith(b"%PDF")
    text = " ".join((page.extract_text() or "") for page in PdfReader(pdf_path).pages)
    assert "Deep Dive" in text and "Sources" in text and "Run statistics" in text


@pytest.mark.parametrize("engine", ["weasyprint", "chromium"])
def test_each_pdf_engine_prints_the_hostile_report(hostile_report, tmp_path, engine):
    try:
        export_mod.pdf_engine(engine)
    except ApplianceError as exc:
        pytest.skip(f"{engine} is not usable here: {exc.one_line()}")
    out = tmp_path / f"{engine}.pdf"
    result = CliRunner().invoke(main, ["export", str(hostile_report), "--format", "pdf", "--pdf-engine", engine,
                                       "-o", str(out)])
    assert result.exit_code == 0, result.output
    from pypdf import PdfReader

    assert out.read_bytes().startswith(b"%PDF")
    text = " ".join((page.extract_text() or "") for page in PdfReader(out).pages)
    assert "alert" in text and "annual report 2024.pdf" in text


def test_without_weasyprint_auto_falls_back_to_chromium(hostile_report, tmp_path, monkeypatch):
    if export_mod.find_chromium() is None:
        pytest.skip("no Chromium on PATH (apt-get install -y chromium)")
    monkeypatch.setattr(export_mod, "_weasyprint", lambda: None)  # as where Pango is missing
    assert export_mod.pdf_engine("auto") == "chromium"
    out = export_mod.export_report(hostile_report, "pdf", tmp_path / "auto.pdf")
    assert out.read_bytes().startswith(b"%PDF")


def test_without_a_renderer_pdf_export_names_what_to_install(real_run, monkeypatch, tmp_path):
    # What a machine without WeasyPrint's libraries and without Chromium has: neither loads.
    monkeypatch.setattr(export_mod, "_weasyprint", lambda: None)
    monkeypatch.setattr(export_mod, "find_chromium", lambda: None)
    result = CliRunner().invoke(main, ["export", str(real_run[0]), "--format", "pdf", "-o", str(tmp_path / "x.pdf")])
    line = assert_one_line_error(result, 2, "PDF export needs a renderer", "weasyprint", "apt-get install -y chromium")
    assert "libpango" in line and not (tmp_path / "x.pdf").exists()
    result = CliRunner().invoke(main, ["export", str(real_run[0]), "--format", "pdf", "--pdf-engine", "chromium",
                                       "-o", str(tmp_path / "x.pdf")])
    assert_one_line_error(result, 2, "Chromium", "apt-get install -y chromium")


def test_research_with_pdf_export_and_no_renderer_stops_before_the_run(monkeypatch, tmp_path):
    monkeypatch.setattr(export_mod, "_weasyprint", lambda: None)
    monkeypatch.setattr(export_mod, "find_chromium", lambda: None)
    home, out = tmp_path / "home", tmp_path / "reports"
    result = CliRunner().invoke(main, ["research", QUESTION, "--backend", "corpus", "--out", str(out),
                                       "--export", "pdf"], env={"APPLIANCE_HOME": str(home)})
    assert_one_line_error(result, 2, "PDF export needs a renderer")
    assert not out.exists()


# ---------------------------------------------------------------- bibliographies

def bibtex_entries(text: str) -> list[tuple[str, str, dict[str, str]]]:
    """(type, key, fields) of each entry, braces matched by hand (escaped braces skipped):
    BibTeX's own reading of a field, enough to show that every field is well formed."""
    entries = []
    for match in re.finditer(r"@(\w+)\{([^,\s]+),", text):
        i, depth, fields, start = match.end(), 1, {}, match.end()
        while depth:
            ch = text[i]
            if ch == "\\":
                i += 2
                continue
            depth += {"{": 1, "}": -1}.get(ch, 0)
            i += 1
        body = text[start:i - 1]
        for field in re.finditer(r"^\s+(\w+) = \{", body, re.M):
            j, d = field.end(), 1
            while d:
                if body[j] == "\\":
                    j += 2
                    continue
                d += {"{": 1, "}": -1}.get(body[j], 0)
                j += 1
            fields[field.group(1)] = body[field.end():j - 1]
        entries.append((match.group(1), match.group(2), fields))
    return entries


def test_bibtex_of_the_real_report(real_run, real_report):
    text = export_mod.default_output(real_run[0], "bibtex").read_text(encoding="utf-8")
    entries = bibtex_entries(text)
    assert [key for _, key, _ in entries] == [f"ref{s['n']}" for s in real_report["sources"]]
    for (_, _, fields), source in zip(entries, real_report["sources"]):
        assert fields["urldate"] == real_report["date"] and real_report["date"] in fields["note"]
        assert fields["title"].startswith("{") and fields["title"].endswith("}")
        assert "corpus" in fields["howpublished"]  # demo corpus passages: named by corpus and id
        assert source["url"].rsplit("/", 1)[-1] in fields["howpublished"]


def test_bibtex_escapes_braces_percent_ampersand_underscore(hostile_report):
    text = export_mod.render_bibtex(json.loads(hostile_report.read_text(encoding="utf-8")))
    entries = bibtex_entries(text)
    title = entries[0][2]["title"]
    assert title == r"{Costs \{2020\} rose 40\% \& fell\_back \#3 \$5 \^{} \~{} \textbackslash{}end}"
    pdf = entries[-1][2]
    assert pdf["pages"] == "17" and pdf["file"] == "/srv/docs/annual report 2024.pdf"
    assert pdf["url"] == PDF_URL and pdf["year"] == "2024"
    assert pdf["title"] == "{annual report 2024.pdf}"
    # Outside the url field, no special character stands unescaped.
    for _, _, fields in entries:
        for name, value in fields.items():
            if name != "url":
                assert not re.search(r"(?<!\\)[%&_#$]", value), (name, value)


def ris_records(text: str) -> list[list[tuple[str, str]]]:
    records, current = [], []
    for line in text.splitlines():
        if not line:
            continue
        match = re.fullmatch(r"([A-Z][A-Z0-9])  - (.*)", line)
        assert match, line
        current.append((match.group(1), match.group(2)))
        if match.group(1) == "ER":
            records.append(current)
            current = []
    assert not current, "every record ends with ER"
    return records


def test_ris_of_the_real_and_hostile_reports(real_run, real_report, hostile_report):
    records = ris_records(export_mod.default_output(real_run[0], "ris").read_text(encoding="utf-8"))
    assert len(records) == len(real_report["sources"])
    y2 = real_report["date"].replace("-", "/")
    for record, source in zip(records, real_report["sources"]):
        tags = dict(record)
        assert record[0] == ("TY", "ELEC") and tags["Y2"] == y2 and tags["ID"] == f"ref{source['n']}"
        assert tags["TI"] == " ".join(source["title"].split()) and tags["DB"].startswith("Local corpus")
    hostile = ris_records(export_mod.render_ris(json.loads(hostile_report.read_text(encoding="utf-8"))))
    pdf = dict(hostile[-1])
    assert hostile[-1][0] == ("TY", "GEN") and pdf["SP"] == "17" and pdf["UR"] == PDF_URL
    assert pdf["L1"] == "/srv/docs/annual report 2024.pdf" and dict(hostile[0])["TI"] == HOSTILE_TITLE


def test_csl_json_of_the_real_and_hostile_reports(real_run, real_report, hostile_report):
    items = json.loads(export_mod.default_output(real_run[0], "csl-json").read_text(encoding="utf-8"))
    year, month, day = (int(p) for p in real_report["date"].split("-"))
    assert [i["id"] for i in items] == [f"ref{s['n']}" for s in real_report["sources"]]
    for item, source in zip(items, real_report["sources"]):
        assert item["accessed"] == {"date-parts": [[year, month, day]]}
        assert item["type"] == "webpage" and item["title"] == " ".join(source["title"].split())
        assert item["archive_location"] == source["url"].split("/", 3)[3]
    hostile = json.loads(export_mod.render_csl_json(json.loads(hostile_report.read_text(encoding="utf-8"))))
    assert hostile[0]["title"] == HOSTILE_TITLE
    expected = {"type": "document", "title": "annual report 2024.pdf", "page": "17", "URL": PDF_URL,
                "source": "/srv/docs/annual report 2024.pdf", "issued": {"date-parts": [[2024]]}}
    assert {k: hostile[-1].get(k) for k in expected} == expected


def test_text_formats_print_on_stdout_with_dash(real_run):
    result = CliRunner().invoke(main, ["export", str(real_run[0]), "--format", "csl-json", "-o", "-"])
    assert result.exit_code == 0, result.output
    assert isinstance(json.loads(result.stdout), list)


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("content, words", [
    ('{"question": "q", "answer": "a"}', ["not a report JSON", "no 'date' key"]),
    ("# Deep Dive: a markdown report\n", ["not a report JSON", "not JSON"]),
    ("[1, 2, 3]", ["not a report JSON", "a JSON list"]),
    ("", ["not a report JSON"]),
])
def test_a_file_that_is_not_a_report_is_one_line(tmp_path, content, words):
    path = tmp_path / "thing.json"
    path.write_text(content, encoding="utf-8")
    result = CliRunner().invoke(main, ["export", str(path), "--format", "html"])
    assert_one_line_error(result, 2, *words, "appliance research")
    assert not (tmp_path / "thing.html").exists()


def test_a_missing_report_and_an_unknown_format_are_one_line(real_run, tmp_path):
    result = CliRunner().invoke(main, ["export", str(tmp_path / "nope.json"), "--format", "html"])
    assert_one_line_error(result, 2, "no such report", "nope.json")
    result = CliRunner().invoke(main, ["export", str(real_run[0]), "--format", "docx"])
    assert_one_line_error(result, 2, "docx", "html", "csl-json", "--help")
    result = CliRunner().invoke(main, ["research", QUESTION, "--export", "markdown"])
    assert_one_line_error(result, 2, "markdown", "bibtex")


def test_an_unwritable_output_is_one_line(real_run, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x", encoding="utf-8")
    # A path under a file cannot be made, even by root (permissions would not stop root).
    result = CliRunner().invoke(main, ["export", str(real_run[0]), "--format", "html", "-o",
                                       str(blocker / "report.html")])
    assert_one_line_error(result, 2, "cannot write", "choose a writable path with -o")
    result = CliRunner().invoke(main, ["export", str(real_run[0]), "--format", "ris", "-o", str(tmp_path)])
    assert_one_line_error(result, 2, "it is a folder")
    result = CliRunner().invoke(main, ["export", str(real_run[0]), "--format", "pdf", "-o", "-"])
    assert_one_line_error(result, 2, "name a file with -o")


def test_a_corpus_passage_of_a_local_document_is_cited_as_its_file_and_page():
    """The corpus stores a PDF page under a corpus:// URL and links it to the file at that page:
    the bibliography names the file and the printed page label."""
    from appliance.export import source_entries

    report = {"sources": [{"n": 1, "url": "corpus://docs/abc123", "title": "harbour survey.pdf, p. iv",
                           "link": "file:///srv/docs/harbour%20survey.pdf#page=6", "quotes": ["The pier is 40 m long."]}]}
    [entry] = source_entries(report)
    assert entry.path == "/srv/docs/harbour survey.pdf"
    assert entry.title == "harbour survey.pdf" and entry.location == "p. iv"


# ---------------------------------------------------------------- batch --export

def test_batch_exports_each_report_and_names_an_export_it_cannot_write(tmp_path, searxng, cli_with_script):
    """batch --export writes every format beside each report as it finishes (batch.json names
    the files); rerun with another format, the finished reports are exported, not answered
    again; an export that cannot be written is one line naming the question, the rest are
    written and the exit code is 1; --emit-make passes the formats to every target."""
    from fault_helpers import any_page_script, app_env, cli

    engine = cli_with_script(any_page_script())
    questions = tmp_path / "questions.jsonl"
    questions.write_text(json.dumps({"id": "bees", "question": "How do honeybees find flowers?"}) + "\n"
                         + json.dumps({"id": "basalt", "question": "How do basalt columns form?"}) + "\n",
                         encoding="utf-8")
    out, env = tmp_path / "out", app_env(tmp_path / "home")
    base = ["batch", str(questions), "--out", str(out), "--profile", "quick", "--searxng-url", searxng.url]
    result = cli(base + ["--export", "html", "--export", "bibtex", "--export", "html"], env)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "batch.json").read_text(encoding="utf-8"))
    for entry in summary["questions"]:
        assert sorted(entry["exports"]) == ["bibtex", "html"]
        page = Path(entry["exports"]["html"])
        assert page == out / f"{entry['id']}.html" and "<html" in page.read_text(encoding="utf-8")
        assert "@misc{ref1," in Path(entry["exports"]["bibtex"]).read_text(encoding="utf-8")
    calls = len(engine.calls)

    (out / "basalt.ris").mkdir()  # a folder where basalt's RIS file would go
    again = cli(base + ["--export", "ris", "--export", "html"], env)
    assert again.exit_code == 1, again.output
    assert len(engine.calls) == calls, "finished reports are exported, not answered again"
    assert (out / "bees.ris").read_text(encoding="utf-8").startswith("TY  -")
    errors = [line for line in again.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "export ris of basalt" in errors[0] and "folder" in errors[0]
    assert "1 export not written" in again.stderr
    summary = json.loads((out / "batch.json").read_text(encoding="utf-8"))
    # html existed already for both skipped reports: not written again.
    assert [sorted(e["exports"]) for e in summary["questions"]] == [["ris"], []]

    made = cli(["batch", str(questions), "--out", str(out), "--emit-make", "--export", "pdf"], env)
    assert made.exit_code == 0, made.output
    assert made.stdout.count("--export pdf") == 3  # the whole batch and each of the two targets
