"""Plan: the question becomes a DAG of sub-questions, validated and repaired.

Every repair is recorded: a plan is never silently changed.
"""

from __future__ import annotations

import re
from ..contracts import CheckedPlan, NodeState, Plan, bounded
from . import prompts

_ID_RE = re.compile(r"[^A-Za-z0-9_-]+")


def make_plan(engine, ctx: prompts.Context, min_nodes: int, max_nodes: int) -> Plan:
    """Ask the planner model for a plan (raises ModelOutputError when it cannot give one)."""
    messages = prompts.plan(ctx, min_nodes, max_nodes)
    schema = bounded(Plan, nodes=(min(min_nodes, max_nodes), max_nodes))
    return engine.structured(messages, schema, max_tokens=prompts.PLAN_TOKENS, purpose="plan")


def check_plan(plan: Plan, max_nodes: int, min_queries: int, max_queries: int,
               question: str = "") -> CheckedPlan:
    """Validate and repair: unique ids, known dependencies, no cycles, at most max_nodes.

    Order of repairs: drop empty and repeated questions, make ids unique, cut extra nodes,
    drop edges to unknown or cut nodes and self-edges, then break cycles edge by edge.
    """
    repairs: list[str] = []
    nodes = _clean_nodes(plan, repairs, question)
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
    effort = min(max(plan.effort, min_queries), max_queries)
    if effort != plan.effort:
        repairs.append(f"effort {plan.effort} clamped to {effort} by the profile")
    return CheckedPlan(nodes=nodes, effort=effort, repairs=repairs)


def _clean_nodes(plan: Plan, repairs: list[str], question: str) -> list[NodeState]:
    nodes: list[NodeState] = []
    seen_questions: set[str] = set()
    used_ids: set[str] = set()
    main_question = question
    for index, raw in enumerate(plan.nodes, start=1):
        question = " ".join(raw.question.split())
        if not question:
            repairs.append(f"dropped node {raw.id!r}: empty question")
            continue
        if prompts.echoes_example(question, main_question):
            repairs.append(f"dropped node {raw.id!r}: it copies the prompt's example")
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
