"""Gather: each node researched in its own context, the moment its parents are done.

Per node: queries -> hits -> URL rules and the run's fetch budget -> fetch + extract ->
claims whose quotes are anchored in the source text -> (reflect, search again) -> findings.
Nodes run on a small thread pool; model calls serialise on the engine, network I/O overlaps.
URL admissions go through a turnstile in the run's fixed node order, so which node gets which
page never depends on thread timing: a rerun replays the same calls from the cache.
"""

from __future__ import annotations

import hashlib
import re
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from ..contracts import (Claim, Extraction, Hit, Importance, IterativeStep, NodeState, Reflection,
                         SearchQueries, Source, SourceQuality, answer_schema, bounded, quoting_extraction)
from ..errors import RunCancelled, SearchError, StateError
from . import prompts
from .anchor import find_quote, passages_text, quotable_sentences, quote_context, source_passages
from .forms import checked_answer, compared, compared_query, echoes_example, held_answer
from .names import names_named, names_unsupported, off_subject, query_names
from .text import grounded, same_question
from .state import RunContext, ask

MAX_PARALLEL_NODES = 4
# Claims joined into a node's findings (what its children and the report see of it).
MAX_FINDINGS = 5


class Turnstile:
    """Lets keys pass in a fixed order; a key that will never come must be released."""

    def __init__(self, order: list[tuple[str, int]]):
        self._order = list(order)
        self._done: set[tuple[str, int]] = set()
        self._cond = threading.Condition()

    def _head(self) -> tuple[str, int] | None:
        for key in self._order:
            if key not in self._done:
                return key
        return None

    def wait(self, key: tuple[str, int]) -> None:
        """Until ``key`` is the first not done, or has itself been released (``release_all``
        marks every key done while nodes may be waiting: they must pass, not wait forever)."""
        with self._cond:
            self._cond.wait_for(lambda: key in self._done or self._head() == key)

    def done(self, key: tuple[str, int]) -> None:
        with self._cond:
            self._done.add(key)
            self._cond.notify_all()

    def release_node(self, node_id: str) -> None:
        with self._cond:
            self._done.update(k for k in self._order if k[0] == node_id)
            self._cond.notify_all()

    def release_all(self) -> None:
        """Open the gate for everyone: the run is stopping and no key will come in order."""
        with self._cond:
            self._done.update(self._order)
            self._cond.notify_all()


def gather(run: RunContext, nodes: list[NodeState], effort: int) -> list[Claim]:
    """Research every node (parents first, pipelined) and return all accepted claims in a fixed order."""
    iterations = max(1, run.settings.pipeline.iterations)
    turnstile = Turnstile([(n.id, it) for n in nodes for it in range(rounds_of(run, n, iterations))])
    claims: dict[str, list[Claim]] = {n.id: [] for n in nodes}
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_NODES, max(1, len(nodes))),
                            thread_name_prefix="node") as pool:
        try:
            _drive(run, nodes, effort, iterations, turnstile, pool, claims)
        except BaseException:
            # The run is stopping (a full state folder, Ctrl-C): running nodes may wait at the
            # turnstile for nodes that will now never start. Open it so the pool can wind down.
            turnstile.release_all()
            raise
    return [c for n in nodes for c in claims[n.id]]


def _drive(run: RunContext, nodes: list[NodeState], effort: int, iterations: int,
           turnstile: Turnstile, pool: ThreadPoolExecutor, claims: dict[str, list[Claim]]) -> None:
    """Start each node when its parents are done; collect its claims as it finishes."""
    by_id = {n.id: n for n in nodes}
    finished: set[str] = set()
    running: dict = {}

    def ready(node: NodeState) -> bool:
        return node.status == "pending" and all(p in finished for p in node.depends_on)

    while len(finished) < len(nodes):
        for node in nodes:
            if ready(node) and node.id not in running.values():
                node.status = "running"
                run.progress.on_node(node.id, node.question, "in progress")
                parents = [by_id[p] for p in node.depends_on]
                future = pool.submit(_gather_node, run, node, parents, effort, iterations, turnstile)
                running[future] = node.id
        if not running:
            break  # nothing can start: cannot happen with a checked plan, but never hang
        done, _ = wait(list(running), return_when=FIRST_COMPLETED)
        for future in done:
            node_id = running.pop(future)
            node = by_id[node_id]
            try:
                claims[node_id] = future.result()
                node.status = "done"
            except (StateError, RunCancelled):
                # A full or read-only state folder fails every node alike: stop the run with
                # the one clear message instead of recording each node as failed. A cancel
                # stops the whole run, not one node.
                raise
            except Exception as exc:  # a bug in one node must not discard the others' work
                node.status = "failed"
                node.error = f"{type(exc).__name__}: {exc}"
                run.stats.add(nodes_failed=1)
            finally:
                turnstile.release_node(node_id)
            finished.add(node_id)
            run.recorder.append("nodes", node)
            run.progress.on_node(node_id, node.question, node.status)


def rounds_of(run: RunContext, node: NodeState, iterations: int) -> int:
    """How many searches a node may make: the question's own node up to ``question_searches``
    (each after the first named by a reading step), a compared thing's node one, every other
    node ``iterations``."""
    if node.whole_question:
        return max(1, run.settings.pipeline.question_searches)
    return 1 if node.reads_only else iterations


def earlier_text(parents: list[NodeState]) -> str:
    """What a node's parents found, for its prompts: each sub-question with its short answer,
    then its findings. Multi-hop questions need the answer itself ("the association that
    published X" is searched and read as its name once a parent found it)."""
    parts = []
    for p in parents:
        if p.answer:
            parts.append(f"{p.question} {p.answer}.")
        if p.findings:
            parts.append(p.findings)
    return " ".join(parts)


_REFERENCE = re.compile(r"#(\d{1,2})\b")


def resolve_question(node: NodeState, parents: list[NodeState]) -> str:
    """The node's question with each reference to an earlier answer (#1 for q1's) replaced by
    that answer, or, when the parent found none, by the parent's own question."""
    by_id = {p.id: p for p in parents}

    def fill(match: re.Match) -> str:
        parent = by_id.get(f"q{match.group(1)}")
        if parent is None:
            return match.group(0)
        return parent.answer or f"(the answer to: {parent.asked.rstrip('?')})"

    return _REFERENCE.sub(fill, node.question)


def query_with_answers(node: NodeState, parents: list[NodeState]) -> str:
    """The node's question as asked, with its parents' short answers added (those it lacks)."""
    low = node.asked.lower()
    extra = [p.answer for p in parents if p.answer and p.answer.lower() not in low]
    return " ".join([node.asked] + extra)


def _gather_node(run: RunContext, node: NodeState, parents: list[NodeState], effort: int,
                 iterations: int, turnstile: Turnstile) -> list[Claim]:
    settings = run.settings.pipeline
    node.resolved = resolve_question(node, parents)
    parent_text = earlier_text(parents)
    node_claims: list[Claim] = []
    queries = _first_queries(run, node, parents, parent_text, effort)
    source_index = 0
    read: list[Source] = []
    rounds = rounds_of(run, node, iterations)
    for iteration in range(rounds):
        node.queries.extend(queries)
        hits = _search(run, queries, node.id)
        # A later search of the question's own node is what its pages must come near: the
        # hop it names ("Brandt and Sons founder") may share no words with the question.
        focus = queries[0] if iteration and node.whole_question else query_with_answers(node, parents)
        turnstile.wait((node.id, iteration))
        try:
            admitted = _admit(run, hits, source_cap(run, node))
            sources = run.fetcher.fetch_many([h.url for h in admitted]) if admitted else []
            for hit, source in zip(admitted, sources):
                if not source.title:
                    source.title = hit.title
            # In the turnstile, so which node may read a given-back page next is the same on
            # every run.
            bearing = [bears_on(run, node, focus, source) for source in sources]
        finally:
            turnstile.done((node.id, iteration))
        for source, bears in zip(sources, bearing):
            source_index += 1
            if bears:
                node_claims.extend(_read_source(run, node, parent_text, source, source_index, focus))
                if source.ok and source.text.strip():
                    read.append(source)
        if iteration + 1 >= rounds:
            break
        queries = _next_search(run, node, read) if node.whole_question else _reflect(run, node, node_claims, effort)
        if not queries:
            break  # the turnstile keys of the rounds not run are released with the node
    _conclude(run, node, node_claims, parent_text, query_with_answers(node, parents))
    return node_claims


def source_cap(run: RunContext, node: NodeState) -> int:
    """How many sources a node reads: the question's own node ``question_sources``, a compared
    thing's ``compared_sources``, any other ``sources_per_node``; a sub-question that is the
    question as asked stands for the question's node too (none is added beside it), so it reads
    for both: ``sources_per_node`` + ``question_sources``. The answer then never rests on fewer
    pages than the plan's node and the question's node together would read."""
    settings = run.settings.pipeline
    if node.whole_question:
        return settings.question_sources
    if node.compares:
        return settings.compared_sources
    if settings.question_sources and same_question(node.question, run.ctx.question):
        return settings.sources_per_node + settings.question_sources
    return settings.sources_per_node


def _first_queries(run: RunContext, node: NodeState, parents: list[NodeState], parent_text: str,
                   effort: int) -> list[str]:
    # With one query a node searches its own sub-question, its parents' answers added: no
    # model call is needed (hybrid search matches the names as they are). The question as
    # asked is searched as it is, as one retrieval call would; a compared thing by its name
    # and the question's own words.
    if node.compares:
        return [compared_query(node.compares, run.ctx.question,
                               [c for c in compared(run.ctx.question) if c != node.compares])]
    if effort <= 1 or node.whole_question:
        return [query_with_answers(node, parents)]
    messages = prompts.queries(run.ctx, node.asked, parent_text, effort)
    out = ask(run, run.models.extractor, messages, bounded(SearchQueries, queries=(1, effort)),
              max_tokens=prompts.QUERIES_TOKENS, purpose="queries")
    if out is None:
        return [query_with_answers(node, parents)]
    queries = [q for q in _clean_queries(out.queries)
               if not run.checks.applies("example-echo", lambda: echoes_example(q, node.asked, parent_text),
                                  on=f"query {q!r}", node=node.id)][:effort]
    return queries or [query_with_answers(node, parents)]


def _clean_queries(queries: list[str]) -> list[str]:
    seen: list[str] = []
    for q in queries:
        q = " ".join(q.split())[:200]
        if q and q.lower() not in (s.lower() for s in seen):
            seen.append(q)
    return seen


def _search(run: RunContext, queries: list[str], node: str = "") -> list[Hit]:
    """Hits of every query, interleaved by rank (best of each query first)."""
    per_query: list[list[Hit]] = []
    limit = run.settings.search.results_per_query
    for query in queries:
        key = hashlib.sha256(f"{run.backend.name}\0{limit}\0{query}".encode()).hexdigest()
        cached = run.searches.get(key)
        if cached is not None:
            hits = [Hit.model_validate(h) for h in cached]
        else:
            try:
                hits = run.backend.search(query, limit)
            except SearchError as exc:
                run.stats.note_search_error(exc.one_line())
                continue
            for hit in hits:
                hit.query = query
            run.searches.put(key, [h.model_dump(mode="json") for h in hits])
        run.stats.add(searches=1, hits=len(hits))
        per_query.append(named_first(run, query, hits, node))
    merged: list[Hit] = []
    for rank in range(max((len(h) for h in per_query), default=0)):
        merged.extend(hits[rank] for hits in per_query if rank < len(hits))
    return merged


def named_first(run: RunContext, query: str, hits: list[Hit], node: str = "") -> list[Hit]:
    """Check search-named-first: a query's hits ordered by how many of the names it asks about
    their title and snippet name, the search's own order kept among equals. A node reads a few
    pages of each search, and a ranking that weighs meaning puts a page on the general topic
    ("Which county is Ardmore in?": a page on counties) before the one page naming the place.
    The question as asked keeps the search's order: its node reads what one retrieval call
    would, and a question names incidental things ("Besides Ardmore, which town ...") that a
    sub-question leaves out."""
    asked = query_names(query)
    if (len(hits) < 2 or not asked or same_question(query, run.ctx.question)
            or not run.checks.on("search-named-first")):
        return hits
    named = [names_named(asked, f"{hit.title}. {hit.snippet}") for hit in hits]
    order = sorted(range(len(hits)), key=lambda i: -named[i])
    if order == list(range(len(hits))):
        return hits
    moved = [hits[i].url for i, at in zip(order, range(len(hits))) if i > at]
    run.checks.fired("search-named-first", on=f"query {query!r}", node=node, moved_up=moved)
    return [hits[i] for i in order]


def _admit(run: RunContext, hits: list[Hit], cap: int) -> list[Hit]:
    """Up to ``cap`` new hits through the run-wide URL rules; the rest are counted, not lost."""
    admitted: list[Hit] = []
    before_dups = len(run.ledger.duplicates)
    before_drops = len(run.ledger.budget_drops)
    for position, hit in enumerate(hits):
        if len(admitted) >= cap:
            run.stats.add(node_cap_drops=len(hits) - position)
            break
        admitted.extend(run.ledger.admit([hit]))
    run.stats.add(url_duplicates=len(run.ledger.duplicates) - before_dups,
                  budget_drops=len(run.ledger.budget_drops) - before_drops)
    return admitted


def bears_on(run: RunContext, node: NodeState, focus: str, source: Source) -> bool:
    """Check page-gate: False when no sentence of the text the extractor would read, alone or after the page's
    title, comes near anything the run asks (``_nearness`` below ``relevance_threshold``): a
    claim quoting one would be tangential, so the page is not read (no extraction call). Its
    URL is given back to the run: a later node, knowing more (a parent's answer in its
    focus), may admit and read it."""
    if not source.ok or not source.text.strip() or not run.checks.on("page-gate"):
        return True  # _read_source records the failure
    text = source.text[: run.settings.pipeline.source_chars]
    sentences = list(quotable_sentences(text)) or [text]
    # Each sentence also with the page's title before it: a page names its subject in the
    # title and says "the river" after it ("Velka River": "The river ... joins the sea at Port Ardmore").
    nearest = _nearness(run, focus, sentences + after_title(source.title, sentences))
    if nearest is None or float(nearest.max()) >= run.settings.pipeline.relevance_threshold:
        return True
    run.ledger.release(source.url)
    run.recorder.append("sources", {"node": node.id, **source.model_dump(mode="json"),
                                    "off_topic": True, "relevance": round(float(nearest.max()), 3)})
    run.stats.add(sources_off_topic=1)
    run.checks.fired("page-gate", on=f"source {source.url}", node=node.id)
    return False


def _read_source(run: RunContext, node: NodeState, parent_text: str, source: Source,
                 index: int, focus: str) -> list[Claim]:
    """Extract the claims of one source; ``focus`` is what they must bear on (the node's
    question with its parents' answers)."""
    with run.sources_lock:
        run.sources[source.url] = source
    if not source.ok or not source.text.strip():
        run.recorder.append("sources", {"node": node.id, **source.model_dump(mode="json")})
        run.stats.add(sources_failed=1)
        return []
    run.stats.add(sources_fetched=1)
    settings = run.settings.pipeline
    text = source.text[: settings.source_chars]
    sentences = quotable_sentences(text) if settings.quote_sentences else ()
    messages = prompts.extract(run.ctx, node.asked, parent_text, source.title,
                               source.published, text, settings.claims_per_source,
                               quote_first=bool(sentences), restate=settings.restate_claims)
    if sentences:  # the grammar admits only the source's own sentences as quotes
        schema = quoting_extraction(settings.claims_per_source, sentences, settings.restate_claims)
    else:
        schema = bounded(Extraction, claims=(0, settings.claims_per_source))
    extraction = ask(run, run.models.extractor, messages, schema, max_tokens=prompts.EXTRACT_TOKENS,
                     purpose="extract", extraction_failures=1)
    if extraction is None:
        run.recorder.append("sources", {"node": node.id, **source.model_dump(mode="json")})
        return []
    source.quality = extraction.source_quality
    run.recorder.append("sources", {"node": node.id, **source.model_dump(mode="json")})
    relevance = (relevance_to(run, focus, [(" ".join(c.claim.split()), c.quote) for c in extraction.claims],
                              source.title)
                 if run.checks.on("claim-relevance") else None)
    accepted: list[Claim] = []
    for k, item in enumerate(extraction.claims[: settings.claims_per_source], start=1):
        run.stats.add(claims_extracted=1)
        span = find_quote(item.quote, source.text, settings.quote_similarity)
        claim_text = " ".join(item.claim.split())
        record: dict = {"node": node.id, "source_url": source.url, "claim": claim_text,
                        "model_quote": item.quote, "accepted": span is not None,
                        "importance": item.importance.value, "checks": []}
        on = f"claim {node.id}-s{index}-c{k}"
        importance = item.importance
        if relevance is not None:
            record["relevance"] = round(float(relevance[k - 1]), 3)
            if relevance[k - 1] < settings.relevance_threshold and importance != Importance.tangential:
                importance = Importance.tangential  # off the sub-question, whatever the label
                record["off_topic"] = True
                record["checks"].append("claim-relevance")
                run.checks.fired("claim-relevance", on=on)
        around = f"{source.title}\n{quote_context(source.text, span)}" if span is not None else ""
        if span is not None:
            # The model's wording does not rest on the sentence it quoted (an echo of the
            # prompt's example, a guess, the sub-question's subject put on another's fact):
            # the quoted sentence itself is the claim.
            kept = claim_text
            rewrite = next((check_id for check_id, decide in (
                ("claim-ungrounded", lambda: not grounded(kept, span)),
                ("claim-names-unsupported", lambda: names_unsupported(kept, around)))
                if run.checks.applies(check_id, decide, on=on)), None)
            if rewrite:
                claim_text = " ".join(span.split())
                record["claim_from_quote"] = claim_text
                record["checks"].append(rewrite)
                run.stats.add(claims_from_quote=1)
        else:
            record["checks"].append("quote-anchor")
            run.checks.fired("quote-anchor", on=on)
        run.recorder.append("claims", record)
        if span is None:
            run.stats.add(quotes_rejected=1)
            continue
        accepted.append(Claim(
            id=f"{node.id}-s{index}-c{k}", node_id=node.id, text=claim_text, quote=span,
            source_url=source.url, source_title=source.title, importance=importance,
            source_quality=extraction.source_quality,
            published=source.published or extraction.publish_date))
    nearest = _nearest_claim(run, node, source, list(sentences), focus, accepted,
                             f"{node.id}-s{index}-c{len(extraction.claims[: settings.claims_per_source]) + 1}",
                             extraction.source_quality, source.published or extraction.publish_date)
    return accepted + ([nearest] if nearest is not None else [])


def _nearest_claim(run: RunContext, node: NodeState, source: Source, sentences: list[str], focus: str,
                   picked: list[Claim], claim_id: str, quality: SourceQuality,
                   published: str | None) -> Claim | None:
    """Check nearest-sentence: the page's sentence nearest to what the run asks, as a claim of
    its own (the sentence is the claim, rated supporting, so the extractor's central picks
    rank first), when it is near enough (``relevance_threshold``) and none of ``picked``
    quotes it. None otherwise, or when the check or the embedder is off."""
    if not sentences or not run.checks.on("nearest-sentence"):
        return None
    found = nearest_sentence(run, focus, sentences, source.title)
    if found is None or found[1] < run.settings.pipeline.relevance_threshold:
        return None
    span = find_quote(found[0], source.text, run.settings.pipeline.quote_similarity)
    if span is None or " ".join(span.split()) in {" ".join(c.quote.split()) for c in picked}:
        return None
    text = " ".join(span.split())
    run.checks.fired("nearest-sentence", on=f"claim {claim_id}", relevance=round(found[1], 3))
    run.stats.add(claims_extracted=1)  # a claim of the page like the extractor's, counted with them
    run.recorder.append("claims", {"node": node.id, "source_url": source.url, "claim": text, "model_quote": None,
                                   "accepted": True, "importance": Importance.supporting.value,
                                   "relevance": round(found[1], 3), "checks": ["nearest-sentence"]})
    return Claim(id=claim_id, node_id=node.id, text=text, quote=span, source_url=source.url,
                 source_title=source.title, importance=Importance.supporting, source_quality=quality,
                 published=published)


def nearest_sentence(run: RunContext, focus: str, sentences: list[str], title: str | None) -> tuple[str, float] | None:
    """Check nearest-sentence decides on this: the sentence nearest in meaning to what the run
    asks (``_nearness``), each read alone and after the page's title as the page gate reads
    them, with its similarity; None without an embedder or with the threshold at 0."""
    sims = _nearness(run, focus, sentences + after_title(title, sentences)) if sentences else None
    if sims is None:
        return None
    best = sims.reshape(-1, len(sentences)).max(axis=0)
    at = int(best.argmax())
    return sentences[at], float(best[at])


def relevance_to(run: RunContext, focus: str, pairs: list[tuple[str, str]], title: str = ""):
    """Check claim-relevance decides on this: for each (claim, quote), how near it is in meaning to what the run asks (see
    ``_nearness``): the highest of the claim's and the quote's, each read alone and, with a
    ``title``, after its page's title. A page names its subject in its title and "she" after
    it: "She is best known for the ballad Silver Rain", on its own far from a question about
    the singer of that ballad, comes near once read as "Ida Brandt: She is ...". None when the
    check is off."""
    texts = [t for pair in pairs for t in pair]
    titled = after_title(title, texts)
    sims = _nearness(run, focus, texts + titled) if pairs else None
    if sims is None:
        return None
    return list(sims.reshape(2 if titled else 1, len(pairs), 2).max(axis=(0, 2)))


def after_title(title: str | None, texts: list[str]) -> list[str]:
    """Each text read after its page's title ("Velka River: The river ... joins the sea"), the
    one form both the page gate and claim-relevance judge a sentence in, so the two checks
    never read one sentence two ways; none without a title. The title's spacing is folded."""
    title = " ".join((title or "").split())
    return [f"{title}: {text}" for text in texts] if title else []


def _nearness(run: RunContext, focus: str, texts: list[str]):
    """For each text, the highest cosine similarity with what the run asks: ``focus`` (the
    node's question with its parents' answers), the main question or another sub-question of
    the plan (a page read for one may answer another). None when the check is off
    (``relevance_threshold`` 0) or no embedder is at hand."""
    if not texts or run.embedder is None or run.settings.pipeline.relevance_threshold <= 0:
        return None
    asks = list(dict.fromkeys([focus, run.ctx.question, *run.questions]))
    vectors = run.embedder.encode(asks + texts)
    return (vectors[len(asks):] @ vectors[:len(asks)].T).max(axis=1)


def _next_search(run: RunContext, node: NodeState, read: list[Source]) -> list[str]:
    """The question's own node searches again with what it read (retrieve, read, retrieve
    again): one step reads its pages so far, says what they establish and names the one
    search still missing ("Brandt and Sons founder" once a page named the builder of the
    bridge the question asks about), or none when they answer the question. A search already
    made, or one copying the prompt's example, ends the node's searching."""
    messages = prompts.iterative_step(run.ctx.question, passages_text(read) or "nothing found yet",
                                      node.queries, run.ctx.today)
    step = ask(run, run.models.planner, messages, IterativeStep, max_tokens=prompts.ITERATIVE_STEP_TOKENS,
               purpose="next-search")
    search = " ".join(step.next_search.split())[:150] if step is not None else ""
    if not search or search.lower() in {q.lower() for q in node.queries}:
        return []
    if run.checks.applies("example-echo", lambda: echoes_example(search, run.ctx.question, passages_text(read)),
                          on=f"next search {search!r}", node=node.id):
        return []
    return [search]


def _claims_text(claims: list[Claim], limit: int = 12) -> str:
    return "\n".join(f"- {c.text}" for c in claims[:limit])


def _reflect(run: RunContext, node: NodeState, claims: list[Claim], effort: int) -> list[str]:
    messages = prompts.reflect(run.ctx, node.asked, _claims_text(claims), effort)
    out = ask(run, run.models.extractor, messages, bounded(Reflection, queries=(0, effort)),
              max_tokens=prompts.REFLECT_TOKENS, purpose="reflect")
    if out is None:
        return []
    context = node.asked + " " + _claims_text(claims)
    node.gaps.extend(g for g in out.gaps if g.strip() and not run.checks.applies(
        "example-echo", lambda: echoes_example(g, context), on=f"gap {g!r}", node=node.id))
    done = {q.lower() for q in node.queries}
    return [q for q in _clean_queries(out.queries)
            if q.lower() not in done and not run.checks.applies(
                "example-echo", lambda: echoes_example(q, context), on=f"query {q!r}", node=node.id)][:effort]


def _conclude(run: RunContext, node: NodeState, claims: list[Claim], earlier: str, focus: str) -> None:
    """A node ends with its short answer (what its children search and read with), findings
    (its claims) and gaps (for the gap round). The answer is read from the verbatim sentences
    its claims quote, by the same short-answer prompt as the run's final answer: a small model
    reads far better than it restates. It must rest on those sentences, or it is not kept.
    ``focus`` is the node's question with its parents' answers: the claims about what it names
    are the ones read."""
    with run.sources_lock:
        texts = {url: s.text for url, s in run.sources.items() if s.ok}
    relevant = about(run, focus, [c for c in claims if c.importance != Importance.tangential], texts)
    if node.reads_only:
        # Its claims go to the run's answer with every other node's; a short answer of its own
        # would be one more call, read from fewer pages than the run's answer reads, and a
        # gap for the question itself is no new sub-question.
        node.findings = " ".join(dedupe_text([c.text for c in relevant])[:MAX_FINDINGS])
        return
    if not relevant:
        node.findings = ""
        node.gaps = dedupe_text(node.gaps + [node.asked])
        return
    node.findings = " ".join(dedupe_text([c.text for c in relevant])[:MAX_FINDINGS])
    evidence = node_evidence(relevant, texts)
    question = f"{node.asked}\nEarlier answers: {earlier}" if earlier else node.asked
    held = held_answer(node.asked, evidence, run.checks.switches)
    for check_id, detail in held.firings():
        run.checks.fired(check_id, on=f"answer of {node.id}", **detail)
    out = ask(run, run.models.writer, prompts.short_answer(question, evidence, run.ctx.today, held.choices),
              answer_schema(held.allowed), max_tokens=prompts.ANSWER_TOKENS, purpose="node-answer",
              temperature=run.settings.llm.answer_temperature)
    node.answer = answer_checked(run, out.answer, evidence, node.asked, on=f"answer of {node.id}") if out else ""
    if not node.answer:
        node.gaps = dedupe_text(node.gaps + [node.asked])


def about(run: RunContext, focus: str, claims: list[Claim], texts: dict[str, str]) -> list[Claim]:
    """The claims about what ``focus`` names (check node-about, ``names.off_subject``: a claim, its
    quote or the text around it names one of its names, or the claim names nothing); all of
    them when the names check is off; ``texts``: the run's source texts by URL. A question on
    the country of a town, read from a page on that town and one on another country's
    colleges, must not answer with the other country; when no claim is about the town, none is
    read. The page's title counts as text around the quote: a page names its subject in the
    title and says "he" after it ("He already wrote for voices" on the page "Marta Olsen")."""
    if not run.settings.pipeline.name_check:
        return claims
    return [c for c in claims if not run.checks.applies("node-about", lambda: off_subject(
        f"{c.text}\n{c.quote}", focus,
        f"{c.source_title or ''}\n{quote_context(texts.get(c.source_url, ''), c.quote)}"), on=f"claim {c.id}")]


def answer_checked(run: RunContext, answer: str, evidence: str | None, question: str, on: str) -> str:
    """``forms.checked_answer`` under the run's switches, each check that fired counted."""
    kept, fired = checked_answer(answer, evidence, question, run.checks.switches)
    for check_id in fired:
        run.checks.fired(check_id, on=on, answer=" ".join(answer.split())[:200])
    return kept


# Characters of its sources a node's answer reads at most (about 800 tokens).
NODE_EVIDENCE_CHARS = 3200


def node_evidence(claims: list[Claim], texts: dict[str, str] | None = None, limit: int = 8,
                  total: int = NODE_EVIDENCE_CHARS) -> str:
    """What a node's answer reads: per source (in the order of its claims), the sentences its
    claims quote with the text around them (``anchor.passage_around``), numbered, with the
    source's title; at most ``limit`` quotes and about ``total`` characters. The extractor
    often quotes the sentence that names the subject and not the next one, which answers
    ("Ida Brandt's Harbour Notes ..." quoted, "Brandt, who was the first chair of the
    Velka Harbour Board, ..." not): the answer reads both. A source whose text
    is not at hand, or whose passage would pass ``total``, gives its quotes alone."""
    texts = texts or {}
    quotes: dict[str, list[str]] = {}
    titles: dict[str, str] = {}
    count = 0
    for claim in claims:
        mine = quotes.setdefault(claim.source_url, [])
        titles.setdefault(claim.source_url, claim.source_title or "untitled")
        if claim.quote not in mine and count < limit:
            mine.append(claim.quote)
            count += 1
    return "\n".join(f"[{n}] {titles[url]}: {passage}" for n, (url, passage)
                     in enumerate(source_passages(quotes, texts, total, quotes_alone=True), start=1))


def dedupe_text(items: list[str]) -> list[str]:
    """Items with spaces folded, empty and case-insensitively repeated ones left out, in order."""
    seen: list[str] = []
    for item in items:
        item = " ".join(item.split())
        if item and item.lower() not in (s.lower() for s in seen):
            seen.append(item)
    return seen
