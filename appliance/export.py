"""Reports for their readers, made from the report JSON: one self-contained HTML page, a PDF
of that page, and the cited sources as BibTeX, RIS and CSL-JSON.

The HTML is built from the JSON's structure, not from the markdown: each citation is then
tied to the very quotes its statement rests on, and every piece of text is escaped once, as
HTML. The page loads nothing: styles are inline, a Content-Security-Policy forbids every
fetch, and the only links are the cited sources themselves.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote as url_quote, unquote, urlsplit

from .errors import ApplianceError, UsageError
from .report import STATUS_TEXT, plain_line, stat_lines
from .contracts import RunStatus

FORMATS: tuple[str, ...] = ("html", "pdf", "bibtex", "ris", "csl-json")
SUFFIXES = {"html": ".html", "pdf": ".pdf", "bibtex": ".bib", "ris": ".ris", "csl-json": ".csl.json"}
PDF_ENGINES: tuple[str, ...] = ("auto", "weasyprint", "chromium")

# What a user without a PDF renderer is told to install (Debian package names).
WEASYPRINT_HINT = ("pip install weasyprint (in the appliance's environment) and its system libraries: "
                   "apt-get install -y libpango-1.0-0 libpangoft2-1.0-0")
CHROMIUM_HINT = "apt-get install -y chromium"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_TIMEOUT = 120.0

# A location at the end of a local document's title: "report.pdf, p. 17", "deck.pptx, slide 3".
_LOCATION = re.compile(r"^(?P<title>.+?), (?P<loc>(?:p\.|pp\.|page|slide|sheet|message) .+)$")
_YEAR = re.compile(r"\b(1[5-9]\d\d|20\d\d)\b")
_LINKABLE = ("http://", "https://", "file://")


class ExportError(ApplianceError):
    """An export cannot be made: no renderer, or the output cannot be written."""

    exit_code = 2


# ---------------------------------------------------------------- reading the report JSON

@dataclass
class SourceEntry:
    """One cited source as the exports show it."""

    n: int
    url: str
    title: str
    # The place inside the document ("p. 17", "slide 3"), "" for a whole page or passage.
    location: str = ""
    # A local document's path (file:// sources), "" otherwise.
    path: str = ""
    published: str = ""
    quality: str = ""
    quotes: list[str] = field(default_factory=list)

    @property
    def page(self) -> str:
        """The page label alone ("17"), "" when the location is not a page."""
        for prefix in ("p. ", "pp. ", "page "):
            if self.location.startswith(prefix):
                return self.location[len(prefix):]
        return ""

    @property
    def year(self) -> int | None:
        match = _YEAR.search(self.published)
        return int(match.group(1)) if match else None

    def cite_text(self) -> str:
        """How the source reads in a citation's tooltip: its title and where in it."""
        return f"{self.title}, {self.location}" if self.location else self.title


def load_report(path: str | Path) -> dict[str, Any]:
    """The report JSON at ``path``; raises UsageError (one line) for anything else."""
    path = Path(path)
    hint = "give the .json file that `appliance research` writes beside the report's .md"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"no such report: {path}", hint=hint) from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a folder, not a report JSON", hint=hint) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}", hint=hint) from None
    try:
        report = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not a report JSON (not JSON: line {exc.lineno}, column {exc.colno})",
                         hint=hint) from None
    problem = _shape_problem(report)
    if problem:
        raise UsageError(f"{path} is not a report JSON ({problem})", hint=hint)
    return report


def _shape_problem(report: Any) -> str:
    """What makes ``report`` unusable as a report JSON, "" when nothing does."""
    if not isinstance(report, dict):
        return f"a JSON {type(report).__name__}, not an object"
    for key, kind in (("question", str), ("date", str), ("status", str), ("sources", list),
                      ("findings", list), ("claims", list)):
        if key not in report:
            return f"no {key!r} key"
        if not isinstance(report[key], kind):
            return f"{key!r} is not a {kind.__name__}"
    if report["status"] not in {s.value for s in RunStatus}:
        return f"unknown status {report['status']!r}"
    for i, source in enumerate(report["sources"]):
        if not (isinstance(source, dict) and isinstance(source.get("n"), int)
                and isinstance(source.get("url"), str)):
            return f"source {i + 1} has no number or URL"
    return ""


def source_entries(report: dict[str, Any]) -> list[SourceEntry]:
    """The report's cited sources, in citation order, with location and path split out."""
    entries = []
    for src in report["sources"]:
        # A local document's passage is stored under its corpus URL; its link opens the file
        # at the cited page (report.py), and that is what a reader's bibliography wants.
        link = src.get("link")
        url = link if isinstance(link, str) and link.startswith("file://") else src["url"]
        title = plain_line(src.get("title") or "") or url
        location = plain_line(src.get("location") or "")
        path = ""
        if url.startswith("file://"):
            path = unquote(urlsplit(url).path)
            match = _LOCATION.match(title)
            if match and not location:
                title, location = match.group("title"), match.group("loc")
            if not location:
                page = re.search(r"#page=(\d+)$", url)
                location = f"p. {page.group(1)}" if page else ""
        entries.append(SourceEntry(
            n=src["n"], url=url, title=title, location=location, path=path,
            published=plain_line(src.get("published") or ""), quality=plain_line(src.get("quality") or ""),
            quotes=[plain_line(q) for q in src.get("quotes") or [] if isinstance(q, str)]))
    return entries


# ---------------------------------------------------------------- HTML

_CSS = """
:root { color-scheme: light; }
body { font-family: Georgia, "DejaVu Serif", serif; line-height: 1.5; max-width: 46rem;
  margin: 2rem auto; padding: 0 1rem; color: #1d1d1f; background: #fff; }
h1 { font-size: 1.6rem; line-height: 1.25; margin-bottom: .25rem; }
h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ddd; padding-bottom: .2rem; }
h3 { font-size: 1.05rem; margin-bottom: .3rem; }
.meta { color: #555; font-style: italic; margin-top: 0; }
.status-failed { color: #8a1c1c; }
.cite { position: relative; color: #0b5cad; text-decoration: none; font-size: .85em;
  vertical-align: super; line-height: 0; }
.cite:hover, .cite:focus { text-decoration: underline; outline: 2px solid #0b5cad; outline-offset: 1px; }
.tip { display: none; position: absolute; z-index: 10; left: 0; top: 1.4em; width: 22rem;
  max-width: 80vw; padding: .5rem .7rem; background: #fffbe6; color: #1d1d1f; border: 1px solid #c9b458;
  border-radius: 4px; box-shadow: 0 2px 6px rgba(0,0,0,.2); font-size: .9rem; line-height: 1.35;
  font-style: normal; vertical-align: baseline; white-space: normal; text-align: left; }
.cite:hover .tip, .cite:focus .tip, .cite:focus-within .tip { display: block; }
.tip q { display: block; margin-bottom: .3rem; }
.tip .where { display: block; color: #555; font-size: .85rem; }
ol.sources > li { margin-bottom: 1rem; }
.sources blockquote { margin: .3rem 0 .3rem 1rem; padding-left: .6rem; border-left: 3px solid #ccc; color: #333; }
.url { word-break: break-all; font-size: .9em; }
table.stats { border-collapse: collapse; font-size: .85rem; }
table.stats td { border: 1px solid #ddd; padding: .15rem .5rem; }
@media print {
  .tip { display: none !important; }
  .cite { color: #000; }
  body { margin: 0; max-width: none; }
}
"""

# Nothing may be fetched by the page: no script, image, font, frame or stylesheet from anywhere.
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; form-action 'none'; base-uri 'none'"


def _e(text: str) -> str:
    """One line of outside text (model, page) as HTML text: no markup, no control characters."""
    return html.escape(plain_line(text), quote=True)


def _href(url: str) -> str | None:
    """The URL as an attribute value when it may be a link (http, https, file), else None."""
    cleaned = url.strip()
    if not cleaned.lower().startswith(_LINKABLE):
        return None
    return html.escape(url_quote(cleaned, safe=":/?#[]@!$&'()*+,;=%-._~"), quote=True)


class _Cites:
    """Citation marks for the page: each ``[n]`` carries the quotes its statement rests on."""

    def __init__(self, report: dict[str, Any], entries: list[SourceEntry]):
        self.by_n = {e.n: e for e in entries}
        self.n_by_url = {e.url: e.n for e in entries}
        self.claims = {c["id"]: c for c in report["claims"] if isinstance(c, dict) and "id" in c}
        self.count = 0

    def quotes_for(self, n: int, claim_ids: list[str]) -> list[str]:
        entry = self.by_n[n]
        quotes: list[str] = []
        for cid in claim_ids:
            for ref in (self.claims.get(cid) or {}).get("quotes") or []:
                if ref.get("source_url") == entry.url:
                    quote = plain_line(ref.get("quote") or "")
                    if quote and quote not in quotes:
                        quotes.append(quote)
        return quotes or entry.quotes

    def marks(self, numbers: list[int], claim_ids: list[str]) -> str:
        out = []
        for n in numbers:
            if n not in self.by_n:
                continue
            self.count += 1
            tip_id = f"tip-{self.count}"
            entry = self.by_n[n]
            quotes = "".join(f"<q>{_e(q)}</q>" for q in self.quotes_for(n, claim_ids))
            out.append(f'<a class="cite" href="#src-{n}" aria-describedby="{tip_id}">[{n}]'
                       f'<span class="tip" role="tooltip" id="{tip_id}">{quotes}'
                       f'<span class="where">[{n}] {_e(entry.cite_text())}</span></span></a>')
        return "".join(out)


def render_html(report: dict[str, Any]) -> str:
    """The report as one self-contained HTML page (styles inline, nothing loaded from anywhere)."""
    entries = source_entries(report)
    cites = _Cites(report, entries)
    status = RunStatus(report["status"])
    title = f"Deep Dive: {plain_line(report['question'])}"
    meta = (f"{_e(report['date'])} · model {_e(str(report.get('model') or ''))} · "
            f"profile {_e(str(report.get('profile') or ''))} · status: {html.escape(STATUS_TEXT[status])}")
    body = [f"<h1>{html.escape(title)}</h1>",
            f'<p class="meta{" status-failed" if status.failed else ""}">{meta}</p>']
    body += _answer_html(report, status, cites)
    body += ["<h2>Findings</h2>"] + _findings_html(report, status, cites)
    questions = [q for q in report.get("open_questions") or [] if isinstance(q, str)]
    body += ["<h2>Open Questions</h2>"]
    body += (["<ul>"] + [f"<li>{_e(q)}</li>" for q in questions] + ["</ul>"]) if questions \
        else ["<p><em>None recorded.</em></p>"]
    body += ["<h2>Sources</h2>"] + _sources_html(entries)
    body += ["<h2>Run statistics</h2>"] + _stats_html(report.get("stats") or {})
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>{html.escape(title)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>",
        *body, "</body>", "</html>", ""])


def _answer_html(report: dict[str, Any], status: RunStatus, cites: _Cites) -> list[str]:
    short = plain_line(report.get("short_answer") or "").rstrip(".").strip()
    marks = cites.marks(report.get("answer_citations") or [], report.get("answer_claims") or [])
    direct = f"<strong>{html.escape(short)}.</strong>{marks}" if short else ""
    answer = plain_line(report.get("answer") or "")
    summary = plain_line(report.get("executive_summary") or "")
    # The writer's text exists only when synthesis ran; otherwise the status explains the report.
    if answer or summary:
        text = " ".join(p for p in (direct, html.escape(answer)) if p)
        return ["<h2>Answer</h2>", f"<p>{text or '<em>No answer was written.</em>'}</p>",
                "<h2>Executive Summary</h2>", f"<p>{html.escape(summary) if summary else '<em>None.</em>'}</p>"]
    explain = {
        RunStatus.inconclusive: "Inconclusive. Claims were found, but none survived adversarial "
                                "verification; they are listed below with their votes.",
        RunStatus.no_evidence: "No answer: sources were read, but none gave a claim whose quote could "
                               "be found in the source text.",
        RunStatus.no_sources: "No answer: the searches found no source that could be read.",
        RunStatus.plan_failed: "No answer: the research could not start because planning failed.",
        RunStatus.synthesis_failed: "The report text could not be written; the verified claims are "
                                    "listed below as they are, each with its sources.",
    }.get(status, "No answer.")
    error = plain_line(report.get("error") or "")
    text = " ".join(p for p in (direct, html.escape(explain)) if p)
    return ["<h2>Answer</h2>", f"<p>{text}</p>", "<h2>Executive Summary</h2>",
            f"<p>{html.escape(error or summary or 'See the run statistics below for what was tried.')}</p>"]


def _findings_html(report: dict[str, Any], status: RunStatus, cites: _Cites) -> list[str]:
    out: list[str] = []
    for finding in report["findings"]:
        if not isinstance(finding, dict):
            continue
        out.append(f"<h3>{_e(str(finding.get('theme') or ''))}</h3>")
        out.append("<ul>")
        for st in finding.get("statements") or []:
            marks = cites.marks(st.get("citations") or [], st.get("claim_ids") or [])
            out.append(f"<li>{_e(str(st.get('text') or ''))} {marks}</li>")
        out.append("</ul>")
    if status == RunStatus.inconclusive:
        rejected = [c for c in report["claims"] if isinstance(c, dict) and c.get("verdict")
                    and not c["verdict"].get("confirmed")]
        if rejected:
            out += ["<h3>Claims not confirmed</h3>", "<ul>"]
            for claim in rejected:
                verdict = claim["verdict"]
                numbers = sorted({cites.n_by_url[q["source_url"]] for q in claim.get("quotes") or []
                                  if q.get("source_url") in cites.n_by_url})
                reasons = "; ".join(plain_line(v.get("reason") or "") for v in verdict.get("votes") or []
                                    if v.get("reason"))
                out.append(f"<li>{_e(str(claim.get('text') or ''))} {cites.marks(numbers, [claim['id']])} "
                           f"(refutations {int(verdict.get('refutations') or 0)}, valid votes "
                           f"{int(verdict.get('valid_votes') or 0)}: {html.escape(reasons or 'no reasons')})</li>")
            out.append("</ul>")
    return out or ["<p><em>No verified findings.</em></p>"]


def _sources_html(entries: list[SourceEntry]) -> list[str]:
    if not entries:
        return ["<p><em>No source was cited.</em></p>"]
    out = ['<ol class="sources">']
    for e in entries:
        href = _href(e.url)
        shown = _e(e.path or e.url)
        link = (f'<a class="url" href="{href}" rel="noreferrer noopener">{shown}</a>' if href
                else f'<span class="url">{shown}</span>')
        details = [f"quality: {_e(e.quality or 'unrated')}", f"published: {_e(e.published or 'date unknown')}"]
        quotes = "".join(f"<blockquote>“{_e(q)}”</blockquote>" for q in e.quotes)
        out.append(f'<li id="src-{e.n}" value="{e.n}"><strong>{_e(e.cite_text())}</strong><br>{link}<br>'
                   f'<small>{" · ".join(details)}</small>{quotes}</li>')
    return out + ["</ol>"]


def _stats_html(stats: dict[str, Any]) -> list[str]:
    rows = [f"<tr><td>{html.escape(label)}</td><td>{_e(shown)}</td></tr>" for label, shown in stat_lines(stats)]
    if not rows:
        return ["<p><em>No statistics recorded.</em></p>"]
    return ['<table class="stats">', *rows, "</table>"]


# ---------------------------------------------------------------- PDF

def _refuse_fetch(url: str, *args: Any, **kwargs: Any) -> Any:
    raise ValueError(f"the report page loads nothing; refused {url}")


def _weasyprint() -> Any:
    """WeasyPrint's HTML class, or None when the package or its system libraries are missing."""
    try:
        from weasyprint import HTML  # type: ignore[import-untyped]
    except (ImportError, OSError):
        return None
    return HTML


def find_chromium() -> str | None:
    """The path of a Chromium (or Chrome) program on PATH, None if there is none."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def pdf_engine(choice: str = "auto") -> str:
    """The renderer a PDF export will use; raises ExportError naming what to install."""
    if choice not in PDF_ENGINES:
        raise UsageError(f"unknown PDF engine {choice!r}", hint=f"choose one of {', '.join(PDF_ENGINES)}")
    if choice in ("auto", "weasyprint") and _weasyprint() is not None:
        return "weasyprint"
    if choice == "weasyprint":
        raise ExportError("PDF export needs WeasyPrint, which cannot be loaded here", hint=WEASYPRINT_HINT)
    if find_chromium():
        return "chromium"
    if choice == "chromium":
        raise ExportError("PDF export with --pdf-engine chromium needs a Chromium program on PATH",
                          hint=CHROMIUM_HINT)
    raise ExportError("PDF export needs a renderer and none is installed",
                      hint=f"{WEASYPRINT_HINT}; or {CHROMIUM_HINT}")


def render_pdf(page: str, engine: str = "auto") -> bytes:
    """The HTML page printed to PDF by WeasyPrint, else by headless Chromium."""
    engine = pdf_engine(engine)
    if engine == "weasyprint":
        html_class = _weasyprint()
        return bytes(html_class(string=page, base_url=None, url_fetcher=_refuse_fetch).write_pdf())
    return _chromium_pdf(page)


def _chromium_pdf(page: str) -> bytes:
    program = find_chromium()
    if program is None:
        raise ExportError("PDF export needs a Chromium program on PATH", hint=CHROMIUM_HINT)
    with tempfile.TemporaryDirectory(prefix="appliance-pdf-") as tmp:
        source, target = Path(tmp) / "report.html", Path(tmp) / "report.pdf"
        source.write_text(page, encoding="utf-8")
        # A closed network must not be probed: no background fetches, updates or sync.
        args = [program, "--headless", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-extensions", "--no-pdf-header-footer",
                f"--user-data-dir={Path(tmp) / 'profile'}", f"--print-to-pdf={target}", source.as_uri()]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium will not start as root with its sandbox
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise ExportError(f"Chromium did not print the PDF within {CHROMIUM_TIMEOUT:.0f} s",
                              hint="try the WeasyPrint engine: --pdf-engine weasyprint") from None
        if not target.is_file() or target.stat().st_size == 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise ExportError(f"Chromium printed no PDF (exit {done.returncode}: {plain_line(last)[:200]})",
                              hint="try the WeasyPrint engine: --pdf-engine weasyprint")
        return target.read_bytes()


# ---------------------------------------------------------------- bibliographies

# BibTeX: each special character of text fields, and what stands for it.
_BIBTEX_SPECIAL = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "%": r"\%", "&": r"\&", "_": r"\_",
                   "#": r"\#", "$": r"\$", "^": r"\^{}", "~": r"\~{}"}
_BIBTEX_RE = re.compile("|".join(re.escape(c) for c in _BIBTEX_SPECIAL))


def bibtex_text(text: str) -> str:
    """Text for a BibTeX field: specials escaped, so braces always balance."""
    return _BIBTEX_RE.sub(lambda m: _BIBTEX_SPECIAL[m.group(0)], plain_line(text))


def bibtex_url(url: str) -> str:
    """A URL for BibTeX's url field: percent-encoded so that no brace, backslash or space is left
    (the field is read verbatim, so % and # stay as they are)."""
    return url_quote(plain_line(url), safe=":/?#[]@!$&'()*+,;=%-._~")


def _corpus_parts(url: str) -> tuple[str, str] | None:
    """(corpus name, passage id) of a ``corpus://NAME/ID`` URL."""
    if not url.startswith("corpus://"):
        return None
    name, _, passage = url[len("corpus://"):].partition("/")
    return name, passage


def render_bibtex(report: dict[str, Any]) -> str:
    """The cited sources as BibTeX @misc entries (keys ref1, ref2, ... follow the report's [n])."""
    accessed = plain_line(report["date"])
    # Text between entries is a comment to BibTeX, as long as it holds no "@".
    question = bibtex_text(report["question"]).replace("@", " at ")
    out = [f"% Sources of the report: {question}", f"% Accessed {bibtex_text(accessed)}", ""]
    for e in source_entries(report):
        fields = [("title", "{" + bibtex_text(e.title) + "}")]
        corpus = _corpus_parts(e.url)
        if e.path:
            fields.append(("howpublished", "Local document"))
            fields.append(("file", bibtex_text(e.path)))
        elif corpus:
            fields.append(("howpublished", bibtex_text(f"Local corpus {corpus[0]}, passage {corpus[1]}")))
        if e.url.lower().startswith(_LINKABLE):
            fields.append(("url", bibtex_url(e.url)))
        if e.page:
            fields.append(("pages", bibtex_text(e.page)))
        if e.year:
            fields.append(("year", str(e.year)))
        # urldate for biblatex; the note says the same to classic BibTeX styles.
        fields.append(("urldate", bibtex_text(accessed)))
        note = [e.location] if e.location and not e.page else []
        fields.append(("note", bibtex_text("; ".join(note + [f"Accessed {accessed}"]))))
        body = ",\n".join(f"  {name} = {{{value}}}" for name, value in fields)
        out += [f"@misc{{ref{e.n},", body, "}", ""]
    return "\n".join(out)


def _ris_value(text: str) -> str:
    return plain_line(text)[:2000]


def render_ris(report: dict[str, Any]) -> str:
    """The cited sources as RIS records (ELEC for pages and passages, GEN for local documents)."""
    accessed = report["date"].replace("-", "/")
    lines: list[str] = []
    for e in source_entries(report):
        tags = [("TY", "GEN" if e.path else "ELEC"), ("ID", f"ref{e.n}"), ("TI", e.title)]
        if e.url.lower().startswith(_LINKABLE):
            tags.append(("UR", e.url))
        if e.path:
            tags.append(("L1", e.path))
        corpus = _corpus_parts(e.url)
        if corpus:
            tags += [("DB", f"Local corpus {corpus[0]}"), ("AN", corpus[1])]
        if e.page:
            tags.append(("SP", e.page))
        elif e.location:
            tags.append(("N1", e.location))
        if e.year:
            tags.append(("PY", str(e.year)))
        tags += [("Y2", accessed), ("ER", "")]
        lines += [f"{tag}  - {_ris_value(value)}" for tag, value in tags]
        lines.append("")
    return "\r\n".join(lines)


def render_csl_json(report: dict[str, Any]) -> str:
    """The cited sources as a CSL-JSON array (ids ref1, ref2, ... follow the report's [n])."""
    try:
        parts = [int(p) for p in report["date"].split("-")[:3]]
    except ValueError:
        parts = []
    items = []
    for e in source_entries(report):
        item: dict[str, Any] = {"id": f"ref{e.n}", "citation-key": f"ref{e.n}",
                                "type": "document" if e.path else "webpage", "title": e.title}
        if e.url.lower().startswith(_LINKABLE):
            item["URL"] = e.url
        if e.path:
            item["source"] = e.path
        corpus = _corpus_parts(e.url)
        if corpus:
            item["archive"] = f"Local corpus {corpus[0]}"
            item["archive_location"] = corpus[1]
        if e.page:
            item["page"] = e.page
        elif e.location:
            item["note"] = e.location
        if e.year:
            item["issued"] = {"date-parts": [[e.year]]}
        if parts:
            item["accessed"] = {"date-parts": [parts]}
        items.append(item)
    return json.dumps(items, ensure_ascii=False, indent=2) + "\n"


# ---------------------------------------------------------------- one export

_TEXT_RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "html": render_html, "bibtex": render_bibtex, "ris": render_ris, "csl-json": render_csl_json}


def render(report: dict[str, Any], fmt: str, pdf_engine_choice: str = "auto") -> bytes:
    """The report in ``fmt`` (one of FORMATS) as bytes."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}", hint=f"choose one of {', '.join(FORMATS)}")
    if fmt == "pdf":
        return render_pdf(render_html(report), pdf_engine_choice)
    return _TEXT_RENDERERS[fmt](report).encode("utf-8")


def default_output(report_path: str | Path, fmt: str) -> Path:
    """Where an export goes by default: beside the report JSON, ``<stem><suffix>``."""
    path = Path(report_path)
    stem = path.name[:-len(".json")] if path.name.endswith(".json") else path.stem
    return path.with_name(stem + SUFFIXES[fmt])


def export_report(report_path: str | Path, fmt: str, out: str | Path | None = None,
                  pdf_engine_choice: str = "auto") -> Path:
    """Write the report at ``report_path`` in ``fmt`` to ``out`` (default: beside it); the path."""
    from .atomic import write_atomic

    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}", hint=f"choose one of {', '.join(FORMATS)}")
    report = load_report(report_path)
    data = render(report, fmt, pdf_engine_choice)
    target = Path(out) if out is not None else default_output(report_path, fmt)
    if target.is_dir():
        raise ExportError(f"cannot write {target}: it is a folder", hint="give a file name with -o")
    try:
        write_atomic(target, data)
    except OSError as exc:
        raise ExportError(f"cannot write {target}: {exc.strerror or exc}",
                          hint="choose a writable path with -o") from None
    return target


__all__ = ["FORMATS", "PDF_ENGINES", "SUFFIXES", "ExportError", "SourceEntry", "load_report", "source_entries",
           "render_html", "render_pdf", "render_bibtex", "render_ris", "render_csl_json", "render",
           "pdf_engine", "export_report", "default_output", "bibtex_text", "find_chromium"]
