"""Join user feedback spans (``ragpulse.sdk.feedback``) to the traces they are about.

Feedback within the assembly window is attached to the open trace (so its
record carries the score and priority rules can act on it); feedback for a
trace already evaluated becomes a late update: the record is exported again
with a ``user_feedback`` result; feedback for a trace not seen yet waits
(bounded) for it. Every outcome is counted in ``ragpulse_feedback_total{joined}``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

from ragpulse import semconv as sc
from ragpulse.collector.assembly.assembler import Assembler
from ragpulse.record import AttributeValue, EvalResult, Span
from ragpulse.signals import feedback_score
from ragpulse.telemetry import CollectorMetrics

FEEDBACK_ATTRIBUTES = (sc.RAGPULSE_FEEDBACK_SCORE, sc.RAGPULSE_FEEDBACK_COMMENT)


def is_feedback(span: Span) -> bool:
    return span.attributes.get(sc.RAGPULSE_ROLE) == sc.ROLE_FEEDBACK


def feedback_result(attributes: dict[str, AttributeValue]) -> EvalResult | None:
    """A ``user_feedback`` result from record attributes (score 1 good, 0 bad, 0.5 neutral)."""
    raw = feedback_score(attributes)
    if raw is None:
        return None
    label = "negative" if raw < 0 else "positive" if raw > 0 else "neutral"
    comment = attributes.get(sc.RAGPULSE_FEEDBACK_COMMENT)
    return EvalResult(
        metric="user_feedback",
        method="feedback",
        score={"negative": 0.0, "positive": 1.0, "neutral": 0.5}[label],
        label=label,
        explanation=str(comment) if comment else None,
        details={"raw_score": raw},
    )


class FeedbackJoiner:
    """Thread-safe; called from intake with every decoded batch."""

    def __init__(
        self,
        assembler: Assembler,
        late_update: Callable[[str, dict[str, AttributeValue]], bool],
        metrics: CollectorMetrics,
        max_pending: int = 10_000,
    ) -> None:
        self._assembler = assembler
        self._late_update = late_update
        self._metrics = metrics
        self._max_pending = max_pending
        self._pending: OrderedDict[str, dict[str, AttributeValue]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def split(spans: Sequence[Span]) -> tuple[list[Span], Sequence[Span]]:
        """(the feedback spans, the others for assembly); nothing is handled yet."""
        feedback = [span for span in spans if is_feedback(span)]
        if not feedback:
            return feedback, spans
        return feedback, [span for span in spans if not is_feedback(span)]

    def handle(self, feedback: Sequence[Span]) -> None:
        """Join feedback spans to their traces (or queue them as late updates)."""
        for span in feedback:
            self._handle(span)

    def after_add(self, spans: Sequence[Span]) -> None:
        """Attach waiting feedback to traces that have just opened."""
        if not self._pending:
            return
        for trace_id in {s.trace_id for s in spans}:
            with self._lock:
                waiting = self._pending.pop(trace_id, None)
            if waiting is not None and self._assembler.annotate(trace_id, waiting):
                self._metrics.feedback.labels("in_window").inc()

    def _handle(self, span: Span) -> None:
        target = str(span.attributes.get(sc.RAGPULSE_FEEDBACK_TRACE_ID) or "").lower()
        attributes = {k: v for k, v in span.attributes.items() if k in FEEDBACK_ATTRIBUTES}
        if len(target) != 32 or sc.RAGPULSE_FEEDBACK_SCORE not in attributes:
            self._metrics.feedback.labels("invalid").inc()
            return
        if self._assembler.annotate(target, attributes):
            self._metrics.feedback.labels("in_window").inc()
        elif self._late_update(target, attributes):
            self._metrics.feedback.labels("late").inc()
        else:
            with self._lock:
                self._pending[target] = attributes
                while len(self._pending) > self._max_pending:
                    self._pending.popitem(last=False)
                    self._metrics.feedback.labels("unmatched").inc()
            self._metrics.feedback.labels("waiting").inc()
