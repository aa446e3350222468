"""Drawing a short answer: one call, its answer checks, and one redraw when a check dropped it
for something a second draw can mend. The pipeline's direct answer, its sub-questions' answers
and every eval baseline's answer are drawn here, so all modes are scored on one set of terms."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import prompts
from .checks import ALL_ON, Switches
from .forms import checked_answer, refusal_reason

# The longest refused answer the redraw prompt repeats (a sentence answer is cut there).
REFUSED_CHARS = 160


@dataclass
class DrawnAnswer:
    """The checked answer ("" when none passed), the model's raw answers in order, and each
    answer check that fired with the raw answer it fired on."""

    answer: str
    raws: list[str] = field(default_factory=list)
    fired: list[tuple[str, str]] = field(default_factory=list)

    @property
    def raw(self) -> str:
        return self.raws[-1] if self.raws else ""


def draw_answer(call: Callable[[list[dict]], str | None], question: str, evidence: str | None, today: str,
                choices: list[str] | tuple[str, ...] = (), switches: Switches = ALL_ON,
                checked_as: str | None = None) -> DrawnAnswer:
    """The short answer to ``question`` from ``evidence`` (None: from memory). ``call`` runs
    one short-answer prompt and gives the model's answer, or None when it gave no valid output.
    ``checked_as``: the question the answer checks read, when the prompt's question carries
    more (a sub-question with the earlier answers it builds on).
    Check answer-redraw: when an answer check drops the first answer for its form, for saying
    the question again or for not resting on the evidence, the prompt is asked once more with
    that answer and the reason it was refused; the second answer passes the same checks. An
    answer that says there is none is not drawn again (a model asked twice guesses)."""
    drawn = DrawnAnswer("")
    refused: tuple[str, str] | None = None
    for _ in range(2):
        raw = call(prompts.short_answer(question, evidence, today, choices, refused))
        if raw is None:
            return drawn
        drawn.raws.append(raw)
        answer, fired = checked_answer(raw, evidence, checked_as or question, switches)
        drawn.fired += [(check_id, raw) for check_id in fired]
        if answer or not fired or refused is not None or not switches.on("answer-redraw"):
            drawn.answer = answer
            return drawn
        reason = refusal_reason(fired[-1], raw, checked_as or question)
        if not reason:
            return drawn
        drawn.fired.append(("answer-redraw", raw))
        refused = (" ".join(raw.split())[:REFUSED_CHARS], reason)
    return drawn
