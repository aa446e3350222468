"""The decode loop: sampler, repetition stop, grammar properties on the real vocabulary, and
fast-forward with the real model."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from appliance import contracts
from appliance.contracts import bounded, quoting_extraction
from appliance.llm import CallRecord, grammar_for, normalize_schema, schema_json
from appliance.llm.decode import RepetitionGuard, Sampler, generate
from appliance.llm.grammar import dump_json

# ---------------------------------------------------------------- sampler


def test_sampler_is_seeded_and_samples_only_allowed_tokens():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal(1000).astype(np.float32)
    allowed = np.array(sorted(rng.choice(1000, 300, replace=False)))
    draws = lambda seed: [Sampler(seed, 0.8, 0.95).sample(logits, allowed) for _ in range(1)]  # noqa: E731
    sampler_a, sampler_b = Sampler(7, 0.8, 0.95), Sampler(7, 0.8, 0.95)
    seq_a = [sampler_a.sample(logits, allowed) for _ in range(200)]
    seq_b = [sampler_b.sample(logits, allowed) for _ in range(200)]
    assert seq_a == seq_b and set(seq_a) <= set(allowed.tolist())
    assert len(set(seq_a)) > 1                                     # it does sample
    assert {draws(s)[0] for s in range(50)} != {draws(0)[0]}       # seeds differ
    top40 = set(allowed[np.argsort(-logits[allowed])[:40]].tolist())
    assert set(seq_a) <= top40                                     # top-k 40


def test_sampler_greedy_min_p_and_top_p():
    logits = np.array([0.0, 5.0, 4.9, -3.0, 1.0], dtype=np.float32)
    allowed = np.arange(5)
    assert Sampler(1, 0.0, 1.0).sample(logits, allowed) == 1       # temperature 0: argmax
    assert Sampler(1, 0.7, 1.0).sample(logits, np.array([0, 3])) == 0
    # min-p 0.05 drops tokens far below the best; top-p 0.5 keeps only the best.
    picks = {Sampler(s, 1.0, 1.0).sample(logits, allowed) for s in range(200)}
    assert picks == {1, 2}
    assert {Sampler(s, 1.0, 0.5).sample(logits, allowed) for s in range(50)} == {1}


def _reference_sample(sampler: Sampler, logits, allowed) -> int:
    """The sampling chain written plainly over every allowed token (top-k by a full sort)."""
    values = logits[allowed].astype(np.float64)
    if sampler.temperature <= 0:
        return int(allowed[int(np.argmax(values))])
    order = np.lexsort((allowed, -values))[:sampler.top_k]
    chosen = values[order]
    probs = np.exp(chosen - chosen[0])
    probs /= probs.sum()
    keep = min(len(order), int(np.searchsorted(np.cumsum(probs), sampler.top_p) + 1))
    keep = min(keep, max(1, int(np.count_nonzero(probs >= sampler.min_p * probs[0]))))
    weights = np.exp((chosen[:keep] - chosen[0]) / sampler.temperature)
    return int(allowed[order[int(sampler._rng.choice(keep, p=weights / weights.sum()))]])


@hsettings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), scale=st.sampled_from([0.5, 3.0, 8.0, 30.0]),
       share=st.sampled_from([0.001, 0.02, 0.5, 1.0]), temperature=st.sampled_from([0.0, 0.3, 1.0]),
       peak=st.sampled_from([0.0, 15.0, 40.0]))
def test_the_fast_sampler_draws_what_the_plain_chain_draws(seed, scale, share, temperature, peak):
    """The sampler looks for the top-k near the best logit first, widening the look while it
    holds fewer than k; on any logits and mask (a peaked row with few near tokens, or a few
    tokens far above a cliff, included) it draws exactly what the plain chain draws."""
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal(5000) * scale).astype(np.float32)
    logits[rng.integers(0, 5000, 3)] += peak
    allowed = np.flatnonzero(rng.random(5000) < share)
    if not len(allowed):
        allowed = np.array([int(rng.integers(5000))])
    fast, plain = Sampler(seed, temperature, 0.95), Sampler(seed, temperature, 0.95)
    assert [fast.sample(logits, allowed) for _ in range(5)] == \
        [_reference_sample(plain, logits, allowed) for _ in range(5)]


# ---------------------------------------------------------------- repetition stop


def feed_text(guard: RepetitionGuard, pieces: list[bytes]) -> int | None:
    """Feed pieces (token id = piece's index in a private vocabulary); the step it stops at."""
    vocab: dict[bytes, int] = {}
    for step, piece in enumerate(pieces):
        if guard.feed(vocab.setdefault(piece, len(vocab)), piece):
            return step
    return None


def test_repetition_stop_fires_on_a_looping_string_only():
    stamp = [b"2024", b"-", b"01", b"-", b"01", b" ", b"12", b":", b"00", b" "]
    looping = [b'{"', b"summary", b'": "', b"At"] + stamp * 30
    step = feed_text(RepetitionGuard(), looping)
    assert step is not None and step < 4 + 10 * 7                 # stopped after a few copies
    # The same pieces as separate list items are not one looping string.
    items = [b'{"', b"stamps", b'": ['] + [b'"', *stamp, b'", '] * 30
    assert feed_text(RepetitionGuard(), items) is None
    # Ordinary prose does not trip it; nor does an escaped quote end the string early.
    prose = [b'{"a": "'] + [w.encode() + b" " for w in ("the lake drains north through a channel at "
                                                       "Omegna and its water was polluted").split()] * 2
    assert feed_text(RepetitionGuard(), prose + [b'\\"', b"x", b'"}']) is None


def test_no_repeat_ngram_bans_what_would_repeat_inside_the_string():
    guard = RepetitionGuard()
    for token, piece in [(0, b'{"a": "'), (1, b"x"), (2, b"y"), (3, b"z"), (1, b"x"), (2, b"y")]:
        guard.feed(token, piece)
    assert guard.banned(3) == {3}          # "x y" was followed by "z": "x y z" may not recur
    assert guard.banned(2) == {3}          # "y" was followed by "z"
    guard.feed(4, b'", "b": "')
    assert guard.banned(3) == set()        # a new string starts clean


# ---------------------------------------------------------------- grammar properties (real vocabulary)

# Characters that broke grammars before: quotes, backslashes, accents, control characters.
# (Unassigned and private-use code points are left out: SmolLM's vocabulary has no token for
# some of their UTF-8 lead bytes, so no model output could hold them.)
CHARS = st.characters(blacklist_categories=("Cs", "Cn", "Co"))
TRICKY = st.text(alphabet=st.one_of(st.sampled_from('"\\/\'\n\t\r\x00\x01\x1f\x7féçà€ßü—“”\u2028'), CHARS),
                 min_size=1, max_size=60)


def from_schema(node: dict):
    """A hypothesis strategy for JSON values valid under a normalised (ref-free) schema node."""
    if "enum" in node:
        return st.sampled_from(node["enum"])
    if "const" in node:
        return st.just(node["const"])
    if "anyOf" in node:
        return st.one_of([from_schema(n) for n in node["anyOf"]])
    kind = node.get("type")
    if kind == "object":
        props = node.get("properties", {})
        keys = list(props)  # in declaration order, as the grammar writes them
        return st.tuples(*(from_schema(props[k]) for k in keys)).map(lambda vals: dict(zip(keys, vals)))
    if kind == "array":
        return st.lists(from_schema(node.get("items", {})), min_size=node.get("minItems", 0),
                        max_size=min(node.get("maxItems", 3), 3))
    if kind == "string":
        return st.text(alphabet=CHARS, max_size=min(node.get("maxLength", 30), 30)) | TRICKY.filter(
                           lambda s: len(s) <= node.get("maxLength", 10**6))
    if kind == "integer":
        return st.integers(node.get("minimum", -1000), node.get("maximum", 1000))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    raise AssertionError(f"no strategy for {node}")


def contract_schemas(sentences: tuple[str, ...]) -> list[type]:
    return [bounded(contracts.Plan, nodes=(2, 4)), bounded(contracts.SearchQueries, queries=(1, 3)),
            contracts.Extraction, quoting_extraction(3, sentences), contracts.Vote,
            contracts.ReportDraft, contracts.ShortAnswer, contracts.Reflection, contracts.GapQuestions]


@pytest.fixture(scope="module")
def backend(llm_engine):
    return llm_engine.backend


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(sentences=st.lists(TRICKY, min_size=1, max_size=8, unique=True), data=st.data())
def test_matcher_accepts_every_valid_instance(backend, sentences, data):
    """For each contract (quotes as an enum of tricky sentences), a random valid instance,
    written as the grammar writes JSON, is accepted whole by the matcher on the real
    vocabulary, and is valid for pydantic."""
    for schema in contract_schemas(tuple(sentences)):
        normal = normalize_schema(json.loads(schema_json(schema)))
        value = data.draw(from_schema(normal), label=schema.__name__)
        text = dump_json(value)
        schema.model_validate_json(text)
        matcher = backend.matcher(grammar_for(schema_json(schema)), schema.__name__)
        assert matcher.consume_tokens(backend.tokenizer.tokenize_str(text)), (schema.__name__, text,
                                                                              matcher.get_error())
        assert matcher.is_accepting(), (schema.__name__, text)


class NoiseModel:
    """Random logits (seeded), biased towards tokens that close strings and lists so that
    random outputs end in reasonable time. Stands in for the model: the property is about
    the grammar and the loop, whatever the model prefers."""

    def __init__(self, bias: np.ndarray, seed: int):
        self.bias = bias
        self.rng = np.random.default_rng(seed)
        self.evaluated = 0

    def eval(self, tokens) -> None:
        assert len(tokens) >= 1
        self.evaluated += len(tokens)

    def logits(self) -> np.ndarray:
        return (self.rng.standard_normal(len(self.bias)) * 3 + self.bias).astype(np.float32)


@pytest.fixture(scope="module")
def closing_bias(backend):
    tok = backend.tokenizer
    bias = np.zeros(tok.vocab_size, dtype=np.float32)
    for t in range(tok.vocab_size):
        piece = tok.decode_bytes([t])
        if any(c in piece for c in b'"]}'):
            bias[t] = 9.0
    return bias


@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(sentences=st.lists(TRICKY, min_size=1, max_size=8, unique=True), seed=st.integers(0, 2**31 - 1),
       temperature=st.sampled_from([0.0, 0.3, 1.0]))
def test_decoded_output_always_parses_and_validates(backend, closing_bias, sentences, seed, temperature):
    """Whatever the logits, what the loop decodes to a grammar's end is valid JSON for the
    schema; the forced and sampled tokens add up to the output."""
    for i, schema in enumerate(contract_schemas(tuple(sentences))):
        matcher = backend.matcher(grammar_for(schema_json(schema)), schema.__name__)
        model = NoiseModel(closing_bias, seed + i)
        gen = generate(model, matcher, Sampler(seed + i, temperature, 0.95), max_tokens=3000,
                       eos=backend.tokenizer.eos_tokens, piece=backend._piece,
                       n_vocab=backend.tokenizer.vocab_size)
        assert gen.sampled + gen.forced == len(gen.tokens)
        assert model.evaluated == gen.evaluated <= len(gen.tokens)
        if gen.finish_reason != "stop":
            continue  # a truncation: the engine's retry path handles it
        text = backend.tokenizer.decode_bytes(gen.tokens).decode("utf-8")
        schema.model_validate_json(text)


# ---------------------------------------------------------------- real model

PASSAGE = ('Lake Orta is a small lake in the north of Italy. The island of San Giulio lies in the middle '
           'of the lake and holds a twelfth-century basilica. The lake drains to the north, unlike its '
           'neighbours, through the Nigoglia channel at Omegna. Its water was badly polluted by a rayon '
           'factory from 1926, and liming in 1989 and 1990 brought the fish back.')


@pytest.mark.slow
def test_forced_text_is_fast_forwarded_and_output_repeats_exactly(llm_engine):
    from appliance.pipeline.anchor import quotable_sentences

    schema = quoting_extraction(2, quotable_sentences(PASSAGE))
    messages = [{"role": "system", "content": "Extract claims as JSON. Each quote is one sentence of the text."},
                {"role": "user", "content": f"Text:\n{PASSAGE}\n\nWhich way does Lake Orta drain?"}]
    records: list[CallRecord] = []
    remove = llm_engine.add_listener(records.append)
    try:
        kwargs = dict(seed=5, max_tokens=400, cache=False)
        first = llm_engine.structured(messages, schema, **kwargs)
        second = llm_engine.structured(messages, schema, **kwargs)
        llm_engine.structured([{"role": "user", "content": "Is water wet? Give a reason."}], contracts.Vote,
                              max_tokens=120, cache=False)
        third = llm_engine.structured(messages, schema, **kwargs)
    finally:
        remove()
    assert first == second == third
    rec = records[0]
    assert rec.sampled_tokens + rec.forced_tokens == rec.generated_tokens
    assert 0 < rec.sampled_tokens < rec.generated_tokens           # a forced run was fast-forwarded
    assert 0 < rec.mask_seconds < rec.decode_seconds
    assert [r.generated_tokens for r in records] [:2] == [rec.generated_tokens] * 2
    assert records[1].prompt_evaluated == 2   # the same prompt again: only its two-token tail is evaluated


@pytest.mark.slow
def test_a_saved_instruction_head_is_restored_and_changes_nothing(tmp_path):
    """Calls with the same system message share its evaluated head even when another kind of
    call ran in between: the head's KV state is kept and restored (a memory copy), and the
    output is the one a fresh model gives the same call."""
    from appliance.llm import ModelPool
    from conftest import llm_settings

    system = ("You check whether the evidence states a claim. Write a reason first, then a "
              "verdict: supported, refuted or insufficient. " * 3)
    first = [{"role": "system", "content": system}, {"role": "user", "content": f"Evidence: {PASSAGE}\nClaim: Lake Orta drains north."}]
    other = [{"role": "system", "content": "Answer with one word."}, {"role": "user", "content": "Is water wet?"}]
    again = [{"role": "system", "content": system}, {"role": "user", "content": f"Evidence: {PASSAGE}\nClaim: Lake Orta is in Italy."}]
    records: list[CallRecord] = []
    with ModelPool(llm_settings(tmp_path / "a"), cache=False) as pool:
        engine = pool.for_role("verifier")
        engine.add_listener(records.append)
        engine.structured(first, contracts.Vote, seed=3, max_tokens=120)
        engine.structured(other, contracts.ShortAnswer, seed=3, max_tokens=20)
        restored = engine.structured(again, contracts.Vote, seed=3, max_tokens=120)
        bank = engine.backend.prefixes
        assert bank.restored == 1 and len(bank) == 2
        head = len(next(iter(p for p in bank._items if len(p) > 40)))
        assert records[2].prompt_evaluated <= records[2].prompt_tokens - head + 2
    with ModelPool(llm_settings(tmp_path / "b"), cache=False) as pool:
        fresh = pool.for_role("verifier").structured(again, contracts.Vote, seed=3, max_tokens=120)
    assert restored == fresh


def test_each_prompt_token_is_evaluated_once_when_a_head_is_saved(tmp_path):
    """The first call with a new system message evaluates its head, keeps the head's state and
    goes on from there: no prompt token is evaluated twice, and the accounting says so."""
    from appliance.llm import ModelPool
    from conftest import llm_settings

    system = "You check whether the evidence states a claim. " * 6
    messages = [{"role": "system", "content": system},
                {"role": "user", "content": f"Evidence: {PASSAGE}\nClaim: Lake Orta drains north."}]
    records: list[CallRecord] = []
    with ModelPool(llm_settings(tmp_path), cache=False) as pool:
        engine = pool.for_role("verifier")
        engine.add_listener(records.append)
        backend = engine.backend
        prompt_chunks: list[int] = []
        evaluate = backend._eval

        def counting(tokens, what):
            if what.startswith("evaluate a prompt"):
                prompt_chunks.append(len(tokens))
            evaluate(tokens, what)

        backend._eval = counting
        engine.structured(messages, contracts.Vote, seed=3, max_tokens=60)
    assert len(backend.prefixes) == 1                      # the head was saved on the way
    rec = records[0]
    assert sum(prompt_chunks) == rec.prompt_evaluated
    # each attempt submits the whole prompt; the first evaluates it once, a retry only its tail
    assert rec.prompt_evaluated == rec.prompt_tokens // rec.attempts + 2 * (rec.attempts - 1)
