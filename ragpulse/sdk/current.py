"""The ids of the span being recorded now, for ``ragpulse.feedback()``.

An app hands the trace id back with its answer (to a web page, a chat UI) so
that the user's thumbs up or down can later name the trace it is about:
``ragpulse.feedback(trace_id, -1, span_id=span_id)``. Inside a function
decorated with ``@ragpulse.pipeline`` (or a ``with ragpulse.pipeline_span()``
block) the current span is the pipeline span, the one the collector evaluates.
"""

from __future__ import annotations

from opentelemetry import trace

__all__ = ["current_span_id", "current_trace_id"]


def current_trace_id() -> str | None:
    """The current trace id as 32 lower-case hex digits, or None outside any recorded span.

    None also when spans are not recorded (no ``configure()`` and no SDK provider),
    since such a trace id would name nothing the collector ever sees. Never raises.
    """
    context = trace.get_current_span().get_span_context()
    return trace.format_trace_id(context.trace_id) if context.is_valid else None


def current_span_id() -> str | None:
    """The current span id as 16 lower-case hex digits, or None (see :func:`current_trace_id`).

    Called directly in a ``@ragpulse.pipeline`` function it is the pipeline span's id,
    which ``ragpulse.feedback(..., span_id=...)`` links the feedback to.
    """
    context = trace.get_current_span().get_span_context()
    return trace.format_span_id(context.span_id) if context.is_valid else None
