"""Which tiers evaluate a record: deterministic functions of the trace id.

Every replica decides the same for the same trace, and replaying a topic
decides the same again, so a sampled share is a stable slice of traffic.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ragpulse.config import JudgeSettings
from ragpulse.evaluators.base import Tier
from ragpulse.record import EvalResult, RagRecord


def trace_fraction(trace_id: str, salt: str) -> float:
    """A uniform number in [0, 1) derived from the trace id (and a per-use salt)."""
    digest = hashlib.blake2b(f"{salt}:{trace_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class TierSampler:
    """The cheap tier sees everything; the model tier a ``model_rate`` share; the judge
    tier a ``judge.rate`` share plus records the cheap tier found uncertain or bad."""

    def __init__(self, model_rate: float = 0.1, judge: JudgeSettings | None = None) -> None:
        self.judge = judge or JudgeSettings()
        self.rates = {Tier.CHEAP: 1.0, Tier.MODEL: model_rate, Tier.JUDGE: self.judge.rate}

    def wants(self, record: RagRecord, tier: Tier, results: Sequence[EvalResult] = ()) -> bool:
        return self.reason(record, tier, results) is not None

    def reason(
        self, record: RagRecord, tier: Tier, results: Sequence[EvalResult] = ()
    ) -> str | None:
        """Why this tier evaluates the record (sampled, escalated:...), or None."""
        rate = self.rates.get(tier, 0.0)
        if rate >= 1.0 or trace_fraction(record.trace_id, tier.value) < rate:
            return "sampled"
        if tier == Tier.JUDGE:
            return self._escalation(results)
        return None

    def _escalation(self, results: Sequence[EvalResult]) -> str | None:
        below = self.judge.escalate_faithfulness_below
        for r in results:
            low = below is not None and r.score is not None and r.score < below
            if r.metric == "faithfulness" and low:
                return "escalated:low_faithfulness"
            if (
                r.metric == "injection"
                and r.label == "injection"
                and self.judge.escalate_on_injection
            ):
                return "escalated:injection"
        return None
