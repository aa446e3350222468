"""Dedup: claims merged by meaning in a LanceDB table of the run.

A claim joins the nearest merged claim when their cosine similarity reaches the threshold;
the merged claim keeps every source and quote, and its support is its number of distinct
sources. Claims arrive in the run's fixed order, so merging is deterministic.
"""

from __future__ import annotations

import re

import pyarrow as pa

from ..config import state_dir
from ..contracts import IMPORTANCE_RANK, QUALITY_RANK, Claim, MergedClaim, QuoteRef
from ..errors import StateError


class ClaimPool:
    """The run's merged claims; ``add`` may be called again for the gap round."""

    def __init__(self, settings, run_id: str, embedder):
        self.threshold = settings.pipeline.dedup_threshold
        self.embedder = embedder
        self.claims: dict[str, MergedClaim] = {}
        self.merged_count = 0
        name = "claims_" + re.sub(r"[^A-Za-z0-9_]", "_", run_id)[:80]
        try:
            import lancedb

            self._db = lancedb.connect(str(state_dir(settings, "lancedb")))
            schema = pa.schema([pa.field("id", pa.string()),
                                pa.field("vector", pa.list_(pa.float32(), embedder.dim))])
            # One table per run, rebuilt on a rerun: its content follows from the claims.
            self._table = self._db.create_table(name, schema=schema, mode="overwrite")
        except OSError as exc:
            raise StateError(f"cannot write the claim table in the state folder: {exc}",
                             hint="set APPLIANCE_HOME to a writable folder") from None

    def add(self, claims: list[Claim]) -> list[str]:
        """Merge ``claims`` into the pool; return the ids of merged claims created or grown."""
        if not claims:
            return []
        vectors = self.embedder.encode([c.text for c in claims])
        touched: list[str] = []
        for claim, vector in zip(claims, vectors):
            target = self._nearest(vector)
            if target is not None:
                self._merge(self.claims[target], claim)
                self.merged_count += 1
            else:
                target = f"m{len(self.claims) + 1}"
                self.claims[target] = MergedClaim(
                    id=target, text=claim.text, importance=claim.importance,
                    source_quality=claim.source_quality,
                    quotes=[QuoteRef(source_url=claim.source_url, quote=claim.quote)],
                    members=[claim.id], node_ids=[claim.node_id])
                self._table.add([{"id": target, "vector": vector.astype("float32").tolist()}])
            if target not in touched:
                touched.append(target)
        return touched

    def _nearest(self, vector) -> str | None:
        if not self.claims:
            return None
        rows = (self._table.search(vector.astype("float32").tolist())
                .distance_type("cosine").limit(1).to_list())
        if not rows:
            return None
        similarity = 1.0 - float(rows[0]["_distance"])
        return rows[0]["id"] if similarity >= self.threshold else None

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

    def drop_table(self) -> None:
        """Remove the run's table once the run is over (its claims live on in the report JSON)."""
        try:
            self._db.drop_table(self._table.name)
        except Exception:  # best effort: a leftover table is harmless and rebuilt on rerun
            pass


def rank_claims(claims: list[MergedClaim]) -> list[MergedClaim]:
    """Importance, then source quality, then support; ties keep the run's order."""
    order = {c.id: i for i, c in enumerate(claims)}
    return sorted(claims, key=lambda c: (IMPORTANCE_RANK[c.importance],
                                         QUALITY_RANK[c.source_quality], -c.support, order[c.id]))
