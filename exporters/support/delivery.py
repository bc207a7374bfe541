"""Delivery: a sink's items queued, batched, sent through a transport and retried, off the
evaluation thread (what the OpenTelemetry SDK's batch processor is to its exporter).

A :class:`Delivery` takes items without blocking (:meth:`Delivery.put`); worker threads
take them in batches, ask the :class:`Transport` for the requests that carry a batch
(:meth:`Transport.requests`) and send each one (:meth:`Transport.send`). What the
transport answers with ``retry`` (408, 425, 429, 5xx, a network error, "not there yet")
is sent again with exponential backoff and jitter, honouring ``Retry-After``, for up to
``retry_for_s``. The transport knows a tool's API; the delivery knows nothing of it.

Nothing is lost silently: a request that failed for good counts in
``ragpulse_sink_errors_total{sink}``, and every item in
``ragpulse_sink_items_total{sink,outcome}`` (delivered, failed, or dropped when the
queue was full); ``ragpulse_sink_retries_total{sink}`` counts requests sent again.
``max_queue`` bounds every item the delivery holds, as the OpenTelemetry Collector's
sending queue does: waiting to be sent, in flight, and waiting to be sent again, so a
backend that stays down holds at most ``max_queue`` items and the rest are dropped and
counted. ``force_flush`` waits for what is held; ``shutdown`` sends what is held within
``flush_timeout_s``, then closes the transport.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

from pydantic import Field

from ragpulse.config import RedactionSettings
from ragpulse.options import PluginOptions
from ragpulse.telemetry import CollectorMetrics

log = logging.getLogger(__name__)

ItemT = TypeVar("ItemT")
ItemT_contra = TypeVar("ItemT_contra", contravariant=True)


class Outcome(StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"  # transient: the same request is sent again later
    FAILED = "failed"  # for good: counted, never sent again


@dataclass(frozen=True)
class Reply:
    """What a tool's answer means: the outcome, how many of the request's items the tool
    refused although it took the request (a batch's partial success), and how long the
    tool asked to wait before a retry (``Retry-After``)."""

    outcome: Outcome
    refused: int = 0
    reason: str = ""
    retry_after_s: float | None = None


@dataclass(frozen=True)
class ApiRequest:
    """One call of the tool's API: path (relative to the base URL), JSON body, items it
    carries."""

    path: str
    body: Any
    items: int
    params: Mapping[str, str] = field(default_factory=dict)


class Transport(Protocol[ItemT_contra]):
    """A tool's API as a delivery uses it. Called on the delivery's worker threads, several
    at once (``concurrency``)."""

    def requests(self, batch: Sequence[ItemT_contra]) -> list[ApiRequest]:
        """The requests that carry ``batch`` (several items per request where the API
        takes many)."""
        ...

    def send(self, request: ApiRequest) -> Reply:
        """Send one request and say what the answer means; a network error is a
        ``retry``, never an exception (one that escapes counts the request failed)."""
        ...

    def close(self) -> None:
        """Release the connections (after the last send)."""
        ...


class DeliveryOptions(PluginOptions):
    """How a tracing-tool sink queues, batches and retries (the same for every tool)."""

    headers: dict[str, str] = Field(
        default_factory=dict, description="Extra HTTP headers on every request (never logged)."
    )
    max_queue: int = Field(
        10_000, ge=1, description="Items waiting to be sent; past it new ones are dropped, counted."
    )
    batch_size: int = Field(100, ge=1, description="Most items per request where the API batches.")
    max_wait_s: float = Field(1.0, ge=0, description="Longest an item waits to fill a batch.")
    concurrency: int = Field(2, ge=1, description="Requests in flight at once.")
    timeout_s: float = Field(10.0, gt=0, description="Per request.")
    retry_for_s: float = Field(
        300.0,
        gt=0,
        description="How long one request is retried (429, 5xx, network errors, and the "
        "evaluated trace not there yet) before it counts as failed.",
    )
    backoff_s: float = Field(0.5, gt=0, description="First retry delay; doubles on each retry.")
    max_backoff_s: float = Field(30.0, gt=0, description="Longest delay between two tries.")
    flush_timeout_s: float = Field(
        10.0, gt=0, description="Longest shutdown waits for queued items to be sent."
    )
    redaction: RedactionSettings = Field(
        default_factory=RedactionSettings,
        description="the top-level redaction section (path otel)",
    )


@dataclass(order=True)
class _Attempt:
    due: float
    seq: int
    request: ApiRequest = field(compare=False)
    first: float = field(compare=False)
    tries: int = field(default=0, compare=False)


class WarnEvery:
    """At most one warning per ``interval_s`` (an outage must not flood the log)."""

    def __init__(self, interval_s: float = 10.0) -> None:
        self._interval = interval_s
        self._last = -interval_s
        self._suppressed = 0
        self._lock = threading.Lock()

    def __call__(self, message: str, *args: object) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last < self._interval:
                self._suppressed += 1
                return
            suppressed, self._suppressed, self._last = self._suppressed, 0, now
        if suppressed:
            message += " (%d similar since the last warning)"
            args = (*args, suppressed)
        log.warning(message, *args)


class Delivery(Generic[ItemT]):
    """One sink's items on their way through ``transport`` (see the module doc): a bounded
    queue, batches, retries, ``concurrency`` worker threads started here.

    :meth:`put` is called on the evaluation thread and never blocks; :meth:`force_flush`
    and :meth:`shutdown` from any thread. ``sink`` names the counters' ``sink`` label.
    """

    def __init__(
        self,
        sink: str,
        transport: Transport[ItemT],
        options: DeliveryOptions,
        metrics: CollectorMetrics,
    ) -> None:
        self.sink = sink
        self._transport = transport
        self._options = options
        self._metrics = metrics
        self.warn = WarnEvery()
        self._cond = threading.Condition()
        self._queue: deque[tuple[float, ItemT]] = deque()
        self._ready: deque[_Attempt] = deque()
        self._retries: list[_Attempt] = []
        self._seq = itertools.count()
        self._held = 0  # items queued, grouped, in flight or waiting to retry: <= max_queue
        self._flushing = 0  # force_flush calls waiting: batches go out without max_wait_s
        self._closing = False
        self._abandoned = False
        self._workers = [
            threading.Thread(target=self._work, name=f"ragpulse-{sink}-{i}", daemon=True)
            for i in range(options.concurrency)
        ]
        self._started = False

    def start(self) -> None:
        """Start the delivery workers: the collector does, with its other threads; a sink
        used on its own starts them with its first export."""
        with self._cond:
            if self._started or self._closing:
                return
            self._started = True
        for worker in self._workers:
            worker.start()

    # -- the evaluation thread ----------------------------------------------------------

    def put(self, items: Sequence[ItemT]) -> list[ItemT]:
        """Queue ``items`` without blocking; what finds no room is dropped and counted.
        Returns the items taken."""
        self.start()
        now = time.monotonic()
        with self._cond:
            room = 0 if self._closing else self._options.max_queue - self._held
            taken = list(items[: max(0, room)])
            self._queue.extend((now, item) for item in taken)
            self._held += len(taken)
            self._cond.notify()
        if dropped := len(items) - len(taken):
            self._metrics.sink_items.labels(self.sink, "dropped").inc(dropped)
            self._metrics.sink_errors.labels(self.sink).inc()
            self.warn("%s sink: queue full, %d items dropped", self.sink, dropped)
        return taken

    @property
    def held(self) -> int:
        """Items held now: queued, in flight or waiting to be sent again (<= max_queue)."""
        with self._cond:
            return self._held

    # -- workers ------------------------------------------------------------------------

    def _work(self) -> None:
        while (attempt := self._next()) is not None:
            self._send(attempt)

    def _next(self) -> _Attempt | None:
        """The next request to send, waiting for one; None when the delivery is done."""
        s = self._options
        with self._cond:
            while not self._abandoned:
                now = time.monotonic()
                if self._ready:
                    return self._ready.popleft()
                if self._retries and self._retries[0].due <= now:
                    return heapq.heappop(self._retries)
                if self._queue and (
                    len(self._queue) >= s.batch_size
                    or self._closing
                    or self._flushing
                    or now - self._queue[0][0] >= s.max_wait_s
                ):
                    size = min(s.batch_size, len(self._queue))
                    batch = [self._queue.popleft()[1] for _ in range(size)]
                    grouped = self._grouped(batch)
                    # Items that no request carries are done with (failed, counted).
                    self._release(len(batch) - sum(r.items for r in grouped))
                    self._ready.extend(_Attempt(now, next(self._seq), r, now) for r in grouped)
                    continue
                if self._closing and not self._queue and not self._retries:
                    return None
                waits = [self._queue[0][0] + s.max_wait_s - now] if self._queue else []
                if self._retries:
                    waits.append(self._retries[0].due - now)
                self._cond.wait(max(0.0, min(waits)) if waits else None)
        return None

    def _grouped(self, batch: list[ItemT]) -> list[ApiRequest]:
        try:
            return self._transport.requests(batch)
        except Exception:
            log.exception("%s sink: cannot build requests for %d items", self.sink, len(batch))
            self._count(Outcome.FAILED, len(batch))
            return []

    def _send(self, attempt: _Attempt) -> None:
        request = attempt.request
        try:
            reply = self._transport.send(request)
        except Exception as exc:  # a bug in a transport must not kill the worker
            log.exception("%s sink: sending failed", self.sink)
            reply = Reply(Outcome.FAILED, reason=type(exc).__name__)
        if reply.outcome is Outcome.RETRY and self._retry(attempt, reply.retry_after_s):
            self._metrics.sink_retries.labels(self.sink).inc()
            log.debug("%s sink: %s, retrying (try %d)", self.sink, reply.reason, attempt.tries)
            return
        with self._cond:
            self._release(request.items)
        if reply.outcome is Outcome.DELIVERED:
            self._count(Outcome.DELIVERED, request.items - reply.refused)
            if reply.refused:
                self._count(Outcome.FAILED, reply.refused)
                self.warn("%s sink: %d items refused: %s", self.sink, reply.refused, reply.reason)
            return
        self._count(Outcome.FAILED, request.items)
        self.warn(
            "%s sink: %d items not delivered to %s (%s)",
            self.sink,
            request.items,
            request.path.split("?")[0],
            reply.reason,
        )

    def _retry(self, attempt: _Attempt, retry_after: float | None) -> bool:
        s = self._options
        delay = min(s.max_backoff_s, s.backoff_s * 2**attempt.tries) * random.uniform(0.5, 1.0)
        if retry_after is not None:
            delay = max(delay, min(retry_after, s.max_backoff_s))
        due = time.monotonic() + delay
        if due - attempt.first > s.retry_for_s:
            return False
        with self._cond:
            if self._abandoned:
                return False
            attempt.due, attempt.tries = due, attempt.tries + 1
            heapq.heappush(self._retries, attempt)
            self._cond.notify()
        return True

    def _release(self, items: int) -> None:
        """``items`` are done with (delivered, failed for good): room for new ones. Called
        with the condition held."""
        if items:
            self._held = max(0, self._held - items)
            self._cond.notify_all()

    def _count(self, outcome: Outcome, items: int) -> None:
        if outcome is Outcome.FAILED:
            self._metrics.sink_errors.labels(self.sink).inc()
        if items:
            self._metrics.sink_items.labels(self.sink, outcome.value).inc(items)

    # -- flush and shutdown -------------------------------------------------------------

    def force_flush(self, timeout_s: float | None = None) -> bool:
        """Send every item held now (retries included) without waiting to fill a batch;
        True when none is left within ``timeout_s`` (default ``flush_timeout_s``)."""
        deadline = time.monotonic() + (
            self._options.flush_timeout_s if timeout_s is None else timeout_s
        )
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._held and not self._abandoned:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(left)
                return not self._held
            finally:
                self._flushing -= 1

    def shutdown(self) -> None:
        """Send what is held within ``flush_timeout_s``; count the rest as failed; close
        the transport. Nothing is taken after it."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._cond.notify_all()
        if not self._started:  # nothing was ever queued
            self._transport.close()
            return
        deadline = time.monotonic() + self._options.flush_timeout_s
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        if any(w.is_alive() for w in self._workers):
            with self._cond:
                self._abandoned = True
                left = len(self._queue) + sum(a.request.items for a in self._ready)
                left += sum(a.request.items for a in self._retries)
                self._queue.clear()
                self._ready.clear()
                self._retries.clear()
                self._held = 0
                self._cond.notify_all()
            if left:
                self._count(Outcome.FAILED, left)
                log.warning(
                    "%s sink: %d items not delivered by the end of the flush timeout",
                    self.sink,
                    left,
                )
            for worker in self._workers:  # an in-flight request ends within timeout_s
                worker.join(self._options.timeout_s)
        self._transport.close()
