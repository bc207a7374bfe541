"""Facts read off a record by both the collector and the sinks.

The deterministic trace fraction (sampling, regression-set rules) and the
user-feedback score (the feedback result, the sampling priority, the
regression sets) live here so that plug-ins never import the collector.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from ragpulse import semconv as sc
from ragpulse.record import AttributeValue


def trace_fraction(trace_id: str, salt: str) -> float:
    """A uniform number in [0, 1) derived from the trace id (and a per-use salt)."""
    digest = hashlib.blake2b(f"{salt}:{trace_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def feedback_score(attributes: Mapping[str, AttributeValue]) -> float | None:
    """The user's score joined onto a record (negative is bad), or None: the one reading
    that the feedback result, the sampling priority and the regression sets share."""
    raw = attributes.get(sc.RAGPULSE_FEEDBACK_SCORE)
    if not isinstance(raw, int | float) or isinstance(raw, bool):
        return None
    return float(raw)
