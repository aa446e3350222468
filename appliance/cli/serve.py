"""`appliance serve`: the HTTP JSON API over one persistent job queue."""

from __future__ import annotations

import logging
import secrets

import click

from .common import app

LOOPBACK = ("127.0.0.1", "::1", "localhost")


# How long an idle keep-alive connection stays open. Longer than clients keep theirs (httpx 5 s,
# as uvicorn's own default): when the server closed first, a client that reused the connection
# at that moment got it closed under its request.
KEEP_ALIVE_SECONDS = 30


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Anything but loopback requires a token (given or generated).")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="TCP port to listen on.")
@click.option("--token", default=None, envvar="APPLIANCE_SERVE_TOKEN",
              help="Token every request must carry (Authorization: Bearer TOKEN). Generated and printed "
                   "once when binding beyond loopback without one. Env: APPLIANCE_SERVE_TOKEN.")
@click.option("--workers", type=click.IntRange(0, 64), default=1, show_default=True,
              help="Runs at once. The model is one sequential resource on a CPU: keep 1 there. "
                   "0 accepts and queues runs without running any (maintenance).")
@click.option("--max-queued", type=click.IntRange(1, 100000), default=None,
              help="Queued runs beyond which submissions are refused with 429 (default 100).")
def serve(host, port, token, workers, max_queued):
    """Serve the HTTP JSON API (/api/...) over the job queue in the state folder.

    Runs submitted are queued in <state>/serve/jobs.sqlite and run one by one (--workers for
    more) through the same code as `appliance research`; their reports go to
    <state>/serve/reports. A server killed mid-run re-enters its running jobs on restart:
    they replay their cached model calls. The OpenAPI document is /api/openapi.json.
    """
    import uvicorn

    from ..jobs import DEFAULT_MAX_QUEUED, JobQueue, Runner
    from ..serve import ServeConfig, create_app, serve_behind_runs

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    ctx = app()
    settings = ctx.settings()
    if host not in LOOPBACK and not token:
        token = secrets.token_urlsafe(24)
        click.echo(f"token (shown once; every request needs 'Authorization: Bearer TOKEN'): {token}", err=True)
    queue = JobQueue.for_settings(settings, max_queued=max_queued or DEFAULT_MAX_QUEUED)
    runner = Runner(queue, ctx.config_file, workers=workers)
    recovered = runner.start()
    if recovered:
        click.echo(f"re-entered {len(recovered)} run(s) left running: {', '.join(recovered)}", err=True)
    # After the workers started: they keep their priority, the request handlers yield to them.
    serve_behind_runs()
    config = ServeConfig(queue=queue, config_file=ctx.config_file, token=token)
    server = uvicorn.Server(uvicorn.Config(create_app(config), host=host, port=port, log_level="warning",
                                           access_log=False, lifespan="off", timeout_keep_alive=KEEP_ALIVE_SECONDS))
    click.echo(f"serving on http://{host}:{port}/api (state folder {settings.home})", err=True)
    try:
        server.run()
    finally:
        runner.stop()


@click.command()
@click.option("--workers", type=click.IntRange(0, 64), default=1, show_default=True,
              help="Runs at once when this process runs the queue (it does unless `serve` holds it).")
def mcp(workers):
    """Serve research as MCP tools over STDIO (no network listener) for a local agent client.

    Tools: research (queues a run, returns its id), get_report, search_corpus, list_runs. The
    queue is the one `appliance serve` uses; if a server holds it, that server runs the jobs.
    """
    from ..mcp_tools import build_server

    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    server = build_server(app().config_file, workers=workers)
    try:
        server.run("stdio")
    finally:
        server.appliance_runner.stop()


COMMANDS = [serve, mcp]
