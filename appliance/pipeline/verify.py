"""Verify: adversarial votes on the best-ranked claims.

Each vote looks for a reason the quotes do not state the claim, writes that reason first and
then gives a verdict: supported, refuted or insufficient. An insufficient verdict, a failed
call, an empty reason or one copied from the prompt's example is an abstention: not support,
and not a refutation either. A claim is confirmed iff it has at least ``min_valid_votes``
supporting votes and fewer than ``refutations_to_kill`` refutations, so all-abstain never
passes and doubt never kills a true claim.

A claim that is word for word a sentence it quotes needs no vote (knob ``vote_verbatim``):
the votes ask whether the quotes state the claim, and the quote check has already found that
sentence in the source. Such a claim is confirmed as verbatim, and about half the claims a
small model extracts are (the ungrounded ones become their quote in gather).

The votes on one claim run back to back with the same prompt and different seeds, so
llama.cpp reuses the whole evaluated prompt for the later ones; and once the votes cast decide
the outcome whatever the rest would say, the rest are not cast (counted as skipped).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..contracts import MergedClaim, Verdict, Vote, VoteRecord, VoteVerdict
from ..errors import ModelOutputError
from . import prompts
from .checks import ALL_ON, Switches
from .forms import echoes_example
from .text import same_sentence
from .state import RunContext

MAX_EVIDENCE_QUOTES = 4


@dataclass(frozen=True)
class VoteRule:
    """How many votes a claim gets and what decides it (the [pipeline] knobs)."""

    votes: int
    min_valid: int
    kill_at: int
    temperature: float = 0.3

    @classmethod
    def from_settings(cls, settings) -> "VoteRule":
        p = settings.pipeline
        return cls(votes=int(p.votes), min_valid=int(p.min_valid_votes), kill_at=int(p.refutations_to_kill),
                   temperature=float(settings.llm.vote_temperature))

    def confirmed(self, supports: int, refutations: int) -> bool:
        return supports >= self.min_valid and refutations < self.kill_at

    def decided(self, supports: int, refutations: int, remaining: int) -> bool:
        """True when no outcome of the ``remaining`` votes can change the verdict."""
        sure_yes = supports >= self.min_valid and refutations + remaining < self.kill_at
        sure_no = refutations >= self.kill_at or supports + remaining < self.min_valid
        return sure_yes or sure_no


def tally(claim_id: str, votes: list[VoteRecord], rule: VoteRule, skipped: int = 0) -> Verdict:
    """The voting arithmetic, separate so it can be tested on its own."""
    supports = sum(1 for v in votes if v.supports)
    refutations = sum(1 for v in votes if v.refutes)
    return Verdict(claim_id=claim_id, confirmed=rule.confirmed(supports, refutations), supports=supports,
                   refutations=refutations, valid_votes=sum(1 for v in votes if v.valid),
                   skipped=skipped, votes=votes)


def evidence_text(claim: MergedClaim) -> str:
    return "\n".join(f'- "{q.quote}"' for q in claim.quotes[:MAX_EVIDENCE_QUOTES])


def vote_seed(base: int, claim_text: str, index: int) -> int:
    # Distinct seeds per vote; fixed for a claim, so a rerun replays the same votes.
    return (base * 1000003 + index * 7919 + sum(map(ord, claim_text))) % (2**31 - 1)


def judge(engine, ctx: prompts.Context, claim_id: str, claim_text: str, evidence: str, rule: VoteRule,
          base_seed: int, switches: Switches = ALL_ON) -> tuple[Verdict, int]:
    """Cast the votes on one claim, stopping once the outcome is decided.

    Returns the verdict and the number of votes that failed as calls (invalid output after the
    engine's retries): those are abstentions too, counted apart as model failures.
    """
    messages = prompts.vote(ctx, claim_text, evidence)
    votes: list[VoteRecord] = []
    failures = 0
    for index in range(rule.votes):
        supports = sum(1 for v in votes if v.supports)
        refutations = sum(1 for v in votes if v.refutes)
        if rule.decided(supports, refutations, rule.votes - index):
            break
        seed = vote_seed(base_seed, claim_text, index)
        vote, failed = cast_vote(engine, messages, claim_id, claim_text, evidence, seed, rule.temperature,
                                 switches)
        failures += failed
        votes.append(vote)
    return tally(claim_id, votes, rule, skipped=rule.votes - len(votes)), failures


def cast_vote(engine, messages: list[dict], claim_id: str, claim_text: str, evidence: str,
              seed: int, temperature: float, switches: Switches = ALL_ON) -> tuple[VoteRecord, bool]:
    """One vote, and whether the call itself failed. Every way a vote can fail to support or
    refute (a failed call included) makes it an abstention; checks vote-no-reason and
    example-echo name theirs in the record."""
    try:
        out = engine.structured(messages, Vote, seed=seed, max_tokens=prompts.VOTE_TOKENS,
                                temperature=temperature, purpose="vote")
    except ModelOutputError as exc:
        return VoteRecord(claim_id=claim_id, seed=seed, valid=False, reason=f"failed: {exc.message}"), True
    reason = " ".join(out.reason.split())
    if not reason and switches.on("vote-no-reason"):
        return VoteRecord(claim_id=claim_id, seed=seed, valid=False, verdict=out.verdict,
                          reason="abstained: no reason given", check="vote-no-reason"), False
    if switches.on("example-echo") and echoes_example(reason, claim_text, evidence):
        # A reason copied from the prompt's example says nothing about this claim.
        return VoteRecord(claim_id=claim_id, seed=seed, valid=False, verdict=out.verdict,
                          reason=f"abstained: reason copies the prompt's example ({reason[:80]})",
                          check="example-echo"), False
    return VoteRecord(claim_id=claim_id, seed=seed, valid=out.verdict != VoteVerdict.insufficient,
                      verdict=out.verdict, reason=reason), False


def is_verbatim(claim: MergedClaim) -> bool:
    """True when the claim's text is, spaces and case aside, one of the sentences it quotes."""
    return any(same_sentence(claim.text, q.quote) for q in claim.quotes)


def verbatim_verdict(claim_id: str) -> Verdict:
    """The verdict of a claim that is the very sentence it quotes: confirmed, no vote cast."""
    return Verdict(claim_id=claim_id, confirmed=True, refutations=0, valid_votes=0, votes=[], verbatim=True)


def verify_claims(run: RunContext, claims: list[MergedClaim]) -> list[Verdict]:
    """Vote on each claim (in the given order) and return the verdicts."""
    rule = VoteRule.from_settings(run.settings)
    verdicts: list[Verdict] = []
    for claim in claims:
        if not run.settings.pipeline.vote_verbatim and run.checks.applies(
                "verbatim-confirmed", lambda: is_verbatim(claim), on=f"claim {claim.id}"):
            verdicts.append(verbatim_verdict(claim.id))
            run.stats.add(verified=1, confirmed=1, confirmed_verbatim=1)
            continue
        verdict, failures = judge(run.models.verifier, run.ctx, claim.id, claim.text, evidence_text(claim),
                                  rule, run.settings.llm.seed, run.checks.switches)
        for vote in verdict.votes:
            run.recorder.append("votes", vote)
            if vote.check:
                run.checks.fired(vote.check, on=f"vote on {claim.id}", seed=vote.seed)
        abstained = len(verdict.votes) - verdict.valid_votes
        run.stats.add(verified=1, confirmed=int(verdict.confirmed), killed=int(not verdict.confirmed),
                      votes_valid=verdict.valid_votes, votes_invalid=abstained, votes_skipped=verdict.skipped,
                      model_failures=failures)
        verdicts.append(verdict)
    return verdicts
