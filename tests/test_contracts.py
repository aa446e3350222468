"""Contracts at phase boundaries: a bounded contract validates what its grammar admits, no more."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from appliance.contracts import (Extraction, GapQuestions, Plan, Reflection, SearchQueries, bounded,
                                 quoting_extraction)
from appliance.llm.grammar import normalize_schema

# Every bounded schema the pipeline builds (plan.py, gaps.py, gather.py), with a valid answer.
CALL_SITES = {
    "plan": (bounded(Plan, nodes=(2, 3)),
             {"effort": 1, "nodes": [{"id": "q1", "question": "a?", "depends_on": []},
                                     {"id": "q2", "question": "b?", "depends_on": ["q1"]}]}, "nodes"),
    "gaps": (bounded(GapQuestions, questions=(0, 3)), {"questions": []}, "questions"),
    "queries": (bounded(SearchQueries, queries=(1, 2)), {"queries": ["bees"]}, "queries"),
    "extract": (bounded(Extraction, claims=(0, 3)),
                {"source_quality": "blog", "publish_date": None, "claims": []}, "claims"),
    "reflect": (bounded(Reflection, queries=(0, 2)),
                {"insights": [], "gaps": [], "contradictions": [], "queries": []}, "queries"),
}
CALL_SITES["quoting"] = (quoting_extraction(2, ("The first sentence is here.",)),
                         {"source_quality": "blog", "publish_date": None, "claims": []}, "claims")
CALL_SITES["quoting-sentences"] = (quoting_extraction(2, ("The first sentence is here.",), restate=False),
                                   {"source_quality": "blog", "publish_date": None, "claims": []}, "claims")
SITES = list(CALL_SITES)


def test_a_bounded_plan_without_nodes_is_rejected():
    """The issue's case: the grammar requires nodes, so the validator must too (it returned a
    plan with no nodes: the bounded field had default_factory=list)."""
    with pytest.raises(ValidationError, match="nodes"):
        bounded(Plan, nodes=(2, 3)).model_validate({"effort": 1})


@pytest.mark.parametrize("site", SITES)
def test_every_bounded_call_site_requires_its_bounded_list(site):
    schema, valid, field = CALL_SITES[site]
    assert schema.model_validate(valid)  # what the grammar admits still validates
    missing = {k: v for k, v in valid.items() if k != field}
    with pytest.raises(ValidationError, match=field):
        schema.model_validate(missing)


@pytest.mark.parametrize("site", SITES)
def test_bounded_lists_are_required_in_the_validator_as_in_the_grammar(site):
    schema, _, field = CALL_SITES[site]
    json_schema = schema.model_json_schema()
    assert field in normalize_schema(json_schema)["required"]
    assert field in json_schema.get("required", []), "the validator lets the list be left out"


def test_bounds_are_enforced_both_ways():
    schema = bounded(Plan, nodes=(2, 3))
    node = {"id": "q", "question": "a?", "depends_on": []}
    for count in (1, 4):
        with pytest.raises(ValidationError):
            schema.model_validate({"effort": 1, "nodes": [node] * count})
    assert len(schema.model_validate({"effort": 1, "nodes": [node] * 3}).nodes) == 3


def test_the_unbounded_contracts_keep_their_defaults():
    """Only bounded copies change: Extraction itself still defaults claims to [] (the salvage
    paths build it by hand)."""
    assert Extraction(source_quality="blog").claims == []
    assert bounded(Plan, nodes=(2, 3)) is bounded(Plan, nodes=(2, 3)), "classes are cached"
