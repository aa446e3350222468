"""The web view of `appliance serve`: server-rendered pages over the same job queue as the API.

No JavaScript library: the pages are HTML rendered here, styled by one local stylesheet, and
one small local script (``static/app.js``) that follows a live run through the API's
server-sent events (polling when those drop). Citations need no script at all: each ``[n]`` is
a focusable element whose popover (quote, source title, location) shows on hover and on
keyboard focus by CSS alone. Nothing is loaded from outside this server.

Forms carry a double-submit CSRF token: a random value in an HttpOnly, SameSite=Strict cookie
and the same value in a hidden field; a post whose field does not match its cookie is refused
with 403 and one line. Nothing a page is given is used as a path: run ids are checked against
the queue's form, reports are read from the queue's own folder, corpora only by name.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hmac
import html
import json
import re
import secrets
from importlib import resources
from typing import Any, Callable
from urllib.parse import parse_qs, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from .contracts import BACKENDS, PROFILES
from .errors import ApplianceError
from .jobs import FINISHED, STATUSES, Job, JobQueue, JobRequest, QueueFull, valid_job_id
from .serve import Refusal, log, read_capped

CSRF_COOKIE = "appliance_csrf"
CSRF_FIELD = "csrf"
STATIC = {"app.css": "text/css; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
          "icon.svg": "image/svg+xml"}
MAX_BULK = 1000
# Private-use marks that stand for a citation while the markdown renders; stripped from the
# report text first, so no text can forge one.
_CITE_OPEN, _CITE_CLOSE = "\ue000", "\ue001"
_CITATION = re.compile(r"(?<!\\)\[(\d{1,4})\]")


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


class PageRefusal(Exception):
    """A page request refused with a 4xx and one line, shown in the page."""

    def __init__(self, status: int, reason: str):
        self.status, self.reason = status, reason
        super().__init__(reason)


# ---------------------------------------------------------------- layout

NAV = (("/", "New research"), ("/history", "History"), ("/corpora", "Corpora"))


def page(title: str, body: str, *, here: str = "", status: int = 200, csrf: str | None = None) -> HTMLResponse:
    nav = "".join(f'<a href="{href}"{" class=here" if href == here else ""}>{esc(name)}</a>' for href, name in NAV)
    doc = (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
           f'<meta name="viewport" content="width=device-width, initial-scale=1">'
           f'<title>{esc(title)} · appliance</title><link rel="icon" href="/static/icon.svg"><link rel="stylesheet" href="/static/app.css">'
           f'<script src="/static/app.js" defer></script></head><body>'
           f'<header class="top"><div class="bar"><a class="brand" href="/">appliance</a><nav>{nav}</nav></div></header>'
           f'<main>{body}</main><footer class="foot">Runs on this machine only: local models, local corpora, '
           f'your own SearXNG.</footer></body></html>')
    response = HTMLResponse(doc, status_code=status, headers={"cache-control": "no-store"})
    if csrf is not None:
        response.set_cookie(CSRF_COOKIE, csrf, httponly=True, samesite="strict", path="/")
    return response


def refusal_page(status: int, reason: str) -> HTMLResponse:
    log.warning("refused %d: %s", status, reason)
    return page("Refused", f'<h1>Refused</h1><p class="error" id="refusal">{esc(reason)}</p>'
                           f'<p><a href="/">Back to a new research</a></p>', status=status)


def badge(status: str) -> str:
    return f'<span class="badge {esc(status.replace(" ", "-"))}">{esc(status)}</span>'


def when(stamp: float | None) -> str:
    return dt.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M") if stamp else "–"


def seconds(value: float | None) -> str:
    if value is None:
        return "–"
    minutes, rest = divmod(int(round(value)), 60)
    return f"{minutes} min {rest:02d} s" if minutes else f"{rest} s"


def options(values: list[tuple[str, str]], chosen: str | None) -> str:
    return "".join(f'<option value="{esc(v)}"{" selected" if v == (chosen or "") else ""}>{esc(label)}</option>'
                   for v, label in values)


# ---------------------------------------------------------------- CSRF and forms

def csrf_token(request: Request) -> tuple[str, bool]:
    """The session's CSRF token, and whether it is new (then the response sets its cookie)."""
    current = request.cookies.get(CSRF_COOKIE, "")
    if re.fullmatch(r"[A-Za-z0-9_-]{32,64}", current):
        return current, False
    return secrets.token_urlsafe(32), True


async def read_form(request: Request, cap: int) -> dict[str, list[str]]:
    """A urlencoded form, read with a cap, its CSRF field checked against its cookie."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise PageRefusal(415, "a form post must be application/x-www-form-urlencoded")
    body = await read_capped(request, cap, lambda reason: PageRefusal(413, reason))
    try:
        form = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_BULK + 20)
    except (UnicodeDecodeError, ValueError):
        raise PageRefusal(400, "the form could not be read (not UTF-8, or too many fields)") from None
    cookie = request.cookies.get(CSRF_COOKIE, "")
    given = (form.get(CSRF_FIELD) or [""])[0]
    if not cookie or not given or not hmac.compare_digest(cookie.encode(), given.encode()):
        raise PageRefusal(403, "the form's CSRF token is missing or does not match its cookie: "
                               "reload the page and submit again")
    return form


def field(form: dict[str, list[str]], name: str) -> str | None:
    value = (form.get(name) or [""])[0].strip()
    return value or None


def hidden_csrf(token: str) -> str:
    return f'<input type="hidden" name="{CSRF_FIELD}" value="{esc(token)}">'


# ---------------------------------------------------------------- the report

def render_report(markdown: str, report: dict[str, Any]) -> str:
    """The report's markdown as HTML, each citation [n] a focusable mark whose popover shows
    the verbatim quote(s) used, the source's title and its location."""
    from markdown_it import MarkdownIt

    sources = {s.get("n"): s for s in report.get("sources", []) if isinstance(s, dict)}
    text = markdown.replace(_CITE_OPEN, "").replace(_CITE_CLOSE, "")
    head, sep, tail = text.partition("\n## Sources\n")
    head = _CITATION.sub(lambda m: f"{_CITE_OPEN}{m.group(1)}{_CITE_CLOSE}", head)
    rendered = MarkdownIt("commonmark", {"html": False}).enable("table").render(head + sep + tail)
    counter = iter(range(1, 1_000_000))

    def cite(match: re.Match) -> str:
        n = int(match.group(1))
        source = sources.get(n)
        pop_id = f"cite-{next(counter)}"
        if source is None:
            body = '<span class="q">This source is not listed in the report.</span>'
        else:
            quotes = [q for q in source.get("quotes") or [] if isinstance(q, str)][:3]
            body = "".join(f'<span class="q">“{esc(q)}”</span>' for q in quotes) or \
                '<span class="q">No quote recorded.</span>'
            body += f'<span class="t">{esc(source.get("title") or source.get("url"))}</span>'
            body += f'<span class="u">{esc(source.get("url"))}</span>'
        return (f'<span class="cite" tabindex="0" data-n="{n}" aria-describedby="{pop_id}">[{n}]'
                f'<span class="pop" role="tooltip" id="{pop_id}">{body}</span></span>')

    return re.sub(f"{_CITE_OPEN}(\\d+){_CITE_CLOSE}", cite, rendered)


# ---------------------------------------------------------------- routes

def web_routes(queue: JobQueue, config_file: str | None, max_body: int,
               check_request: Callable[[JobRequest], None], *, max_upload: int = 256 * 1024) -> list[Route]:
    """The pages, their form posts and the two static files."""
    from .config import SettingsRecipe

    def settings():
        return SettingsRecipe(config_file).build()

    def pageview(func: Callable[..., Any]) -> Callable[[Request], Any]:
        async def wrapped(request: Request) -> Response:
            token, new = csrf_token(request)
            try:
                response = await func(request, token)
            except PageRefusal as exc:
                response = refusal_page(exc.status, exc.reason)
            except QueueFull as exc:
                response = refusal_page(429, exc.one_line())
            except ApplianceError as exc:
                response = refusal_page(400, exc.one_line())
            except Exception as exc:  # noqa: BLE001 - never a traceback in a page or the log
                reason = f"{type(exc).__name__}: {exc}".replace("\n", " ")
                log.error("internal error on %s: %s", request.url.path, reason)
                response = page("Error", f'<h1>Error</h1><p class="error">internal error: {esc(reason)}</p>',
                                status=500)
            if new:
                response.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="strict", path="/")
            return response
        return wrapped

    def job_or_404(run_id: str) -> Job:
        if not valid_job_id(run_id):
            raise PageRefusal(400, f"not a run id: {run_id[:40]!r} (ids look like j-0123456789ab)")
        job = queue.get(run_id)
        if job is None:
            raise PageRefusal(404, f"no run {run_id}")
        return job

    def form_choices() -> dict[str, Any]:
        from .llm.manifest import load_manifest_for, resolve_model
        from .sources.corpus import list_corpora

        built = settings()
        manifest = load_manifest_for(built)
        try:
            default_model = resolve_model(built, "writer", manifest).name
        except ApplianceError:
            default_model = "none"
        return {"models": [m.name for m in manifest.models], "corpora": list_corpora(built),
                "default_model": default_model, "default_backend": built.search.backend,
                "default_corpus": built.search.corpus}

    def new_form(token: str, values: dict[str, str | None], error: str = "") -> str:
        c = form_choices()
        profiles = [("", "default")] + [(p, p) for p in PROFILES]
        backends = [("", f"default ({c['default_backend']})")] + [(b, b) for b in BACKENDS]
        corpora = [("", f"default ({c['default_corpus'] or 'none'})")] + [(n, n) for n in c["corpora"]]
        models = [("", f"default ({c['default_model']})")] + [(m, m) for m in c["models"]]
        problem = f'<p class="error" id="form-error">{esc(error)}</p>' if error else ""
        return (f'<h1>New research</h1><p class="sub">Ask one question; the appliance plans sub-questions, '
                f'reads sources, verifies every claim against its quote and writes a cited report.</p>{problem}'
                f'<form class="card" method="post" action="/runs" id="new-run">{hidden_csrf(token)}'
                f'<label for="question">Question</label>'
                f'<textarea id="question" name="question" required maxlength="2000" '
                f'placeholder="e.g. Who mapped the northern lakes, and when?">{esc(values.get("question"))}</textarea>'
                f'<div class="grid">'
                f'<div><label for="profile">Profile <span class="hint">effort</span></label>'
                f'<select id="profile" name="profile">{options(profiles, values.get("profile"))}</select></div>'
                f'<div><label for="backend">Search <span class="hint">corpus or SearXNG</span></label>'
                f'<select id="backend" name="backend">{options(backends, values.get("backend"))}</select></div>'
                f'<div><label for="corpus">Corpus</label>'
                f'<select id="corpus" name="corpus">{options(corpora, values.get("corpus"))}</select></div>'
                f'<div><label for="model">Model <span class="hint">every role</span></label>'
                f'<select id="model" name="model">{options(models, values.get("model"))}</select></div>'
                f'</div><div class="actions"><button type="submit" id="submit">Start research</button>'
                f'<span class="hint">Runs wait in one queue; you can close the page and come back.</span></div>'
                f'</form>')

    def batch_form(token: str) -> str:
        c = form_choices()
        profiles = [("", "default")] + [(p, p) for p in PROFILES]
        corpora = [("", f"default ({c['default_corpus'] or 'none'})")] + [(n, n) for n in c["corpora"]]
        models = [("", f"default ({c['default_model']})")] + [(m, m) for m in c["models"]]
        return (f'<h2>Batch</h2><form class="card" method="post" action="/batch" enctype="multipart/form-data" '
                f'id="batch-form">{hidden_csrf(token)}<div class="grid">'
                f'<div><label for="bfile">Questions file <span class="hint">one a line, or .jsonl; '
                f'{max_upload // 1024} KiB at most</span></label>'
                f'<input type="file" id="bfile" name="file" accept=".txt,.jsonl,.ndjson,.json" required></div>'
                f'<div><label for="bprofile">Profile</label><select id="bprofile" name="profile">'
                f'{options(profiles, None)}</select></div>'
                f'<div><label for="bcorpus">Corpus</label><select id="bcorpus" name="corpus">'
                f'{options(corpora, None)}</select></div>'
                f'<div><label for="bmodel">Model</label><select id="bmodel" name="model">'
                f'{options(models, None)}</select></div></div>'
                f'<div class="actions"><button type="submit" class="quiet" id="batch-submit">Queue the questions'
                f'</button><span class="hint">Each question becomes one run in the queue.</span></div></form>')

    async def new_page(request: Request, token: str) -> Response:
        body = await asyncio.to_thread(new_form, token, {})
        body += await asyncio.to_thread(batch_form, token)
        recent = await asyncio.to_thread(queue.list_jobs, limit=5)
        if recent:
            body += '<h2>Recent runs</h2>' + history_table(recent, token=None)
        return page("New research", body, here="/")

    async def submit(request: Request, token: str) -> Response:
        form = await read_form(request, max_body)
        values = {k: field(form, k) for k in ("question", "profile", "backend", "corpus", "model")}
        try:
            req = JobRequest(question=values["question"] or "", profile=values["profile"],
                             backend=values["backend"], corpus=values["corpus"], model=values["model"]).checked()
            await asyncio.to_thread(check_request, req)
            job = await asyncio.to_thread(queue.submit, req)
        except QueueFull:
            raise
        except (ApplianceError, PageRefusal, Refusal) as exc:
            reason = exc.one_line() if isinstance(exc, ApplianceError) else exc.reason
            status = 400 if isinstance(exc, ApplianceError) else exc.status
            log.warning("refused %d: %s", status, reason)
            body = await asyncio.to_thread(new_form, token, values, reason)
            return page("New research", body, here="/", status=status)
        return RedirectResponse(f"/runs/{job.id}", status_code=303)

    async def run_page(request: Request, token: str) -> Response:
        job = await asyncio.to_thread(job_or_404, request.path_params["run_id"])
        data = json.dumps(job.as_dict()).replace("<", "\\u003c")
        facts = "".join(f'<div class="fact"><div class="k">{k}</div><div class="v" id="{i}">–</div></div>'
                        for k, i in (("sub-questions", "n-total"), ("finished", "n-done"),
                                     ("in progress", "n-running"), ("failed", "n-failed"), ("elapsed", "run-elapsed")))
        options_line = " · ".join(f"{k} {esc(v)}" for k, v in (("profile", job.profile), ("search", job.backend),
                                                                  ("corpus", job.corpus), ("model", job.model)) if v)
        cancel = ("" if job.status in FINISHED else
                  f'<form method="post" action="/runs/{job.id}/cancel" id="cancel-form">{hidden_csrf(token)}'
                  f'<button class="danger" type="submit">Cancel run</button></form>')
        stats = ""
        if job.stats:
            keys = (("model_calls", "model calls"), ("sources_fetched", "sources read"),
                    ("claims_extracted", "claims"), ("confirmed", "confirmed"),
                    ("tokens_generated", "tokens generated"))
            stats = '<div class="facts">' + "".join(
                f'<div class="fact"><div class="k">{label}</div><div class="v">{esc(job.stats[k])}</div></div>'
                for k, label in keys if k in job.stats) + "</div>"
        body = (f'<div data-run-id="{job.id}" data-status="{esc(job.status)}" id="run">'
                f'<script type="application/json" id="run-data">{data}</script>'
                f'<p class="sub"><a href="/history">History</a> › {job.id}</p>'
                f'<h1 id="run-question">{esc(job.question)}</h1>'
                f'<p class="sub">{badge(job.status).replace("<span", "<span id=run-status", 1)} '
                f'phase: <strong id="run-phase">{esc(job.phase or "waiting in the queue")}</strong>'
                f'{" · " + options_line if options_line else ""} · submitted {when(job.created)}</p>'
                f'<p class="error" id="run-error"{"" if job.error else " hidden"}>{esc(job.error)}</p>'
                f'<div class="facts">{facts}</div>{stats}'
                f'<div class="actions"><a class="button" id="report-link" href="/runs/{job.id}/report"'
                f'{"" if job.report else " hidden"}>Open the report</a>{cancel}</div>'
                f'<h2>Sub-questions</h2><div class="table-wrap"><table><thead><tr><th>node</th><th>question</th>'
                f'<th>status</th></tr></thead><tbody id="nodes">{node_rows(job)}</tbody></table></div></div>')
        return page(job.question[:60], body, here="")

    def node_rows(job: Job) -> str:
        if not job.nodes:
            return '<tr><td colspan="3" class="empty">No sub-question yet: the plan comes first.</td></tr>'
        return "".join(f'<tr data-node="{esc(nid)}"><td class="nowrap muted">{esc(nid)}</td>'
                       f'<td>{esc(node.get("question"))}</td><td>{badge(str(node.get("status", "")))}</td></tr>'
                       for nid, node in job.nodes.items())

    async def cancel_run(request: Request, token: str) -> Response:
        await read_form(request, max_body)
        job = await asyncio.to_thread(job_or_404, request.path_params["run_id"])
        if job.status not in FINISHED:
            await asyncio.to_thread(queue.cancel, job.id)
        return RedirectResponse(f"/runs/{job.id}", status_code=303)

    async def report_page(request: Request, token: str) -> Response:
        job = await asyncio.to_thread(job_or_404, request.path_params["run_id"])
        if not job.report:
            raise PageRefusal(409, f"run {job.id} has no report yet (status {job.status})")
        md = queue.reports_dir / f"{job.id}.md"   # never the stored path itself: only the queue's folder
        if not md.is_file():
            raise PageRefusal(404, f"the report of run {job.id} was removed")
        markdown = md.read_text(encoding="utf-8")
        json_path = md.with_suffix(".json")
        report = json.loads(json_path.read_text(encoding="utf-8")) if json_path.is_file() else {}
        rendered = await asyncio.to_thread(render_report, markdown, report)
        body = (f'<p class="sub"><a href="/history">History</a> › <a href="/runs/{job.id}">{job.id}</a> › report '
                f'· download <a href="/api/runs/{job.id}/report">markdown</a> · '
                f'<a href="/api/runs/{job.id}/report?format=json">JSON</a></p>'
                f'<p class="hint">Hover or focus (Tab) a citation to see its verbatim quote and source.</p>'
                f'<article class="report" id="report">{rendered}</article>')
        return page(job.question[:60], body)

    def history_table(jobs: list[Job], token: str | None) -> str:
        if not jobs:
            return '<div class="card empty">No run matches.</div>'
        check = token is not None
        head = ('<th><input type="checkbox" id="select-all" aria-label="select all"></th>' if check else "")
        rows = []
        for job in jobs:
            tokens = job.stats.get("tokens_generated") if job.stats else None
            box = (f'<td><input type="checkbox" name="ids" value="{job.id}" aria-label="select {job.id}"></td>'
                   if check else "")
            report = f'<a href="/runs/{job.id}/report">report</a>' if job.report else ""
            rows.append(f'<tr data-job="{job.id}">{box}<td><a href="/runs/{job.id}">{esc(job.question)}</a></td>'
                        f'<td class="st">{badge(job.status)}</td>'
                        f'<td class="nowrap">{esc(job.model or "default")}</td><td>{esc(job.profile or "default")}</td>'
                        f'<td class="nowrap">{when(job.created)}</td>'
                        f'<td class="num dur">{seconds(job.as_dict()["elapsed"])}</td>'
                        f'<td class="num tok">{esc(tokens if tokens is not None else "–")}</td>'
                        f'<td class="rep">{report}</td></tr>')
        return (f'<div class="table-wrap"><table id="history"><thead><tr>{head}<th>question</th><th>status</th>'
                f'<th>model</th><th>profile</th><th>submitted</th><th class="num">duration</th>'
                f'<th class="num">tokens</th><th></th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>')

    async def history_page(request: Request, token: str) -> Response:
        params = request.query_params
        status = params.get("status") or None
        if status is not None and status not in STATUSES:
            raise PageRefusal(400, f"unknown status {status!r}: one of {', '.join(STATUSES)}")
        text = (params.get("q") or "").strip()[:200] or None
        model = (params.get("model") or "").strip()[:100] or None
        jobs = await asyncio.to_thread(queue.list_jobs, status=status, text=text, limit=1000)
        models = sorted({j.model for j in jobs if j.model})
        if model:
            jobs = [j for j in jobs if j.model == model]
        counts = await asyncio.to_thread(queue.counts)
        notice = ""
        if params.get("deleted") is not None or params.get("cancelled") is not None:
            notice = (f'<p class="notice" id="notice">Deleted {esc(params.get("deleted", "0"))} run(s); '
                      f'cancel requested for {esc(params.get("cancelled", "0"))}.</p>')
        pills = " ".join(f'<span class="badge {s}">{s} {counts[s]}</span>' for s in STATUSES)
        body = (f'<h1>History</h1><p class="sub">Every run of this state folder, newest first.</p>'
                f'<div class="pill-row">{pills}</div>{notice}'
                f'<form class="card row" method="get" action="/history" id="filter">'
                f'<div class="grow"><label for="q">Search questions</label>'
                f'<input type="search" id="q" name="q" value="{esc(text)}" placeholder="words in the question"></div>'
                f'<div><label for="status">Status</label><select id="status" name="status">'
                f'{options([("", "any")] + [(s, s) for s in STATUSES], status)}</select></div>'
                f'<div><label for="hmodel">Model</label><select id="hmodel" name="model">'
                f'{options([("", "any")] + [(m, m) for m in models], model)}</select></div>'
                f'<div><button type="submit" class="quiet">Filter</button></div></form>'
                f'<form method="post" action="/history/delete" id="bulk">{hidden_csrf(token)}'
                f'{history_table(jobs, token)}<div class="actions"><button class="danger" type="submit" '
                f'id="delete-selected">Delete selected</button><span class="hint">Finished runs are deleted with '
                f'their reports; queued and running ones are cancelled.</span></div></form>')
        return page("History", body, here="/history")

    async def bulk_delete(request: Request, token: str) -> Response:
        form = await read_form(request, max_body)
        ids = form.get("ids", [])
        if len(ids) > MAX_BULK:
            raise PageRefusal(413, f"at most {MAX_BULK} runs at once")
        bad = [i for i in ids if not valid_job_id(i)]
        if bad:
            raise PageRefusal(400, f"not a run id: {bad[0][:40]!r} (ids look like j-0123456789ab)")

        def work() -> tuple[int, int]:
            deleted = cancelled = 0
            for run_id in dict.fromkeys(ids):
                job = queue.get(run_id)
                if job is None:
                    continue
                if job.status in FINISHED:
                    deleted += queue.delete(run_id)
                else:
                    queue.cancel(run_id)
                    cancelled += 1
            return deleted, cancelled

        deleted, cancelled = await asyncio.to_thread(work)
        return RedirectResponse("/history?" + urlencode({"deleted": deleted, "cancelled": cancelled}), status_code=303)

    async def corpora_page(request: Request, token: str) -> Response:
        from .sources.corpus import Corpus, corpus_stats, list_corpora

        name = (request.query_params.get("name") or "").strip()
        query = (request.query_params.get("q") or "").strip()[:500]

        def collect() -> tuple[list[Any], list[Any]]:
            built = settings()
            names = list_corpora(built)
            stats = [corpus_stats(built, n) for n in names]
            hits: list[Any] = []
            if name:
                if name not in names:
                    raise PageRefusal(404, f"unknown corpus {name!r}: see the list on this page")
                if query:
                    hits = Corpus(built, name).search(query, 10)
            return stats, hits

        stats, hits = await asyncio.to_thread(collect)
        if stats:
            rows = "".join(f'<tr><td><a href="/corpora?name={esc(s.name)}">{esc(s.name)}</a></td>'
                           f'<td class="num">{s.documents}</td><td class="num">{s.chunks}</td>'
                           f'<td>{esc(s.embed_model)}</td><td>{"yes" if s.fts_indexed else "no"}</td></tr>'
                           for s in stats)
            table = (f'<div class="table-wrap"><table id="corpora"><thead><tr><th>corpus</th><th class="num">documents'
                     f'</th><th class="num">chunks</th><th>embedding model</th><th>text index</th></tr></thead>'
                     f'<tbody>{rows}</tbody></table></div>')
        else:
            table = ('<div class="card empty">No corpus yet. Add one from a shell: '
                     '<code>appliance corpus add NAME FOLDER</code></div>')
        chosen = name or (stats[0].name if stats else "")
        search = ""
        if stats:
            search = (f'<h2>Search</h2><form class="card row" method="get" action="/corpora" id="corpus-search">'
                      f'<div><label for="cname">Corpus</label><select id="cname" name="name">'
                      f'{options([(s.name, s.name) for s in stats], chosen)}</select></div>'
                      f'<div class="grow"><label for="cq">Query</label><input type="search" id="cq" name="q" '
                      f'value="{esc(query)}" placeholder="words or a question"></div>'
                      f'<div><button type="submit">Search</button></div></form>')
        results = ""
        if name and query:
            items = "".join(f'<li><strong>{esc(h.title or h.url)}</strong><div class="loc">{esc(h.url)}</div>'
                            f'<div>{esc(h.snippet)}</div></li>' for h in hits)
            results = (f'<h3>{len(hits)} result(s) in {esc(name)} for “{esc(query)}”</h3>'
                       f'<ol class="hits card" id="hits">{items}</ol>' if hits else
                       f'<div class="card empty" id="hits">Nothing in {esc(name)} matches “{esc(query)}”.</div>')
        body = (f'<h1>Corpora</h1><p class="sub">Local document collections in this state folder.</p>'
                f'{table}{search}{results}')
        return page("Corpora", body, here="/corpora")

    async def batch_submit(request: Request, token: str) -> Response:
        import tempfile
        from pathlib import Path

        from .batch import JSON_SUFFIXES, read_questions

        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "multipart/form-data":
            raise PageRefusal(415, "a questions file is posted as multipart/form-data")
        if not (request.headers.get("content-length") or "").isdigit():
            raise PageRefusal(411, "a questions file needs a Content-Length")
        try:
            form = await request.form(max_files=1, max_fields=10, max_part_size=max_upload)
        except Exception as exc:  # noqa: BLE001 - a malformed upload is the sender's problem
            raise PageRefusal(400, f"the upload could not be read: {str(exc).splitlines()[0][:120]}") from None
        given = form.get(CSRF_FIELD)
        cookie = request.cookies.get(CSRF_COOKIE, "")
        if not cookie or not isinstance(given, str) or not hmac.compare_digest(cookie.encode(), given.encode()):
            raise PageRefusal(403, "the form's CSRF token is missing or does not match its cookie: "
                                   "reload the page and submit again")
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise PageRefusal(400, "choose a questions file")
        data = await upload.read()
        name = upload.filename or ""
        options_given: dict[str, str | None] = {}
        for key in ("profile", "corpus", "model"):
            value = form.get(key)
            if value is not None and not isinstance(value, str):
                raise PageRefusal(400, f"{key} must be text")
            options_given[key] = value.strip() or None if value is not None else None

        def work() -> tuple[list[tuple[int, str, str, str]], int]:
            # The file is parsed from a private temporary folder of the state folder under a fixed
            # name: the name the browser sent chooses only text or JSON lines.
            suffix = ".jsonl" if Path(name).suffix.lower() in JSON_SUFFIXES else ".txt"
            with tempfile.TemporaryDirectory(dir=queue.path.parent) as tmp:
                path = Path(tmp) / f"questions{suffix}"
                path.write_bytes(data)
                items = read_questions(path)
            rows: list[tuple[int, str, str, str]] = []   # line, question, run id or "", reason
            refused = 0
            for item in items:
                if item.error:
                    rows.append((item.line, item.question, "", item.error))
                    refused += 1
                    continue
                try:
                    req = JobRequest(item.question, profile=item.profile or options_given["profile"],
                                     corpus=options_given["corpus"], model=options_given["model"]).checked()
                    check_request(req)
                    rows.append((item.line, req.question, queue.submit(req).id, ""))
                except QueueFull as exc:
                    rows.append((item.line, item.question, "", exc.one_line()))
                    refused += 1
                except (ApplianceError, Refusal) as exc:
                    rows.append((item.line, item.question, "",
                                 exc.one_line() if isinstance(exc, ApplianceError) else exc.reason))
                    refused += 1
            return rows, refused

        rows, refused = await asyncio.to_thread(work)
        if refused:
            log.warning("batch upload: %d of %d line(s) not queued (named in the page)", refused, len(rows))
        ids = [run_id for _, _, run_id, _ in rows if run_id]
        table = "".join(
            f'<tr><td class="num">{line}</td><td>{esc(question)}</td><td>'
            f'{f"<a href=/runs/{run_id}>{run_id}</a>" if run_id else badge("not queued")}</td>'
            f'<td class="muted">{esc(reason)}</td></tr>' for line, question, run_id, reason in rows)
        progress = (f'<p><a class="button" href="/batch?{urlencode({"ids": ",".join(ids)})}" id="batch-progress">'
                    f'Follow the batch</a></p>' if ids else "")
        body = (f'<h1>Batch queued</h1><p class="sub">{len(ids)} of {len(rows)} question(s) queued'
                f'{f"; {refused} not queued, each with its reason" if refused else ""}.</p>{progress}'
                f'<div class="table-wrap"><table id="batch"><thead><tr><th class="num">line</th><th>question</th>'
                f'<th>run</th><th>reason</th></tr></thead><tbody>{table}</tbody></table></div>')
        return page("Batch", body, status=201 if ids else 400)

    async def batch_page(request: Request, token: str) -> Response:
        raw = [i for i in (request.query_params.get("ids") or "").split(",") if i]
        if not raw or len(raw) > MAX_BULK:
            raise PageRefusal(400, f"give the batch's run ids: /batch?ids=j-...,j-... (at most {MAX_BULK})")
        bad = [i for i in raw if not valid_job_id(i)]
        if bad:
            raise PageRefusal(400, f"not a run id: {bad[0][:40]!r} (ids look like j-0123456789ab)")
        jobs = [j for j in await asyncio.to_thread(lambda: [queue.get(i) for i in raw]) if j is not None]
        counts = {s: sum(j.status == s for j in jobs) for s in STATUSES}
        pills = " ".join(f'<span class="badge {s}" data-count="{s}">{s} {counts[s]}</span>' for s in STATUSES)
        done = sum(counts[s] for s in FINISHED)
        live = " ".join(j.id for j in jobs if j.status not in FINISHED)
        body = (f'<h1>Batch</h1><p class="sub">{len(jobs)} run(s); <span id="batch-deleted">'
                f'{len(raw) - len(jobs)}</span> deleted. '
                f'<span id="batch-live-note">{"Updates as the runs go on." if live else "Every run has finished."}'
                f'</span><noscript> Reload for the latest.</noscript></p>'
                f'<div id="batch-live" data-batch-ids="{",".join(j.id for j in jobs)}" '
                f'data-live="{"1" if live else ""}"><progress id="batch-bar" max="{max(1, len(jobs))}" '
                f'value="{done}">{done} of {len(jobs)}</progress> <span id="batch-done">{done} of {len(jobs)} '
                f'finished</span><div class="pill-row" id="batch-counts">{pills}</div>'
                f'{history_table(jobs, token=None)}</div>')
        return page("Batch", body)

    static_cache: dict[str, bytes] = {}

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return refusal_page(404, f"no static file {name[:40]!r}")
        if name not in static_cache:
            static_cache[name] = (resources.files("appliance") / "static" / name).read_bytes()
        return Response(static_cache[name], media_type=STATIC[name], headers={"cache-control": "max-age=300"})

    return [
        Route("/", pageview(new_page), methods=["GET"]),
        Route("/runs", pageview(submit), methods=["POST"]),
        Route("/runs/{run_id}", pageview(run_page), methods=["GET"]),
        Route("/runs/{run_id}/cancel", pageview(cancel_run), methods=["POST"]),
        Route("/runs/{run_id}/report", pageview(report_page), methods=["GET"]),
        Route("/history", pageview(history_page), methods=["GET"]),
        Route("/history/delete", pageview(bulk_delete), methods=["POST"]),
        Route("/corpora", pageview(corpora_page), methods=["GET"]),
        Route("/batch", pageview(batch_submit), methods=["POST"]),
        Route("/batch", pageview(batch_page), methods=["GET"]),
        Route("/static/{name}", static, methods=["GET"]),
    ]
