"""The sink contract."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from ragpulse.record import EvalResult, RagRecord


class Sink(ABC):
    """Receives every evaluated record.

    Contract: ``export`` is called from the collector's evaluation worker
    thread, one record at a time, in completion order. It should return
    quickly (buffer and flush in the background where I/O is slow) and must
    not raise; the pipeline still guards it, counting any exception under
    ``ragpulse_sink_errors_total{sink}``. ``shutdown`` flushes and releases.
    """

    name: str = "sink"

    @abstractmethod
    def export(self, record: RagRecord, results: Sequence[EvalResult]) -> None: ...

    def shutdown(self) -> None:  # noqa: B027 - optional hook, most sinks hold nothing
        """Flush buffers and release resources."""
