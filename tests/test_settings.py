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


@pytest.mark.parametrize("key, value, named", [
    ("APPLIANCE_PIPELINE_VOTES", "0", "pipeline.votes"),
    ("APPLIANCE_PIPELINE_PLAN_DRAWS", "-2", "pipeline.plan_draws"),
    ("APPLIANCE_PIPELINE_VERIFY_TOP", "0", "pipeline.verify_top"),
    ("APPLIANCE_PIPELINE_GAP_QUESTIONS", "-1", "pipeline.gap_questions"),
    ("APPLIANCE_PIPELINE_RELEVANCE_THRESHOLD", "1.5", "pipeline.relevance_threshold"),
    ("APPLIANCE_LLM_TEMPERATURE", "-0.1", "llm.temperature"),
    ("APPLIANCE_LLM_TOP_P", "0", "llm.top_p"),
    ("APPLIANCE_FETCH_BUDGET", "0", "fetch.budget"),
    ("APPLIANCE_FETCH_TOTAL_TIMEOUT", "0", "fetch.total_timeout"),
])
def test_a_number_out_of_its_range_is_one_clear_error(key, value, named):
    """A count that must be at least one, a share above one, a negative temperature: each
    would run without a word and give reports that confirm nothing or read nothing."""
    with pytest.raises(ConfigError) as info:
        load_settings(env={key: value})
    line = info.value.one_line()
    assert named in line and value.lstrip("-").rstrip("0").rstrip(".") in line and "\n" not in line


@pytest.mark.parametrize("env, named", [
    ({"APPLIANCE_PIPELINE_MIN_VALID_VOTES": "4"}, "min_valid_votes (4) is more than votes (3)"),
    ({"APPLIANCE_PIPELINE_VOTES": "1"}, "is more than votes (1)"),
    ({"APPLIANCE_PIPELINE_PROFILE": "quick", "APPLIANCE_PIPELINE_MIN_NODES": "4"},
     "min_nodes (4) is more than max_nodes (3) with profile quick"),
    ({"APPLIANCE_PIPELINE_MIN_NODES": "9"}, "min_nodes (9) is more than max_nodes (6) with profile standard"),
])
def test_settings_that_contradict_each_other_are_one_clear_error(env, named):
    with pytest.raises(ConfigError) as info:
        load_settings(env=env)
    assert named in info.value.one_line()
    assert info.value.one_line().endswith("lower the one or raise the other")


def test_the_edges_of_each_range_are_accepted():
    settings = load_settings(env={"APPLIANCE_PIPELINE_GAP_QUESTIONS": "0", "APPLIANCE_PIPELINE_RELEVANCE_THRESHOLD": "0",
                                  "APPLIANCE_LLM_TEMPERATURE": "0", "APPLIANCE_PIPELINE_VOTES": "1",
                                  "APPLIANCE_PIPELINE_MIN_VALID_VOTES": "1", "APPLIANCE_PIPELINE_REFUTATIONS_TO_KILL": "1"})
    assert settings.pipeline.gap_questions == 0 and settings.pipeline.votes == 1
