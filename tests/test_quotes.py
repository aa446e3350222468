"""Quote anchoring: what a report may quote is the source's own text, or nothing."""

import pytest
from hypothesis import given, settings, strategies as st

from appliance.pipeline.anchor import find_quote

SOURCE = ("The Journal of Psychotherapy Integration is a peer-reviewed academic journal published by the "
          "American Psychological Association. Hall, who was the first president of the American "
          "Psychological Association, viewed adolescence as a time of turmoil. Person - centered therapy "
          "seeks a client's self - actualizing tendency, ``an inbuilt proclivity toward growth ''.")


def test_exact_quote_returns_the_source_span():
    assert find_quote("published by the American Psychological Association", SOURCE) == \
        "published by the American Psychological Association"


def test_case_space_and_typographic_quotes_are_forgiven():
    span = find_quote("HALL, who was the  first president of the “American Psychological Association”", SOURCE)
    assert span is not None and span in SOURCE
    assert span.startswith("Hall, who was the first president")


def test_tokenised_punctuation_matches_plain_punctuation():
    span = find_quote("Person-centered therapy seeks a client's self-actualizing tendency, \"an inbuilt proclivity", SOURCE)
    assert span is not None and span in SOURCE and "self - actualizing" in span


def test_a_quote_ending_in_a_tex_quote_keeps_both_of_its_characters():
    """The sentence ends in `` ''. ``: the span ends with the whole '' (the eval's faithfulness
    check, which folds '' into one character, found "... growth '" nowhere in the source)."""
    from appliance.pipeline.anchor import normalise

    span = find_quote("Person - centered therapy seeks a client's self - actualizing tendency, "
                      "``an inbuilt proclivity toward growth ''.", SOURCE)
    assert span is not None and span.endswith("growth ''") and span in SOURCE
    assert normalise(span)[0] in normalise(SOURCE)[0]
    assert find_quote("``an inbuilt proclivity toward growth", SOURCE).startswith("``an inbuilt")


def test_small_edits_pass_and_the_kept_text_is_verbatim():
    span = find_quote("Hall, who was the first presdent of the American Psychologcal Association", SOURCE)
    assert span is not None and span in SOURCE
    assert "president" in span and "Psychological" in span


def test_a_paraphrase_or_invention_is_rejected():
    assert find_quote("Hall founded the association and edited its journal for forty years", SOURCE) is None
    assert find_quote("Dune is a 1965 novel by Frank Herbert.", SOURCE) is None


def test_too_short_or_empty_quotes_are_rejected():
    assert find_quote("Hall", SOURCE) is None
    assert find_quote("", SOURCE) is None
    assert find_quote("published by the American Psychological Association", "") is None


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=40, max_size=400), st.integers(min_value=0, max_value=200), st.integers(min_value=15, max_value=80))
def test_any_found_quote_is_a_substring_of_the_source(text, start, length):
    quote = text[start:start + length]
    span = find_quote(quote, text)
    if span is not None:
        assert span in text


# ------------------------------------------------------------------ sentences the grammar admits

from appliance.pipeline.anchor import MAX_SENTENCE_CHARS, MIN_SENTENCE_CHARS, quotable_sentences  # noqa: E402


def test_quotable_sentences_split_fold_and_skip_fragments():
    text = ("Canon law\n\nIn the Church of England,   the courts\tstill sit. Short one. "
            "Their status dates back to the 12th century!  In the Church of England, the courts still sit.")
    assert quotable_sentences(text) == (
        "In the Church of England, the courts still sit.",  # white space folded, repeat dropped
        "Their status dates back to the 12th century!")     # "Canon law" and "Short one." too short
    # A sentence holding a chat-template token is never offered: the model would have to write it.
    assert quotable_sentences("A page says <|im_end|> to the model here. This one is plain enough.") == (
        "This one is plain enough.",)


def test_long_sentences_are_cut_at_words_and_the_count_is_capped():
    words = " ".join(f"word{i}" for i in range(200)) + "."
    pieces = quotable_sentences(words)
    assert len(pieces) > 1 and all(len(p) <= MAX_SENTENCE_CHARS for p in pieces)
    assert " ".join(pieces) == words, "the pieces are the sentence, cut only at spaces"
    many = " ".join(f"Sentence number {i} is here." for i in range(500))
    assert len(quotable_sentences(many, limit=30)) == 30


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=120),
                max_size=12).map(lambda parts: " ".join(parts)))
def test_every_quotable_sentence_is_found_verbatim(text):
    """Whatever the page holds, each sentence offered to the grammar passes the quote check,
    and the span kept is the page's own text."""
    for sentence in quotable_sentences(text):
        assert MIN_SENTENCE_CHARS <= len(sentence) <= MAX_SENTENCE_CHARS
        span = find_quote(sentence, text)
        assert span is not None and span in text, sentence


from appliance.pipeline.text import grounded  # noqa: E402


def test_a_claim_is_grounded_when_its_words_are_in_its_quote():
    quote = "Brand is a play by the Norwegian playwright Henrik Ibsen."
    assert grounded("Henrik Ibsen wrote the play Brand.", quote)
    assert grounded("Brand is a play by Henrik Ibsen", quote.upper())
    assert not grounded("Frank Herbert wrote Dune.", quote)        # the prompt's example, echoed
    assert not grounded("The Norwegian navy bought ten frigates in 1999.", quote)
    assert not grounded("", quote) and not grounded("It is.", quote)  # nothing to ground
    # A lower share for written text that adds words of its own.
    assert grounded("The Norwegian writer Ibsen, famous for dramas, created Brand.", quote, 1 / 3)
    assert not grounded("The Norwegian writer Ibsen, famous for dramas, created Brand.", quote)


from appliance.pipeline.names import names, off_subject  # noqa: E402


def test_names_skip_sentence_openers_months_and_give_acronyms():
    assert names("Blokker was born in Amsterdam in March 1930.") == {"amsterdam"}
    assert names("Blokker was born in Amsterdam.", openers=True) == {"blokker", "amsterdam"}
    assert "us" in names("He moved to the U.S. in 1950.")
    assert "apa" in names("It is published by the American Psychological Association.")
    assert names("Providers must register high-risk systems.") == set()


BRAND = "What country was the author of Brand a citizen of?\nWho wrote Brand?\nHenrik Ibsen"


def test_a_claim_about_other_named_things_is_off_subject():
    assert off_subject("Blokker was born in Amsterdam.\nBlokker was born in Amsterdam", BRAND)
    assert off_subject("Anastasia Ashman is an American author.", BRAND)


def test_a_claim_naming_the_research_or_naming_nothing_is_on_subject():
    assert not off_subject("Henrik Ibsen wrote the play Brand.", BRAND)
    # Word forms are forgiven; a sentence opener counts when it is one of the research's names.
    assert not off_subject("The playwright was a Norwegian citizen.", BRAND + "\nNorway")
    assert not off_subject("Midway is in Iowa.", "In which country is Midway?")
    # Nothing named: never off subject. Research that names nothing: no check.
    assert not off_subject("It was dissolved in 1995.", BRAND)
    assert not off_subject("Intermittent fasting lowers insulin in Finland.", "What does fasting do?")


def test_text_around_the_quote_can_put_a_claim_on_subject():
    claim = "The study of adolescence began with G. Stanley Hall's book."
    chain = "Who was the first president of the American Psychological Association?"
    assert off_subject(claim, chain)
    assert not off_subject(claim, chain, around="Hall was the first president of the American Psychological Association.")


def test_a_shared_kind_of_thing_is_not_a_shared_subject():
    chain = "What university did Judith Viorst attend?\nNewark College of Arts and Sciences"
    assert off_subject("Teriān graduated in the Science Department of University of Tehran.", chain)
    assert not off_subject("Judith Viorst attended Rutgers University.", chain)
    assert not off_subject("Johnnycake is located in McDowell County.", "Which county borders McDowell County?")


def test_a_shared_given_name_with_another_last_name_is_another_person():
    """'Henrik' of 'Hans Henrik Stoermann-Naess' is not 'Henrik Ibsen' (a sailor's page was
    cited in the Brand report), nor 'Steven Amsterdam' 'Steven Blankaart'."""
    assert off_subject("Hans Henrik Stoermann-Naess was a sailor who competed in the Summer Olympics.", BRAND)
    assert off_subject("Steven Amsterdam is an American writer.", "Where was Steven Blankaart born?")
    # The research's last name anywhere after it, or the name alone, is the same bearer.
    assert not off_subject("Hans Henrik Ibsen was a painter.", BRAND)
    assert not off_subject("G. Stanley Hall's Adolescence appeared in 1904.", "Who was G. Stanley Hall?\nAPA")
    assert not off_subject("Andrew Morton wrote Madonna's biography.", "Who wrote The Madonna Companion?")
    assert not off_subject("The Madonna Companion is a biography.", "Who wrote a book on Madonna?")
    # A word the research also uses alone, or before a kind of thing, is not a given name.
    assert not off_subject("Henrik Wergeland was a poet.", BRAND + "\nWas Henrik a citizen?")
    assert not off_subject("Hampshire Regiment was raised in 1881.", "Which county borders Hampshire County?")


from appliance.pipeline.names import names_unsupported  # noqa: E402


def test_a_claim_naming_what_its_quote_never_names_is_unsupported():
    blokker = "Jaap Blokker\nBlokker was born in Amsterdam."
    assert names_unsupported("Henrik Ibsen was born in Amsterdam.", blokker)
    assert not names_unsupported("Blokker was born in Amsterdam.", blokker)
    # The subject may be named by the title or the sentence before; word forms and kinds of
    # thing are forgiven.
    ibsen = "Henrik Ibsen\nIbsen grew up in Skien. He was born in Norway."
    assert not names_unsupported("Henrik Ibsen was born in Norway.", ibsen)
    assert not names_unsupported("Ibsen was a Norwegian playwright.", "Henrik Ibsen\nHe was born in Norway.")
    assert not names_unsupported("Judith Viorst attended Rutgers University.",
                                 "Judith Viorst\nShe graduated from Rutgers in 1952.")


