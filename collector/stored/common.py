"""What the stored-trace readers share: times, paging, their Prometheus series, and the
reader contract.

A reader turns one tool's API into pages of ragpulse :class:`~ragpulse.record.Span`;
everything after (assembly, extraction, sampling, evaluation, sinks) is the collector's,
as for live traffic. Requests go through :class:`~ragpulse.backend_client.BackendClient`
(bounded answers, retries with backoff; shared with the sinks that read spans back) and
are bounded in what they ask for (``page_spans``): a page past ``page_bytes`` is asked
for again in halves. Credentials come from settings or the tools' own environment
variables, go in headers only, and are never logged or put in an error message.
"""

from __future__ import annotations

import logging
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from ragpulse.backend_client import BackendClient, PageTooLarge, Tool
from ragpulse.errors import BackendError, ConfigError
from ragpulse.record import Span

log = logging.getLogger(__name__)

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)$")
_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_time(value: str, now_ns: int | None = None) -> int:
    """Nanoseconds since the epoch for ``--since`` / ``--until``: a duration before now
    (``90s``, ``15m``, ``2h``, ``7d``, ``1w``) or an ISO 8601 time (``2026-01-31``,
    ``2026-01-31T12:00:00Z``; without a zone, UTC)."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    text = value.strip()
    if m := _DURATION.match(text):
        return now_ns - int(float(m.group(1)) * _UNITS[m.group(2)] * 1e9)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"{value!r} is neither a duration (90s, 15m, 2h, 7d) nor an ISO 8601 time "
            "(2026-01-31T12:00:00Z)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1e9)


def iso(ns: int) -> str:
    """An ISO 8601 UTC time with microseconds, as the tools' time filters take."""
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat().replace("+00:00", "Z")


# --- Prometheus ---------------------------------------------------------------------


class SourceMetrics:
    """The stored-trace readers' series; every label value is a fixed enumeration."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "ragpulse_source_requests",
            "Requests to the tracing tool that traces are read from, by outcome (ok; retried: "
            "network error, 408, 425, 429, 5xx; too_large: past page_bytes, asked again in "
            "halves; failed: refused, or unreachable for retry_for_s).",
            ["backend", "outcome"],
            registry=registry,
        )
        self.spans = Counter(
            "ragpulse_source_spans",
            "Spans read from the tool, by what became of them (ingested; duplicate: read "
            "again in the overlap window; late: a new span of a trace already evaluated; "
            "rejected: an invalid id or shape).",
            ["backend", "outcome"],
            registry=registry,
        )
        self.traces = Counter(
            "ragpulse_source_traces",
            "Traces read from the tool and handed to the collector.",
            ["backend"],
            registry=registry,
        )
        self.polls = Counter(
            "ragpulse_source_polls",
            "Follow-mode polls by outcome (ok, failed: the tool was unreachable or refused; "
            "the next poll tries again).",
            ["backend", "outcome"],
            registry=registry,
        )
        self.watermark = Gauge(
            "ragpulse_source_watermark_seconds",
            "Follow mode's position (Unix time): every trace that started before it, less "
            "overlap_s, has been evaluated and its results delivered.",
            ["backend"],
            registry=registry,
        )


# --- the reader contract ------------------------------------------------------------


@dataclass(frozen=True)
class TraceRef:
    """A trace found in a time window: its id (OTel hex) and when it started (ns)."""

    trace_id: str
    start_ns: int


@dataclass
class Page:
    """Spans of one answer from the tool, decoded, and the bytes they came in."""

    spans: list[Span]
    nbytes: int = 0
    rejected: int = 0


class Reader(ABC):
    """One tool's stored traces as ragpulse spans.

    ``roots`` finds the traces that started in a window (one-shot ``eval --from``), newest
    first where the API orders them; ``traces`` fetches whole traces by id; ``recent``
    (follow mode) reads what is new since a time, skipping what the caller already has
    where the API lets it. Each raises :class:`~ragpulse.errors.BackendError` for a
    failure the caller reports; none raises for a bad span (counted as rejected).
    """

    tool: Tool

    def __init__(self, client: BackendClient[SourceMetrics]) -> None:
        self.client = client
        self.settings = client.settings
        self.url = client.url
        self.metrics = client.metrics

    @abstractmethod
    def roots(self, since_ns: int, until_ns: int | None) -> Iterator[list[TraceRef]]:
        """The traces whose root span starts in ``[since_ns, until_ns)``, page by page."""

    @abstractmethod
    def traces(self, trace_ids: Sequence[str]) -> Iterator[Page]:
        """Every span of these traces (any number of ids: requested in chunks)."""

    @abstractmethod
    def recent(
        self, since_ns: int, *, wanted: Callable[[str], bool], known: Callable[[Span], bool]
    ) -> Iterator[Page]:
        """Spans that may be new since ``since_ns`` (the caller drops those it has). A
        reader that lists traces before their spans fetches only the traces ``wanted``
        (by trace id) still wants; one whose tool pages spans newest first stops after a
        page of spans that ``known`` says were read before."""

    def close(self) -> None:
        self.client.close()

    def count_rejected(self, page: Page) -> None:
        if page.rejected:
            self.metrics.spans.labels(self.tool, "rejected").inc(page.rejected)


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when a JSON object, else empty (answers are checked where they are read)."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for at in range(0, len(items), size):
        yield items[at : at + size]


def halving(fetch: Callable[[int], tuple[Any, int]], limit: int, tool: str) -> tuple[Any, int, int]:
    """``fetch(limit)``, asked again with half the limit while the answer passes
    ``page_bytes``: (answer, bytes, the limit that worked)."""
    while True:
        try:
            answer, size = fetch(limit)
            return answer, size, limit
        except PageTooLarge as exc:
            if limit <= 1:
                raise BackendError(
                    f"{exc}: one item alone is larger; raise stored_traces.page_bytes"
                ) from exc
            limit = max(1, limit // 2)
            log.info("%s: page past page_bytes, asking for %d at a time", tool, limit)
