"""Where spans come from: the source contract and what a source may ask of the collector."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Protocol

from ragpulse.collector.assembly.assembler import Ack
from ragpulse.record import Span


class Intake(Protocol):
    """The collector, as a source sees it. Every method is thread-safe."""

    def ingest(
        self, spans: Sequence[Span], ack: Ack | None = None, *, nbytes: int = 0, admit: bool = False
    ) -> int:
        """Add decoded spans (sealing ``ack``); returns how many were refused and counted.
        With ``admit``: all or nothing, CollectorFull (``ack`` unsealed) near the bounds."""
        ...

    def pressure(self) -> float:
        """How full the bounded stages are, 0..1 (open traces, evaluation backlog)."""
        ...

    def abandon(self, predicate: Callable[[list[Ack]], bool]) -> int:
        """Drop open traces whose acks match, leaving the acks unreleased."""
        ...

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every completed trace has been exported."""
        ...


class Source(ABC):
    """A stream of span batches feeding an :class:`Intake`.

    ``start`` returns once the source is ready; ``stop`` stops taking new
    data; ``close`` runs after the collector drained what the source gave
    it (the place for final acknowledgements). None of them raise for
    transport errors: sources log, count and retry.
    """

    name: str = "source"

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    def close(self) -> None:  # noqa: B027 - most sources have nothing left to acknowledge
        """Final acknowledgements after the collector drained."""
