"""`appliance search` and `appliance corpus ...`: the search backends from the shell."""

from __future__ import annotations

import json

import click

from ..contracts import BACKENDS
from .common import app

BACKEND = click.Choice(BACKENDS)
# Skipped files are listed on stderr up to this many; the rest are counted.
_SHOW_SKIPPED = 20


def _echo_json(data) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2))


def _log(message: str) -> None:
    click.echo(message, err=True)


@click.command()
@click.argument("query")
@click.option("--backend", type=BACKEND, default=None,
              help="auto (SearXNG if a URL is configured, else the local corpus), searxng or corpus.")
@click.option("--corpus", "corpus_name", default=None, metavar="NAME",
              help="Local corpus to search (default: search.corpus, 'default').")
@click.option("--searxng-url", default=None, metavar="URL",
              help="Base URL of your SearXNG instance (overrides searxng.url and APPLIANCE_SEARXNG_URL).")
@click.option("--limit", type=click.IntRange(1, 100), default=None,
              help="Hits to show (default: search.results_per_query).")
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the hits as JSON.")
def search(query, backend, corpus_name, searxng_url, limit, as_json):
    """Search QUERY with the configured backend and print the hits.

    Useful to check a SearXNG instance or a corpus before a research run. Engines that
    SearXNG reports as unresponsive are listed on stderr.
    """
    from ..report import plain_line
    from ..sources.base import make_backend

    settings = app().settings(search__backend=backend, search__corpus=corpus_name, searxng__url=searxng_url)
    chosen = make_backend(settings)
    hits = chosen.search(query, limit or settings.search.results_per_query)
    unresponsive = dict(chosen.unresponsive_engines)
    if as_json:
        _echo_json({"query": query, "backend": chosen.name, "hits": [h.model_dump() for h in hits],
                    "unresponsive_engines": unresponsive})
    else:
        _print_hits(hits, chosen.name)
    for engine, reason in sorted(unresponsive.items()):
        _log(f"warning: SearXNG engine {plain_line(engine)} did not respond "
             f"({plain_line(reason) or 'no reason given'})")


def _print_hits(hits, backend_name: str) -> None:
    """Hits as text; what SearXNG or a page sent is made one inert line (no terminal escapes)."""
    from ..report import plain_line

    if not hits:
        _log(f"no hits from {backend_name}")
        return
    for hit in hits:
        click.echo(f"{hit.rank:>3}. {plain_line(hit.title) or '(no title)'}")
        click.echo(f"     {plain_line(hit.url)}")
        snippet = plain_line(hit.snippet)
        snippet = snippet if len(snippet) <= 200 else snippet[:197] + "..."
        if snippet:
            click.echo(f"     {snippet}")
        click.echo(f"     [{plain_line(hit.engine or backend_name)}]")


@click.group()
def corpus():
    """Manage local corpora: the search backend when no SearXNG is configured.

    Documents are chunked, embedded with the packaged MiniLM model and stored in LanceDB
    under the state folder, with a full-text index; search fuses both (hybrid).
    """


@corpus.command("add")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--name", default="default", show_default=True, help="Corpus to add to (created if new).")
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the report as JSON.")
@click.option("--prune", is_flag=True, default=False,
              help="Also remove the passages of files that are gone from the given folders.")
def corpus_add(paths, name, as_json, prune):
    """Add files and folders to a corpus: .html/.htm, .md, .txt, .jsonl, .pdf, .docx, .pptx,
    .xlsx, .csv/.tsv, .epub, .eml, .mbox, .odt and .rtf.

    Folders are read recursively. A PDF page, a slide, a block of spreadsheet rows, an e-book
    chapter and an e-mail message are each a passage of their own, cited by that place
    ("report.pdf, p. 17"). JSON-lines records are {id?, title, text, url?}; a record's id
    becomes its passage URL corpus://NAME/ID. A file whose content is unchanged is not read
    again, a changed one has its passages replaced, so adding the same folder again is cheap.
    What cannot be read is listed with its reason; when nothing at all can be read, the command
    fails (exit 2) saying why.
    """
    from ..errors import UsageError
    from ..sources.corpus import Corpus

    settings = app().settings()
    report = Corpus(settings, name).add(list(paths), progress=_log, prune=prune)
    if report.documents == 0 and not (report.files_unchanged or report.files_updated or report.files_removed):
        raise UsageError(f"nothing added to corpus {name!r}: {_why_nothing(report.skipped)}",
                         hint='corpus add reads documents (.pdf, .docx, .pptx, .xlsx, .csv, .epub, .eml, .mbox, '
                              '.odt, .rtf), .html/.htm, .md, .txt, and .jsonl with one record a line, '
                              '{"text": ..., "title"?, "id"?, "url"?}')
    for line in report.skipped[:_SHOW_SKIPPED]:
        _log(f"skipped: {line}")
    if len(report.skipped) > _SHOW_SKIPPED:
        _log(f"skipped: ... and {len(report.skipped) - _SHOW_SKIPPED} more")
    if as_json:
        _echo_json(report.as_dict())
        return
    click.echo(f"corpus {name}: {report.files} files ({report.files_added} added, {report.files_updated} updated, "
               f"{report.files_unchanged} unchanged, {report.files_removed} removed); "
               f"{report.added + report.updated + report.unchanged} documents ({report.added} added, "
               f"{report.updated} updated, {report.unchanged} unchanged); {_skip_summary(report.skipped)}; "
               f"{report.chunks_added} chunks indexed in {report.seconds:.1f} s")


def _skip_summary(skipped: list[str], shown: int = 3) -> str:
    """``N skipped`` with the commonest reasons: ``3 skipped (2 empty file, 1 not a DOCX)``."""
    if not skipped:
        return "0 skipped"
    kinds: dict[str, int] = {}
    for line in skipped:
        kind = line.split(": ", 1)[-1].split(" (", 1)[0].strip()
        kinds[kind] = kinds.get(kind, 0) + 1
    common = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
    listed = ", ".join(f"{count} {kind}" for kind, count in common[:shown])
    more = f", {sum(c for _, c in common[shown:])} other" if len(common) > shown else ""
    return f"{len(skipped)} skipped ({listed}{more})"


def _why_nothing(skipped: list[str], shown: int = 3) -> str:
    """The first reasons records were skipped, for the one-line error."""
    if not skipped:
        return "no file with text to read"
    more = f"; and {len(skipped) - shown} more" if len(skipped) > shown else ""
    return f"{len(skipped)} skipped: " + "; ".join(skipped[:shown]) + more


@corpus.command("list")
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the names as JSON.")
def corpus_list(as_json):
    """List the corpora in the state folder."""
    from ..sources.corpus import list_corpora

    names = list_corpora(app().settings())
    if as_json:
        _echo_json(names)
    elif not names:
        _log("no corpora yet: add one with `appliance corpus add PATH`")
    else:
        for name in names:
            click.echo(name)


@corpus.command("stats")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the figures as JSON.")
def corpus_stats_cmd(name, as_json):
    """Documents, chunks, embedding model and index state of corpus NAME."""
    from ..sources.corpus import corpus_stats

    stats = corpus_stats(app().settings(), name)
    if as_json:
        _echo_json(stats.as_dict())
        return
    for key, value in stats.as_dict().items():
        click.echo(f"{key}: {value}")


@corpus.command("remove")
@click.argument("name")
def corpus_remove(name):
    """Delete corpus NAME and its index (its source files are not touched)."""
    from ..sources.corpus import remove_corpus

    remove_corpus(app().settings(), name)
    click.echo(f"removed corpus {name}")


@corpus.command("serve")
@click.argument("name")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. The default answers this machine only; another address "
                   "lets anyone who reaches it read the corpus.")
@click.option("--port", type=click.IntRange(0, 65535), default=8890, show_default=True,
              help="Port to listen on (0: any free port; the URL is printed).")
@click.option("--base-url", default="", metavar="URL",
              help="Base of the passage URLs in results (default: the host and port the client used).")
def corpus_serve(name, host, port, base_url):
    """Serve corpus NAME over HTTP for SearXNG (its json_engine) and page fetchers.

    GET /search?q=WORDS&page=N answers {"results": [{"title", "url", "content"}]}, ten a
    page; each result URL (/corpus/NAME/ID) is the passage as an HTML page. Prints the base
    URL on stdout and one line per request on stderr; Ctrl-C stops it. The SearXNG engine
    entry to use is in config/searxng/corpus.yml.
    """
    import signal

    from ..sources.serve import CorpusServer

    server = CorpusServer(app().settings(), name, host=host, port=port, base_url=base_url, log=_log, warm_up=True)
    if host not in ("127.0.0.1", "localhost", "::1"):
        _log(f"warning: listening on {host}: anyone who can reach this address can search and read corpus {name}")
    click.echo(server.url)
    _log(f"serving corpus {name} at {server.url} (search: /search?q=WORDS&page=N, passages: /corpus/{name}/ID); "
         "Ctrl-C stops")

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    _log("stopped")


COMMANDS = [search, corpus]
