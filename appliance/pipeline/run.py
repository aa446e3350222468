"""The orchestrator: plan -> gather (pipelined) -> dedup -> barrier -> verify -> one gap round
-> synthesize -> report. Every outcome, including failure, is a report file with its stats
(rule 6), and the run folder holds what happened as it happened.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..config import Settings, state_dir
from ..contracts import Importance, MergedClaim, NodeState, ReportData, RunStatus, Verdict
from ..errors import ApplianceError, ModelOutputError, RunCancelled, StateError
from .. import questions
from ..questions import clean_question, run_id_for
from ..report import render_json, render_markdown
from . import prompts
from .parts import ACCOUNTING_FIELDS, Models
from .checks import CHECKS
from .dedup import ClaimPool, rank_claims
from .text import same_question
from .gaps import gap_nodes
from .gather import gather
from .forms import answer_rests_on, compared, names_alone
from .names import names_nothing, off_subject
from .plan import plan_research, repair_checks, topo_order
from .state import Progress, Recorder, RunContext, RunStats, SearchLog, write_atomic
from .synthesize import answer_support, claim_contexts, contradicted, outline, short_answer, synthesize
from .verify import is_verbatim, verbatim_verdict, verify_claims

@dataclass
class ResearchResult:
    status: RunStatus
    markdown_path: Path
    json_path: Path
    run_dir: Path
    report: dict
    exit_code: int = 0      # non-zero when the run failed (plan_failed, error): the report says why


@contextmanager
def _phase(run: RunContext, name: str):
    run.progress.on_phase(name)
    start = time.monotonic()
    try:
        yield
    finally:
        run.stats.phase_seconds[name] = round(run.stats.phase_seconds.get(name, 0.0)
                                              + time.monotonic() - start, 3)


def research(question: str, settings: Settings, *, models: Models, backend, fetcher, embedder,
             out_dir: str | Path | None = None, progress: Progress | None = None,
             today: dt.date | None = None, report_name: str | None = None,
             run_dir: Path | None = None) -> ResearchResult:
    """Research ``question`` and write its report; returns where everything went.

    The report is ``<out_dir>/<date>-<slug>.md`` and ``.json`` unless ``report_name`` (a safe
    file stem, as batch uses) names it. The run folder is ``<state>/runs/<run id>`` unless
    ``run_dir`` names another (a cluster worker's scratch folder, shipped to the client).
    """
    from ..sources.urls import UrlLedger

    question = clean_question(question)
    date = (today or questions.today()).isoformat()
    run_id = run_id_for(question, date, settings.pipeline.profile)
    run_dir = run_dir or state_dir(settings, "runs") / run_id
    recorder = Recorder(run_dir)
    run = RunContext(settings=settings, models=models, backend=backend, fetcher=fetcher,
                     ledger=UrlLedger(settings.fetch.budget), recorder=recorder,
                     searches=SearchLog(run_dir / "searches.jsonl"), stats=RunStats(),
                     ctx=prompts.Context(question=question, today=date),
                     progress=progress or Progress(), embedder=embedder)
    before = models.totals()
    # Every model call of this run goes to calls.jsonl as it happens.
    removers = [engine.add_listener(lambda record: recorder.append("calls", record.as_dict()))
                for engine in models.engines() if hasattr(engine, "add_listener")]
    data = ReportData(question=question, status=RunStatus.complete, date=date, model=models.label(),
                      profile=settings.pipeline.profile, run_id=run_id)
    failure_code = 0
    try:
        _run_phases(run, data, embedder)
    except Exception as exc:  # noqa: BLE001 - any failure still gives a report
        if isinstance(exc, StateError):
            raise  # nowhere to write a report: the CLI says how to free the state folder
        if isinstance(exc, RunCancelled):
            data.status, data.error = RunStatus.cancelled, exc.message
            data.sources = dict(run.sources)
        else:
            data.status, data.error = RunStatus.error, f"{type(exc).__name__}: {exc}"
            data.sources = dict(run.sources)
            failure_code = exc.exit_code if isinstance(exc, ApplianceError) else 1
    finally:
        for remove in removers:
            remove()
    _finish_stats(run, models, before)
    data.stats = run.stats.to_dict()
    data.checks_disabled = sorted(run.checks.switches.disabled)
    # In the registry's order, then by what each fired on: the same on every run of the same
    # calls, whichever node's thread got there first (checks.jsonl keeps the order of events).
    order = {c.id: i for i, c in enumerate(CHECKS)}
    data.checks_fired = sorted(run.checks.log, key=lambda e: (order[e["check"]], str(e["on"]),
                                                              json.dumps(e, sort_keys=True, default=str)))
    result = _write_outputs(run, data, Path(out_dir or settings.output.reports_dir), report_name or run_id)
    if data.status == RunStatus.plan_failed:
        failure_code = ModelOutputError.exit_code
    result.exit_code = failure_code
    return result


def _run_phases(run: RunContext, data: ReportData, embedder) -> None:
    """Each phase hands its work to the next; a failure becomes the report's status, never a loss."""
    settings = run.settings.pipeline
    with _phase(run, "plan"):
        try:
            drawn, checked = plan_research(
                run.models.planner, run.ctx, settings.min_nodes, min(settings.max_nodes, settings.hard_max_nodes),
                settings.min_queries, settings.max_queries, settings.plan_draws, run.settings.llm.seed,
                settings.plan_redraw_temperature, run.checks.switches)
        except ModelOutputError as exc:
            data.status, data.error = RunStatus.plan_failed, f"planning failed: {exc.message}"
            return
        nodes = with_compared_nodes(topo_order(checked.nodes), run.ctx.question, settings.compared_sources)
        nodes = with_question_node(nodes, run.ctx.question, settings.question_sources)
        data.nodes, data.effort, data.repairs = nodes, checked.effort, checked.repairs
        run.questions = [n.question for n in nodes]
        run.stats.add(plan_repairs=len(checked.repairs), nodes=len(nodes), plan_draws=len(drawn))
        for check_id in repair_checks(checked.repairs):
            run.checks.fired(check_id, on="plan")
        run.recorder.write_json("plan.json", {"raw": drawn[-1].model_dump(mode="json"),
                                              "drawn": [p.model_dump(mode="json") for p in drawn], "effort": checked.effort,
                                              "repairs": checked.repairs,
                                              "nodes": [n.model_dump(mode="json") for n in nodes]})
    with _phase(run, "gather"):
        claims = gather(run, nodes, checked.effort)
    with _phase(run, "dedup"):
        pool = ClaimPool(run.settings, data.run_id, embedder)
        pool.add(claims)
    try:
        # The one barrier: ranking needs the whole claim pool.
        with _phase(run, "verify"):
            ranked = relevant_claims(run, rank_claims(list(pool.claims.values())),
                                     data.nodes)[: settings.verify_top]
            verdicts = {v.claim_id: v for v in verify(run, pool, ranked, data.nodes)}
        _gap_round(run, data, pool, verdicts, checked.effort)
        data.claims = dict(pool.claims)
        data.verdicts = verdicts
        pool.record_verdicts(verdicts)
        run.stats.add(claims_merged=pool.merged_count,
                      claims_after_dedup=sum(1 for c in pool.claims.values() if not c.restated_from))
    finally:
        pool.close()
    data.sources = dict(run.sources)
    confirmed = [c for c in rank_claims(list(data.claims.values()))
                 if c.id in verdicts and verdicts[c.id].confirmed]
    if not confirmed:
        data.status = _empty_status(run, verdicts)
        data.error = "; ".join(run.stats.search_error_messages[:2])
        return
    with _phase(run, "answer"):
        data.short_answer = short_answer(run, confirmed, data.nodes)
        for node in data.nodes:
            if not node.answer_superseded and run.checks.applies(
                    "chain-contradicted", lambda: contradicted(node, data.nodes, run.ctx.question, data.short_answer),
                    on=f"answer of {node.id}", answer=node.answer):
                node.answer_superseded = True
        if data.short_answer:
            # The research without the final answer's own words: what a claim cited beside
            # the answer must be about, beyond carrying the answer.
            asked = "\n".join([run.ctx.question] + [n.asked for n in data.nodes] + steps_named(data.nodes) + [
                n.answer for n in data.nodes if n.answer and not answer_rests_on(data.short_answer, n.answer)])
            data.answer_claims = answer_support(confirmed, data.nodes, data.short_answer,
                                                claim_contexts(run, confirmed),
                                                asked if run.settings.pipeline.name_check else None,
                                                run.checks, compared(run.ctx.question),
                                                question_read(run, data.nodes))
    with _phase(run, "synthesize"):
        if not run.settings.pipeline.write_report:
            data.synthesis = outline(confirmed, data.nodes, data.answer_claims,
                                     compared(run.ctx.question), run.checks)
            return
        try:
            data.synthesis = synthesize(run, confirmed, data.short_answer)
        except ModelOutputError as exc:
            data.status, data.error = RunStatus.synthesis_failed, f"synthesis failed: {exc.message}"


def with_compared_nodes(nodes: list[NodeState], question: str, sources: int) -> list[NodeState]:
    """The plan's nodes and, after them, one node for each thing the question compares
    (``forms.compared``: a choice between two named things, a question about both) that no
    sub-question researches on its own (naming it and not the other), unless ``sources`` is 0.
    A small planner often asks one sub-question about both, or the whole question again,
    and the answer then compares one side's facts with nothing. Each such node is searched by
    the thing's name and the question's words, read, and its claims verified; it has no
    answer of its own and nothing depends on it."""
    items = compared(question)
    if not sources or not items:
        return nodes
    out = list(nodes)
    for item in items:
        if any(names_alone(n.question, item, items) for n in nodes):
            continue
        out.append(NodeState(id=_fresh_node_id(out), question=f"About {item}: {question}", compares=item))
    return out


def _fresh_node_id(nodes: list[NodeState]) -> str:
    used = {n.id for n in nodes}
    return next(f"q{i}" for i in range(len(nodes) + 1, len(nodes) + 100) if f"q{i}" not in used)


def with_question_node(nodes: list[NodeState], question: str, sources: int) -> list[NodeState]:
    """The plan's nodes and, last, the question as asked (unless a node already asks it, which
    then reads for both, see ``gather.source_cap``, or ``sources`` is 0): searched for itself
    and read like any node, so the answer never rests on less than one retrieval call would
    read, whatever the plan. Last, so the sub-questions
    read their own pages first (a page is read by one node) and this one reads what of the
    question's top pages they left. Nothing depends on it: its findings never steer a hop."""
    if not sources or any(same_question(n.question, question) for n in nodes):
        return nodes
    return nodes + [NodeState(id=_fresh_node_id(nodes), question=question, whole_question=True)]


def _gap_round(run: RunContext, data: ReportData, pool: ClaimPool, verdicts: dict[str, Verdict],
               effort: int) -> None:
    """One round, never more: new sub-questions from the gaps, gathered and verified like the rest."""
    with _phase(run, "gaps"):
        confirmed = [pool.claims[cid] for cid, v in verdicts.items() if v.confirmed]
        new_nodes = gap_nodes(run, data.nodes, confirmed)
        if not new_nodes:
            return
        run.stats.add(nodes=len(new_nodes), gap_nodes=len(new_nodes))
        data.nodes = data.nodes + new_nodes
        claims = gather(run, new_nodes, effort)
        touched = pool.add(claims)
        fresh = [pool.claims[cid] for cid in touched if cid not in verdicts]
        budget = max(3, run.settings.pipeline.verify_top // 2)
        for verdict in verify(run, pool, relevant_claims(run, rank_claims(fresh), data.nodes)[:budget],
                              data.nodes):
            verdicts[verdict.claim_id] = verdict


def verify(run: RunContext, pool: ClaimPool, claims: list[MergedClaim],
           nodes: list[NodeState]) -> list[Verdict]:
    """The votes on ``claims``; then each claim refuted as worded is kept as the sentence it
    quotes (knob ``restate_killed``), a new claim confirmed as verbatim. A small model's
    paraphrase often fails its votes ("studied at Kessel" for "a graduate of ... at the Kessel
    Institute") while the sentence itself bears on the question: dropping it loses the
    source. The sentence must still name what the research names (its claim may have been
    what did)."""
    verdicts = verify_claims(run, claims)
    if not run.settings.pipeline.restate_killed or not run.checks.on("restate-killed"):
        return verdicts
    by_id = {c.id: c for c in claims}
    for verdict in list(verdicts):
        claim = by_id[verdict.claim_id]
        if verdict.refutations < run.settings.pipeline.refutations_to_kill or is_verbatim(claim):
            continue  # confirmed, unconfirmed by abstentions, or its wording was its quote's
        restated = pool.restate(claim)
        if restated is not None and relevant_claims(run, [restated], nodes):
            verdicts.append(verbatim_verdict(restated.id))
            run.stats.add(verified=1, confirmed=1, confirmed_verbatim=1, claims_restated=1)
            run.checks.fired("restate-killed", on=f"claim {claim.id}", kept_as=restated.id)
    return verdicts


def relevant_claims(run: RunContext, ranked: list[MergedClaim], nodes: list[NodeState]) -> list[MergedClaim]:
    """The claims that bear on the research: tangential ones (by the extraction's own rating)
    and ones about other named things than the question, its sub-questions and their answers
    (``names.off_subject``) are neither verified nor written into the answer: each would cost
    votes and dilute the report. Both are counted."""
    kept = [c for c in ranked if not run.checks.applies(
        "verify-tangential", lambda: c.importance == Importance.tangential, on=f"claim {c.id}")]
    run.stats.add(claims_tangential=len(ranked) - len(kept))
    if not run.settings.pipeline.name_check or not run.checks.on("verify-off-subject"):
        return kept
    # A last step's answer is what the claims are to bear out, not a subject of its own: a claim
    # that names it and nothing else of the research ("a Ruritanian sailor" for "Ruritania") is
    # off subject. Answers that later steps build on, and the gap round's, count.
    built_on = {d for n in nodes for d in n.depends_on}
    chain = "\n".join([run.ctx.question] + [
        f"{n.asked}\n{n.answer if n.id in built_on or n.from_gap_round else ''}" for n in nodes]
        + steps_named(nodes))
    around = claim_contexts(run, kept)
    for_question = question_read(run, nodes)

    def off(claim: MergedClaim) -> bool:
        if not off_subject(claim_text(claim), chain, around.get(claim.id, "")):
            return False
        if for_question & set(claim.node_ids):
            run.checks.fired("question-subject", on=f"claim {claim.id}")
            return False
        return True

    on_subject = [c for c in kept if not run.checks.applies("verify-off-subject", lambda: off(c), on=f"claim {c.id}")]
    run.stats.add(claims_off_subject=len(kept) - len(on_subject))
    return on_subject


def steps_named(nodes: list[NodeState]) -> list[str]:
    """The searches the question's own node named after reading (its first is the question):
    what they name is the research's too, as a sub-question's words are."""
    return [q for n in nodes if n.whole_question for q in n.queries[1:]]


def question_read(run: RunContext, nodes: list[NodeState]) -> set[str]:
    """The ids of the nodes that read the question as asked, when check question-subject keeps
    their claims on subject (the question names nothing of its own, ``names.names_nothing``);
    else none."""
    ids = {n.id for n in nodes if n.whole_question}
    if ids and run.checks.on("question-subject") and names_nothing(run.ctx.question):
        return ids
    return set()


def claim_text(claim: MergedClaim) -> str:
    """A claim's text and its quotes, one per line."""
    return "\n".join([claim.text] + [q.quote for q in claim.quotes])


def _empty_status(run: RunContext, verdicts: dict[str, Verdict]) -> RunStatus:
    if verdicts:
        return RunStatus.inconclusive
    if run.stats.sources_fetched:
        return RunStatus.no_evidence
    return RunStatus.no_sources


def _finish_stats(run: RunContext, models: Models, before: dict[str, float]) -> None:
    after = models.totals()
    for key in ACCOUNTING_FIELDS:
        value = after[key] - before[key]
        setattr(run.stats, key, round(value, 3) if key.endswith("seconds") else int(value))
    run.stats.checks = dict(sorted(run.checks.counts.items()))
    run.stats.wall_seconds = round(time.monotonic() - run.started, 3)
    if run.stats.wall_seconds > 0:
        run.stats.llm_busy_share = round(run.stats.llm_seconds / run.stats.wall_seconds, 3)
    engines = getattr(run.backend, "unresponsive_engines", None) or []
    run.stats.unresponsive_engines = sorted({str(e) for e in engines})


def _write_outputs(run: RunContext, data: ReportData, out: Path, stem: str) -> ResearchResult:
    markdown = render_markdown(data)
    report = render_json(data)
    md_path = out / f"{stem}.md"
    json_path = out / f"{stem}.json"
    # JSON first: a complete .md is the sign of a finished report (batch resume relies on it).
    write_atomic(json_path, json.dumps(report, ensure_ascii=False, indent=2, default=str))
    write_atomic(md_path, markdown)
    run.recorder.write_json("stats.json", data.stats)
    return ResearchResult(status=data.status, markdown_path=md_path, json_path=json_path,
                          run_dir=run.recorder.folder, report=report)
