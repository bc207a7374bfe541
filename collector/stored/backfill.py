"""One pass over the traces a tool stores: ``ragpulse eval --from URL``.

The traces whose root span started in ``[since, until)`` are found (the newest ``limit``
of them where the tool lists the newest first, as Phoenix and MLflow do), then fetched
whole, page by page, and handed to a collector without receivers oldest root first, so
that a conversation's turns are evaluated in the order they were taken (each joined to
the turns before it): assembly, extraction, sampling, evaluation and every sink, as for
live traffic. At the end every open trace is closed (conversations too), the queue is
evaluated, and the sinks deliver what they hold before the run reports. Memory is
bounded by the collector's own bounds (while it is full, reading waits), but for the
list of the window's trace ids and start times.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
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
    stop = stop or threading.Event()
    ids = _oldest_first(reader.roots(since_ns, until_ns), limit, run, stop)
    step = reader.settings.traces_per_request
    for at in range(0, len(ids), step):
        if stop.is_set():
            break
        _hand_over(collector, reader, ids[at : at + step], run, stop)
        if progress is not None:
            progress(run)
    # Every trace read is whole: close them all now, evaluate, then close the
    # conversations they belong to (the end of the run: nothing more of them is read).
    while not collector.flush(IDLE_STEP_S):
        if stop.is_set():
            break
    collector.close_conversations("end_of_run")
    run.delivered = collector.settle(deliver_timeout_s)
    run.seconds = time.monotonic() - started
    return run


def _oldest_first(
    pages: Iterable[list[TraceRef]], limit: int | None, run: BackfillRun, stop: threading.Event
) -> list[str]:
    """The trace ids listed (at most ``limit``: the first listed), oldest root first."""
    started: dict[str, int] = {}
    for refs in pages:
        for ref in refs:
            if ref.trace_id in started:
                run.listed_twice += 1
            elif limit is None or len(started) < limit:
                started[ref.trace_id] = ref.start_ns
        if stop.is_set() or (limit is not None and len(started) >= limit):
            break
    return sorted(started, key=started.__getitem__)


def _hand_over(
    collector: Collecting,
    reader: Reader,
    trace_ids: list[str],
    run: BackfillRun,
    stop: threading.Event,
) -> None:
    """Fetch a few whole traces (every page first: no trace is closed half-read), then
    hand each to the collector in the order of ``trace_ids`` (a tool's pages need not
    keep it), waiting while it is full."""
    by_trace: dict[str, list[Span]] = {trace_id: [] for trace_id in trace_ids}
    nbytes = 0
    for page in reader.traces(trace_ids):
        for span in page.spans:
            by_trace.setdefault(span.trace_id, []).append(span)
        nbytes += page.nbytes
    spans_read = sum(map(len, by_trace.values()))
    share = nbytes // max(1, spans_read)
    for spans in by_trace.values():
        if not spans:
            continue
        while True:
            try:
                collector.ingest(spans, nbytes=share * len(spans), admit=True)
                break
            except CollectorFull:
                if stop.wait(FULL_WAIT_S):
                    return
    run.spans += spans_read
    run.nbytes += nbytes
    traces = sum(1 for spans in by_trace.values() if spans)
    run.traces += traces
    reader.metrics.spans.labels(reader.tool, "ingested").inc(spans_read)
    reader.metrics.traces.labels(reader.tool).inc(traces)
