"""Verify: adversarial votes on the best-ranked claims.

Each vote tries to refute the claim from its quotes ("if unsure, refuted"). A vote that fails
or abstains (gives no reason) is not a vote: a claim survives only with at least
``min_valid_votes`` valid votes and fewer than ``refutations_to_kill`` refutations, so
all-abstain never passes. The votes on one claim run back to back with the same prompt and
different seeds, so llama.cpp reuses the whole evaluated prompt for the second and third.
"""

from __future__ import annotations

from ..contracts import MergedClaim, Verdict, Vote, VoteRecord
from ..errors import ModelOutputError
from . import prompts
from .state import RunContext

MAX_EVIDENCE_QUOTES = 4


def tally(claim_id: str, votes: list[VoteRecord], min_valid: int, kill_at: int) -> Verdict:
    """The voting arithmetic, separate so it can be tested on its own."""
    valid = [v for v in votes if v.valid]
    refutations = sum(1 for v in valid if v.refuted)
    confirmed = len(valid) >= min_valid and refutations < kill_at
    return Verdict(claim_id=claim_id, confirmed=confirmed, refutations=refutations,
                   valid_votes=len(valid), votes=votes)


def evidence_text(claim: MergedClaim) -> str:
    return "\n".join(f'- "{q.quote}"' for q in claim.quotes[:MAX_EVIDENCE_QUOTES])


def vote_seed(base: int, claim_text: str, index: int) -> int:
    # Distinct seeds per vote; fixed for a claim, so a rerun replays the same votes.
    return (base * 1000003 + index * 7919 + sum(map(ord, claim_text))) % (2**31 - 1)


def verify_claims(run: RunContext, claims: list[MergedClaim]) -> list[Verdict]:
    """Vote on each claim (in the given order) and return the verdicts."""
    settings = run.settings.pipeline
    verdicts: list[Verdict] = []
    for claim in claims:
        messages = prompts.vote(run.ctx, claim.text, evidence_text(claim))
        votes: list[VoteRecord] = []
        for index in range(settings.votes):
            seed = vote_seed(run.settings.llm.seed, claim.text, index)
            votes.append(_one_vote(run, claim, messages, seed))
        verdict = tally(claim.id, votes, settings.min_valid_votes, settings.refutations_to_kill)
        for vote in votes:
            run.recorder.append("votes", vote)
        run.stats.add(verified=1, confirmed=int(verdict.confirmed), killed=int(not verdict.confirmed),
                      votes_valid=verdict.valid_votes, votes_invalid=len(votes) - verdict.valid_votes)
        verdicts.append(verdict)
    return verdicts


def _one_vote(run: RunContext, claim: MergedClaim, messages: list[dict], seed: int) -> VoteRecord:
    claim_id = claim.id
    try:
        out = run.models.verifier.structured(messages, Vote, seed=seed,
                                             max_tokens=prompts.VOTE_TOKENS, purpose="vote")
    except ModelOutputError as exc:
        run.stats.add(model_failures=1)
        return VoteRecord(claim_id=claim_id, seed=seed, valid=False, reason=f"failed: {exc.message}")
    reason = " ".join(out.reason.split())
    if not reason:
        return VoteRecord(claim_id=claim_id, seed=seed, valid=False, refuted=out.refuted,
                          reason="abstained: no reason given")
    if prompts.echoes_example(reason, claim.text, evidence_text(claim)):
        # A reason copied from the prompt's example says nothing about this claim.
        return VoteRecord(claim_id=claim_id, seed=seed, valid=False, refuted=out.refuted,
                          reason=f"abstained: reason copies the prompt's example ({reason[:80]})")
    return VoteRecord(claim_id=claim_id, seed=seed, valid=True, refuted=out.refuted, reason=reason)
