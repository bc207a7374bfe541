"""Group spans into traces and decide when a trace is complete.

A trace is complete when its root span has arrived (spans arrive only once
ended, so the root has ended) and no new span came for ``grace_s``; or when
``timeout_s`` has passed since its first span, whatever arrived.

Memory is bounded by ``max_open_traces``, ``max_held_bytes`` (the OTLP bytes of
open traces and of completed ones waiting for evaluation) and
``max_spans_per_trace``. A receiver adds a request whole or not at all
(``admit=True``): while the open traces or held bytes are past 90% of their bound
(past the bound, for a request that only continues open traces), the request
raises :class:`~ragpulse.errors.CollectorFull` before any span is kept, so the
sender retries later and nothing is lost for capacity. What
is bad in itself (a late span, a trace over ``max_spans_per_trace``) is dropped
and counted by reason.

OTLP log records (GenAI events, from the receivers' ``/v1/logs`` and gRPC
LogsService) wait with their trace and are attached, as ``source="log"``
events, to the span of their span id when the trace closes; one whose span
never came is counted as ``log_unjoined``, one after its trace closed as
``log_late``. Kafka intake carries spans only.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from ragpulse import semconv
from ragpulse.config import AssemblySettings
from ragpulse.errors import CollectorFull
from ragpulse.record import AttributeValue, LogEvent, Span, SpanEvent
from ragpulse.source import Ack
from ragpulse.telemetry import (
    DROP_LATE_SPAN,
    DROP_LOG_LATE,
    DROP_LOG_OPEN_TRACES,
    DROP_LOG_PER_TRACE,
    DROP_LOG_UNJOINED,
    DROP_OPEN_TRACES,
    DROP_SPANS_PER_TRACE,
    CollectorMetrics,
)

ADMIT_SHARE = 0.9
"""New traces are admitted up to this share of the bounds: the rest is kept for the spans
of traces already open, so they are not refused for capacity half-way through."""


class _Traced(Protocol):
    @property
    def trace_id(self) -> str: ...


_T = TypeVar("_T", bound=_Traced)


@dataclass
class CompletedTrace:
    trace_id: str
    spans: list[Span]
    trigger: str  # quiet | timeout | shutdown
    first_seen: float
    acks: list[Ack] = field(default_factory=list)
    annotations: dict[str, AttributeValue] = field(default_factory=dict)
    nbytes: int = 0  # OTLP bytes its spans came in (a share of each request's)

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
        self._timeouts_checked = float("-inf")  # when every open trace was last checked
        # Recently closed traces, so stragglers are counted as late, not opened anew.
        self._closed: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._open)

    @property
    def held_bytes(self) -> int:
        """OTLP bytes of the open traces."""
        return int(self._bytes)

    def add(
        self, spans: Sequence[Span], ack: Ack | None = None, *, nbytes: int = 0, admit: bool = False
    ) -> int:
        """Add spans that came in ``nbytes`` of OTLP; returns how many were rejected
        (dropped and counted). With ``admit``, all or nothing: raises
        :class:`~ragpulse.errors.CollectorFull` when the bounds are near."""
        now = self._clock()
        share = nbytes / len(spans) if spans else 0.0
        return self._add_each(
            spans, lambda span: self._add_one(span, now, ack, share), nbytes, admit
        )

    def _add_each(
        self,
        items: Sequence[_T],
        add_one: Callable[[_T], str | None],
        nbytes: int = 0,
        admit: bool = False,
    ) -> int:
        """``add_one`` each item under the lock; count the refusals by reason, return how many."""
        rejected: dict[str, int] = {}
        with self._lock:
            if admit:
                self._admit(items, nbytes)
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
            self._metrics.open_traces.set(len(self._open))
        for reason, n in rejected.items():
            self._metrics.dropped.labels(reason).inc(n)
        return sum(rejected.values())

    def _admit(self, items: Sequence[_T], nbytes: int) -> None:
        """Raise CollectorFull (counted) when the collector is too full for ``items``;
        called under the lock.

        As the OpenTelemetry Collector's memory limiter does, what is held now is
        compared with the bounds, not what would be held with the request: a request
        larger than the headroom is taken once there is room, never starved, and it
        takes the usage past the soft bound by at most its own size.
        """
        s = self._settings
        held = self._bytes + (self._held_elsewhere.backlog_bytes if self._held_elsewhere else 0)
        opens = any(i.trace_id not in self._open and i.trace_id not in self._closed for i in items)
        bound = None
        if held >= s.max_held_bytes:
            bound = "held_bytes"
        elif opens and len(self._open) >= ADMIT_SHARE * s.max_open_traces:
            bound = "open_traces"
        elif opens and held >= ADMIT_SHARE * s.max_held_bytes:
            bound = "held_bytes"
        if bound is not None:
            self._metrics.intake_refused.labels(bound).inc()
            raise CollectorFull(bound)

    def _trace(self, trace_id: str, now: float, late: str, full: str) -> _OpenTrace | str:
        """The open trace, opened now if new; else why not (``late``: it was closed; ``full``)."""
        trace = self._open.get(trace_id)
        if trace is None:
            if trace_id in self._closed:
                return late
            if not self._admitted and len(self._open) >= self._settings.max_open_traces:
                return full
            trace = self._open[trace_id] = _OpenTrace(first_seen=now, last_seen=now)
        return trace

    def _touch(self, trace_id: str, trace: _OpenTrace, now: float) -> None:
        if trace.last_seen != now:
            self._open.move_to_end(trace_id)
            trace.last_seen = now

    def _add_one(self, span: Span, now: float, ack: Ack | None, nbytes: float) -> str | None:
        trace = self._trace(span.trace_id, now, DROP_LATE_SPAN, DROP_OPEN_TRACES)
        if isinstance(trace, str):
            return trace
        if len(trace.spans) >= self._settings.max_spans_per_trace:
            return DROP_SPANS_PER_TRACE
        trace.spans.append(span)
        trace.nbytes += nbytes
        self._bytes += nbytes
        self._touch(span.trace_id, trace, now)
        trace.root_seen = trace.root_seen or is_local_root(span)
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
        return self._add_each(events, lambda event: self._add_log(event, now, share), nbytes, admit)

    def _add_log(self, event: LogEvent, now: float, nbytes: float) -> str | None:
        trace = self._trace(event.trace_id, now, DROP_LOG_LATE, DROP_LOG_OPEN_TRACES)
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
        """Close the traces that are complete at ``now``.

        Only the quiet prefix of the open traces (ordered by their last span) is
        looked at; traces still receiving spans are checked for the hard timeout
        once every ``min(1 s, timeout_s / 10)``, so a tick costs what completes, not
        what is open.
        """
        now = self._clock() if now is None else now
        grace, timeout = self._settings.grace_s, self._settings.timeout_s
        done: list[tuple[str, str]] = []
        with self._lock:
            for trace_id, trace in self._open.items():
                if now - trace.last_seen < grace:
                    break  # this one and every later one had a span within the grace window
                if trace.root_seen:
                    done.append((trace_id, "quiet"))
                elif now - trace.first_seen >= timeout:
                    done.append((trace_id, "timeout"))
            if now - self._timeouts_checked >= min(1.0, timeout / 10):
                self._timeouts_checked = now
                listed = {trace_id for trace_id, _ in done}
                done += [
                    (trace_id, "timeout")
                    for trace_id, trace in self._open.items()
                    if now - trace.first_seen >= timeout and trace_id not in listed
                ]
            closed = [self._close(trace_id, trigger) for trace_id, trigger in done]
            self._metrics.open_traces.set(len(self._open))
        return [trace for trace in closed if trace is not None]

    def drain(self) -> list[CompletedTrace]:
        """Close every open trace (shutdown): evaluate what we have rather than lose it."""
        with self._lock:
            closed = [self._close(trace_id, "shutdown") for trace_id in list(self._open)]
            self._metrics.open_traces.set(0)
        return [trace for trace in closed if trace is not None]

    def abandon(self, predicate: Callable[[list[Ack]], bool]) -> int:
        """Forget open traces whose acks match, without releasing the acks.

        For a source that lost ownership of the data (a revoked Kafka
        partition): the new owner re-reads it, so nothing is acknowledged here.
        """
        with self._lock:
            gone = [t for t, trace in self._open.items() if predicate(list(trace.acks.values()))]
            for trace_id in gone:
                self._bytes -= self._open.pop(trace_id).nbytes
            self._metrics.open_traces.set(len(self._open))
        return len(gone)

    def _close(self, trace_id: str, trigger: str) -> CompletedTrace | None:
        """The finished trace, its log events joined; None when only log records came."""
        trace = self._open.pop(trace_id)
        self._bytes = max(0.0, self._bytes - trace.nbytes)
        self._closed[trace_id] = None
        while len(self._closed) > self._settings.remember_closed:
            self._closed.popitem(last=False)
        if trace.logs:
            trace.spans = self._join_logs(trace.spans, trace.logs)
        if not trace.spans:
            return None  # nothing to evaluate; its log events were counted as unjoined
        self._metrics.traces_completed.labels(trigger).inc()
        self._metrics.trace_assembly_seconds.observe(max(0.0, self._clock() - trace.first_seen))
        return CompletedTrace(
            trace_id=trace_id,
            spans=trace.spans,
            trigger=trigger,
            first_seen=trace.first_seen,
            acks=list(trace.acks.values()),
            annotations=trace.annotations,
            nbytes=int(trace.nbytes),
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
