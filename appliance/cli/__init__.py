"""The `appliance` command line. Commands live in the modules of this package by subject;
this module holds the group, the shared options and the error boundary."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from .. import __version__
from ..errors import ApplianceError
from .common import AppContext


class ApplianceGroup(click.Group):
    """Turns every ApplianceError into one line on stderr and its exit code: never a traceback.

    Click's own usage errors (unknown option, missing argument, bad value) become one line too,
    naming the command's --help, instead of click's usage block.
    """

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:  # type: ignore[override]
        run = super().main  # click types main() by overloads that *args cannot name
        if not standalone_mode:
            return run(*args, standalone_mode=False, **kwargs)  # type: ignore[call-overload]
        try:
            code = run(*args, standalone_mode=False, **kwargs)  # type: ignore[call-overload]
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()  # no arguments at all: the help is the answer
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx else "appliance"
            message = " ".join(exc.format_message().split())
            click.echo(f"error: {message} (see '{where} --help')", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("interrupted: finished work is on disk; run the same command again to resume", err=True)
            sys.exit(130)
        # Without standalone mode click returns the code of an explicit exit (--help, --version).
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ApplianceError as exc:
            click.echo(f"error: {exc.one_line()}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted: finished work is on disk; run the same command again to resume", err=True)
            sys.exit(130)


@click.group(name="appliance", cls=ApplianceGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="appliance")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="Config file (default: $APPLIANCE_CONFIG, else ./config/appliance.toml if present).")
@click.pass_context
def main(ctx: click.Context, config_file: str | None) -> None:
    """A research appliance that runs entirely on this machine.

    A question goes in; a cited, fact-checked markdown report comes out. Models are local
    GGUF files; search goes to your SearXNG or to a local corpus.
    """
    ctx.obj = AppContext(config_file=config_file)


def _register() -> None:
    """Add each subject's commands: a module lists them in COMMANDS."""
    for name in ("models", "doctor", "sources", "research", "batch", "evaluate", "serve", "export", "checks"):
        module = importlib.import_module(f"{__name__}.{name}")
        for command in module.COMMANDS:
            main.add_command(command)


_register()
