"""Evaluation results delivered to a tracing tool's own HTTP API, off the evaluation thread.

The sinks that write into a tool through its API (Phoenix annotations, MLflow
assessments, Langfuse scores) share this machinery. ``export`` finds the span each
result judges (:func:`ragpulse.exporters.support.targets.evaluated_span`), redacts what the
results quote (the ``redaction`` section, path ``otel``: every evaluation export to a
tracing tool), turns them into items (the sink's :meth:`HttpSink.items`) and queues them
without blocking. Worker threads take items in batches, group them into requests
(:meth:`HttpSink.requests`) and send them; what the tool answers with 408, 425, 429, 5xx,
a network error or "not there yet" (:meth:`HttpSink.reply`) is sent again with
exponential backoff and jitter, honouring ``Retry-After``, for up to ``retry_for_s``.

Nothing is lost silently: a request that failed for good counts in
``ragpulse_sink_errors_total{sink}``, and every item in
``ragpulse_sink_items_total{sink,outcome}`` (delivered, failed, or dropped when the
queue was full); ``ragpulse_sink_retries_total{sink}`` counts requests sent again.
``max_queue`` bounds every item the sink holds, as the OpenTelemetry Collector's
sending queue does: waiting to be sent, in flight, and waiting to be sent again, so a
backend that stays down holds at most ``max_queue`` items and the rest are dropped and
counted. ``force_flush`` waits for what is held; ``shutdown`` sends what is held within
``flush_timeout_s``. Request headers (credentials) and URLs are never logged.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import random
import threading
import time
from abc import abstractmethod
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

import httpx
from pydantic import Field

from ragpulse import semconv as sc
from ragpulse.config import RedactionSettings, Settings
from ragpulse.exporters.base import Sink
from ragpulse.exporters.support.results import redact_conversation_results, redact_results
from ragpulse.exporters.support.targets import EvaluatedSpan, evaluated_span
from ragpulse.options import PluginOptions
from ragpulse.plugin_context import PluginContext
from ragpulse.record import ConversationRecord, EvalResult, RagRecord
from ragpulse.redaction import Redactor
from ragpulse.telemetry import CollectorMetrics

log = logging.getLogger(__name__)

Item = TypeVar("Item")


class Outcome(StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"  # transient: the same request is sent again later
    FAILED = "failed"  # for good: counted, never sent again


@dataclass(frozen=True)
class Reply:
    """What a tool's answer means: the outcome, and how many of the request's items the
    tool refused although it took the request (a batch's partial success)."""

    outcome: Outcome
    refused: int = 0
    reason: str = ""


@dataclass(frozen=True)
class ApiRequest:
    """One POST to the tool: path (relative to the base URL), JSON body, items it carries."""

    path: str
    body: Any
    items: int
    params: Mapping[str, str] = field(default_factory=dict)


@dataclass(order=True)
class _Attempt:
    due: float
    seq: int
    request: ApiRequest = field(compare=False)
    first: float = field(compare=False)
    tries: int = field(default=0, compare=False)


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


@dataclass(frozen=True)
class Judged:
    """One result (redacted) with the span it judges."""

    result: EvalResult
    target: EvaluatedSpan


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: the backoff applies instead


class _WarnEvery:
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


class SpanCheck(Protocol):
    """A read-back of the spans a sink judged
    (:class:`ragpulse.exporters.support.target_check.TargetCheck`)."""

    def offer(self, trace_id: str, project: str | None, spans: collections.Counter[str]) -> None:
        """Take these judged spans (span id -> items) for a later check; never blocks."""

    def close(self) -> None:
        """Stop checking (checks still waiting are not run)."""


@dataclass(frozen=True)
class Endpoint:
    """Where a tool's API is and how to authenticate to it."""

    base_url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    auth: httpx.Auth | None = None


class HttpSink(Sink, Generic[Item]):
    """A sink that posts each result to a tracing tool's HTTP API (see the module doc).

    Subclasses declare their ``Options`` (a :class:`DeliveryOptions`) and fill four
    hooks: :meth:`endpoint` (options -> URL and credentials, at construction),
    :meth:`items` (results -> items, on the evaluation thread; and
    :meth:`conversation_items` for a conversation's), :meth:`requests` (a
    batch of items -> requests, on a worker thread) and, where the tool answers in its
    own way, :meth:`reply`. ``export`` is called more than once per record when costly
    tiers follow (each call carries only new results), and posts each result it is
    given once.
    """

    def __init__(
        self,
        options: DeliveryOptions,
        *,
        metrics: CollectorMetrics | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(options)
        self.settings = options
        endpoint = self.endpoint(options)
        self.redactor = Redactor.for_path(options.redaction, "otel")
        self.metrics = metrics if metrics is not None else CollectorMetrics()
        self._client = httpx.Client(
            base_url=endpoint.base_url.rstrip("/"),
            headers={**options.headers, **endpoint.headers},
            auth=endpoint.auth,
            timeout=options.timeout_s,
            transport=transport,
        )
        self._warn = _WarnEvery()
        self._check = self.target_check(options, endpoint)
        self._cond = threading.Condition()
        self._queue: deque[tuple[float, Item]] = deque()
        self._ready: deque[_Attempt] = deque()
        self._retries: list[_Attempt] = []
        self._seq = itertools.count()
        self._held = 0  # items queued, grouped, in flight or waiting to retry: <= max_queue
        self._flushing = 0  # force_flush calls waiting: batches go out without max_wait_s
        self._closing = False
        self._abandoned = False
        self._workers = [
            threading.Thread(target=self._work, name=f"ragpulse-{self.name}-{i}", daemon=True)
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

    @classmethod
    def section(cls, settings: Settings) -> dict[str, Any]:
        return {"redaction": settings.redaction.model_dump()}

    @classmethod
    def create(cls, options: PluginOptions, context: PluginContext) -> Sink | None:
        assert isinstance(options, DeliveryOptions)
        return cls(options, metrics=context.metrics)

    # -- hooks --------------------------------------------------------------------------

    @abstractmethod
    def endpoint(self, options: DeliveryOptions) -> Endpoint:
        """The tool's base URL and credentials from ``options`` (and the tool's usual
        environment variables); raises ConfigError when they are incomplete."""

    @abstractmethod
    def items(self, record: RagRecord, judged: Sequence[Judged]) -> list[Item]:
        """The items to send for these results of ``record`` (already redacted)."""

    def conversation_items(
        self, conversation: ConversationRecord, results: Sequence[EvalResult]
    ) -> list[Item]:
        """The items to send for a conversation's results (already redacted); none by
        default, for a tool with no place for a session's evaluations."""
        return []

    @abstractmethod
    def requests(self, batch: list[Item]) -> list[ApiRequest]:
        """Requests that carry ``batch`` (several per request where the API takes many)."""

    def target_check(self, options: DeliveryOptions, endpoint: Endpoint) -> SpanCheck | None:
        """The read-back of judged spans (:mod:`ragpulse.exporters.support.target_check`)
        for a tool that takes results for spans it does not have; None: no read-back."""
        return None

    def item_span(self, item: Item) -> str | None:
        """The span ``item`` judges, for the read-back (only asked when there is one)."""
        return None

    def send(self, client: httpx.Client, request: ApiRequest) -> httpx.Response:
        """Send one request (on a worker thread): a POST of its body. A tool without
        upserts overrides this to find and replace what ragpulse wrote before; httpx
        errors are retried like a 5xx."""
        return client.post(request.path, params=request.params, json=request.body)

    def reply(self, request: ApiRequest, response: httpx.Response) -> Reply:
        """2xx: delivered; 408, 425, 429, 5xx: retry; anything else: failed."""
        status = response.status_code
        if 200 <= status < 300:
            return Reply(Outcome.DELIVERED)
        if status in (408, 425, 429) or status >= 500:
            return Reply(Outcome.RETRY, reason=f"HTTP {status}")
        return Reply(Outcome.FAILED, reason=f"HTTP {status}: {response.text[:200]}")

    # -- the evaluation thread ----------------------------------------------------------

    def preview(self, record: RagRecord, results: Sequence[EvalResult]) -> list[ApiRequest]:
        """The requests :meth:`export` would lead to for these results, built the same way
        and not sent (``ragpulse eval --from ... --dry-run``)."""
        if not record.trace_id or not record.span_id or not results:
            return []
        items = self._items_for(record, results)
        return self.requests(items) if items else []

    def _items_for(self, record: RagRecord, results: Sequence[EvalResult]) -> list[Item]:
        # Targets first: where an injection was found is read from unredacted details.
        targets = [evaluated_span(record, r) for r in results]
        if self.redactor.enabled:
            results = redact_results(record, results, self.redactor)
        judged = [Judged(r, t) for r, t in zip(results, targets, strict=True)]
        return self.items(record, judged)

    def export(self, record: RagRecord, results: Sequence[EvalResult]) -> None:
        if not record.trace_id or not record.span_id or not results:
            return  # nothing in the tool to attach the results to
        try:
            items = self._items_for(record, results)
        except Exception:
            log.exception("%s sink: cannot build items for trace %s", self.name, record.trace_id)
            self.metrics.sink_errors.labels(self.name).inc()
            return
        taken = self._enqueue(items)
        if self._check is not None and taken:
            self._offer_check(record, taken)

    def export_conversation(
        self, conversation: ConversationRecord, results: Sequence[EvalResult]
    ) -> None:
        """The conversation metrics' results, as the tool files a session's evaluations
        (:meth:`conversation_items`); a revision, a repeat or a judge's update writes the
        same items again, which the tool upserts."""
        if not conversation.turns or not results:
            return
        try:
            if self.redactor.enabled:
                results = redact_conversation_results(conversation, results, self.redactor)
            items = self.conversation_items(conversation, results)
        except Exception:
            log.exception(
                "%s sink: cannot build items for conversation %s",
                self.name,
                conversation.conversation_id,
            )
            self.metrics.sink_errors.labels(self.name).inc()
            return
        self._enqueue(items)

    def _enqueue(self, items: list[Item]) -> list[Item]:
        """Queue ``items`` without blocking; what finds no room is dropped and counted.
        Returns the items taken."""
        self.start()
        now = time.monotonic()
        with self._cond:
            room = 0 if self._closing else self.settings.max_queue - self._held
            taken = items[: max(0, room)]
            self._queue.extend((now, item) for item in taken)
            self._held += len(taken)
            self._cond.notify()
        if dropped := len(items) - len(taken):
            self.metrics.sink_items.labels(self.name, "dropped").inc(dropped)
            self.metrics.sink_errors.labels(self.name).inc()
            self._warn("%s sink: queue full, %d items dropped", self.name, dropped)
        return taken

    def _offer_check(self, record: RagRecord, items: list[Item]) -> None:
        assert self._check is not None
        spans = collections.Counter(s for item in items if (s := self.item_span(item)))
        project = record.attributes.get(sc.OPENINFERENCE_PROJECT_NAME)
        project = project if isinstance(project, str) and project else None
        self._check.offer(record.trace_id, project, spans)

    # -- workers ------------------------------------------------------------------------

    def _work(self) -> None:
        while (attempt := self._next()) is not None:
            self._send(attempt)

    def _next(self) -> _Attempt | None:
        """The next request to send, waiting for one; None when the sink is done."""
        s = self.settings
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

    def _grouped(self, batch: list[Item]) -> list[ApiRequest]:
        try:
            return self.requests(batch)
        except Exception:
            log.exception("%s sink: cannot build requests for %d items", self.name, len(batch))
            self._count(Outcome.FAILED, len(batch))
            return []

    def _send(self, attempt: _Attempt) -> None:
        request = attempt.request
        try:
            response = self.send(self._client, request)
            reply = self.reply(request, response)
            retry_after = _retry_after(response)
        except httpx.HTTPError as exc:
            # The exception's text can hold the URL (and credentials put in it): name only.
            reply, retry_after = Reply(Outcome.RETRY, reason=type(exc).__name__), None
        except Exception as exc:  # a bug in a hook must not kill the worker
            log.exception("%s sink: sending failed", self.name)
            reply, retry_after = Reply(Outcome.FAILED, reason=type(exc).__name__), None
        if reply.outcome is Outcome.RETRY and self._retry(attempt, retry_after):
            self.metrics.sink_retries.labels(self.name).inc()
            log.debug("%s sink: %s, retrying (try %d)", self.name, reply.reason, attempt.tries)
            return
        with self._cond:
            self._release(request.items)
        if reply.outcome is Outcome.DELIVERED:
            self._count(Outcome.DELIVERED, request.items - reply.refused)
            if reply.refused:
                self._count(Outcome.FAILED, reply.refused)
                self._warn("%s sink: %d items refused: %s", self.name, reply.refused, reply.reason)
            return
        self._count(Outcome.FAILED, request.items)
        self._warn(
            "%s sink: %d items not delivered to %s (%s)",
            self.name,
            request.items,
            request.path.split("?")[0],
            reply.reason,
        )

    def _retry(self, attempt: _Attempt, retry_after: float | None) -> bool:
        s = self.settings
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

    @property
    def held(self) -> int:
        """Items held now: queued, in flight or waiting to be sent again (<= max_queue)."""
        with self._cond:
            return self._held

    def _release(self, items: int) -> None:
        """``items`` are done with (delivered, failed for good): room for new ones. Called
        with the condition held."""
        if items:
            self._held = max(0, self._held - items)
            self._cond.notify_all()

    def force_flush(self, timeout_s: float | None = None) -> bool:
        """Send every item held now (retries included) without waiting to fill a batch;
        True when none is left within ``timeout_s`` (default ``flush_timeout_s``)."""
        deadline = time.monotonic() + (
            self.settings.flush_timeout_s if timeout_s is None else timeout_s
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

    def _count(self, outcome: Outcome, items: int) -> None:
        if outcome is Outcome.FAILED:
            self.metrics.sink_errors.labels(self.name).inc()
        if items:
            self.metrics.sink_items.labels(self.name, outcome.value).inc(items)

    # -- shutdown -----------------------------------------------------------------------

    def shutdown(self) -> None:
        """Send what is queued within ``flush_timeout_s``; count the rest as failed."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._cond.notify_all()
        if self._check is not None:
            self._check.close()  # read-backs still waiting are not run
        if not self._started:  # nothing was ever queued
            self._client.close()
            return
        deadline = time.monotonic() + self.settings.flush_timeout_s
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
                    self.name,
                    left,
                )
            for worker in self._workers:  # an in-flight request ends within timeout_s
                worker.join(self.settings.timeout_s)
        self._client.close()
