"""The sinks, as one part: every export to them goes through here, one at a time.

The sink contract says ``export`` and ``export_conversation`` are never called
concurrently: the turn pipeline's workers and the conversation stage's ticker and judges
all export through one :class:`Exports`, under its lock. The conversation stage holds the
same lock around a check and the export that depends on it (a judge's update is dropped
when a later revision went out meanwhile). Each sink is guarded on its own: one that
raises is logged and counted (``ragpulse_sink_errors_total{sink}``), the others still get
the record.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from ragpulse.collector.lifecycle import Deadline
from ragpulse.exporters.base import Sink
from ragpulse.record import ConversationRecord, ExportItem, RagRecord
from ragpulse.telemetry import CollectorMetrics

log = logging.getLogger(__name__)


class Exports:
    """The sinks and their lock (re-entrant: a turn's export may close its conversation,
    which exports the conversation record)."""

    name = "sinks"

    def __init__(self, sinks: Sequence[Sink], metrics: CollectorMetrics) -> None:
        self.sinks = list(sinks)
        self._metrics = metrics
        self.lock = threading.RLock()

    def export(self, item: ExportItem[RagRecord]) -> None:
        """Hand one record's results to every sink."""
        self._each(lambda sink: sink.export(item), "trace", item.record.trace_id)

    def conversation(self, item: ExportItem[ConversationRecord]) -> None:
        """Hand a closed conversation's record to every sink."""
        conversation_id = item.record.conversation_id
        self._each(lambda sink: sink.export_conversation(item), "conversation", conversation_id)

    def _each(self, send: Callable[[Sink], None], what: str, ident: str) -> None:
        """``send`` to every sink under the lock; one that raises is logged (naming ``what``
        ``ident``) and counted, and the next still gets it."""
        with self.lock:
            for sink in self.sinks:
                try:
                    send(sink)
                except Exception:
                    log.exception("sink %s failed on %s %s", sink.name, what, ident)
                    self._metrics.sink_errors.labels(sink.name).inc()

    def force_flush(self, timeout: float) -> bool:
        """Whether every sink delivered what it was handed within ``timeout`` in all."""
        deadline = time.monotonic() + timeout
        return all(s.force_flush(max(0.0, deadline - time.monotonic())) for s in self.sinks)

    # -- the part ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the sinks' delivery (their threads), before anything is exported."""
        for sink in self.sinks:
            sink.start()

    def stop(self, deadline: Deadline) -> None:
        """Shut the sinks down (flush, release), waiting until ``deadline.end`` at most (None:
        as long as they take): the stages stopped before, so nothing is exported after."""
        if deadline.end is None:
            self._shutdown()
            return
        closing = threading.Thread(target=self._shutdown, name="ragpulse-sinks", daemon=True)
        closing.start()
        closing.join(max(0.0, deadline.end - time.monotonic()))
        if closing.is_alive():
            log.warning("sinks still shutting down at the shutdown deadline; not waiting")

    def close(self) -> None:
        pass

    def _shutdown(self) -> None:
        with self.lock:  # no export is half done
            for sink in self.sinks:
                try:
                    sink.shutdown()
                except Exception:
                    log.exception("sink %s failed to shut down", sink.name)
