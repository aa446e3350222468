"""Shared CLI plumbing: lazily loaded settings carried on the click context."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import click

from ..config import Settings, load_settings


@dataclass
class AppContext:
    config_file: str | None = None
    _settings: dict = field(default_factory=dict)

    def settings(self, profile: str | None = None, **overrides: Any) -> Settings:
        """Settings with CLI overrides given as ``section__key=value`` (None means not given)."""
        flat = {k.replace("__", "."): v for k, v in overrides.items() if v is not None}
        return load_settings(self.config_file, profile=profile, overrides=flat)


def app(ctx: click.Context | None = None) -> AppContext:
    ctx = ctx or click.get_current_context()
    obj = ctx.find_object(AppContext)
    if obj is None:
        obj = AppContext()
        ctx.obj = obj
    return obj
