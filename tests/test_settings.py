"""Typed settings: the section models and the packaged defaults file agree key for key and
type for type, and a value outside a setting's allowed set is one clear error."""

from __future__ import annotations

import tomllib
from importlib import resources
from typing import get_args, get_origin

import pytest

from appliance.config import SettingsModel, load_settings
from appliance.errors import ConfigError


def _defaults() -> dict:
    return tomllib.loads(resources.files("appliance").joinpath("defaults.toml").read_text(encoding="utf-8"))


def _python_type(annotation):
    origin = get_origin(annotation)
    if origin is list:
        return list
    if origin is not None and get_args(annotation) and all(isinstance(a, str) for a in get_args(annotation)):
        return str  # a Literal of strings
    return annotation


def test_every_default_has_a_typed_field_and_every_field_a_default():
    defaults = {k: v for k, v in _defaults().items() if k != "profiles"}
    sections = SettingsModel.model_fields
    assert set(sections) == set(defaults)
    for name, values in defaults.items():
        fields = sections[name].annotation.model_fields
        assert set(fields) == set(values), name
        for key, value in values.items():
            want = _python_type(fields[key].annotation)
            assert isinstance(value, want) and not (want is int and isinstance(value, bool)), (name, key)


def test_profiles_only_name_known_settings():
    defaults = _defaults()
    for profile, sections in defaults["profiles"].items():
        for section, values in sections.items():
            assert set(values) <= set(SettingsModel.model_fields[section].annotation.model_fields), (profile, section)


def test_sections_are_typed_models():
    settings = load_settings(env={})
    assert settings.fetch.budget == 15 and isinstance(settings.llm.temperature, float)
    with pytest.raises(AttributeError):
        settings.fetch.budgett  # noqa: B018 - a misspelt setting fails at once


@pytest.mark.parametrize("key, value", [("APPLIANCE_SEARCH_BACKEND", "bing"),
                                        ("APPLIANCE_SEARCH_BACKEND", "")])
def test_a_value_outside_the_allowed_set_is_one_clear_error(key, value, tmp_path):
    with pytest.raises(ConfigError) as info:
        load_settings(env={key: value})
    line = info.value.one_line()
    assert "search.backend" in line and "\n" not in line
