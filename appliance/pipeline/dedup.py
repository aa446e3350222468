"""Dedup: claims merged by meaning, in the state folder's one LanceDB claims table.

A claim joins the nearest merged claim of its run when their cosine similarity reaches the
threshold; the merged claim keeps every source and quote, and its support is its number of
distinct sources. Claims arrive in the run's fixed order, so merging is deterministic.

The table is persistent and shared by every run (and by the processes of a batch): one row
per merged claim with its run, text, sources, vector and, once voted on, its verdict. A run
searches only its own rows; a rerun of the same run replaces them. Kept across runs, the rows
are the seed of a claim store that later runs could consult.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..config import state_dir
from ..contracts import IMPORTANCE_RANK, QUALITY_RANK, Claim, MergedClaim, QuoteRef, Verdict
from ..errors import StateError
from .text import same_sentence

CLAIMS_TABLE = "claims"
# Fragments (one per write) after which a run's end compacts the table.
COMPACT_AFTER = 64


def _quoted(value: str) -> str:
    """A string literal for a LanceDB filter."""
    return "'" + value.replace("'", "''") + "'"


class ClaimPool:
    """The run's merged claims; ``add`` may be called again for the gap round."""

    def __init__(self, settings, run_id: str, embedder):
        self.threshold = settings.pipeline.dedup_threshold
        self.embedder = embedder
        self.run_id = run_id
        self.claims: dict[str, MergedClaim] = {}
        self.merged_count = 0
        self._where = f"run_id = {_quoted(run_id)}"
        try:
            import lancedb

            self._db = lancedb.connect(str(state_dir(settings, "lancedb")))
            schema = pa.schema([pa.field("run_id", pa.string()), pa.field("claim_id", pa.string()),
                                pa.field("text", pa.string()), pa.field("sources", pa.list_(pa.string())),
                                pa.field("verdict", pa.string()),
                                pa.field("vector", pa.list_(pa.float32(), embedder.dim))])
            # exist_ok: the processes of a batch may create it at the same moment.
            self._table = self._db.create_table(CLAIMS_TABLE, schema=schema, exist_ok=True)
            # A rerun of this run rebuilds its rows: their content follows from its claims.
            self._table.delete(self._where)
        except OSError as exc:
            raise StateError(f"cannot write the claims table in the state folder: {exc}",
                             hint="set APPLIANCE_HOME to a writable folder") from None

    def add(self, claims: list[Claim]) -> list[str]:
        """Merge ``claims`` into the pool; return the ids of merged claims created or grown."""
        if not claims:
            return []
        vectors = self.embedder.encode([c.text for c in claims])
        touched: list[str] = []
        grown: set[str] = set()
        for claim, vector in zip(claims, vectors):
            target = self._nearest(vector)
            if target is not None:
                self._merge(self.claims[target], claim)
                self.merged_count += 1
                grown.add(target)
            else:
                target = f"m{len(self.claims) + 1}"
                self.claims[target] = MergedClaim(
                    id=target, text=claim.text, importance=claim.importance,
                    source_quality=claim.source_quality,
                    quotes=[QuoteRef(source_url=claim.source_url, quote=claim.quote)],
                    members=[claim.id], node_ids=[claim.node_id])
                self._table.add([{"run_id": self.run_id, "claim_id": target, "text": claim.text,
                                  "sources": [claim.source_url], "verdict": "",
                                  "vector": vector.astype("float32").tolist()}])
            if target not in touched:
                touched.append(target)
        for claim_id in sorted(grown):
            sources = sorted({q.source_url for q in self.claims[claim_id].quotes})
            self._table.update(where=f"{self._where} AND claim_id = {_quoted(claim_id)}",
                               values={"sources": sources})
        return touched

    def _nearest(self, vector) -> str | None:
        if not self.claims:
            return None
        query: Any = self._table.search(vector.astype("float32").tolist())  # a vector query
        rows = query.distance_type("cosine").where(self._where, prefilter=True).limit(1).to_list()
        if not rows:
            return None
        similarity = 1.0 - float(rows[0]["_distance"])
        return rows[0]["claim_id"] if similarity >= self.threshold else None

    def restate(self, killed: MergedClaim) -> MergedClaim | None:
        """A new claim that is the first sentence ``killed`` quotes (the votes killed its
        wording, not its source); None when that sentence is already a claim of the run. It
        has no members of its own: the extracted claims stay the killed claim's."""
        quote = killed.quotes[0]
        text = " ".join(quote.quote.split())
        if any(same_sentence(c.text, text) for c in self.claims.values()):
            return None
        target = f"m{len(self.claims) + 1}"
        claim = MergedClaim(id=target, text=text, importance=killed.importance,
                            source_quality=killed.source_quality, quotes=[quote],
                            members=[], node_ids=killed.node_ids[:1], restated_from=killed.id)
        self.claims[target] = claim
        vector = self.embedder.encode([text])[0]
        self._table.add([{"run_id": self.run_id, "claim_id": target, "text": text,
                          "sources": [quote.source_url], "verdict": "",
                          "vector": vector.astype("float32").tolist()}])
        return claim

    @staticmethod
    def _merge(into: MergedClaim, claim: Claim) -> None:
        into.members.append(claim.id)
        if claim.node_id not in into.node_ids:
            into.node_ids.append(claim.node_id)
        if not any(q.source_url == claim.source_url and q.quote == claim.quote for q in into.quotes):
            into.quotes.append(QuoteRef(source_url=claim.source_url, quote=claim.quote))
        if IMPORTANCE_RANK[claim.importance] < IMPORTANCE_RANK[into.importance]:
            into.importance = claim.importance
        if QUALITY_RANK[claim.source_quality] < QUALITY_RANK[into.source_quality]:
            into.source_quality = claim.source_quality

    def record_verdicts(self, verdicts: dict[str, Verdict]) -> None:
        """Write each voted claim's outcome (confirmed or killed) into its row."""
        for outcome in ("confirmed", "killed"):
            ids = [cid for cid, v in verdicts.items() if v.confirmed == (outcome == "confirmed")]
            if ids:
                listed = ", ".join(_quoted(cid) for cid in ids)
                self._table.update(where=f"{self._where} AND claim_id IN ({listed})", values={"verdict": outcome})

    def close(self) -> None:
        """Compact the table once its many small writes add up (best effort: a table left
        uncompacted is only slower)."""
        try:
            stats: Any = self._table.stats()
            if stats["fragment_stats"]["num_fragments"] >= COMPACT_AFTER:
                self._table.optimize()
        except Exception:  # noqa: BLE001 - compaction is an optimisation, never a failure
            pass


def rank_claims(claims: list[MergedClaim]) -> list[MergedClaim]:
    """Importance, then source quality, then support; ties keep the run's order."""
    order = {c.id: i for i, c in enumerate(claims)}
    return sorted(claims, key=lambda c: (IMPORTANCE_RANK[c.importance],
                                         QUALITY_RANK[c.source_quality], -c.support, order[c.id]))
