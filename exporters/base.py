"""The sink contract."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ragpulse.record import EvalResult, RagRecord

if TYPE_CHECKING:
    from ragpulse.config import Settings
    from ragpulse.telemetry import CollectorMetrics


class Sink(ABC):
    """Receives every evaluated record.

    Contract: ``export`` is called from the collector's evaluation worker
    thread, one record at a time, in completion order. It should return
    quickly (buffer and flush in the background where I/O is slow) and must
    not raise; the pipeline still guards it, counting any exception under
    ``ragpulse_sink_errors_total{sink}``. ``shutdown`` flushes and releases.
    """

    name: str = "sink"

    @classmethod
    def from_settings(cls, settings: Settings, metrics: CollectorMetrics) -> Sink | None:
        """Build the sink ``ragpulse serve`` uses; None when settings do not enable it."""
        return None

    @abstractmethod
    def export(self, record: RagRecord, results: Sequence[EvalResult]) -> None: ...

    def shutdown(self) -> None:  # noqa: B027 - optional hook, most sinks hold nothing
        """Flush buffers and release resources."""
