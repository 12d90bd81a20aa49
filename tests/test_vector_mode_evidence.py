"""A vector-only search ranks without the query terms' coverage of each candidate's text (its
model gives coverage no weight), yet its hits show their coverage as a hybrid search's do."""

from __future__ import annotations

from pathlib import Path

import hybridkb
from hybridkb import HashingEmbedder, calibration

TEXTS = ["vitamin d deficiency and bone density in older adults",
         "bone density scans for adults over fifty", "a recipe for lemon cake",
         "vitamins in citrus fruit", "deficiency of iron in athletes"]


def test_vector_hits_show_their_coverage_and_rank_as_before(tmp_path: Path) -> None:
    assert not any(calibration.COEFFICIENTS["vector"][i] for i in (1, 5))  # what the skip relies on
    with hybridkb.open(str(tmp_path / "kb.db"), embedder=HashingEmbedder(64)) as kb:
        kb.add_many([{"id": f"t{k}", "text": t} for k, t in enumerate(TEXTS)])
        query = "vitamin d deficiency bone density"
        hits = kb.search(query, mode="vector", limit=5).hits
        assert hits
        for hit in hits:
            terms = [[w] for w in calibration.tokens(query)]
            assert hit.evidence["coverage"] == calibration.coverage(terms, hit.text)
            assert hit.evidence["full"] == (1.0 if hit.evidence["coverage"] >= 1 - 1e-9 else 0.0)
        assert any(h.evidence["coverage"] > 0 for h in hits)  # the test can see a skipped one
        hybrid = {h.id: h.evidence["coverage"] for h in kb.search(query, limit=5).hits}
        assert all(hybrid[h.id] == h.evidence["coverage"] for h in hits if h.id in hybrid)
