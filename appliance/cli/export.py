"""`appliance export`: a report JSON as HTML, PDF, BibTeX, RIS or CSL-JSON for its readers."""

from __future__ import annotations

import sys

import click

from ..export import FORMATS, PDF_ENGINES

FORMAT = click.Choice(FORMATS)
PDF_ENGINE = click.Choice(PDF_ENGINES)


@click.command(name="export")
@click.argument("report", type=click.Path(dir_okay=True))
@click.option("--format", "fmt", type=FORMAT, required=True,
              help="html (one self-contained page), pdf (that page printed), or the cited sources as "
                   "bibtex, ris or csl-json.")
@click.option("-o", "--output", "output", type=click.Path(), default=None,
              help="File to write (default: beside REPORT, e.g. report.html); '-' prints a text format on stdout.")
@click.option("--pdf-engine", type=PDF_ENGINE, default="auto", show_default=True,
              help="PDF renderer: WeasyPrint, else headless Chromium (auto), or one of them only.")
def export(report, fmt, output, pdf_engine):
    """Export REPORT (the .json that `appliance research` writes) for its readers.

    Prints the path of the file written. The HTML page loads nothing from anywhere: styles
    are inline, and each citation [n] shows its verbatim quote, source and page on hover or
    keyboard focus.
    """
    from ..errors import UsageError
    from ..export import export_report, load_report, render

    if output == "-":
        if fmt == "pdf":
            raise UsageError("a PDF is not printed on a terminal", hint="name a file with -o FILE.pdf")
        sys.stdout.write(render(load_report(report), fmt, pdf_engine).decode("utf-8"))
        return
    click.echo(str(export_report(report, fmt, output, pdf_engine)))


COMMANDS = [export]
