"""The benign gate the model-based injection detectors share (probe and classifiers).

Model detectors' false alarms on ordinary text (manuals, FAQs, e-mails, help-desk
questions full of "you", imperatives and passwords) are texts on which no
injection rule fires at all, while most attacks a model adds to the rules still
trip a weak rule. So where no rule fires, a location's risk is scaled by
``threshold / alone_threshold``: only a near-certain call crosses the threshold,
and ``label == (score >= threshold)`` still holds.
"""

from __future__ import annotations

from ragpulse.evaluators.injection_engine.scan import scan_text

ALONE_THRESHOLD = 0.99
"""The lowest of 0.9/0.95/0.98/0.99/0.995 that flags none of the tune split of
bench/data/benign_traffic.jsonl with the injection probe."""


def gated(risk: float, text: str, *, document: bool, threshold: float, alone: float) -> float:
    """``risk``, or, where no injection rule fires on ``text``, ``risk`` scaled down so that
    only ``risk >= alone`` reaches ``threshold``."""
    alone = max(alone, threshold)
    if risk >= alone or scan_text(text, document=document).risk > 0:
        return risk
    return risk * threshold / alone
