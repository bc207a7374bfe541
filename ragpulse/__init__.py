"""ragpulse: evaluate live RAG traffic from its OpenTelemetry traces.

The public names are imported on first use (PEP 562), so that ``ragpulse
eval`` and the collector do not pay for the OpenTelemetry SDK that only the
instrumentation needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragpulse.feedback import feedback
    from ragpulse.instrument import (
        InstrumentConfig,
        configure,
        generation,
        generation_span,
        pipeline,
        pipeline_span,
        retrieval,
        retrieval_span,
        shutdown,
    )
    from ragpulse.record import Document, EvalResult, RagRecord

_WHERE = {
    "feedback": "ragpulse.feedback",
    "Document": "ragpulse.record",
    "EvalResult": "ragpulse.record",
    "RagRecord": "ragpulse.record",
    **dict.fromkeys(
        (
            "InstrumentConfig",
            "configure",
            "generation",
            "generation_span",
            "pipeline",
            "pipeline_span",
            "retrieval",
            "retrieval_span",
            "shutdown",
        ),
        "ragpulse.instrument",
    ),
}

__all__ = [
    "Document",
    "EvalResult",
    "InstrumentConfig",
    "RagRecord",
    "configure",
    "feedback",
    "generation",
    "generation_span",
    "pipeline",
    "pipeline_span",
    "retrieval",
    "retrieval_span",
    "shutdown",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'ragpulse' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
