"""`appliance checks`: the pipeline's checks, what each does, its settings and whether it is on."""

from __future__ import annotations

import json

import click

from .common import app


def _setting_value(settings, name: str):
    """The value of a check's setting: a settings key (section.key) or a module constant."""
    import importlib

    section, key = name.split(".", 1)
    if section in settings.data:
        return settings.get(name)
    module = importlib.import_module(f"appliance.pipeline.{section}")
    return getattr(module, key)


@click.command(name="checks")
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the registry as JSON.")
def checks(as_json):
    """List the pipeline's checks: every rule that drops, rewrites, demotes or redraws something.

    Switch one off with `[checks] disabled = ["ID"]` in the config file (or
    APPLIANCE_CHECKS_DISABLED=ID,ID); measure what one earns with `appliance eval --without ID`.
    A run's stats count each check by id; its run folder's checks.jsonl says what each fired on.
    """
    from ..pipeline.checks import CHECKS

    settings = app().settings()
    disabled = set(settings.checks.disabled)
    rows = [{"id": c.id, "phase": c.phase, "on": c.id not in disabled, "switchable": c.switchable,
             "does": c.does, "decided_by": f"appliance.pipeline.{c.decides.replace(':', '.')}",
             "settings": {name: _setting_value(settings, name) for name in c.settings}} for c in CHECKS]
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    for row in rows:
        state = "on" if row["on"] else "OFF"
        if not row["switchable"]:
            state += ", always"
        tuned = ", ".join(f"{k} = {v}" for k, v in row["settings"].items())
        click.echo(f"{row['id']:<26} {row['phase']:<7} {state:<11} {row['does']}"
                   + (f" [{tuned}]" if tuned else ""))
    click.echo(f"{len(rows)} checks, {sum(not r['on'] for r in rows)} switched off", err=True)


COMMANDS = [checks]
