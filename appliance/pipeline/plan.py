"""Plan: the question becomes a DAG of sub-questions, validated and repaired.

Every repair is recorded: a plan is never silently changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..contracts import CheckedPlan, NodeState, Plan, bounded
from ..errors import ModelOutputError
from ..llm import derive_seed
from . import prompts
from .checks import ALL_ON, Switches
from .forms import echoes_example
from .names import GENERIC_NAMES, name_found, names
from .text import content_words, word_found

_ID_RE = re.compile(r"[^A-Za-z0-9_-]+")


def make_plan(engine, ctx: prompts.Context, min_nodes: int, max_nodes: int,
              draw: int = 0, base_seed: int = 0, temperature: float | None = None) -> Plan:
    """Ask the planner model for a plan (raises ModelOutputError when it cannot give one).
    ``draw`` 0 is the call's own seed; draw n > 0 samples the same prompt with a seed of its
    own (derived from ``base_seed``), at ``temperature`` (None: the setting)."""
    messages = prompts.plan(ctx, min_nodes, max_nodes)
    schema = bounded(Plan, nodes=(min(min_nodes, max_nodes), max_nodes))
    seed = derive_seed(base_seed, messages, f"plan draw {draw}") if draw else None
    return engine.structured(messages, schema, max_tokens=prompts.PLAN_TOKENS, purpose="plan",
                             seed=seed, temperature=temperature if draw else None)


def plan_research(engine, ctx: prompts.Context, min_nodes: int, max_nodes: int, min_queries: int,
                  max_queries: int, draws: int = 1, base_seed: int = 0,
                  temperature: float | None = None,
                  switches: Switches = ALL_ON) -> tuple[list[Plan], CheckedPlan]:
    """Plan the question, checked and repaired; a plan with faults (``plan_faults``) is drawn
    again, up to ``draws`` plans in all, and the first without faults is kept. When none is
    fit, the question itself becomes the one sub-question: a search for the whole question
    beats a search for a guess. With one draw the plan stands whatever its faults (recorded),
    unless nothing of it is usable. Every plan set aside is named in the repairs, with its faults,
    each fault led by its check's id ("[plan-dropped-name] ..."). ``switches``: the checks on.

    Returns the plans drawn (raw, in order) and the checked plan. Raises ModelOutputError
    only when the first draw gives no plan at all.
    """
    drawn: list[Plan] = []
    set_aside: list[str] = []
    for draw in range(max(1, draws)):
        try:
            plan = make_plan(engine, ctx, min_nodes, max_nodes, draw, base_seed, temperature)
        except ModelOutputError as exc:
            if not drawn:
                raise
            set_aside.append(f"plan draw {draw + 1} gave no plan: {exc.message}")
            break
        drawn.append(plan)
        checked = check_plan(plan, max_nodes, min_queries, max_queries, ctx.question, switches)
        faults = plan_faults(checked.nodes, ctx.question, switches) if checked.nodes else ["no usable sub-question"]
        if not faults or (draws <= 1 and checked.nodes):
            # One draw allowed: the plan stands, its faults on record.
            checked.repairs = set_aside + checked.repairs + [f"plan kept with faults: {f}" for f in faults]
            return drawn, checked
        set_aside += [f"plan draw {draw + 1}: {repair}" for repair in checked.repairs]
        set_aside.append(f"plan draw {draw + 1} set aside: " + "; ".join(faults))
    effort = min(max(drawn[0].effort, min_queries), max_queries)
    set_aside.append("no plan without faults: researching the question itself")
    return drawn, CheckedPlan(nodes=[NodeState(id="q1", question=ctx.question)], effort=effort,
                              repairs=set_aside)


def plan_faults(nodes: list[NodeState], question: str, switches: Switches = ALL_ON) -> list[str]:
    """What makes a checked plan unfit to research ``question``, one line each, each led by
    the id of the check that found it (none: fit). A small planner loses the question's
    thread in ways a search cannot recover from; each plan check names one (see its function).
    Word forms are forgiven as elsewhere ("Dutch" for "Netherlands"); kinds of thing ("County",
    "River") never count as names."""
    asked = _Asked.of(question)
    faults: list[str] = []
    waited_on = {dep for node in nodes for dep in node.depends_on}
    for node in nodes:
        text = node.question
        invented = invented_names(text, asked) if switches.on("plan-invented-name") else []
        if invented:
            faults.append(f"[plan-invented-name] {node.id} {text!r} names {', '.join(invented)}, "
                          "which the question does not")
        elif switches.on("plan-unanchored") and unanchored(node, asked):
            faults.append(f"[plan-unanchored] {node.id} {text!r} names nothing of the question and "
                          "uses no earlier answer")
        if switches.on("plan-definition") and asks_definition(text) and not asks_definition(question):
            faults.append(f"[plan-definition] {node.id} {text!r} asks only what it names is, not a fact of it")
        if switches.on("plan-whole-first") and node.id in waited_on and whole_question_first(text, asked):
            faults.append(f"[plan-whole-first] {node.id} {text!r} is the whole question, yet other "
                          "sub-questions wait on it")
    dropped = dropped_names(nodes, asked) if switches.on("plan-dropped-name") else []
    if dropped:
        faults.append(f"[plan-dropped-name] no sub-question names {', '.join(dropped)}")
    return faults


@dataclass(frozen=True)
class _Asked:
    """What the plan checks read of the question."""

    names: set[str]      # its names, kinds of thing left out
    words: set[str]      # every word of it, and its names with a sentence's first word
    content: set[str]    # its content words

    @classmethod
    def of(cls, question: str) -> "_Asked":
        return cls(names={n for n in names(question, acronyms=False) if n not in GENERIC_NAMES},
                   words=set(re.findall(r"\w+", question.lower())) | names(question, openers=True),
                   content=content_words(question))


def invented_names(sub_question: str, asked: _Asked) -> list[str]:
    """Check plan-invented-name: the names of a sub-question that the question does not have
    ("What is the capital of Ruritania?" for a question about a radio station): it researches
    a guess."""
    own = names(_REFERENCE.sub(" ", sub_question), acronyms=False)
    return sorted(n for n in own if not name_found(n, asked.words) and n not in GENERIC_NAMES)


def unanchored(node: NodeState, asked: _Asked) -> bool:
    """Check plan-unanchored: a sub-question that names nothing of the question, uses no
    earlier answer and depends on no node ("What is the name of the book?"): nothing ties its
    findings to the question."""
    text = node.question
    return bool(asked.names and not _REFERENCE.search(text) and not node.depends_on
                and not any(name_found(n, asked.names) for n in names(text, openers=True)))


def whole_question_first(sub_question: str, asked: _Asked) -> bool:
    """Check plan-whole-first (for a sub-question other nodes wait on): it is the whole
    question, so the parts are asked after the whole they were meant to answer. Only a copy
    with every content word counts: one word short ("Which film was set in ...?" for "Who
    directed the film set in ...?") is a hop."""
    if not asked.content:
        return False
    said = content_words(sub_question)
    return all(word_found(w, said) for w in asked.content)


def whole_question_last(nodes: list[NodeState], question: str) -> list[str]:
    """Check plan-whole-last, repair: a sub-question that is the whole question again, waited
    on by sub-questions that do not use its answer (no #n of it in their text), is asked after
    them instead: they are its parts, and asked first their answers go into its search. A
    part that does use its answer still waits on it (check plan-whole-first then redraws)."""
    asked = _Asked.of(question)
    repairs: list[str] = []
    for whole in nodes:
        if not whole_question_first(whole.question, asked):
            continue
        for part in nodes:
            if whole.id not in part.depends_on or _uses_answer(part, whole.id):
                continue
            part.depends_on.remove(whole.id)
            if _waits_on(part, whole.id, nodes):  # it still waits on the whole by another way
                part.depends_on.append(whole.id)
                continue
            whole.depends_on.append(part.id)
            repairs.append(f"[plan-whole-last] {whole.id} (the whole question) now waits on {part.id}, "
                           f"which waited on it without using its answer")
    return repairs


def _uses_answer(node: NodeState, other_id: str) -> bool:
    """Whether ``node``'s question uses the answer of ``other_id`` (#n of it)."""
    return any(f"q{n}" == other_id for n in _REFERENCE.findall(node.question))


def _waits_on(node: NodeState, target: str, nodes: list[NodeState]) -> bool:
    """Whether ``node`` depends on ``target``, directly or through others."""
    by_id = {n.id: n for n in nodes}
    seen: set[str] = set()
    todo = list(node.depends_on)
    while todo:
        current = todo.pop()
        if current == target:
            return True
        if current in seen or current not in by_id:
            continue
        seen.add(current)
        todo += by_id[current].depends_on
    return False


def dropped_names(nodes: list[NodeState], asked: _Asked) -> list[str]:
    """Check plan-dropped-name: the names of the question that no sub-question names (as a
    name or as a plain word, "the Harbour" -> "harbour"): that hop is never searched."""
    covered: set[str] = set()
    for node in nodes:
        covered |= names(node.question, openers=True) | content_words(node.question)
    return sorted(n for n in asked.names if not name_found(n, covered))


_DEFINITION = re.compile(r"^\s*(?:what|who)\s+(?:is|was|are|were)\s+(?:the\s+|an?\s+)?(?P<rest>[^?]+?)\s*\??\s*$",
                         re.IGNORECASE)
# Small words inside a name ("University of Texas", "Leonardo da Vinci").
_NAME_JOINERS = frozenset("of the and de da di del della der van von la le du".split())


def asks_definition(question: str) -> bool:
    """Check plan-definition: whether ``question`` is "What/Who is <a name>?" and nothing more: every word after the
    verb is part of a name (capitalised, a number, an earlier answer #n, or a joiner like "of")."""
    match = _DEFINITION.match(question)
    if not match:
        return False
    words = match.group("rest").replace("'s", "").split()
    return any(w[:1].isupper() for w in words) and all(
        w[:1].isupper() or w[:1].isdigit() or w.startswith("#") or w.lower() in _NAME_JOINERS for w in words)


def check_plan(plan: Plan, max_nodes: int, min_queries: int, max_queries: int,
               question: str = "", switches: Switches = ALL_ON) -> CheckedPlan:
    """Validate and repair: unique ids, known dependencies, no cycles, at most max_nodes.

    Order of repairs: drop empty and repeated questions (and, check example-echo, those that
    copy the prompt's example), make ids unique, cut extra nodes, drop edges to unknown or cut
    nodes and self-edges, then break cycles edge by edge (check plan-structure); then the whole
    question asked as a sub-question waits on the parts that waited on it (check
    plan-whole-last).
    """
    repairs: list[str] = []
    nodes = _clean_nodes(plan, repairs, question, switches)
    if len(nodes) > max_nodes:
        cut = [n.id for n in nodes[max_nodes:]]
        repairs.append(f"cut {len(cut)} node(s) over the limit of {max_nodes}: {', '.join(cut)}")
        nodes = nodes[:max_nodes]
    known = {n.id for n in nodes}
    for node in nodes:
        kept: list[str] = []
        for dep in node.depends_on:
            if dep == node.id:
                repairs.append(f"dropped self-dependency of {node.id}")
            elif dep not in known:
                repairs.append(f"dropped dependency {node.id} -> {dep} (no such node)")
            elif dep in kept:
                repairs.append(f"dropped repeated dependency {node.id} -> {dep}")
            else:
                kept.append(dep)
        node.depends_on = kept
    _add_referenced(nodes, repairs)
    _break_cycles(nodes, repairs)
    if question and switches.on("plan-whole-last"):
        repairs += whole_question_last(nodes, question)
    effort = min(max(plan.effort, min_queries), max_queries)
    if effort != plan.effort:
        repairs.append(f"effort {plan.effort} clamped to {effort} by the profile")
    return CheckedPlan(nodes=nodes, effort=effort, repairs=repairs)


def _clean_nodes(plan: Plan, repairs: list[str], question: str, switches: Switches) -> list[NodeState]:
    nodes: list[NodeState] = []
    seen_questions: set[str] = set()
    used_ids: set[str] = set()
    main_question = question
    for index, raw in enumerate(plan.nodes, start=1):
        question = " ".join(raw.question.split())
        if not question:
            repairs.append(f"dropped node {raw.id!r}: empty question")
            continue
        if switches.on("example-echo") and echoes_example(question, main_question):
            repairs.append(f"[example-echo] dropped node {raw.id!r}: it copies the prompt's example")
            continue
        key = question.lower()
        if key in seen_questions:
            repairs.append(f"dropped node {raw.id!r}: repeats an earlier question")
            continue
        seen_questions.add(key)
        node_id = _ID_RE.sub("", raw.id)[:12] or f"q{index}"
        if node_id in used_ids:
            new_id = _fresh_id(used_ids)
            repairs.append(f"renamed duplicate id {node_id!r} to {new_id!r}")
            node_id = new_id
        used_ids.add(node_id)
        nodes.append(NodeState(id=node_id, question=question,
                               depends_on=[_ID_RE.sub("", d)[:12] for d in raw.depends_on]))
    return nodes


_REFERENCE = re.compile(r"#(\d{1,2})\b")


def _add_referenced(nodes: list[NodeState], repairs: list[str]) -> None:
    """A question that uses an earlier answer (#1 is q1's) depends on that node, listed or not."""
    known = {n.id for n in nodes}
    for node in nodes:
        for number in _REFERENCE.findall(node.question):
            ref = f"q{number}"
            if ref == node.id or ref not in known:
                repairs.append(f"{node.id} refers to #{number}, which is not an earlier sub-question")
            elif ref not in node.depends_on:
                node.depends_on.append(ref)
                repairs.append(f"added dependency {node.id} -> {ref} (its question uses #{number})")


def _fresh_id(used: set[str]) -> str:
    n = 1
    while f"q{n}" in used:
        n += 1
    return f"q{n}"


def _break_cycles(nodes: list[NodeState], repairs: list[str]) -> None:
    """Depth-first search in plan order; an edge back to a node on the stack closes a cycle."""
    by_id = {n.id: n for n in nodes}
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def visit(node: NodeState) -> None:
        state[node.id] = 1
        for dep in list(node.depends_on):
            if state.get(dep) == 1:
                node.depends_on.remove(dep)
                repairs.append(f"dropped dependency {node.id} -> {dep} (closed a cycle)")
            elif dep not in state:
                visit(by_id[dep])
        state[node.id] = 2

    for node in nodes:
        if node.id not in state:
            visit(node)


def topo_order(nodes: list[NodeState]) -> list[NodeState]:
    """Nodes by depth (roots first), plan order within a depth: the run's fixed order."""
    by_id = {n.id: n for n in nodes}
    depth: dict[str, int] = {}

    def depth_of(node_id: str) -> int:
        if node_id not in depth:
            parents = by_id[node_id].depends_on
            depth[node_id] = 0 if not parents else 1 + max(depth_of(p) for p in parents)
        return depth[node_id]

    index = {n.id: i for i, n in enumerate(nodes)}
    return sorted(nodes, key=lambda n: (depth_of(n.id), index[n.id]))


_CHECK_TAG = re.compile(r"\[([a-z][a-z-]+)\]")


def repair_checks(repairs: list[str]) -> list[str]:
    """The check behind each repair line, in order: the ids a line names ("[plan-unanchored]
    ..."), or plan-structure for a repair of the plan's form; a line that says how the drawing
    went (a draw that gave no plan, the question researched itself) is no check's."""
    out: list[str] = []
    for line in repairs:
        tags = _CHECK_TAG.findall(line)
        if tags:
            out += tags
        elif not _DRAW_NOTE.search(line):
            out.append("plan-structure")
    return out


_DRAW_NOTE = re.compile(r"gave no plan|^no plan without faults")
