"""ragpulse: evaluate live RAG traffic from its OpenTelemetry traces.

The public names are imported on first use (PEP 562), so that ``ragpulse
eval`` and the collector do not pay for the OpenTelemetry SDK that only the
instrumentation needs, and an app with ``pip install ragpulse`` alone (the SDK) never
imports what the collector needs: ``Document``, ``RagRecord``, ``EvalResult`` and
``evaluator`` need the ``collector`` extra, and say so (:mod:`ragpulse.extras`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # "import X as X": re-exported for type checkers
    from ragpulse.function_evaluator import evaluator as evaluator
    from ragpulse.record import Document as Document
    from ragpulse.record import EvalResult as EvalResult
    from ragpulse.record import RagRecord as RagRecord
    from ragpulse.sdk.conversation import conversation as conversation
    from ragpulse.sdk.current import current_span_id as current_span_id
    from ragpulse.sdk.current import current_trace_id as current_trace_id
    from ragpulse.sdk.feedback import feedback as feedback
    from ragpulse.sdk.instrument import InstrumentConfig as InstrumentConfig
    from ragpulse.sdk.instrument import configure as configure
    from ragpulse.sdk.instrument import generation as generation
    from ragpulse.sdk.instrument import generation_span as generation_span
    from ragpulse.sdk.instrument import pipeline as pipeline
    from ragpulse.sdk.instrument import pipeline_span as pipeline_span
    from ragpulse.sdk.instrument import retrieval as retrieval
    from ragpulse.sdk.instrument import retrieval_span as retrieval_span
    from ragpulse.sdk.instrument import shutdown as shutdown
    from ragpulse.sdk.instrument import tool as tool
    from ragpulse.sdk.instrument import tool_span as tool_span

_EXPORTS = {
    "ragpulse.sdk.conversation": "conversation",
    "ragpulse.sdk.current": "current_span_id current_trace_id",
    "ragpulse.sdk.feedback": "feedback",
    "ragpulse.function_evaluator": "evaluator",
    "ragpulse.record": "Document EvalResult RagRecord",
    "ragpulse.sdk.instrument": "InstrumentConfig configure shutdown generation generation_span "
    "pipeline pipeline_span retrieval retrieval_span tool tool_span",
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names.split()}
__all__ = sorted(_WHERE)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'ragpulse' has no attribute {name!r}")
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        from ragpulse import extras

        extra = extras.extra_of(exc.name)
        if extra is None:
            raise
        raise extras.MissingExtra(extras.needs(extra, f"ragpulse.{name}", [str(exc.name)])) from exc
    value = getattr(imported, name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
