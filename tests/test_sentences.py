"""The one sentence splitter (corpus chunking and the sentences a model may quote): it must not
cut at abbreviations, initials or numbers, since a cut sentence is a quote that cannot be made."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from appliance.pipeline.anchor import quotable_sentences
from appliance.sources.ingest import chunk_text
from appliance.sources.sentences import split_sentences

CASES = {
    # the cases
    "title": ("Dr. Smith joined the hospital in 1990. He retired later.",
              ["Dr. Smith joined the hospital in 1990.", "He retired later."]),
    "dotted acronym": ("The U.S. Army built the fort in 1846. It still stands.",
                       ["The U.S. Army built the fort in 1846.", "It still stands."]),
    "saint": ("St. Louis lies on the Mississippi River. It was founded in 1764.",
              ["St. Louis lies on the Mississippi River.", "It was founded in 1764."]),
    "decimal": ("The index rose 3.5 percent to 1,204.75 points. Traders were surprised.",
                ["The index rose 3.5 percent to 1,204.75 points.", "Traders were surprised."]),
    # more of the same kinds
    "initials": ("J. R. R. Tolkien wrote The Hobbit. It appeared in 1937.",
                 ["J. R. R. Tolkien wrote The Hobbit.", "It appeared in 1937."]),
    "several titles": ("Mr. and Mrs. Smith met Prof. Jones and Gen. Lee at 5 p.m. on Monday. They talked.",
                       ["Mr. and Mrs. Smith met Prof. Jones and Gen. Lee at 5 p.m. on Monday.", "They talked."]),
    "numbered references": ("See Fig. 3 and No. 5 in Vol. 2 of the report. The rest is appendix.",
                            ["See Fig. 3 and No. 5 in Vol. 2 of the report.", "The rest is appendix."]),
    "circa": ("The chapel was built c. 1420 by monks. It burned in 1666.",
              ["The chapel was built c. 1420 by monks.", "It burned in 1666."]),
    "e.g. and i.e.": ("Some birds, e.g. penguins, cannot fly. Others, i.e. most, can.",
                      ["Some birds, e.g. penguins, cannot fly.", "Others, i.e. most, can."]),
    "acronym ends a sentence": ("She moved to the U.S. The move took a year.",
                                ["She moved to the U.S.", "The move took a year."]),
    "degree": ("Jane Roe, Ph.D., taught at Porto. She died in 1950.",
               ["Jane Roe, Ph.D., taught at Porto.", "She died in 1950."]),
    "questions and exclamations": ("Who built it? Nobody knows! The records burned.",
                                   ["Who built it?", "Nobody knows!", "The records burned."]),
    "quote closes the sentence": ('He said "the bridge is closed." Then he left. (It reopened.) Traffic resumed.',
                                  ['He said "the bridge is closed."', "Then he left.", "(It reopened.)",
                                   "Traffic resumed."]),
    "lower case after a full stop": ("The firm Yahoo! was founded in 1994. Its founders met at Stanford.",
                                     ["The firm Yahoo! was founded in 1994.", "Its founders met at Stanford."]),
    "vs.": ("The case Roe vs. Wade was decided in 1973. It was overturned in 2022.",
            ["The case Roe vs. Wade was decided in 1973.", "It was overturned in 2022."]),
    "mount and fort": ("Mt. Everest and Ft. Worth are far apart. Both are famous.",
                       ["Mt. Everest and Ft. Worth are far apart.", "Both are famous."]),
    "abbreviation words that end a sentence": ("The answer was no. The vote was close. He liked modern art. Fig. 2 shows it.",
                                               ["The answer was no.", "The vote was close.", "He liked modern art.",
                                                "Fig. 2 shows it."]),
    "etc. ends a sentence": ("They sold pumps, valves, etc. The firm closed in 1950.",
                             ["They sold pumps, valves, etc.", "The firm closed in 1950."]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_split_sentences(name):
    text, expected = CASES[name]
    assert split_sentences(text) == expected


@pytest.mark.parametrize("name", ["title", "dotted acronym", "saint", "initials", "several titles"])
def test_quotable_sentences_keep_abbreviations_whole(name):
    """What the grammar lets the extractor quote is the whole sentence, not a fragment of it."""
    text, expected = CASES[name]
    offered = quotable_sentences(text)
    assert offered[0] == expected[0]


def test_long_paragraphs_are_chunked_at_sentence_ends_not_abbreviations():
    para = " ".join(["Dr. Smith of St. Louis served in the U.S. Army for many years."] * 12)
    chunks = chunk_text(para, 200, 200)
    assert len(chunks) > 1
    for chunk in chunks:
        assert chunk.startswith("Dr. Smith") and chunk.endswith("years."), chunk


def test_empty_and_blank_text():
    assert split_sentences("") == [] and split_sentences("  \n ") == []
    assert split_sentences("No full stop at the end") == ["No full stop at the end"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(list("abAB .!?\"')(\n\u00a0") + ["Dr.", "U.S.", "e.g.", "3.5", "St. "]),
                          st.text(max_size=3)), max_size=60).map("".join))
def test_sentences_cover_the_text_and_are_cut_at_spaces_only(text):
    """Nothing is lost or reordered; every cut is at white space, so each sentence is verbatim."""
    sentences = split_sentences(text)
    assert " ".join(sentences).split() == text.split()
    for sentence in sentences:
        assert sentence and sentence == sentence.strip() and sentence in text
