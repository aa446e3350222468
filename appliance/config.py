"""Settings: packaged defaults < profile < config/appliance.toml < APPLIANCE_* env < CLI flags.

Every key must exist in the packaged defaults and keep its type; anything else is a
ConfigError naming the key and the file (or variable) it came from.
"""

from __future__ import annotations

import copy
import os
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .contracts import PROFILES, Backend, Profile
from .errors import ConfigError, StateError
from .questions import pinned_today

DEFAULT_CONFIG_FILE = Path("config") / "appliance.toml"


# Ranges: a count that must be at least one (0 votes would confirm nothing, 0 sources read
# nothing), one that may be zero (0 gap questions turns the round off), a share or cosine
# similarity in [0, 1], a sampling temperature, a time in seconds.
Count = Annotated[int, Field(ge=1)]
Zeroable = Annotated[int, Field(ge=0)]
Share = Annotated[float, Field(ge=0.0, le=1.0)]
Temperature = Annotated[float, Field(ge=0.0, le=2.0)]
Seconds = Annotated[float, Field(gt=0.0)]


class _Section(BaseModel):
    """One [section] of the settings, typed: a misspelt setting in code is an AttributeError
    a type checker sees, not a KeyError at run time."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class StateSettings(_Section):
    home: str


class OutputSettings(_Section):
    reports_dir: str


class ModelsSettings(_Section):
    manifest: str
    planner: str
    extractor: str
    verifier: str
    writer: str


class LlmSettings(_Section):
    n_ctx: Annotated[int, Field(ge=256)]
    n_threads: Zeroable
    n_batch: Count
    temperature: Temperature
    vote_temperature: Temperature
    answer_temperature: Temperature
    top_p: Annotated[float, Field(gt=0.0, le=1.0)]
    seed: int
    max_retries: Zeroable
    max_output_tokens: Count
    cache: bool
    keep_prefixes: bool


class EmbedSettings(_Section):
    model_path: str
    batch_size: Count
    threads: Zeroable


class SearchSettings(_Section):
    backend: Backend
    corpus: str
    results_per_query: Count


class SearxngSettings(_Section):
    url: str
    timeout: Seconds
    categories: str
    language: str
    time_range: str


class FetchSettings(_Section):
    budget: Count
    connect_timeout: Seconds
    read_timeout: Seconds
    total_timeout: Seconds
    max_bytes: Count
    max_redirects: Zeroable
    per_host: Count
    workers: Count
    allow_pdf: bool
    allow_hosts: list[str]
    user_agent: str
    cache: bool


class CorpusSettings(_Section):
    chunk_chars: Annotated[int, Field(ge=100)]
    paragraph_max_chars: Count
    candidates: Count
    rrf_k: Count
    ann_min_rows: Zeroable
    ocr: bool
    ocr_languages: Annotated[str, Field(pattern=r"^[A-Za-z_]+(\+[A-Za-z_]+)*$")]


class PipelineSettings(_Section):
    profile: Profile
    min_nodes: Count
    max_nodes: Count
    hard_max_nodes: Count
    min_queries: Count
    max_queries: Count
    plan_draws: Count
    plan_redraw_temperature: Temperature
    iterations: Count
    sources_per_node: Count
    question_sources: Zeroable
    question_searches: Count
    compared_sources: Zeroable
    claims_per_source: Count
    source_chars: Annotated[int, Field(ge=100)]
    quote_sentences: bool
    restate_claims: bool
    quote_similarity: Annotated[float, Field(gt=0.0, le=1.0)]
    relevance_threshold: Share
    name_check: bool
    dedup_threshold: Share
    verify_top: Count
    votes: Count
    refutations_to_kill: Count
    min_valid_votes: Count
    vote_verbatim: bool
    restate_killed: bool
    gap_questions: Zeroable
    gap_next_search: bool
    answer_chain: bool
    write_report: bool

    @model_validator(mode="after")
    def _consistent(self) -> "PipelineSettings":
        # Each pair is (the smaller, the larger): votes that can never reach min_valid_votes
        # would leave every claim unconfirmed, and say nothing about why.
        for low, high in (("min_nodes", "max_nodes"), ("min_queries", "max_queries"),
                          ("min_valid_votes", "votes"), ("refutations_to_kill", "votes")):
            if getattr(self, low) > getattr(self, high):
                raise ValueError(f"{low} ({getattr(self, low)}) is more than {high} ({getattr(self, high)}) "
                                 f"with profile {self.profile}: lower the one or raise the other")
        return self


class ChecksSettings(_Section):
    disabled: list[str]

    @field_validator("disabled")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        from .pipeline.checks import check_disabled

        return check_disabled(value)
class ClusterSettings(_Section):
    spec: str
    workers: Count
    cores: Zeroable
    memory: str
    walltime: str
    lifetime: str
    lifetime_stagger: str
    queue: str
    account: str
    extra_directives: list[str]
    local_directory: str
    python: str


class SettingsModel(BaseModel):
    """Every section, typed. Its fields must match the packaged defaults.toml key for key
    (checked by the tests): the file documents each knob, this class types it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state: StateSettings
    output: OutputSettings
    models: ModelsSettings
    llm: LlmSettings
    embed: EmbedSettings
    search: SearchSettings
    searxng: SearxngSettings
    fetch: FetchSettings
    corpus: CorpusSettings
    pipeline: PipelineSettings
    checks: ChecksSettings
    cluster: ClusterSettings


@dataclass(frozen=True)
class Settings:
    """The merged settings. Sections are typed attributes: ``settings.fetch.budget``."""

    data: dict[str, dict[str, Any]]
    sources: tuple[str, ...] = ()
    typed: SettingsModel = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            typed = SettingsModel.model_validate(self.data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err.get("loc", ())) or "settings"
            hint: str | None = "see appliance/defaults.toml for the allowed values"
            if err.get("type") == "value_error":
                # A check of our own: its message names the settings and says what to do.
                message = f"settings of [{where}]: {str(err.get('msg', 'invalid')).removeprefix('Value error, ')}"
                hint = None
            else:
                message = f"setting '{where}': {err.get('msg', 'invalid')} (got {err.get('input')!r})"
            raise ConfigError(message, hint=hint) from None
        object.__setattr__(self, "typed", typed)

    @property
    def state(self) -> StateSettings:
        return self.typed.state

    @property
    def output(self) -> OutputSettings:
        return self.typed.output

    @property
    def models(self) -> ModelsSettings:
        return self.typed.models

    @property
    def llm(self) -> LlmSettings:
        return self.typed.llm

    @property
    def embed(self) -> EmbedSettings:
        return self.typed.embed

    @property
    def search(self) -> SearchSettings:
        return self.typed.search

    @property
    def searxng(self) -> SearxngSettings:
        return self.typed.searxng

    @property
    def fetch(self) -> FetchSettings:
        return self.typed.fetch

    @property
    def corpus(self) -> CorpusSettings:
        return self.typed.corpus

    @property
    def pipeline(self) -> PipelineSettings:
        return self.typed.pipeline

    @property
    def checks(self) -> ChecksSettings:
        return self.typed.checks

    @property
    def cluster(self) -> ClusterSettings:
        return self.typed.cluster

    def get(self, dotted: str) -> Any:
        section, key = dotted.split(".", 1)
        return self.data[section][key]

    def with_overrides(self, overrides: Mapping[str, Any], origin: str = "command line") -> "Settings":
        """Return new settings with ``{"section.key": value}`` applied (None values are skipped)."""
        data = copy.deepcopy(self.data)
        for dotted, value in overrides.items():
            if value is None:
                continue
            section, key = _split_key(dotted, origin)
            _check_key(data, section, key, origin)
            data[section][key] = _coerce(value, data[section][key], f"{section}.{key}", origin)
        return Settings(data, self.sources + (origin,))

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return copy.deepcopy(self.data)

    @property
    def home(self) -> Path:
        return Path(self.data["state"]["home"]).expanduser()


def _split_key(dotted: str, origin: str) -> tuple[str, str]:
    if "." not in dotted:
        raise ConfigError(f"setting {dotted!r} from {origin} is not of the form section.key")
    section, key = dotted.split(".", 1)
    return section, key


def _check_key(data: dict, section: str, key: str, origin: str) -> None:
    if section not in data:
        raise ConfigError(f"unknown section [{section}] in {origin}",
                          hint=f"known sections: {', '.join(sorted(data))}")
    if key not in data[section]:
        raise ConfigError(f"unknown key '{section}.{key}' in {origin}",
                          hint=f"known keys of [{section}]: {', '.join(sorted(data[section]))}")


def _type_name(value: Any) -> str:
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string",
            list: "a list"}.get(type(value), type(value).__name__)


def _coerce(value: Any, default: Any, key: str, origin: str) -> Any:
    """Check ``value`` against the type of the default; parse strings from the environment."""
    want = type(default)
    if isinstance(value, str) and want is not str:
        return _parse_text(value, default, key, origin)
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if want is bool and not isinstance(value, bool):
        raise ConfigError(f"'{key}' in {origin} must be {_type_name(default)}, got {value!r}")
    if want is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"'{key}' in {origin} must be {_type_name(default)}, got {value!r}")
    if not isinstance(value, want):
        raise ConfigError(f"'{key}' in {origin} must be {_type_name(default)}, got {value!r}")
    return value


def _parse_text(text: str, default: Any, key: str, origin: str) -> Any:
    want = type(default)
    try:
        if want is bool:
            low = text.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(text)
        if want is int:
            return int(text.strip())
        if want is float:
            return float(text.strip())
        if want is list:
            return [part.strip() for part in text.split(",") if part.strip()]
    except ValueError:
        pass
    raise ConfigError(f"'{key}' in {origin} must be {_type_name(default)}, got {text!r}")


def _merge_layer(data: dict, layer: Mapping[str, Any], origin: str) -> None:
    for section, values in layer.items():
        if section == "profiles":
            continue
        if not isinstance(values, Mapping):
            raise ConfigError(f"'{section}' in {origin} must be a [section] table")
        for key, value in values.items():
            _check_key(data, section, key, origin)
            data[section][key] = _coerce(value, data[section][key], f"{section}.{key}", origin)


def _merge_profiles(profiles: dict, layer: Mapping[str, Any], base: dict, origin: str) -> None:
    for name, sections in (layer.get("profiles") or {}).items():
        if name not in PROFILES:
            raise ConfigError(f"unknown profile [profiles.{name}] in {origin}",
                              hint=f"profiles are {', '.join(PROFILES)}")
        target = profiles.setdefault(name, {})
        for section, values in sections.items():
            for key, value in values.items():
                _check_key(base, section, key, f"{origin} [profiles.{name}]")
                target.setdefault(section, {})[key] = _coerce(
                    value, base[section][key], f"profiles.{name}.{section}.{key}", origin)


def _read_toml(path: Path) -> dict:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist",
                          hint="create it or unset APPLIANCE_CONFIG / --config") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}",
                          hint="fix the syntax at the position named") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None


def packaged_defaults() -> dict:
    text = resources.files("appliance").joinpath("defaults.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def load_settings(config_file: str | Path | None = None, profile: str | None = None,
                  env: Mapping[str, str] | None = None,
                  overrides: Mapping[str, Any] | None = None) -> Settings:
    """Build the settings from every layer.

    ``config_file`` defaults to $APPLIANCE_CONFIG, else ./config/appliance.toml when it exists.
    ``profile`` defaults to the (merged) ``pipeline.profile``.
    """
    env = os.environ if env is None else env
    raw_defaults = packaged_defaults()
    data = {k: dict(v) for k, v in raw_defaults.items() if k != "profiles"}
    profiles: dict = {}
    _merge_profiles(profiles, raw_defaults, data, "packaged defaults")
    sources = ["packaged defaults"]

    user_layer: dict = {}
    path = Path(config_file) if config_file else (Path(env["APPLIANCE_CONFIG"]) if env.get("APPLIANCE_CONFIG") else None)
    if path is None and DEFAULT_CONFIG_FILE.is_file():
        path = DEFAULT_CONFIG_FILE
    if path is not None:
        user_layer = _read_toml(path)
        _merge_profiles(profiles, user_layer, data, str(path))
        sources.append(str(path))

    env_layer = _env_layer(data, env)
    chosen, origin = _chosen_profile(profile, overrides, env_layer, user_layer, path, data)
    if chosen not in PROFILES:
        raise ConfigError(f"unknown profile {chosen!r} in 'pipeline.profile' from {origin}",
                          hint=f"use one of {', '.join(PROFILES)}")
    _merge_layer(data, profiles.get(chosen, {}), f"profile {chosen}")
    data["pipeline"]["profile"] = chosen
    if path is not None:
        _merge_layer(data, user_layer, str(path))
        data["pipeline"]["profile"] = chosen
    for section, values in env_layer.items():
        for key, (value, var) in values.items():
            data[section][key] = _coerce(value, data[section][key], f"{section}.{key}", f"environment variable {var}")
    data["pipeline"]["profile"] = chosen
    if env.get("APPLIANCE_HOME"):
        data["state"]["home"] = env["APPLIANCE_HOME"]
        sources.append("APPLIANCE_HOME")
    settings = Settings(data, tuple(sources))
    if overrides:
        settings = settings.with_overrides({k: v for k, v in overrides.items() if k != "pipeline.profile"})
    return settings


def _chosen_profile(profile, overrides, env_layer, user_layer, path, data) -> tuple[Any, str]:
    """The profile the layers ask for, with where it came from (for the error message)."""
    if profile:
        return profile, "the command line"
    if (overrides or {}).get("pipeline.profile"):
        return overrides["pipeline.profile"], "the command line"
    if "profile" in env_layer.get("pipeline", {}):
        value, var = env_layer["pipeline"]["profile"]
        return value, f"environment variable {var}"
    if (user_layer.get("pipeline") or {}).get("profile"):
        return user_layer["pipeline"]["profile"], str(path)
    return data["pipeline"]["profile"], "packaged defaults"


# Variables with the APPLIANCE_ prefix that are not APPLIANCE_<SECTION>_<KEY> settings.
_ENV_NOT_SETTINGS = frozenset({"APPLIANCE_HOME", "APPLIANCE_CONFIG", "APPLIANCE_TODAY"})


def _env_layer(data: dict, env: Mapping[str, str]) -> dict[str, dict[str, tuple[str, str]]]:
    found: dict[str, dict[str, tuple[str, str]]] = {}
    known: set[str] = set(_ENV_NOT_SETTINGS)
    for section, values in data.items():
        for key in values:
            var = f"APPLIANCE_{section}_{key}".upper()
            known.add(var)
            if var in env:
                found.setdefault(section, {})[key] = (env[var], var)
    # A misspelt variable would otherwise be ignored without a word, as an unknown key in a
    # file is not.
    unknown = sorted(var for var in env if var.startswith("APPLIANCE_") and var not in known)
    pinned_today(env)  # a pinned date that is no date fails before anything runs
    if unknown:
        raise ConfigError(f"unknown setting in environment variable {unknown[0]}",
                          hint="settings are APPLIANCE_<SECTION>_<KEY> for a key of the defaults file, "
                               "e.g. APPLIANCE_FETCH_BUDGET; unset it or fix its name")
    return found


def state_dir(settings: Settings, *parts: str, create: bool = True) -> Path:
    """A folder inside the state folder, created on demand, with a clear error when it cannot be."""
    path = settings.home.joinpath(*parts)
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"cannot create state folder {path}: {exc.strerror}",
                             hint="set APPLIANCE_HOME to a writable folder") from None
    return path


@dataclass(frozen=True)
class SettingsRecipe:
    """How to build settings (config file, profile, flag overrides): picklable, so batch worker
    processes and per-question profiles rebuild exactly the user's settings."""

    config_file: str | None = None
    profile: str | None = None
    overrides: tuple[tuple[str, Any], ...] = ()

    def build(self, profile: str | None = None) -> Settings:
        return load_settings(self.config_file, profile=profile or self.profile,
                             overrides=dict(self.overrides))
