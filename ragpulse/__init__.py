"""ragpulse: evaluate live RAG traffic from its OpenTelemetry traces."""

from ragpulse.record import Document, EvalResult, RagRecord

__all__ = ["Document", "EvalResult", "RagRecord"]
__version__ = "0.1.0"
