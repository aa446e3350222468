"""The parts a run needs, loaded and checked before any work: an engine per model role, the
search backend, the fetcher and the embedder. A missing corpus, model file or too small a
context fails here in one line, never part-way through a run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config import Settings
from ..contracts import ROLES
from ..llm.protocol import StructuredModel
from . import prompts

if TYPE_CHECKING:
    from ..llm.engine import ModelPool

ACCOUNTING_FIELDS = {"calls": "calls", "model_calls": "model_calls", "cache_hits": "cache_hits",
                     "tokens_submitted": "prompt_tokens", "tokens_evaluated": "prompt_evaluated",
                     "tokens_generated": "generated_tokens", "tokens_sampled": "sampled_tokens",
                     "tokens_forced": "forced_tokens", "repetition_stops": "repetition_stops",
                     "mask_seconds": "mask_seconds", "decode_seconds": "decode_seconds",
                     "llm_seconds": "seconds"}


@dataclass
class Models:
    """An engine per role (one engine may hold several roles)."""

    planner: StructuredModel
    extractor: StructuredModel
    verifier: StructuredModel
    writer: StructuredModel

    @classmethod
    def from_pool(cls, pool: ModelPool) -> "Models":
        return cls(planner=pool.for_role("planner"), extractor=pool.for_role("extractor"),
                   verifier=pool.for_role("verifier"), writer=pool.for_role("writer"))

    def engines(self) -> list[StructuredModel]:
        seen: list[StructuredModel] = []
        for role in ROLES:
            engine = getattr(self, role)
            if all(engine is not e for e in seen):
                seen.append(engine)
        return seen

    def label(self) -> str:
        names = {role: getattr(getattr(self, role), "name", "model") for role in ROLES}
        if len(set(names.values())) == 1:
            return names["planner"]
        return ", ".join(f"{role}={name}" for role, name in names.items())

    def totals(self) -> dict[str, float]:
        totals = {key: 0.0 for key in ACCOUNTING_FIELDS}
        for engine in self.engines():
            acc = engine.accounting
            for key, attr in ACCOUNTING_FIELDS.items():
                totals[key] += getattr(acc, attr, 0)
        return totals


def check_run_parts(settings: Settings) -> None:
    """The checks of ``open_run_parts`` without loading a model: the search backend answers,
    and every role's model file exists, is GGUF and has its manifest hash."""
    from ..llm.manifest import HashCache, check_model_file, load_manifest_for, resolve_model
    from ..sources.base import make_backend
    from ..sources.preflight import check_backend

    check_backend(settings, make_backend(settings))
    manifest = load_manifest_for(settings)
    hashes = HashCache.for_settings(settings)
    for entry in {resolve_model(settings, role, manifest).name: resolve_model(settings, role, manifest)
                  for role in ROLES}.values():
        if entry.is_remote:
            from ..llm.remote import RemoteEngine

            RemoteEngine(entry, settings).probe()  # refuses a server that ignores schemas
        else:
            check_model_file(manifest, entry, hashes=hashes)


def open_run_parts(settings: Settings):
    """Load what a run needs (models, search backend, fetcher, embedder), checking every part
    before any work starts: a missing corpus or model fails here in one line."""
    from ..embed import get_embedder
    from ..sources.base import make_backend
    from ..sources.fetch import Fetcher
    from ..sources.preflight import check_backend

    backend = make_backend(settings)
    check_backend(settings, backend)
    models = load_models(settings)
    check_context(models)
    return models, backend, Fetcher(settings), get_embedder(settings)


def _fixed_prompts(role: str) -> list[tuple[str, list[dict], int]]:
    """The prompts a role sends with their variable text empty, and their output budgets."""
    ctx = prompts.Context(question="", today="2000-01-01")
    return {
        "planner": [("plan", prompts.plan(ctx, 1, 1), prompts.PLAN_TOKENS),
                    ("gaps", prompts.gaps(ctx, "", "", 1), prompts.GAPS_TOKENS),
                    ("next-search", prompts.iterative_step("", "", [], ctx.today), prompts.ITERATIVE_STEP_TOKENS)],
        "extractor": [("queries", prompts.queries(ctx, "", "", 1), prompts.QUERIES_TOKENS),
                      ("extract", prompts.extract(ctx, "", "", "", None, "", 1), prompts.EXTRACT_TOKENS),
                      ("reflect", prompts.reflect(ctx, "", "", 1), prompts.REFLECT_TOKENS)],
        "verifier": [("vote", prompts.vote(ctx, "", ""), prompts.VOTE_TOKENS)],
        "writer": [("answer", prompts.short_answer("", "", ctx.today), prompts.ANSWER_TOKENS),
                   ("synthesize", prompts.synthesize(ctx, "", ""), prompts.REPORT_TOKENS)],
    }[role]


def check_context(models: Models) -> None:
    """Fail before any work when a model's context cannot hold a prompt's fixed part plus its
    output budget: the engine trims variable text (sources, claim lists) to fit, but a
    context too small for the rest would only fail part-way through the run."""
    from ..errors import ContextOverflowError

    from ..llm.engine import Engine

    for engine in models.engines():
        if not isinstance(engine, Engine):
            continue  # a scripted stand-in in tests
        roles = [role for role in ROLES if getattr(models, role) is engine]
        # The largest need, so that the hint names a context that holds every prompt.
        need, kind, budget = max((engine.count_prompt(messages) + budget, kind, budget)
                                 for role in roles for kind, messages, budget in _fixed_prompts(role))
        if need > engine.n_ctx:
            raise ContextOverflowError(
                f"model '{engine.name}' has a context of {engine.n_ctx} tokens; its {kind} prompt "
                f"needs at least {need} (fixed text plus {budget} output tokens)",
                hint=f"raise llm.n_ctx to {need} or more, up to the model's own context")


def load_models(settings: Settings) -> Models:
    """The engines for every role, each manifest model loaded once (checked before any work)."""
    from ..llm.engine import ModelPool

    return Models.from_pool(ModelPool(settings))
