"""One pass over the traces a tool stores: ``ragpulse eval --from URL``.

The traces whose root span started in ``[since, until)`` are found (newest first where
the tool orders them; at most ``limit``), fetched whole, page by page, and handed to a
collector without receivers: assembly, extraction, sampling, evaluation and every sink,
as for live traffic. At the end every open trace is closed (conversations too), the
queue is evaluated, and the sinks deliver what they hold before the run reports.
Memory is bounded by the collector's own bounds: while it is full, reading waits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from ragpulse.collector.stored.common import Reader, TraceRef
from ragpulse.errors import CollectorFull
from ragpulse.record import Span
from ragpulse.source import Ack

log = logging.getLogger(__name__)

FULL_WAIT_S = 0.05
IDLE_STEP_S = 1.0


class Collecting(Protocol):
    """The collector, as a one-shot read uses it (:class:`~ragpulse.collector.service.
    Collector`, started without a source)."""

    def ingest(
        self, spans: Sequence[Span], ack: Ack | None = None, *, nbytes: int = 0, admit: bool = False
    ) -> int: ...

    def flush(self, timeout: float = 10.0) -> bool:
        """Close every open trace now; wait until what is queued is exported."""
        ...

    def close_conversations(self, why: Literal["end_of_run"]) -> None: ...

    def settle(self, timeout: float = 10.0) -> bool:
        """Wait until every sink delivered what it was handed."""
        ...


@dataclass
class BackfillRun:
    """What one pass read and handed over."""

    traces: int = 0
    spans: int = 0
    nbytes: int = 0
    seconds: float = 0.0
    delivered: bool = True  # every sink delivered what it was handed
    listed_twice: int = 0  # roots a tool listed again (its pages moved while read)

    @property
    def traces_per_s(self) -> float:
        return self.traces / self.seconds if self.seconds > 0 else 0.0


def backfill(
    collector: Collecting,
    reader: Reader,
    since_ns: int,
    until_ns: int | None,
    *,
    limit: int | None = None,
    deliver_timeout_s: float = 300.0,
    progress: Callable[[BackfillRun], None] | None = None,
    stop: threading.Event | None = None,
) -> BackfillRun:
    """Read, evaluate and deliver the window's traces through ``collector`` (started,
    without receivers); it is left running for the caller to stop."""
    run = BackfillRun()
    started = time.monotonic()
    seen: set[str] = set()
    stop = stop or threading.Event()
    for refs in reader.roots(since_ns, until_ns):
        wanted: list[TraceRef] = []
        for ref in refs:
            if ref.trace_id in seen:
                run.listed_twice += 1
                continue
            if limit is not None and len(seen) >= limit:
                break
            seen.add(ref.trace_id)
            wanted.append(ref)
        ids = [r.trace_id for r in wanted]
        for at in range(0, len(ids), reader.settings.traces_per_request):
            _hand_over(
                collector, reader, ids[at : at + reader.settings.traces_per_request], run, stop
            )
            if progress is not None:
                progress(run)
        if stop.is_set() or (limit is not None and len(seen) >= limit):
            break
    # Every trace read is whole: close them all now, evaluate, then close the
    # conversations they belong to (the end of the run: nothing more of them is read).
    while not collector.flush(IDLE_STEP_S):
        if stop.is_set():
            break
    collector.close_conversations("end_of_run")
    run.delivered = collector.settle(deliver_timeout_s)
    run.seconds = time.monotonic() - started
    return run


def _hand_over(
    collector: Collecting,
    reader: Reader,
    trace_ids: list[str],
    run: BackfillRun,
    stop: threading.Event,
) -> None:
    """Fetch a few whole traces (every page first: no trace is closed half-read), then
    hand each to the collector, waiting while it is full."""
    by_trace: dict[str, list[Span]] = {}
    nbytes = 0
    for page in reader.traces(trace_ids):
        for span in page.spans:
            by_trace.setdefault(span.trace_id, []).append(span)
        nbytes += page.nbytes
    spans_read = sum(map(len, by_trace.values()))
    share = nbytes // max(1, spans_read)
    for spans in by_trace.values():
        while True:
            try:
                collector.ingest(spans, nbytes=share * len(spans), admit=True)
                break
            except CollectorFull:
                if stop.wait(FULL_WAIT_S):
                    return
    run.spans += spans_read
    run.nbytes += nbytes
    run.traces += len(by_trace)
    reader.metrics.spans.labels(reader.tool, "ingested").inc(spans_read)
    reader.metrics.traces.labels(reader.tool).inc(len(by_trace))
