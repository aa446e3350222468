"""`appliance research`: one question in, one cited and fact-checked report out."""

from __future__ import annotations

import json

import click

from ..contracts import BACKENDS, PROFILES, RunStatus
from ..export import FORMATS as EXPORT_FORMATS
from .common import app

PROFILE = click.Choice(PROFILES)
BACKEND = click.Choice(BACKENDS)


def research_options(func):
    """Options shared by `research` and `batch` (everything that shapes one run)."""
    options = [
        click.option("--profile", type=PROFILE, default=None,
                     help="Effort preset: quick, standard (default) or deep."),
        click.option("--backend", type=BACKEND, default=None,
                     help="Search backend: auto (SearXNG if a URL is configured, else the local corpus), searxng or corpus."),
        click.option("--corpus", "corpus_name", default=None, help="Local corpus to search (default: search.corpus)."),
        click.option("--searxng-url", default=None, help="Base URL of your SearXNG instance (overrides searxng.url)."),
        click.option("--model", "model_name", default=None,
                     help="Manifest model to use for every role (see `appliance models list`)."),
        click.option("--no-cache", is_flag=True, default=False,
                     help="Do not read or write the model-call cache (runs are then not resumable)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def run_recipe(profile, backend, corpus_name, searxng_url, model_name, no_cache):
    """How to build the settings of a run from the shared options."""
    overrides = {"search__backend": backend, "search__corpus": corpus_name, "searxng__url": searxng_url,
                 "llm__cache": False if no_cache else None}
    if model_name:
        for role in ("planner", "extractor", "verifier", "writer"):
            overrides[f"models__{role}"] = model_name
    return app().recipe(profile=profile, **overrides)


def run_settings(profile, backend, corpus_name, searxng_url, model_name, no_cache):
    """Settings for one run from the shared options."""
    return run_recipe(profile, backend, corpus_name, searxng_url, model_name, no_cache).build()


@click.command()
@click.argument("question")
@research_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Folder for the report files (default: output.reports_dir, ./reports).")
@click.option("--json", "as_json", is_flag=True, default=False,
              help="Print the whole report as JSON on stdout instead of the report's path.")
@click.option("--progress/--no-progress", default=None,
              help="Live table of sub-questions on stderr (default: only when stderr is a terminal).")
@click.option("--export", "exports", type=click.Choice(EXPORT_FORMATS), multiple=True,
              help="Also write the report in this format beside it (html, pdf, bibtex, ris, csl-json); repeatable.")
def research(question, profile, backend, corpus_name, searxng_url, model_name, no_cache,
             out_dir, as_json, progress, exports):
    """Research QUESTION and write a cited, fact-checked report.

    Writes reports/<date>-<slug>.md and .json and prints the markdown path. Rerunning the same
    question replays finished model calls and fetches from the caches, so a killed run
    resumes where it stopped.
    """
    from ..pipeline.parts import open_run_parts
    from ..pipeline.run import research as run_research
    from ..questions import clean_question
    from ..progress import live_progress

    question = clean_question(question)
    if "pdf" in exports:
        # Before the run, not after it: a missing renderer must not cost a whole research.
        from ..export import pdf_engine
        pdf_engine()
    settings = run_settings(profile, backend, corpus_name, searxng_url, model_name, no_cache)
    models, search_backend, fetcher, embedder = open_run_parts(settings)
    with fetcher, live_progress(question, progress) as prog:
        result = run_research(question, settings, models=models, backend=search_backend,
                              fetcher=fetcher, embedder=embedder, out_dir=out_dir, progress=prog)
    if as_json:
        click.echo(json.dumps(result.report, ensure_ascii=False, indent=2))
    else:
        click.echo(str(result.markdown_path))
    if exports:
        from ..export import export_report
        for fmt in dict.fromkeys(exports):
            click.echo(f"exported {fmt}: {export_report(result.json_path, fmt)}", err=True)
    if result.exit_code:
        # The report is written (its path or JSON is on stdout) and records why the run failed;
        # a script or Makefile must still see the failure.
        reason = (result.report.get("error") or result.status).replace("\n", " ")
        click.echo(f"error: the run failed ({result.status}: {reason}); the report says what was done", err=True)
        raise SystemExit(result.exit_code)
    if result.status != RunStatus.complete:
        click.echo(f"note: report status is {result.status}; see its Run statistics", err=True)


COMMANDS = [research]
