"""Quote anchoring: what a report may quote is the source's own text, or nothing."""

from hypothesis import given, settings, strategies as st

from appliance.pipeline.quotes import find_quote

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
