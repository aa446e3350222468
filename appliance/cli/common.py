"""Shared CLI plumbing: lazily loaded settings carried on the click context."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import click

from ..config import Settings, SettingsRecipe


@dataclass
class AppContext:
    config_file: str | None = None
    _settings: dict = field(default_factory=dict)

    def recipe(self, profile: str | None = None, **overrides: Any) -> SettingsRecipe:
        """How to build settings with CLI overrides given as ``section__key=value`` (None: not given)."""
        flat = tuple((k.replace("__", "."), v) for k, v in overrides.items() if v is not None)
        return SettingsRecipe(self.config_file, profile, flat)

    def settings(self, profile: str | None = None, **overrides: Any) -> Settings:
        """Settings with CLI overrides given as ``section__key=value`` (None means not given)."""
        return self.recipe(profile, **overrides).build()


def app(ctx: click.Context | None = None) -> AppContext:
    ctx = ctx or click.get_current_context()
    obj = ctx.find_object(AppContext)
    if obj is None:
        obj = AppContext()
        ctx.obj = obj
    return obj
