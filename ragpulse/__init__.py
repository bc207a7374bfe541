"""ragpulse: evaluate live RAG traffic from its OpenTelemetry traces."""

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
