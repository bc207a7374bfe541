"""Which tiers evaluate a record: deterministic functions of the trace id.

Every replica decides the same for the same trace, and replaying a topic
decides the same again, so a sampled share is a stable slice of traffic.
"""

from __future__ import annotations

import hashlib

from ragpulse.evaluators.base import Tier
from ragpulse.record import RagRecord


def trace_fraction(trace_id: str, salt: str) -> float:
    """A uniform number in [0, 1) derived from the trace id (and a per-use salt)."""
    digest = hashlib.blake2b(f"{salt}:{trace_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class TierSampler:
    """The cheap tier sees everything; the model tier a ``model_rate`` share."""

    def __init__(self, model_rate: float = 0.1) -> None:
        self.rates = {Tier.CHEAP: 1.0, Tier.MODEL: model_rate}

    def wants(self, record: RagRecord, tier: Tier) -> bool:
        rate = self.rates.get(tier, 0.0)
        return rate >= 1.0 or trace_fraction(record.trace_id, tier.value) < rate
