"""The score a user reads, and the policy applied to it: type weights, access and recency
boosts. Pure.

A hit's score is its relevance in [0, 1]: by default the calibrated relevance, an
estimated probability (calibration.py); under the rank fusions the fused score as a share
of the best fused score the same search could give. The policy's factors multiply into
one factor f per item, which multiplies the relevance's odds: r -> f·r / (1 - r + f·r).
A boost (f > 1) lifts a score towards 1, a penalty (f < 1) lowers it towards 0, 0 and 1
stay put, the order of items with equal factors never changes, and a weak hit stays
weak (a decision at 0.02 scores 0.04, not a confident answer).
Every factor can be switched off and applies only where the item
has the field it reads; an item without a kind keeps weight 1.0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

DEFAULT_TYPE_WEIGHTS: Mapping[str, float] = MappingProxyType(
    {"decision": 2.0, "lesson": 2.0, "summary": 0.5, "temp_note": 0.3}
)
DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class ScorePolicy:
    """Multiplicative score factors. `ScorePolicy.off()` leaves fused scores untouched."""

    type_weights: Mapping[str, float] | None = field(default_factory=lambda: DEFAULT_TYPE_WEIGHTS)
    access_boost: bool = True
    recency_boost: float = 0.15
    recency_days: float = 30.0

    @classmethod
    def off(cls) -> ScorePolicy:
        return cls(type_weights=None, access_boost=False, recency_boost=0.0)

    def recent(self, created_at: float | None, now: float) -> bool:
        """Whether an item created at `created_at` gets the recency boost at `now`."""
        return bool(self.recency_boost and created_at is not None
                    and now - created_at <= self.recency_days * DAY_S)

    def factors(
        self, *, kind: str | None, access_count: int | None, created_at: float | None, now: float,
    ) -> dict[str, float]:
        """The factors that apply to one item, by name (only those that differ from 1)."""
        out: dict[str, float] = {}
        if self.type_weights is not None and kind is not None:
            weight = self.type_weights.get(kind, 1.0)
            if weight != 1.0:
                out["type"] = weight
        if self.access_boost and access_count:
            out["access"] = 1.0 + math.log1p(max(0, access_count))
        if self.recent(created_at, now):
            out["recency"] = 1.0 + self.recency_boost
        return out


def apply(score: float, factors: Mapping[str, float]) -> float:
    """The raw fused score times every factor (what `--explain` reports as the product)."""
    for f in factors.values():
        score *= f
    return score


def relevance(fused: float, best: float) -> float:
    """`fused` as a share of `best`, the best fused score possible in the same search; in [0, 1]."""
    if not (best > 0 and math.isfinite(best) and math.isfinite(fused)):
        return 0.0
    return min(1.0, max(0.0, fused / best))


def boosted(relevance: float, factors: Mapping[str, float]) -> float:
    """A relevance in [0, 1] under the policy's factors: its odds times their product."""
    return boosted_by(relevance, apply(1.0, factors))


def boosted_by(relevance: float, product: float) -> float:
    """`boosted` given the product of the factors: f·r / (1 - r + f·r), in [0, 1]."""
    r = min(1.0, max(0.0, relevance))
    if product <= 0 or r <= 0:
        return 0.0
    if r >= 1.0:
        return 1.0
    return product * r / (1.0 - r + product * r)
