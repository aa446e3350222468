"""`appliance batch`: one report per question, resumable, from a shell or a Makefile."""

from __future__ import annotations

import time
from pathlib import Path

import click

from ..export import FORMATS as EXPORT_FORMATS
from .research import research_options, run_recipe


def _summary_table(results) -> str:
    lines = [f"{'id':<28} {'outcome':<8} {'status':<16} detail"]
    for r in results:
        detail = r.reason if r.outcome == "failed" else r.report
        lines.append(f"{r.id[:28]:<28} {r.outcome:<8} {r.status[:16]:<16} {detail}")
    done = sum(r.outcome == "done" for r in results)
    skipped = sum(r.outcome == "skipped" for r in results)
    failed = sum(r.outcome == "failed" for r in results)
    lines.append(f"{done} done, {skipped} skipped (already done), {failed} failed")
    return "\n".join(lines)


@click.command()
@click.argument("questions_file", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="reports/batch", show_default=True,
              help="Folder for the reports (<id>.md and .json) and batch.json.")
@click.option("--jobs", type=click.IntRange(min=1, max=16), default=1, show_default=True,
              help="Questions answered at once, each in its own process with its own model (CPU threads are split).")
@click.option("--force", is_flag=True, default=False, help="Redo questions whose report already exists.")
@click.option("--only", "only_ids", multiple=True, help="Answer only the question with this id (repeatable).")
@click.option("--emit-make", is_flag=True, default=False,
              help="Print a makefile with one target per report instead of running (used by `make batch`).")
@click.option("--cluster", "cluster_spec", default=None, metavar="SPEC",
              help="Answer the questions as Dask tasks: local, local:N (N worker processes here), "
                   "tcp://HOST:PORT (a running scheduler), slurm or pbs (worker jobs; see [cluster] "
                   "in the config). Default: the [cluster] spec setting; empty: this process.")
@click.option("--print-job-script", is_flag=True, default=False,
              help="With --cluster slurm or pbs: print the worker job script and submit nothing.")
@click.option("--export", "exports", type=click.Choice(EXPORT_FORMATS), multiple=True,
              help="Also write each report in this format beside it (html, pdf, bibtex, ris, csl-json); "
                   "repeatable. Finished reports that lack the file are exported too.")
@research_options
def batch(questions_file, out_dir, jobs, force, only_ids, emit_make, cluster_spec, print_job_script, exports,
          profile, backend, corpus_name, searxng_url, model_name, no_cache):
    """Answer every question in QUESTIONS_FILE, one report each.

    QUESTIONS_FILE is text (one question a line; blank lines and # comments skipped) or JSON
    lines, .jsonl/.ndjson/.json ({"id"?, "question", "profile"?} per line). Reports are named by
    the given id (cleaned to a safe file name) or a hash of the question; a line that is not a
    question, or whose id names the same report as an earlier line's (also when they differ only
    in case), fails naming its line. Rerunning skips finished reports and resumes unfinished
    ones from the caches. Exits non-zero if any line failed (or an export could not be written),
    after answering the others; --emit-make refuses a file with a bad line.
    """
    from ..batch import make_fragment, read_questions, run_batch, write_summary
    from ..cluster import job_script, parse_spec
    from ..errors import UsageError

    items = [] if print_job_script else read_questions(questions_file)
    recipe = run_recipe(profile, backend, corpus_name, searxng_url, model_name, no_cache)
    settings = recipe.build()  # a bad option or config fails here, before any work
    spec_text = settings.cluster.spec if cluster_spec is None else cluster_spec
    cluster = parse_spec(spec_text) if spec_text.strip() else None
    if print_job_script:
        if cluster is None:
            raise UsageError("--print-job-script needs --cluster slurm or pbs",
                             hint="add --cluster slurm (or set spec in the [cluster] settings)")
        click.echo(job_script(settings, cluster), nl=False)
        return
    if cluster is not None and jobs > 1:
        raise UsageError("--jobs and --cluster do not go together",
                         hint="set the number of workers with --cluster local:N, or [cluster] workers")
    if emit_make:
        bad = [item for item in items if item.error]
        if bad:
            more = f" (and {len(bad) - 1} more bad line{'s' if len(bad) > 2 else ''})" if len(bad) > 1 else ""
            raise UsageError(f"{questions_file}:{bad[0].line}: {bad[0].error}{more}",
                             hint="fix the file: --emit-make writes a target for every line, so every "
                                  "line must be a question with its own id")
        flags = _flags(profile, backend, corpus_name, searxng_url, model_name, no_cache, exports)
        click.echo(make_fragment(items, questions_file, out_dir, flags), nl=False)
        return
    if only_ids:
        known = {i.id for i in items}
        missing = [i for i in only_ids if i not in known]
        if missing:
            raise UsageError(f"no question with id {missing[0]!r} in {questions_file}",
                             hint="ids are listed in batch.json or by --emit-make")
        items = [i for i in items if i.id in set(only_ids)]
    exports = tuple(dict.fromkeys(exports))
    if "pdf" in exports:
        # Before any question, not after them: a missing renderer must not cost a whole batch.
        from ..export import pdf_engine
        pdf_engine()
    out = Path(out_dir)
    start = time.monotonic()

    finished = []
    export_failures: list[str] = []

    def show(result):
        finished.append(result)
        click.echo(f"{result.outcome}: {result.id} {result.status} {result.reason}".rstrip(), err=True)
        for line in _export(result, exports):
            export_failures.append(line)
            click.echo(f"error: {line}", err=True)

    try:
        results = run_batch(items, recipe, out, jobs=jobs, force=force, on_result=show, cluster=cluster)
    except KeyboardInterrupt:
        if not only_ids:
            write_summary(finished, out, time.monotonic() - start, interrupted=True)
        raise
    if not only_ids:
        path = write_summary(results, out, time.monotonic() - start)
        click.echo(_summary_table(results))
        click.echo(f"summary: {path}", err=True)
    if export_failures:
        click.echo(f"{len(export_failures)} export{'s' if len(export_failures) > 1 else ''} not written "
                   "(reports kept; fix the cause and rerun with the same --export to write them)", err=True)
    if export_failures or any(r.outcome == "failed" for r in results):
        raise SystemExit(1)


def _export(result, exports) -> list[str]:
    """Write ``result``'s report in each format (a skipped report only where the file is
    missing); every export that cannot be written is one line, the rest go on."""
    from ..errors import ApplianceError
    from ..export import default_output, export_report

    if not exports or not result.report:
        return []
    report_json = Path(result.report).with_suffix(".json")
    if not report_json.is_file():
        return []
    failures = []
    for fmt in exports:
        if result.outcome == "skipped" and default_output(report_json, fmt).is_file():
            continue
        try:
            result.exports[fmt] = str(export_report(report_json, fmt))
        except ApplianceError as exc:
            failures.append(f"export {fmt} of {result.id}: {exc.one_line()}")
    return failures


def _flags(profile, backend, corpus_name, searxng_url, model_name, no_cache, exports=()) -> str:
    import shlex

    parts = []
    for flag, value in (("--profile", profile), ("--backend", backend), ("--corpus", corpus_name),
                        ("--searxng-url", searxng_url), ("--model", model_name)):
        if value:
            parts += [flag, shlex.quote(value)]
    if no_cache:
        parts.append("--no-cache")
    for fmt in exports:
        parts += ["--export", fmt]
    return " ".join(parts)


COMMANDS = [batch]
