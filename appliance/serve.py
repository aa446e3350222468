"""The HTTP JSON API over the job queue (Starlette on uvicorn).

Starlette rather than FastAPI: the API is a dozen routes whose bodies the queue's own
dataclasses already check, so FastAPI's dependency injection and generated validation would
add a package and a second error format for nothing; the OpenAPI document is written here.

Security: loopback by default; a token (Bearer header, ``?token=``, or the HttpOnly cookie a
page opened with ``?token=`` sets) is required on every request when one is set, and ``serve``
sets one whenever it binds beyond loopback; without a token only loopback Host names are
answered (no DNS rebinding), and a cross-site post (Origin, Sec-Fetch-Site) is refused. Every
response carries a Content-Security-Policy of 'self' only. Bodies are capped; the queue is
bounded (429 beyond it). Every refusal is a 4xx JSON ``{"error": one line}``; nothing
user-supplied is ever a path: run ids are checked against the queue's own id form.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, MutableMapping
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .config import SettingsRecipe
from .errors import ApplianceError
from .jobs import FINISHED, STATUSES, JobQueue, JobRequest, QueueFull, valid_job_id

log = logging.getLogger("appliance.serve")

DEFAULT_MAX_BODY = 64 * 1024    # a question and its options; far below any abuse
DEFAULT_MAX_UPLOAD = 256 * 1024  # a questions file: thousands of lines, more than the queue takes
MAX_IDS = 1000                  # runs one GET /api/runs?ids= names (a batch page follows them)
CSP = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
LOOPBACK = ("127.0.0.1", "::1", "localhost")
TOKEN_COOKIE = "appliance_token"


# How much nicer than the runs the thread that answers requests is (Linux): a run's model and
# embedding threads keep their priority, so many clients polling never slow a run down; when
# the CPU is busy, the clients wait a little longer instead. Measured (scripts/bench_serve.py,
# 50 clients, 2 cores, the 135M model): at the same priority a served run took 4.8x; at +19,
# with each job worker a process of its own, 1.07x (the clients at +19 too; see the README).
SERVE_NICENESS = 19


def serve_behind_runs() -> bool:
    """Make the calling thread (the event loop, and every thread it starts from now on: the
    request handlers' executor) nicer than the runs, whose workers were started before. Only
    this thread: Linux gives each thread its own nice value. False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + SERVE_NICENESS))
    except OSError:
        return False
    return True


class Refusal(Exception):
    """A request refused with a 4xx and one line."""

    def __init__(self, status: int, reason: str):
        self.status, self.reason = status, reason
        super().__init__(reason)


@dataclass
class ServeConfig:
    """How the server runs: where the queue is, which config builds settings, the limits."""

    queue: JobQueue
    config_file: str | None = None
    token: str | None = None
    max_body: int = DEFAULT_MAX_BODY
    max_upload: int = DEFAULT_MAX_UPLOAD    # a questions file posted to the web view's /batch


def is_api(path: str) -> bool:
    """Whether a path is the API's (JSON refusals) rather than a page's (HTML refusals)."""
    return path == "/api" or path.startswith("/api/")


def refuse(status: int, reason: str) -> JSONResponse:
    log.warning("refused %d: %s", status, reason)
    return JSONResponse({"error": reason}, status_code=status)


class Guard:
    """ASGI middleware: token, body cap by Content-Length, security headers on every response."""

    def __init__(self, app: ASGIApp, config: ServeConfig):
        self.app, self.config = app, config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        problem = self._check(request)

        async def send_with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
                            (b"referrer-policy", b"same-origin"), (b"x-frame-options", b"DENY")]
                message = {**message, "headers": headers}
            await send(message)

        if problem is not None:
            if is_api(request.url.path):
                await refuse(*problem)(scope, receive, send_with_headers)
            else:
                from .web import refusal_page

                await refusal_page(*problem)(scope, receive, send_with_headers)
            return
        token = self.config.token
        if (token and request.method == "GET" and not is_api(request.url.path)
                and request.query_params.get("token") and not request.headers.get("authorization")):
            # A page opened with ?token=: the token moves to an HttpOnly cookie and out of the URL.
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = request.url.path + ("?" + urlencode(rest) if rest else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict", path="/")
            await response(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def _check(self, request: Request) -> tuple[int, str] | None:
        length = request.headers.get("content-length")
        cap = self.config.max_upload if request.url.path == "/batch" else self.config.max_body
        if length is not None:
            if not length.isdigit():
                return 400, "Content-Length is not a number"
            if int(length) > cap:
                return 413, f"request body over {cap} bytes"
        token = self.config.token
        if token:
            given = request.headers.get("authorization", "")
            given = (given[7:] if given.lower().startswith("bearer ")
                     else request.query_params.get("token", "") or request.cookies.get(TOKEN_COOKIE, ""))
            if not given:
                return 401, "a token is required: send 'Authorization: Bearer <token>' (pages: open /?token=<token>)"
            if not hmac.compare_digest(given.encode(), token.encode()):
                return 403, "wrong token"
        else:
            # Loopback without a token: a page of another site that resolves its own name to
            # 127.0.0.1 (DNS rebinding) is refused by the Host it sends.
            raw = request.headers.get("host", "")
            host = (raw[1:raw.index("]")] if raw.startswith("[") and "]" in raw else raw.rsplit(":", 1)[0]).lower()
            if host and host not in LOOPBACK:
                return 403, f"host {host[:60]!r} refused: without a token the server answers loopback names only"
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            # A browser sends Origin (and Sec-Fetch-Site) with every cross-site post: refused, so a
            # page elsewhere cannot queue or delete runs through the user's browser.
            origin = request.headers.get("origin")
            own = f"{request.url.scheme}://{request.headers.get('host', '')}"
            if request.headers.get("sec-fetch-site") == "cross-site" or (origin and origin != own):
                return 403, f"cross-origin request refused (Origin {str(origin)[:60]!r})"
        return None


async def read_capped(request: Request, cap: int, refuse: Callable[[str], Exception]) -> bytes:
    """The request's body, read with a cap even when no Content-Length was sent; over the cap,
    ``refuse(reason)`` is raised (a 413 of the API or of a page)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:
            raise refuse(f"request body over {cap} bytes")
    return body


async def read_json(request: Request, cap: int) -> dict:
    """The request's JSON object, read with a cap even when no Content-Length was sent."""
    body = await read_capped(request, cap, lambda reason: Refusal(413, reason))
    try:
        data = json.loads(body or b"null")
    except ValueError:
        raise Refusal(400, "the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise Refusal(400, 'the body must be a JSON object: {"question": ...}')
    return data


Handler = Callable[[Request], Awaitable[Response]]


def endpoint(func: Handler) -> Handler:
    """Every refusal a 4xx with one line; an unexpected failure a 500 with one line, logged as one."""
    async def wrapped(request: Request) -> Response:
        try:
            return await func(request)
        except Refusal as exc:
            return refuse(exc.status, exc.reason)
        except QueueFull as exc:
            return refuse(429, exc.one_line())
        except ApplianceError as exc:
            return refuse(400, exc.one_line())
        except Exception as exc:  # noqa: BLE001 - never a traceback in a response or the log
            reason = f"{type(exc).__name__}: {exc}".replace("\n", " ")
            log.error("internal error on %s: %s", request.url.path, reason)
            return JSONResponse({"error": f"internal error: {reason}"}, status_code=500)
    return wrapped


def _run_id(request: Request) -> str:
    run_id = request.path_params["run_id"]
    if not valid_job_id(run_id):
        raise Refusal(400, f"not a run id: {run_id[:40]!r} (ids look like j-0123456789ab)")
    return run_id


def check_job_request(req: JobRequest, config_file: str | None) -> None:
    """An unknown corpus or model is refused now, not found out by a worker later."""
    from .llm.manifest import load_manifest_for
    from .sources.corpus import list_corpora

    built = req.recipe(config_file).build()
    if req.corpus is not None and req.corpus not in list_corpora(built):
        raise Refusal(400, f"unknown corpus {req.corpus!r} (see GET /api/corpora)")
    if req.model is not None:
        load_manifest_for(built).get(req.model)


def create_app(config: ServeConfig) -> ASGIApp:
    """The Starlette app over ``config.queue``: the API under /api, the web view beside it."""
    from .web import refusal_page, web_routes

    queue = config.queue

    def settings():
        return SettingsRecipe(config.config_file).build()

    def job_or_404(request: Request):
        job = queue.get(_run_id(request))
        if job is None:
            raise Refusal(404, f"no run {request.path_params['run_id']}")
        return job

    def check_request(req: JobRequest) -> None:
        check_job_request(req, config.config_file)

    @endpoint
    async def submit(request: Request) -> Response:
        data = await read_json(request, config.max_body)
        unknown = set(data) - {"question", "profile", "backend", "corpus", "model"}
        if unknown:
            raise Refusal(400, f"unknown field(s): {', '.join(sorted(unknown))}")
        if not isinstance(data.get("question"), str):
            raise Refusal(400, 'a "question" string is required')
        for key in ("profile", "backend", "corpus", "model"):
            if data.get(key) is not None and not isinstance(data[key], str):
                raise Refusal(400, f'"{key}" must be a string')
        req = JobRequest(**data).checked()
        if queue.counts()["queued"] >= queue.max_queued:
            raise QueueFull(f"the queue already holds its limit of {queue.max_queued} queued runs",
                            hint="wait for some to finish, or cancel some")
        await asyncio.to_thread(check_request, req)
        job = await asyncio.to_thread(queue.submit, req)
        return JSONResponse(job.as_dict(), status_code=201, headers={"location": f"/api/runs/{job.id}"})

    @endpoint
    async def list_runs(request: Request) -> Response:
        if "ids" in request.query_params:
            return await runs_by_id(request.query_params["ids"])
        status = request.query_params.get("status") or None
        if status is not None and status not in STATUSES:
            raise Refusal(400, f"unknown status {status!r}: one of {', '.join(STATUSES)}")
        limit = request.query_params.get("limit", "100")
        if not limit.isdigit() or not 0 < int(limit) <= 1000:
            raise Refusal(400, "limit must be a number from 1 to 1000")
        jobs = await asyncio.to_thread(queue.list_jobs, status=status, text=request.query_params.get("q") or None,
                                       limit=int(limit))
        return JSONResponse({"runs": [j.as_dict() for j in jobs], "counts": queue.counts()})

    async def runs_by_id(raw: str) -> Response:
        """The runs named (a batch's, in the order given), those deleted, and counts over them."""
        ids = list(dict.fromkeys(i for i in raw.split(",") if i))
        if not 0 < len(ids) <= MAX_IDS:
            raise Refusal(400, f"ids must name 1 to {MAX_IDS} run ids, comma-separated")
        bad = [i for i in ids if not valid_job_id(i)]
        if bad:
            raise Refusal(400, f"not a run id: {bad[0][:40]!r} (ids look like j-0123456789ab)")
        jobs = await asyncio.to_thread(lambda: [queue.get(i) for i in ids])
        found = [j for j in jobs if j is not None]
        return JSONResponse({"runs": [j.as_dict() for j in found],
                             "missing": [i for i, j in zip(ids, jobs) if j is None],
                             "counts": {s: sum(j.status == s for j in found) for s in STATUSES}})

    @endpoint
    async def get_run(request: Request) -> Response:
        return JSONResponse((await asyncio.to_thread(job_or_404, request)).as_dict())

    @endpoint
    async def get_report(request: Request) -> Response:
        job = await asyncio.to_thread(job_or_404, request)
        fmt = request.query_params.get("format", "markdown")
        if fmt not in ("markdown", "json"):
            raise Refusal(400, "format must be markdown or json")
        if not job.report:
            raise Refusal(409, f"run {job.id} has no report yet (status {job.status})")
        md = queue.reports_dir / f"{job.id}.md"   # never the stored path itself: only the queue's folder
        path = md if fmt == "markdown" else md.with_suffix(".json")
        if not path.is_file():
            raise Refusal(404, f"the report of run {job.id} was removed")
        text = path.read_text(encoding="utf-8")
        if fmt == "json":
            return Response(text, media_type="application/json")
        return PlainTextResponse(text, media_type="text/markdown; charset=utf-8")

    @endpoint
    async def delete_run(request: Request) -> Response:
        job = await asyncio.to_thread(job_or_404, request)
        if job.status in FINISHED:
            await asyncio.to_thread(queue.delete, job.id)
            return JSONResponse({"id": job.id, "deleted": True})
        after = await asyncio.to_thread(queue.cancel, job.id)
        return JSONResponse({"id": job.id, "deleted": False, "status": after.status if after else "gone",
                             "cancel_requested": True}, status_code=202)

    @endpoint
    async def events(request: Request) -> Response:
        job = await asyncio.to_thread(job_or_404, request)

        async def stream():
            last = None
            while True:
                current = await asyncio.to_thread(queue.get, job.id)
                if current is None:
                    yield "event: gone\ndata: {}\n\n"
                    return
                data = json.dumps(current.as_dict() | {"elapsed": None}, sort_keys=True)
                if data != last:
                    last = data
                    yield f"event: status\ndata: {json.dumps(current.as_dict())}\n\n"
                if current.status in FINISHED:
                    yield f"event: end\ndata: {json.dumps({'status': current.status})}\n\n"
                    return
                if await request.is_disconnected():
                    return
                await asyncio.sleep(0.5)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"cache-control": "no-store"})

    @endpoint
    async def corpora(request: Request) -> Response:
        from .sources.corpus import corpus_stats, list_corpora

        def collect():
            built = settings()
            # Names and counts only: where the state folder lies on disk is not a client's business.
            return [{k: v for k, v in {"name": n, **_plain(corpus_stats(built, n))}.items() if k != "path"}
                    for n in list_corpora(built)]

        return JSONResponse({"corpora": await asyncio.to_thread(collect)})

    @endpoint
    async def corpus_search(request: Request) -> Response:
        from .sources.corpus import Corpus, list_corpora

        name = request.path_params["name"]
        query = request.query_params.get("q", "").strip()
        if not query:
            raise Refusal(400, "give a query: ?q=...")
        limit = request.query_params.get("limit", "10")
        if not limit.isdigit() or not 0 < int(limit) <= 100:
            raise Refusal(400, "limit must be a number from 1 to 100")

        def run():
            built = settings()
            if name not in list_corpora(built):
                raise Refusal(404, f"unknown corpus {name!r} (see GET /api/corpora)")
            return [h.model_dump(mode="json") for h in Corpus(built, name).search(query, int(limit))]

        return JSONResponse({"corpus": name, "query": query, "hits": await asyncio.to_thread(run)})

    @endpoint
    async def models(request: Request) -> Response:
        from .llm.manifest import load_manifest_for

        manifest = await asyncio.to_thread(lambda: load_manifest_for(settings()))
        return JSONResponse({"models": [{"name": m.name, "roles": list(m.roles), "n_ctx_train": m.n_ctx_train,
                                         "size": m.size} for m in manifest.models]})

    @endpoint
    async def doctor(request: Request) -> Response:
        from .cli.doctor import check_models, check_python

        def run():
            checks = [check_python(), *check_models(settings(), load=False)]
            return [{"name": c.name, "ok": c.ok, "detail": c.detail, "required": c.required} for c in checks]

        checks = await asyncio.to_thread(run)
        return JSONResponse({"ok": all(c["ok"] or not c["required"] for c in checks), "checks": checks})

    async def openapi(request: Request) -> Response:
        return JSONResponse(OPENAPI)

    async def not_found(request: Request, exc: Exception) -> Response:
        if not is_api(request.url.path):
            return refusal_page(404, f"no such page: {request.url.path[:80]}")
        return refuse(404, f"no such endpoint: {request.method} {request.url.path[:80]}")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        if not is_api(request.url.path):
            return refusal_page(405, f"method {request.method} not allowed on {request.url.path[:80]}")
        return refuse(405, f"method {request.method} not allowed on {request.url.path[:80]}")

    routes = [
        Route("/api/runs", submit, methods=["POST"]),
        Route("/api/runs", list_runs, methods=["GET"]),
        Route("/api/runs/{run_id}", get_run, methods=["GET"]),
        Route("/api/runs/{run_id}", delete_run, methods=["DELETE"]),
        Route("/api/runs/{run_id}/report", get_report, methods=["GET"]),
        Route("/api/runs/{run_id}/events", events, methods=["GET"]),
        Route("/api/corpora", corpora, methods=["GET"]),
        Route("/api/corpora/{name}/search", corpus_search, methods=["GET"]),
        Route("/api/models", models, methods=["GET"]),
        Route("/api/doctor", doctor, methods=["GET"]),
        Route("/api/openapi.json", openapi, methods=["GET"]),
        *web_routes(queue, config.config_file, config.max_body, check_request, max_upload=config.max_upload),
    ]
    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_allowed})
    return Guard(app, config)


def _plain(record: Any) -> dict:
    from dataclasses import asdict, is_dataclass

    return asdict(record) if is_dataclass(record) and not isinstance(record, type) else {}


def _op(summary: str, params: list[dict] | None = None, body: bool = False) -> dict:
    op: dict[str, Any] = {"summary": summary, "responses": {"200": {"description": "OK"},
                                                          "4XX": {"description": '{"error": "one line"}'}}}
    if params:
        op["parameters"] = params
    if body:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["question"], "additionalProperties": False,
            "properties": {"question": {"type": "string"}, "profile": {"type": "string"},
                           "backend": {"type": "string"}, "corpus": {"type": "string"},
                           "model": {"type": "string"}}}}}}
    return op


def _q(name: str, where: str = "query") -> dict:
    return {"name": name, "in": where, "required": where == "path", "schema": {"type": "string"}}


OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "appliance", "version": "1"},
    "components": {"securitySchemes": {"token": {"type": "http", "scheme": "bearer"}}},
    "security": [{"token": []}],
    "paths": {
        "/api/runs": {"post": _op("Queue a research run (201; 429 when the queue is full)", body=True),
                      "get": _op("List runs, newest first; with ids=j-...,j-... those runs in that order "
                                 "(a batch's), the ids deleted (missing) and counts over them",
                                 [_q("status"), _q("q"), _q("limit"), _q("ids")])},
        "/api/runs/{run_id}": {"get": _op("A run: status, phase, node table, stats", [_q("run_id", "path")]),
                               "delete": _op("Cancel a queued or running run; delete a finished one",
                                             [_q("run_id", "path")])},
        "/api/runs/{run_id}/report": {"get": _op("The report (format=markdown|json)",
                                                 [_q("run_id", "path"), _q("format")])},
        "/api/runs/{run_id}/events": {"get": _op("Server-sent events of the run's progress",
                                                 [_q("run_id", "path")])},
        "/api/corpora": {"get": _op("Local corpora with their stats")},
        "/api/corpora/{name}/search": {"get": _op("Search a corpus", [_q("name", "path"), _q("q"), _q("limit")])},
        "/api/models": {"get": _op("Manifest models")},
        "/api/doctor": {"get": _op("Health checks (no model is loaded)")},
        "/api/openapi.json": {"get": _op("This document")},
    },
}
