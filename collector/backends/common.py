"""What the stored-trace readers share: URLs, times, bounded paged requests with backoff,
their Prometheus series, and the reader contract.

A reader turns one tool's API into pages of ragpulse :class:`~ragpulse.record.Span`;
everything after (assembly, extraction, sampling, evaluation, sinks) is the collector's,
as for live traffic. Requests are bounded in what they ask for (``page_spans``) and in
what is read back (``page_bytes``, after decompression: a larger answer is abandoned and
the page asked for again in halves); network errors, 408, 425, 429 and 5xx are retried
with exponential backoff and jitter, honouring ``Retry-After``, for ``retry_for_s``,
after which :class:`~ragpulse.errors.BackendUnreachable` names the tool and its URL.
Credentials come from settings or the tools' own environment variables, go in headers
only, and are never logged or put in an error message.
"""

from __future__ import annotations

import email.utils
import logging
import random
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge

from ragpulse import safe_json
from ragpulse.config import BACKEND_SOURCES, StoredTracesSettings
from ragpulse.errors import BackendError, BackendUnreachable, ConfigError
from ragpulse.record import Span

log = logging.getLogger(__name__)

Tool = Literal["phoenix", "mlflow", "langfuse"]

_TARGET = {
    "phoenix": "the project name (phoenix://HOST:PORT/PROJECT)",
    "mlflow": "the experiment id (mlflow://HOST:PORT/EXPERIMENT_ID)",
}


@dataclass(frozen=True)
class BackendUrl:
    """A parsed ``phoenix://HOST:PORT/PROJECT`` (or ``mlflow://.../EXPERIMENT_ID``,
    ``langfuse://HOST:PORT``): the tool, its HTTP base URL, and the project or experiment."""

    tool: Tool
    base_url: str
    target: str | None = None

    def __str__(self) -> str:
        return f"{self.base_url}/{self.target}" if self.target else self.base_url


def parse_backend_url(url: str) -> BackendUrl:
    """``url`` as a :class:`BackendUrl`; a ConfigError says what is wrong and the shape.

    ``<tool>://`` is plain HTTP, ``<tool>+https://`` TLS (``<tool>+http://`` is plain
    too); no port means the scheme's (80 or 443). Phoenix's last path segment is the
    project (percent-encoded if it has spaces), MLflow's the experiment id; what comes
    before it is a path prefix (a proxy's). User names, passwords, queries and fragments
    are refused: credentials belong in settings or the environment, not in a URL that
    shows up in process lists and logs.
    """
    shapes = "phoenix://HOST:PORT/PROJECT, mlflow://HOST:PORT/EXPERIMENT_ID or langfuse://HOST:PORT"
    parts = urlsplit(url.strip())
    tool, _, transport = parts.scheme.lower().partition("+")
    if tool not in BACKEND_SOURCES or transport not in ("", "http", "https"):
        raise ConfigError(f"unsupported source URL scheme {parts.scheme!r}: use {shapes}")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            "credentials do not go in the source URL (it shows in process lists and logs): "
            "set them in stored_traces (api_key, username/password, public_key/secret_key) "
            "or the tool's own environment variables"
        )
    if parts.query or parts.fragment:
        raise ConfigError(f"the source URL takes no query or fragment: use {shapes}")
    if not parts.hostname:
        raise ConfigError(f"the source URL names no host: use {shapes}")
    try:
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"the source URL has an invalid port: {exc}") from exc
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = f"{host}:{port}" if port is not None else host
    segments = [unquote(s) for s in parts.path.split("/") if s]
    target: str | None = None
    if tool in _TARGET:
        if not segments:
            raise ConfigError(f"a {tool} source URL ends with {_TARGET[tool]}")
        target = segments.pop()
        if tool == "mlflow" and not target.isdigit():
            raise ConfigError(
                f"MLflow experiment ids are numbers, not {target!r}: {_TARGET['mlflow']}"
            )
    prefix = "".join(f"/{s}" for s in segments)
    return BackendUrl(tool, f"{transport or 'http'}://{netloc}{prefix}", target)  # type: ignore[arg-type]


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


# --- HTTP ---------------------------------------------------------------------------


class PageTooLarge(BackendError):
    """An answer passed ``page_bytes``: the caller asks for a smaller page."""


@dataclass(frozen=True)
class Credentials:
    """Headers and auth for one tool, resolved once from settings and environment."""

    headers: Mapping[str, str] = field(default_factory=dict)
    auth: httpx.Auth | None = None


RETRYABLE = frozenset({408, 425, 429})


def retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (a number or an HTTP date), else None."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class BackendClient:
    """JSON over HTTP to one tool: bounded answers, retries with backoff, counted.

    Thread-safe (httpx's client is). ``stop`` cuts a backoff wait short (follow mode's
    shutdown); a stopped wait raises :class:`BackendUnreachable` like an exhausted one.
    """

    def __init__(
        self,
        url: BackendUrl,
        settings: StoredTracesSettings,
        credentials: Credentials,
        metrics: SourceMetrics,
        *,
        transport: httpx.BaseTransport | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.url = url
        self.settings = settings
        self.metrics = metrics
        self._stop = stop or threading.Event()
        self._client = httpx.Client(
            base_url=url.base_url,
            headers={**credentials.headers, "Accept": "application/json"},
            auth=credentials.auth,
            timeout=settings.timeout_s,
            transport=transport,
            follow_redirects=False,
        )

    def close(self) -> None:
        self._client.close()

    def get(self, path: str, params: Sequence[tuple[str, Any]] = ()) -> tuple[Any, int]:
        """GET ``path``: (decoded JSON, bytes read)."""
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any) -> tuple[Any, int]:
        """POST ``body`` as JSON to ``path``: (decoded JSON, bytes read)."""
        return self.request("POST", path, body=body)

    def request(
        self, method: str, path: str, *, params: Sequence[tuple[str, Any]] = (), body: Any = None
    ) -> tuple[Any, int]:
        s = self.settings
        tool = self.url.tool
        started = time.monotonic()
        tries = 0
        while True:
            reason, wait = self._attempt(method, path, params, body)
            if isinstance(reason, tuple):  # the answer
                self.metrics.requests.labels(tool, "ok").inc()
                return reason
            elapsed = time.monotonic() - started
            delay = min(s.max_backoff_s, s.backoff_s * 2**tries) * random.uniform(0.5, 1.0)
            if wait is not None:
                delay = max(delay, min(wait, s.max_backoff_s))
            if elapsed + delay > s.retry_for_s or self._stop.is_set():
                self.metrics.requests.labels(tool, "failed").inc()
                raise BackendUnreachable(
                    f"{tool} at {self.url.base_url} did not answer ({reason}) for "
                    f"{elapsed:.0f}s; is it running, and is the URL right?"
                )
            self.metrics.requests.labels(tool, "retried").inc()
            log.debug("%s: %s, retrying in %.1fs", tool, reason, delay)
            tries += 1
            if self._stop.wait(delay):
                self.metrics.requests.labels(tool, "failed").inc()
                raise BackendUnreachable(f"{tool} at {self.url.base_url}: stopped while retrying")

    def _attempt(
        self, method: str, path: str, params: Sequence[tuple[str, Any]], body: Any
    ) -> tuple[tuple[Any, int] | str, float | None]:
        """((JSON, bytes), None) for an answer; (why, Retry-After) for a retryable failure;
        raises for a failure that retrying cannot fix."""
        tool, limit = self.url.tool, self.settings.page_bytes
        kwargs: dict[str, Any] = {"params": [(k, v) for k, v in params if v is not None]}
        if body is not None:
            kwargs["json"] = body
        try:
            with self._client.stream(method, path, **kwargs) as response:
                status = response.status_code
                if status in RETRYABLE or status >= 500:
                    return f"HTTP {status}", retry_after(response)
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > limit:
                        self.metrics.requests.labels(tool, "too_large").inc()
                        raise PageTooLarge(
                            f"{tool} answered more than {limit} bytes (stored_traces.page_bytes)"
                        )
                    chunks.append(chunk)
        except httpx.HTTPError as exc:
            # The exception's text can hold the URL: its type is enough to say what failed.
            return type(exc).__name__, None
        raw = b"".join(chunks)
        if status >= 300:
            self.metrics.requests.labels(tool, "failed").inc()
            raise BackendError(_refusal(tool, self.url, status, raw))
        try:
            return (safe_json.loads(raw), size), None
        except (ValueError, safe_json.NestingTooDeep) as exc:
            self.metrics.requests.labels(tool, "failed").inc()
            raise BackendError(
                f"{tool} at {self.url.base_url} answered with bad JSON: {exc}"
            ) from None


def _refusal(tool: str, url: BackendUrl, status: int, raw: bytes) -> str:
    detail = raw[:300].decode("utf-8", "replace").strip()
    where = f"{tool} at {url.base_url}"
    if status in (401, 403):
        return (
            f"{where} refused the credentials (HTTP {status}): set them in stored_traces or "
            f"the tool's environment variables ({detail})"
        )
    return f"{where} refused the request (HTTP {status}): {detail}"


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

    def __init__(self, client: BackendClient) -> None:
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
