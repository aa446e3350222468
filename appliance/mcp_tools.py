"""`appliance mcp`: research as tools for a local agent client, over STDIO only (no listener).

The tools work on the same job queue as `appliance serve`. When no server holds the state
folder's queue, this process runs the queue's worker itself; when one does, research is only
queued here and that server runs it. Either way a run goes through the code of `appliance
research`. A run takes minutes on a CPU, so ``research`` returns the run id at once (or waits
up to ``wait_seconds``) and ``get_report`` gives the result.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from .config import SettingsRecipe
from .errors import ApplianceError, StateError
from .jobs import FINISHED, STATUSES, JobQueue, JobRequest, Runner, valid_job_id

log = logging.getLogger("appliance.mcp")
MAX_WAIT_SECONDS = 600


def build_server(config_file: str | None = None, *, workers: int = 1) -> Any:
    """The MCPServer with the four tools; starts the queue's worker unless a server has it."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    settings = SettingsRecipe(config_file).build()
    queue = JobQueue.for_settings(settings)
    runner = Runner(queue, config_file, workers=workers)
    try:
        runner.start()
    except StateError as exc:
        log.info("%s: runs are queued for that server to run", exc.message)
    server = MCPServer("appliance", instructions="Local research with cited, fact-checked reports. "
                       "Call research, then get_report with the run id until its status is finished.")

    def fail(exc: ApplianceError) -> ToolError:
        return ToolError(exc.one_line())

    @server.tool()
    def research(question: str, profile: str | None = None, corpus: str | None = None,
                 backend: str | None = None, model: str | None = None, wait_seconds: float = 0) -> dict:
        """Queue a research question; returns its run id and status. With wait_seconds (at most
        600) it waits that long and includes the markdown report if the run finished by then."""
        try:
            req = JobRequest(question, profile, backend, corpus, model).checked()
            if req.corpus is not None:
                from .sources.corpus import list_corpora

                if req.corpus not in list_corpora(req.recipe(config_file).build()):
                    raise ToolError(f"unknown corpus {req.corpus!r}: list_corpora names the known ones")
            if req.model is not None:
                from .llm.manifest import load_manifest_for

                load_manifest_for(req.recipe(config_file).build()).get(req.model)
            job = queue.submit(req)
        except ApplianceError as exc:
            raise fail(exc) from None
        deadline = time.monotonic() + max(0.0, min(float(wait_seconds), MAX_WAIT_SECONDS))
        while time.monotonic() < deadline and job.status not in FINISHED:
            time.sleep(0.5)
            job = queue.get(job.id) or job
        return _result(queue, job.id)

    @server.tool()
    def get_report(run_id: str) -> dict:
        """A run's status, phase and node table; its markdown report once it has finished."""
        if not valid_job_id(run_id):
            raise ToolError(f"not a run id: {run_id[:40]!r} (ids look like j-0123456789ab)")
        if queue.get(run_id) is None:
            raise ToolError(f"no run {run_id}")
        return _result(queue, run_id)

    @server.tool()
    def search_corpus(corpus: str, query: str, limit: int = 5) -> list[dict]:
        """Search a local corpus; returns hits (url, title, snippet)."""
        from .sources.corpus import Corpus, list_corpora

        if not 0 < limit <= 50:
            raise ToolError("limit must be from 1 to 50")
        if not query.strip():
            raise ToolError("give a query")
        try:
            if corpus not in list_corpora(settings):
                raise ToolError(f"unknown corpus {corpus!r}; known: {', '.join(list_corpora(settings)) or 'none'}")
            return [h.model_dump(mode="json") for h in Corpus(settings, corpus).search(query, limit)]
        except ApplianceError as exc:
            raise fail(exc) from None

    @server.tool()
    def list_runs(status: str | None = None, query: str | None = None, limit: int = 20) -> list[dict]:
        """Runs, newest first: filter by status (queued, running, done, failed, cancelled) and by
        text in the question."""
        if status is not None and status not in STATUSES:
            raise ToolError(f"unknown status {status!r}: one of {', '.join(STATUSES)}")
        if not 0 < limit <= 200:
            raise ToolError("limit must be from 1 to 200")
        return [{"id": j.id, "question": j.question, "status": j.status, "created": j.created}
                for j in queue.list_jobs(status=status, text=query, limit=limit)]

    server.appliance_runner = runner  # type: ignore[attr-defined]
    return server


def _result(queue: JobQueue, run_id: str) -> dict:
    job = queue.get(run_id)
    assert job is not None
    result: dict[str, Any] = {"id": job.id, "status": job.status, "phase": job.phase,
                              "nodes": job.nodes, "run_status": job.run_status, "error": job.error}
    md = queue.reports_dir / f"{job.id}.md"
    if job.status in FINISHED and job.report and md.is_file():
        result["report"] = md.read_text(encoding="utf-8")
    return result
