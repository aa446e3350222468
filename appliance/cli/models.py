"""`appliance models ...`: the model manifest from the shell (list, add, remove, verify)."""

from __future__ import annotations

import json
from typing import Any
from pathlib import Path

import click

from ..errors import ApplianceError, ModelError
from ..llm.manifest import (ROLES, HashCache, Manifest, check_model_file, load_manifest_for,
                            register_model, remove_model, resolve_model)
from .common import app


def _serves(manifest: Manifest, settings) -> dict[str, list[str]]:
    """Model name -> roles it serves under the current settings (config may reassign roles)."""
    served: dict[str, list[str]] = {}
    for role in ROLES:
        try:
            served.setdefault(resolve_model(settings, role, manifest).name, []).append(role)
        except ApplianceError:
            continue
    return served


def _size_text(size: int | None) -> str:
    if size is None:
        return "-"
    return f"{size / 1e6:.0f} MB" if size >= 1e6 else f"{size} B"


def _status(manifest: Manifest, entry) -> tuple[str, int | None]:
    path = manifest.path_of(entry)
    try:
        size = path.stat().st_size
    except OSError:
        return "missing", None
    if entry.size is not None and size != entry.size:
        return "wrong size", size
    return "present", size


@click.group("models")
def models() -> None:
    """The local GGUF models: models/models.toml (set models.manifest to use another file).

    Each model has a name, a file, its sha256, its context length, its chat format and the
    roles it serves (planner, extractor, verifier, writer). `make models` fetches the
    default model; `appliance models add` registers your own.
    """


@models.command("list")
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the models as JSON.")
def list_models(as_json: bool) -> None:
    """List the manifest's models: file, size, roles served, context, present or missing.

    Fast: files are not hashed here (`appliance models verify` does that). The roles column
    shows what each model serves under the current settings ([models] may reassign roles).
    """
    settings = app().settings()
    manifest = load_manifest_for(settings)
    served = _serves(manifest, settings)
    rows: list[dict[str, Any]] = []
    for entry in manifest.models:
        if entry.remote is not None:
            rows.append({"name": entry.name, "file": f"{entry.remote.base_url} ({entry.remote.model})",
                         "size": None, "roles": served.get(entry.name, []),
                         "n_ctx_train": entry.n_ctx_train, "chat_format": "server",
                         "status": "remote"})
            continue
        status, size = _status(manifest, entry)
        rows.append({"name": entry.name, "file": str(manifest.path_of(entry)), "size": size,
                     "roles": served.get(entry.name, []), "n_ctx_train": entry.n_ctx_train,
                     "chat_format": entry.chat_format or "gguf", "status": status})
    if as_json:
        click.echo(json.dumps({"manifest": str(manifest.path), "models": rows}, indent=2))
        return
    if not rows:
        click.echo(f"no models in {manifest.path}; `make models` or `appliance models add PATH`", err=True)
        return
    table = [("NAME", "FILE", "SIZE", "ROLES", "CTX", "STATUS")]
    table += [(r["name"], r["file"], _size_text(r["size"]), ",".join(r["roles"]) or "-",
               str(r["n_ctx_train"]), r["status"]) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    unserved = [role for role in ROLES if not any(role in r["roles"] for r in rows)]
    if unserved:
        click.echo(f"warning: no model serves {', '.join(unserved)}", err=True)


@models.command("add")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--name", default=None, help="Name for the model (default: from the file name).")
@click.option("--roles", default="", metavar="ROLE,...",
              help="Roles the model takes over, comma-separated: planner,extractor,verifier,writer. "
                   "Other models stop listing them.")
@click.option("--chat-format", default="", metavar="FORMAT",
              help="llama-cpp-python chat format (e.g. chatml); default: the template inside the GGUF.")
@click.option("--copy", "copy_file", is_flag=True, default=False,
              help="Copy the file into the manifest's folder instead of registering it where it lies.")
def add_model(path: Path, name: str | None, roles: str, chat_format: str, copy_file: bool) -> None:
    """Register the GGUF file PATH in the manifest.

    The file is checked first (GGUF magic, complete header and tensor data), hashed, and its
    context length and chat template are read from its metadata. By default the manifest
    stores the file's absolute path (no copy of a multi-GB file); with --copy the file is
    copied into the manifest's folder and stored by name, so the folder is self-contained.
    """
    settings = app().settings()
    manifest = load_manifest_for(settings)
    entry = register_model(manifest, path, name=name, roles=roles.split(",") if roles else (),
                           chat_format=chat_format, copy=copy_file,
                           hashes=HashCache.for_settings(settings))
    click.echo(f"added {entry.name}: {manifest.path_of(entry)} (context {entry.n_ctx_train}, "
               f"sha256 {entry.sha256[:12]}..., roles: {','.join(entry.roles) or 'none'})")


@models.command("remove")
@click.argument("name")
def remove(name: str) -> None:
    """Remove the model NAME from the manifest (its file is left where it is)."""
    settings = app().settings()
    entry = remove_model(load_manifest_for(settings), name)
    click.echo(f"removed {entry.name} from the manifest; {entry.file} was not deleted")


@models.command("verify")
@click.argument("names", nargs=-1)
def verify(names: tuple[str, ...]) -> None:
    """Check every model's file (or only NAMES): present, GGUF, complete, sha256 as listed.

    Always rehashes the files (and refreshes the hash cache that loading uses). Exits
    non-zero when any file is missing or wrong.
    """
    settings = app().settings()
    manifest = load_manifest_for(settings)
    entries = [manifest.get(n) for n in names] if names else manifest.models
    if not entries:
        raise ModelError(f"no models in {manifest.path}", hint="`make models` or `appliance models add PATH`")
    hashes = HashCache.for_settings(settings)
    failures: list[ApplianceError] = []
    for entry in entries:
        if entry.is_remote:
            click.echo(f"skip  {entry.name}  served by a server (`appliance doctor` probes it)")
            continue
        try:
            check_model_file(manifest, entry, hashes=hashes, rehash=True)
        except ApplianceError as exc:
            failures.append(exc)
            click.echo(f"FAIL  {entry.name}  {exc.one_line()}")
        else:
            click.echo(f"ok    {entry.name}  {manifest.path_of(entry)}  sha256 {entry.sha256[:12]}...")
    if len(failures) == 1:
        raise failures[0]
    if failures:
        raise ModelError(f"{len(failures)} of {len(entries)} models failed verification; first: "
                         f"{failures[0].message}", hint=failures[0].hint)


COMMANDS = [models]
