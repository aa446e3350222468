"""Helpers shared by the fault tests (tests/test_faults_*.py): the CLI runner and its
environment, the one-line error check, a scripted engine that works on any real page, and
the check that report markdown stays inert. The loopback servers are in tests/sources_harness.py.

Issue 7: faults and hostile input. The appliance runs unattended and reads pages written by
strangers; under faults it must keep working, lose nothing and let nothing in. Each row's
promise is asserted in the file named, even where a neighbouring test module covers the
mechanism.

| row | fault or input                                   | file (tests/test_faults_...)  |
| --- | ------------------------------------------------ | ----------------------------- |
| 1   | SearXNG down, 403, slow, HTML, garbage, 500s;    | searxng.py                    |
|     | malformed SearXNG URLs (flag, env, config, doctor)|                              |
| 2   | page never answers, 10 GB, binary, malformed,    | pages.py                      |
|     | redirects forever                                |                               |
| 3   | links/redirects to 127.0.0.1, 10.x, metadata,    | pages.py                      |
|     | private IPv6, names resolving there              |                               |
| 4   | prompt injection in a page                       | injection.py                  |
| 5   | model file missing, truncated, not GGUF, wrong   | models.py                     |
|     | hash; a model that cannot hold the prompt        |                               |
| 6   | model output cut off or invalid after retries    | models.py                     |
| 7   | disk full, read-only state folder, failed writes | disk.py                       |
| 8   | SIGKILL at random moments                        | disk.py                       |
| 9   | hostile questions                                | input.py                      |
| 10  | config: unknown keys, wrong types, missing files | input.py                      |
| B   | bad batch files, corpus files, eval folders      | batch.py, input.py            |
| P   | properties (hypothesis)                          | properties.py                 |
| N   | no network beyond loopback                       | tests/test_no_network.py      |

Real parts wherever the machine allows: the real SearXNG, fetcher, trafilatura, LanceDB and
SmolLM2. The scripted engine (tests/fakes.py) drives only control-flow rows, and the CLI runs
that exercise file names or search faults, where the model's answers do not matter.

Real-model runs here use one llama.cpp thread: with one thread per core, a single other busy
process on a 2-core machine slows llama.cpp a hundredfold (measured: one plan call 2.5 s with
one thread, 215 s with two while another test process held a core).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from click.testing import CliRunner
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from appliance.cli import main
from appliance.contracts import (Extraction, GapQuestions, IterativeStep, Plan, PlanNode, ReportDraft, SearchQueries,
                                 ShortAnswer)
from appliance.pipeline.anchor import quotable_sentences
from appliance.pipeline.parts import Models
from conftest import REPO, TEST_MODEL_ENV, loopback_overrides, make_settings


MANIFEST = REPO / "models" / "models.toml"
MODEL_FILE = REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
HEADINGS = ["# Deep Dive:", "## Answer", "## Executive Summary", "## Findings", "## Open Questions",
            "## Sources", "## Run statistics"]
SAFE_REPORT_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}-[a-z0-9]+(-[a-z0-9]+)*\.md$")
HONEYBEE = "How do honeybees tell each other where flowers are?"



# ============================================================================ helpers

# With a manifest of a test's own, its entries' roles decide, not the suite's test model.
MANIFEST_ROLES = {key: "" for key in TEST_MODEL_ENV}


def app_env(home: Path, **extra: str) -> dict[str, str | None]:
    """Environment of one appliance run: this state folder, the repo's model manifest, one
    llama.cpp thread, loopback pages allowed, short timeouts; every other APPLIANCE_ variable
    of the test process unset but the pinned date."""
    env: dict[str, str | None] = {k: None for k in os.environ
                                  if k.startswith("APPLIANCE_") and k != "APPLIANCE_TODAY"}
    env.update(APPLIANCE_HOME=str(home), APPLIANCE_MODELS_MANIFEST=str(MANIFEST),
               APPLIANCE_LLM_N_THREADS="1", APPLIANCE_FETCH_ALLOW_HOSTS="127.0.0.1",
               APPLIANCE_FETCH_CONNECT_TIMEOUT="2", APPLIANCE_FETCH_READ_TIMEOUT="2",
               APPLIANCE_FETCH_TOTAL_TIMEOUT="4", APPLIANCE_SEARXNG_TIMEOUT="8", **TEST_MODEL_ENV)
    env.update(extra)
    return env


def cli(args: list[str], env: dict[str, str | None]):
    """Invoke the `appliance` command in-process."""
    return CliRunner().invoke(main, args, env=env)


def subprocess_env(env: dict[str, str | None]) -> dict[str, str]:
    """``app_env`` made into a full environment for a child process."""
    full = {k: v for k, v in os.environ.items()
            if not k.startswith("APPLIANCE_") or k == "APPLIANCE_TODAY"}
    full.update({k: v for k, v in env.items() if v is not None})
    return full


def assert_one_line_error(result, exit_code: int, *words: str) -> str:
    """The CLI's promise for every fault: one line starting with "error: ", the exit code of
    the fault's kind, no traceback, and words that name the cause and the fix."""
    assert result.exit_code == exit_code, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.output
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def files_under(folder: Path) -> set[Path]:
    """Every file below ``folder`` (none when it does not exist)."""
    return {p for p in folder.rglob("*") if p.is_file()} if folder.exists() else set()


def report_path_from(result) -> Path:
    """The report path the CLI printed (the last line of stdout)."""
    return Path(result.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- a scripted engine for any page

def source_text(messages: list[dict]) -> str:
    """The fenced source text inside an extraction prompt."""
    content = messages[-1]["content"]
    start = content.find("\n", content.find("<<<SOURCE")) + 1
    return content[start: content.rfind("\n>>>")]


def sentence_with(text: str, fragment: str = "") -> str:
    """The first quotable sentence of ``text`` holding ``fragment``: a quote the grammar of the
    extraction admits (the source's whole sentences) and the quote check finds."""
    for sentence in quotable_sentences(text):
        if fragment in sentence:
            return sentence
    return fragment


def any_page_script(nodes: list[str] | None = None, **over) -> dict:
    """Answers for the scripted engine that work on any real page: the plan is the question
    itself (or ``nodes``), each source gives its first sentence as a claim, votes confirm."""
    def plan(messages, seed):
        question = messages[-1]["content"].removeprefix("Question: ")[:300]
        asked = list(nodes or [question])
        if len(asked) < 2:  # the quick profile plans two to three sub-questions
            asked.append(f"What else is known? {asked[0]}"[:300])
        return Plan(effort=1, nodes=[PlanNode(id=f"q{i}", question=q) for i, q in enumerate(asked, start=1)])

    def extract(messages, seed):
        sentence = sentence_with(source_text(messages))
        claims = [{"claim": sentence[:300], "quote": sentence, "importance": "central"}] if sentence else []
        return Extraction(source_quality="secondary", claims=claims)

    script = {
        "plan": plan,
        "queries": lambda m, s: SearchQueries(queries=["honeybee waggle dance"]),
        "extract": extract,
        "node-answer": lambda m, s: ShortAnswer(answer="unknown"),
        "answer": lambda m, s: ShortAnswer(answer="unknown"),
        "vote": lambda m, s: {"reason": "the quote states it", "verdict": "supported"},
        "gaps": lambda m, s: GapQuestions(questions=[]),
        "next-search": lambda m, s: IterativeStep(known="", next_search=""),
        "synthesize": lambda m, s: ReportDraft(
            answer="See the findings.", executive_summary="The verified claims are listed.",
            findings=[{"theme": "Findings", "statements": [{"text": "The first source says so.",
                                                            "claim_ids": ["c1"]}]}]),
    }
    script.update(over)
    return script


def scripted_models(engine) -> Models:
    """One scripted engine in every role."""
    return Models(planner=engine, extractor=engine, verifier=engine, writer=engine)


def check_report_structure(md: str) -> None:
    """Every heading of the layout exactly once and in order; nothing else at level 1 or 2."""
    found = [line for line in md.splitlines() if re.match(r"#{1,2} ", line)]
    assert len(found) == len(HEADINGS) and found[0].startswith(HEADINGS[0] + " ") \
        and found[1:] == HEADINGS[1:], found


def quick_settings(home: Path, **overrides):
    """Settings of the quick profile for in-process runs: loopback pages allowed."""
    return make_settings(home, **loopback_overrides(**{"pipeline.profile": "quick", **overrides}))


# ---------------------------------------------------------------- markdown that must stay inert

MD = MarkdownIt("commonmark").enable("table")
CONTROL_CHARS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Text that tries every way out of markdown: syntax characters, HTML, links, fences, entities.
_HOSTILE_PIECES = st.sampled_from(
    list("\\`*_{}[]<>()#+!|~-=.&;:/ \n\t\x1b\x00\u202e") +
    ["http://x.example/a", "javascript:alert(1)", "&amp;", "&#60;", "<a>", "<script>", "```", "    ",
     "1.", "-->", "<!--", "[x]: http://y", "](http://evil)", "| a | b |", "## H", "\n\n---\n"])
hostile_text = st.lists(st.one_of(_HOSTILE_PIECES, st.text(max_size=6)), max_size=25).map("".join)


def inline_tokens(tokens):
    """The inline children of every block token."""
    return [c for t in tokens if t.type == "inline" for c in (t.children or [])]


def assert_markdown_is_inert(md: str, source_urls: set[str]) -> None:
    """What the page and model text may never produce: raw HTML, code, images, or a link other
    than a source's own URL; tables keep two cells a row."""
    assert not CONTROL_CHARS.search(md), "a control or bidi-override character reached the report"
    tokens = MD.parse(md)
    kinds = {t.type for t in tokens} | {c.type for c in inline_tokens(tokens)}
    assert not kinds & {"html_block", "html_inline", "code_inline", "code_block", "fence", "image"}, kinds
    from appliance.report import md_url

    allowed = {MD.normalizeLink(md_url(u)[1:-1]) for u in source_urls if md_url(u).startswith("<")}
    links = [c.attrs.get("href") for c in inline_tokens(tokens) if c.type == "link_open"]
    assert set(links) <= allowed, set(links) - allowed
    cells = 0
    for t in tokens:
        if t.type == "tr_open":
            cells = 0
        elif t.type in ("td_open", "th_open"):
            cells += 1
        elif t.type == "tr_close":
            assert cells == 2
