"""User feedback on an answer, recorded as a span that the collector joins to its trace.

``ragpulse.feedback(trace_id, score)`` writes a short ``ragpulse.sdk.feedback`` span
(in its own trace, linked to the evaluated one when its span id is known)
carrying the target trace id, the score (1 / -1 for thumbs up / down, or any
number; negative means bad) and an optional comment. The collector attaches
it to the trace if that is still being assembled, or sends a late update for
the already evaluated record; either way it is counted.
"""

from __future__ import annotations

import logging

from opentelemetry.trace import Link, SpanContext, TraceFlags

from ragpulse import semconv as sc
from ragpulse.sdk.provider import _current

log = logging.getLogger("ragpulse.instrument")


def feedback(
    trace_id: str, score: float, comment: str | None = None, span_id: str | None = None
) -> None:
    """Record feedback for the answer of trace ``trace_id`` (32 hex digits). Never raises."""
    try:
        config, tracer = _current()
        links = []
        if span_id:
            target = SpanContext(
                int(trace_id, 16), int(span_id, 16), is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )  # fmt: skip
            links.append(Link(target))
        attributes: dict[str, str | float | bool] = {
            sc.RAGPULSE_ROLE: sc.ROLE_FEEDBACK,
            sc.RAGPULSE_FEEDBACK_TRACE_ID: trace_id.lower(),
            sc.RAGPULSE_FEEDBACK_SCORE: float(score),
        }
        if comment and config.capture_content:
            text = comment[: config.max_text_chars]
            if config.redact is not None:
                try:
                    text = config.redact(text)
                except Exception:
                    text = "[redaction failed]"
            attributes[sc.RAGPULSE_FEEDBACK_COMMENT] = text
        tracer.start_span("ragpulse.feedback", links=links, attributes=attributes).end()
    except Exception:
        log.debug("recording feedback failed", exc_info=True)
