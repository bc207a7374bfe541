"""Group spans into traces and decide when a trace is complete.

A trace is complete when its root span has arrived (spans arrive only once ended, so the
root has ended) and no new span came for ``grace_s``. A trace whose root has not arrived
(an agent still working, an app that died mid-turn) closes as *partial* when no span came
for ``idle_s``, or ``max_trace_s`` after its first span, whatever arrived: the default
``idle_s`` outlasts an agent's long step (a slow tool, a long model call), so a slow turn
still closes whole when its root comes.

Memory is bounded by ``max_open_traces``, ``max_held_bytes`` (the OTLP bytes of open
traces and of completed ones waiting for evaluation) and ``max_spans_per_trace``. When a
new trace needs room, the least recently active open traces are closed first (as partial
when their root has not arrived: trigger ``open_traces`` or ``held_bytes``) and
evaluated, before anything is refused. A receiver adds a request whole or not at all
(``admit=True``): while the held bytes are past 90% of their bound (past the bound, for
a request that only continues open traces), the request raises
:class:`~ragpulse.errors.CollectorFull` before any span is kept, so the sender retries
once evaluation has freed room, and nothing is lost for capacity.

A closed trace's spans are kept for ``keep_closed_s`` (within what ``max_held_bytes``
leaves: the oldest kept trace goes first): a span that arrives after its trace closed
reopens it, and the trace closes again with its earlier spans, so its records are rebuilt
as revisions (:mod:`~ragpulse.collector.assembly.versions`). A span of a trace closed and
forgotten (``remember_closed`` ids are remembered) cannot revise anything: it is dropped
and counted (``late_span``), and the first such drop is logged with the settings to
raise. What is bad in itself (a trace over ``max_spans_per_trace``) is dropped and
counted by reason.

OTLP log records (GenAI events, from the receivers' ``/v1/logs`` and gRPC
LogsService) wait with their trace and are attached, as ``source="log"``
events, to the span of their span id when the trace closes; one whose span
never came is counted as ``log_unjoined``, one after its trace was forgotten as
``log_late``. Kafka intake carries spans only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Literal, Protocol, TypeVar

from ragpulse import semconv
from ragpulse.collector.assembly.versions import RecordVersions
from ragpulse.config import AssemblySettings
from ragpulse.errors import CollectorFull
from ragpulse.record import AttributeValue, LogEvent, PartialReason, Span, SpanEvent
from ragpulse.source import Ack
from ragpulse.telemetry import (
    DROP_LATE_SPAN,
    DROP_LOG_LATE,
    DROP_LOG_PER_TRACE,
    DROP_LOG_UNJOINED,
    DROP_SPANS_PER_TRACE,
    CollectorMetrics,
)

log = logging.getLogger(__name__)

ADMIT_SHARE = 0.9
"""New traces are admitted up to this share of the bounds: the rest is kept for the spans
of traces already open, so they are not refused for capacity half-way through."""

Trigger = Literal["quiet", "idle", "max_trace", "open_traces", "held_bytes", "shutdown"]
"""What closed a trace: its root and ``grace_s`` of quiet; ``idle_s`` of quiet without its
root; ``max_trace_s`` from its first span; room made for new traces; the shutdown."""

_PARTIAL: dict[Trigger, PartialReason] = {
    "idle": "idle",
    "max_trace": "max_trace",
    "open_traces": "open_traces",
    "held_bytes": "held_bytes",
    "shutdown": "shutdown",
}


class _Traced(Protocol):
    @property
    def trace_id(self) -> str: ...


_T = TypeVar("_T", bound=_Traced)


@dataclass
class CompletedTrace:
    trace_id: str
    spans: list[Span]
    trigger: Trigger
    first_seen: float
    acks: list[Ack] = field(default_factory=list)
    annotations: dict[str, AttributeValue] = field(default_factory=dict)
    nbytes: int = 0  # OTLP bytes its spans came in (a share of each request's)
    partial: PartialReason | None = None
    """Closed before its root span arrived: why (its records are marked so)."""
    versions: RecordVersions = field(default_factory=RecordVersions)
    """Its records so far (shared with the kept copy): a reopened trace's are revised."""
    reopened: bool = False
    """Closed before, and reopened by a span that came late."""

    def release(self) -> None:
        for ack in self.acks:
            ack.release()
        self.acks = []


@dataclass
class _OpenTrace:
    first_seen: float
    last_seen: float
    spans: list[Span] = field(default_factory=list)
    root_seen: bool = False
    acks: dict[int, Ack] = field(default_factory=dict)
    annotations: dict[str, AttributeValue] = field(default_factory=dict)
    logs: list[LogEvent] = field(default_factory=list)
    nbytes: float = 0.0
    versions: RecordVersions | None = None  # a reopened trace's records


@dataclass
class _Kept:
    """A closed trace's spans, kept for a late span to revise its records."""

    spans: list[Span]
    annotations: dict[str, AttributeValue]
    nbytes: float
    closed_at: float
    versions: RecordVersions
    acks: list[Ack]  # released: only their sources are read (a revoked partition's go)


def is_local_root(span: Span) -> bool:
    """A span after which the trace is likely finished.

    A true root, or a ragpulse pipeline span: its parent may be a remote span
    (an upstream HTTP server) that never reaches this collector.
    """
    return span.is_root or span.attributes.get(semconv.RAGPULSE_ROLE) == semconv.ROLE_PIPELINE


class Backlog(Protocol):
    """Where completed traces wait after assembly (the evaluation queue)."""

    @property
    def backlog_bytes(self) -> int:
        """OTLP bytes of the completed traces not yet evaluated."""
        ...


class Assembler:
    """Thread-safe: ``add`` is called from intake, ``pop_complete`` from a ticker.
    ``held_elsewhere``: the completed traces' backlog, counted against ``max_held_bytes``
    with the open traces."""

    def __init__(
        self,
        settings: AssemblySettings,
        metrics: CollectorMetrics,
        clock: Callable[[], float] = time.monotonic,
        held_elsewhere: Backlog | None = None,
    ) -> None:
        self._settings = settings
        self._metrics = metrics
        self._clock = clock
        self._held_elsewhere = held_elsewhere
        self._bytes = 0.0  # OTLP bytes of the open traces
        self._admitted = False  # adding an admitted request now (under the lock)
        # Open traces, least recently added to first: the quiet ones are a prefix.
        self._open: OrderedDict[str, _OpenTrace] = OrderedDict()
        # The open traces whose root arrived, in the same order (they wait for grace_s).
        self._rooted: OrderedDict[str, _OpenTrace] = OrderedDict()
        # Every open trace in the order it opened (or reopened): max_trace_s is a prefix.
        self._started: dict[str, _OpenTrace] = {}
        # Closed trace ids, oldest first, so stragglers revise or are counted, never
        # opened anew; and those whose spans are still kept, oldest first.
        self._closed: OrderedDict[str, None] = OrderedDict()
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._kept_bytes = 0.0
        # Closed to make room, not handed on yet (the next pop_complete does).
        self._forced: list[CompletedTrace] = []
        self._forced_bytes = 0
        self._late_logged = False
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._open)

    @property
    def held_bytes(self) -> int:
        """OTLP bytes of the open traces and of those closed to make room, not handed on."""
        return int(self._bytes) + self._forced_bytes

    @property
    def rooted(self) -> int:
        """Open traces whose root arrived (they close within ``grace_s``)."""
        return len(self._rooted)

    @property
    def closing(self) -> int:
        """Traces closed to make room, not handed on yet."""
        return len(self._forced)

    @property
    def closing_bytes(self) -> int:
        """OTLP bytes of the traces closed to make room, not handed on yet."""
        return self._forced_bytes

    @property
    def kept_bytes(self) -> int:
        """OTLP bytes of the closed traces kept for late spans."""
        return int(self._kept_bytes)

    def _backlog_bytes(self) -> int:
        return self._held_elsewhere.backlog_bytes if self._held_elsewhere else 0

    def add(
        self, spans: Sequence[Span], ack: Ack | None = None, *, nbytes: int = 0, admit: bool = False
    ) -> int:
        """Add spans that came in ``nbytes`` of OTLP; returns how many were rejected
        (dropped and counted). With ``admit``, all or nothing: raises
        :class:`~ragpulse.errors.CollectorFull` when the held bytes are near their bound."""
        now = self._clock()
        share = nbytes / len(spans) if spans else 0.0
        return self._add_each(
            spans, lambda span: self._add_one(span, now, ack, share), now, nbytes, admit
        )

    def _add_each(
        self,
        items: Sequence[_T],
        add_one: Callable[[_T], str | None],
        now: float,
        nbytes: int = 0,
        admit: bool = False,
    ) -> int:
        """``add_one`` each item under the lock; count the refusals by reason, return how many."""
        rejected: dict[str, int] = {}
        with self._lock:
            if admit:
                self._admit(items, nbytes, now)
            # An admitted request is taken whole: it may take the open traces past the
            # bound by what it holds (it is bounded by the body size), never refused half.
            self._admitted = admit
            try:
                for item in items:
                    reason = add_one(item)
                    if reason:
                        rejected[reason] = rejected.get(reason, 0) + 1
            finally:
                self._admitted = False
            self._trim_kept(now)
            self._gauges()
        for reason, n in rejected.items():
            self._metrics.dropped.labels(reason).inc(n)
        return sum(rejected.values())

    def _admit(self, items: Sequence[_T], nbytes: int, now: float) -> None:
        """Make room for ``items``, or raise CollectorFull (counted); called under the lock.

        New traces first close open ones while the open traces are at 90% of
        ``max_open_traces`` (see :meth:`_make_room`: those whose root came first). Held
        bytes past 90% of ``max_held_bytes`` (past 100%, for a request that only
        continues open traces) refuse the request; first the open traces holding the room
        are closed for evaluation (which frees it), so that the sender's retry finds room.
        As the OpenTelemetry Collector's memory limiter does, what is held now is compared
        with the bounds, not what would be held with the request: a request larger than
        the headroom is taken once there is room, never starved, and it takes the usage
        past the soft bound by at most its size.
        """
        s = self._settings
        ids = {i.trace_id for i in items}
        new = [t for t in ids if t not in self._open]
        if new and len(self._open) + len(new) > ADMIT_SHARE * s.max_open_traces:
            target = max(0, int(ADMIT_SHARE * s.max_open_traces) - len(new))
            self._make_room("open_traces", now, keep=ids, open_at_most=target)
        held = self.held_bytes + self._backlog_bytes()
        soft = ADMIT_SHARE * s.max_held_bytes
        if held >= s.max_held_bytes or (new and held >= soft):
            # Evaluation frees what the closed traces hold; the sender comes back then.
            self._make_room("held_bytes", now, keep=ids, bytes_at_most=soft - nbytes)
            self._metrics.intake_refused.labels("held_bytes").inc()
            raise CollectorFull("held_bytes")

    def _make_room(
        self,
        trigger: Trigger,
        now: float,
        *,
        keep: Collection[str] = (),
        open_at_most: int | None = None,
        bytes_at_most: float | None = None,
    ) -> None:
        """Close open traces (but ``keep``) until at most ``open_at_most`` are open, or the
        open ones hold at most ``bytes_at_most``: those whose root came first (they would
        close within ``grace_s``), then the least recently active. They wait in
        ``_forced`` for the next :meth:`pop_complete`. Under the lock."""

        def over() -> bool:
            if open_at_most is not None and len(self._open) > open_at_most:
                return True
            return bytes_at_most is not None and self._bytes > max(0.0, bytes_at_most)

        def close(trace_id: str) -> None:
            closed = self._close(trace_id, trigger, now)
            if closed is not None:
                self._forced.append(closed)
                self._forced_bytes += closed.nbytes

        for trace_id in [t for t in self._rooted if t not in keep]:
            if not over():
                return
            close(trace_id)
        while over():  # the least recently active, a few at a time (no copy of them all)
            oldest = [t for t in islice(self._open, len(keep) + 64) if t not in keep]
            if not oldest:
                return
            for trace_id in oldest:
                if not over():
                    return
                close(trace_id)

    def _trace(self, trace_id: str, now: float, late: str) -> _OpenTrace | str:
        """The open trace, opened (or reopened) now if need be; else ``late``: it closed
        and its spans are forgotten."""
        trace = self._open.get(trace_id)
        if trace is not None:
            return trace
        kept = self._kept.pop(trace_id, None)
        if kept is None and trace_id in self._closed:
            self._log_late(trace_id)
            return late
        if not self._admitted and len(self._open) >= self._settings.max_open_traces:
            keep = {trace_id}
            self._make_room("open_traces", now, keep=keep, open_at_most=len(self._open) - 1)
        trace = _OpenTrace(first_seen=now, last_seen=now)
        if kept is not None:  # a late span: the trace again, its records to be revised
            self._closed.pop(trace_id, None)
            self._kept_bytes = max(0.0, self._kept_bytes - kept.nbytes)
            trace.spans, trace.annotations = list(kept.spans), dict(kept.annotations)
            trace.nbytes, trace.versions = kept.nbytes, kept.versions
            self._bytes += kept.nbytes
            if any(is_local_root(s) for s in kept.spans):
                trace.root_seen = True
                self._rooted[trace_id] = trace
            self._metrics.traces_reopened.inc()
        self._open[trace_id] = trace
        self._started[trace_id] = trace
        return trace

    def _log_late(self, trace_id: str) -> None:
        if self._late_logged:
            return
        self._late_logged = True
        log.warning(
            "a span of trace %s arrived after the trace was closed and its spans were no "
            'longer kept: dropped and counted (ragpulse_dropped_total{reason="late_span"}). '
            "To revise such records instead, raise assembly.keep_closed_s (now %s s) or "
            "assembly.max_held_bytes (now %d), or assembly.idle_s / max_trace_s (now %s s / "
            "%s s) to keep slow traces open longer. Logged once.",
            trace_id,
            self._settings.keep_closed_s,
            self._settings.max_held_bytes,
            self._settings.idle_s,
            self._settings.max_trace_s,
        )

    def _touch(self, trace_id: str, trace: _OpenTrace, now: float) -> None:
        if trace.last_seen != now:
            self._open.move_to_end(trace_id)
            if trace_id in self._rooted:
                self._rooted.move_to_end(trace_id)
            trace.last_seen = now

    def _add_one(self, span: Span, now: float, ack: Ack | None, nbytes: float) -> str | None:
        trace = self._trace(span.trace_id, now, DROP_LATE_SPAN)
        if isinstance(trace, str):
            return trace
        if len(trace.spans) >= self._settings.max_spans_per_trace:
            return DROP_SPANS_PER_TRACE
        trace.spans.append(span)
        trace.nbytes += nbytes
        self._bytes += nbytes
        self._touch(span.trace_id, trace, now)
        if not trace.root_seen and is_local_root(span):
            trace.root_seen = True
            self._rooted[span.trace_id] = trace
        if ack is not None and id(ack) not in trace.acks:
            ack.hold()
            trace.acks[id(ack)] = ack
        return None

    def add_logs(self, events: Sequence[LogEvent], *, nbytes: int = 0, admit: bool = False) -> int:
        """Buffer log events with their traces; returns how many were dropped (counted).

        A log record may arrive before any span of its trace (separate exporters,
        separate batches): it opens the trace, within the same ``max_open_traces``
        bound. Log events per trace are bounded by ``max_spans_per_trace``.
        """
        now = self._clock()
        share = nbytes / len(events) if events else 0.0
        return self._add_each(
            events, lambda event: self._add_log(event, now, share), now, nbytes, admit
        )

    def _add_log(self, event: LogEvent, now: float, nbytes: float) -> str | None:
        trace = self._trace(event.trace_id, now, DROP_LOG_LATE)
        if isinstance(trace, str):
            return trace
        if len(trace.logs) >= self._settings.max_spans_per_trace:
            return DROP_LOG_PER_TRACE
        trace.logs.append(event)
        trace.nbytes += nbytes
        self._bytes += nbytes
        self._touch(event.trace_id, trace, now)
        return None

    def annotate(self, trace_id: str, attributes: dict[str, AttributeValue]) -> bool:
        """Attach attributes to an open trace's records (user feedback); False if not open."""
        with self._lock:
            trace = self._open.get(trace_id)
            if trace is None:
                return False
            trace.annotations.update(attributes)
            return True

    def pop_complete(self, now: float | None = None) -> list[CompletedTrace]:
        """Close the traces that are complete at ``now``, after those closed to make room.

        Each rule looks at a prefix of an order kept as spans come (the rooted traces by
        their last span for ``grace_s``, every open trace by its last span for ``idle_s``,
        by its first for ``max_trace_s``), so a tick costs what completes, not what is
        open.
        """
        now = self._clock() if now is None else now
        s = self._settings
        done: dict[str, Trigger] = {}
        with self._lock:
            for trace_id, trace in self._rooted.items():
                if now - trace.last_seen < s.grace_s:
                    break
                done[trace_id] = "quiet"
            for trace_id, trace in self._open.items():
                if now - trace.last_seen < s.idle_s:
                    break
                if not trace.root_seen:
                    done.setdefault(trace_id, "idle")
            for trace_id, trace in self._started.items():
                if now - trace.first_seen < s.max_trace_s:
                    break
                done.setdefault(trace_id, "max_trace")
            closed = [self._close(trace_id, trigger, now) for trace_id, trigger in done.items()]
            forced, self._forced, self._forced_bytes = self._forced, [], 0
            self._trim_kept(now)
            self._gauges()
        return [*forced, *(trace for trace in closed if trace is not None)]

    def drain(self) -> list[CompletedTrace]:
        """Close every open trace (shutdown): evaluate what we have rather than lose it."""
        now = self._clock()
        with self._lock:
            closed = [self._close(trace_id, "shutdown", now) for trace_id in list(self._open)]
            forced, self._forced, self._forced_bytes = self._forced, [], 0
            self._gauges()
        return [*forced, *(trace for trace in closed if trace is not None)]

    def abandon(self, predicate: Callable[[list[Ack]], bool]) -> int:
        """Forget open traces whose acks match, without releasing the acks.

        For a source that lost ownership of the data (a revoked Kafka
        partition): the new owner re-reads it, so nothing is acknowledged here, and the
        late spans of its closed traces go there: their kept spans are forgotten too.
        """
        with self._lock:
            gone = [t for t, trace in self._open.items() if predicate(list(trace.acks.values()))]
            for trace_id in gone:
                self._bytes -= self._forget_open(trace_id).nbytes
            for trace_id in [t for t, kept in self._kept.items() if predicate(kept.acks)]:
                self._kept_bytes -= self._kept.pop(trace_id).nbytes
            self._gauges()
        return len(gone)

    def _forget_open(self, trace_id: str) -> _OpenTrace:
        self._rooted.pop(trace_id, None)
        self._started.pop(trace_id, None)
        return self._open.pop(trace_id)

    def _gauges(self) -> None:
        self._metrics.open_traces.set(len(self._open))
        self._metrics.closed_kept.set(len(self._kept))
        self._metrics.closed_kept_bytes.set(self._kept_bytes)

    def _trim_kept(self, now: float) -> None:
        """Forget kept spans past ``keep_closed_s``, then the oldest while everything held
        is over ``max_held_bytes`` (kept spans use what is left). Under the lock."""
        s = self._settings
        room = s.max_held_bytes - self.held_bytes - self._backlog_bytes()
        while self._kept:
            trace_id, kept = next(iter(self._kept.items()))
            if now - kept.closed_at < s.keep_closed_s and self._kept_bytes <= room:
                break
            del self._kept[trace_id]
            self._kept_bytes = max(0.0, self._kept_bytes - kept.nbytes)

    def _close(self, trace_id: str, trigger: Trigger, now: float) -> CompletedTrace | None:
        """The finished trace, its log events joined; None when only log records came."""
        trace = self._forget_open(trace_id)
        self._bytes = max(0.0, self._bytes - trace.nbytes)
        self._closed[trace_id] = None
        while len(self._closed) > self._settings.remember_closed:
            forgotten, _ = self._closed.popitem(last=False)
            if (kept := self._kept.pop(forgotten, None)) is not None:
                self._kept_bytes = max(0.0, self._kept_bytes - kept.nbytes)
        if trace.logs:
            trace.spans = self._join_logs(trace.spans, trace.logs)
        if not trace.spans:
            return None  # nothing to evaluate; its log events were counted as unjoined
        versions = trace.versions if trace.versions is not None else RecordVersions()
        acks = list(trace.acks.values())
        if self._settings.keep_closed_s > 0 and self._settings.remember_closed > 0:
            self._kept[trace_id] = _Kept(
                trace.spans, trace.annotations, trace.nbytes, now, versions, acks
            )
            self._kept_bytes += trace.nbytes
        partial = None if trace.root_seen else _PARTIAL.get(trigger, "idle")
        self._metrics.traces_completed.labels(trigger).inc()
        self._metrics.trace_assembly_seconds.observe(max(0.0, now - trace.first_seen))
        return CompletedTrace(
            trace_id=trace_id,
            spans=trace.spans,
            trigger=trigger,
            first_seen=trace.first_seen,
            acks=acks,
            annotations=trace.annotations,
            nbytes=int(trace.nbytes),
            partial=partial,
            versions=versions,
            reopened=trace.versions is not None,
        )

    def _join_logs(self, spans: list[Span], logs: list[LogEvent]) -> list[Span]:
        """Spans with their log events appended (by time); the rest counted as unjoined."""
        by_span: dict[str, list[LogEvent]] = {}
        for log in logs:
            by_span.setdefault(log.span_id or "", []).append(log)
        joined = []
        for span in spans:
            mine = by_span.pop(span.span_id, None)
            if mine:
                events = sorted([*span.events, *(log.event for log in mine)], key=_event_time)
                span = span.model_copy(update={"events": events})
            joined.append(span)
        unjoined = sum(len(rest) for rest in by_span.values())
        if unjoined:
            self._metrics.dropped.labels(DROP_LOG_UNJOINED).inc(unjoined)
        return joined


def _event_time(event: SpanEvent) -> int:
    return event.time_ns
