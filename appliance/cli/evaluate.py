"""`appliance eval`: scores on a question set with its own corpus, modes side by side."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..contracts import BACKENDS, EVAL_MODES, PROFILES
from .research import run_settings


@click.command(name="eval")
@click.argument("dataset_dir", type=click.Path(file_okay=False))
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Answer only the first N questions.")
@click.option("--skip", type=click.IntRange(min=0), default=0, show_default=True,
              help="Leave out the first N questions (with --limit: questions N+1 to N+limit).")
@click.option("--mode", "modes", multiple=True, type=click.Choice(EVAL_MODES),
              help="Mode to run (repeat for several; default: all of them).")
@click.option("--profile", type=click.Choice(PROFILES), default=None,
              help="Profile of the pipeline mode.")
@click.option("--model", "model_name", default=None, help="Manifest model to use for every role.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Output folder (default: reports/eval-<dataset>-<profile>).")
@click.option("--force", is_flag=True, default=False, help="Redo questions already answered in the output folder.")
@click.option("--no-cache", is_flag=True, default=False, help="Bypass the model-call cache.")
@click.option("--backend", type=click.Choice([b for b in BACKENDS if b != "auto"]), default="corpus", show_default=True,
              help="Search the dataset's corpus directly, or through a SearXNG in front of it "
                   "(`appliance corpus serve` + config/searxng/corpus.yml; eval does not start them).")
@click.option("--searxng-url", default=None, metavar="URL",
              help="SearXNG to search with --backend searxng (default: searxng.url).")
@click.option("--without", "without", multiple=True, metavar="CHECK",
              help="Switch this check off in every mode (repeat for several; `appliance checks` lists them). "
                   "The answers go to a folder of their own (with --out: rows of their own, reports under "
                   "reports/without-CHECK); calls whose prompts did not change replay.")
def evaluate(dataset_dir, limit, skip, modes, profile, model_name, out_dir, force, no_cache, backend, searxng_url,
             without):
    """Answer DATASET_DIR's questions in each mode and score them.

    DATASET_DIR holds corpus.jsonl and questions.jsonl (see ../shared/bench/musique-dev).
    The corpus is indexed once into its own local corpus. Writes eval.md (the table, also
    printed), results.jsonl (one line per question and mode) and eval.png (a bar chart).
    The table and chart show every mode the output folder holds for these questions, so modes
    run by separate commands into one --out are compared side by side. Rerunning resumes:
    answered questions are kept, model calls replay from the cache.

    With --backend searxng every mode that searches goes through SearXNG and fetches the
    passage pages over HTTP; their URLs map back to passage ids, so passage recall still
    counts. The corpus server's host must be in fetch.allow_hosts.
    """
    from ..evaluation.output import (columns, folder_rows, paired_lines, render_chart, render_table,
                                     summarize_columns)
    from ..evaluation.runner import MODES, EvalRun, corpus_name_for, load_dataset
    from ..pipeline.parts import open_run_parts

    dataset = load_dataset(dataset_dir, limit, skip)
    corpus = corpus_name_for(dataset)
    settings = run_settings(profile, backend, corpus, searxng_url, model_name, no_cache)
    if without:
        settings = settings.with_overrides(
            {"checks.disabled": sorted(set(settings.checks.disabled) | set(without))}, origin="--without")
    index_dataset(settings, corpus, dataset.corpus_path)
    modes = list(modes) or list(MODES)
    # Results resume by question, mode, profile and model: another backend needs its own folder.
    suffix = ("-searxng" if backend == "searxng" else "") + (
        "-without-" + "+".join(sorted(settings.checks.disabled)) if settings.checks.disabled else "")
    out = Path(out_dir or Path(settings.output.reports_dir) / f"eval-{dataset.name}-{settings.pipeline.profile}{suffix}")
    out.mkdir(parents=True, exist_ok=True)
    models, search, fetcher, embedder = open_run_parts(settings)
    with fetcher:
        if backend == "searxng" and dataset.questions:
            from ..evaluation.searxng import check_serves_dataset

            check_serves_dataset(search, fetcher, dataset.questions[0]["question"], corpus)
        runner = EvalRun(settings, dataset, out, models=models, fetcher=fetcher, embedder=embedder,
                         backend=search, force=force, log=lambda s: click.echo(s, err=True))
        runner.run(modes)
    # Every mode the folder holds for these questions, not only this command's modes.
    grouped = columns(folder_rows(out / "results.jsonl", [q["id"] for q in dataset.questions]))
    table = summarize_columns(grouped)
    rows = [row for column in grouped.values() for row in column]
    models_used = sorted({row.get("model", "") for row in rows}) or [models.label()]
    profiles = sorted({row.get("profile", "") for row in rows if row["mode"] == "pipeline"})
    title = (f"Eval: {dataset.name}, {questions_count(len(dataset.questions))}, model {', '.join(models_used)}"
             + (f", profile {', '.join(profiles)}" if profiles else "")
             + (", search through SearXNG" if backend == "searxng" else ""))
    markdown = render_table(table, title) + paired_lines(grouped)
    (out / "eval.md").write_text(markdown, encoding="utf-8")
    (out / "eval.json").write_text(json.dumps(table, indent=2), encoding="utf-8")
    render_chart(table, out / "eval.png", title)
    click.echo(markdown)
    click.echo(f"wrote {out / 'eval.md'}, {out / 'results.jsonl'}, {out / 'eval.png'}", err=True)


def questions_count(n: int) -> str:
    """ "1 question", "10 questions"."""
    return f"{n} question" + ("" if n == 1 else "s")


def index_dataset(settings, corpus: str, path) -> None:
    """Index a dataset's corpus file into its own corpus. Only a new or changed file is read
    and embedded, and only then does the user hear of indexing; otherwise one line says the
    corpus already holds it."""
    from ..sources.corpus import Corpus

    told: list[bool] = []

    def progress(message: str) -> None:
        if not told:
            click.echo(f"indexing {path} into corpus {corpus} (once; later runs reuse it)...", err=True)
            told.append(True)

    report = Corpus(settings, corpus).add([path], progress=progress)
    if report.added or report.updated:
        click.echo(f"corpus {corpus}: {report.added} passages added, {report.updated} updated "
                   f"in {report.seconds:.0f} s", err=True)
    else:
        click.echo(f"corpus {corpus} holds {path} already ({report.unchanged} passages)", err=True)
    if report.skipped:
        count = len(report.skipped)
        click.echo(f"warning: {count} {'entry' if count == 1 else 'entries'} of {path} not indexed "
                   f"(the first: {report.skipped[0]})", err=True)


@click.command(name="ablate")
@click.argument("dataset_dirs", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Answer only the first N questions.")
@click.option("--skip", type=click.IntRange(min=0), default=0, show_default=True,
              help="Leave out the first N questions (with --limit: questions N+1 to N+limit).")
@click.option("--check", "check_ids", multiple=True, metavar="CHECK",
              help="Switch off only these checks, one at a time (repeat; default: every switchable one).")
@click.option("--profile", type=click.Choice(PROFILES), default=None, help="Profile of the pipeline.")
@click.option("--model", "model_name", default=None, help="Manifest model to use for every role.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Output folder (default: reports/ablate-<profile>).")
def ablate(dataset_dirs, limit, skip, check_ids, profile, model_name, out_dir):
    """Answer each dataset with every check on, then with each check off in turn.

    Prints, per dataset and check, F1 and its paired difference against all checks on (and
    against one retrieval call), supporting-passage recall, seconds and model calls per
    question; writes ablation.md. Rerunning resumes, and a call whose prompt the check did
    not change replays from the cache.
    """
    from ..evaluation.ablation import ablate as run_ablation, render, switchable_checks
    from ..evaluation.runner import corpus_name_for, load_dataset
    from ..pipeline.parts import open_run_parts

    checks = switchable_checks(list(check_ids)) if check_ids else None  # before any work
    datasets = [load_dataset(folder, limit, skip) for folder in dataset_dirs]
    report: list[str] = []
    for dataset in datasets:
        corpus = corpus_name_for(dataset)
        settings = run_settings(profile, "corpus", corpus, None, model_name, False)
        index_dataset(settings, corpus, dataset.corpus_path)
        out = Path(out_dir or Path(settings.output.reports_dir) / f"ablate-{settings.pipeline.profile}") / dataset.name
        out.mkdir(parents=True, exist_ok=True)
        models, search, fetcher, embedder = open_run_parts(settings)
        with fetcher:
            rows = run_ablation(settings, dataset, out, models=models, fetcher=fetcher, embedder=embedder,
                                backend=search, checks=checks,
                                log=lambda s: click.echo(s, err=True))
        report.append(render(rows, f"{dataset.name}, {questions_count(len(dataset.questions))}, "
                                   f"profile {settings.pipeline.profile}, model {models.label()}"))
        (out / "ablation.md").write_text(report[-1], encoding="utf-8")
        click.echo(report[-1])


COMMANDS = [evaluate, ablate]
