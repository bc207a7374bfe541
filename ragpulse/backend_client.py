"""JSON over HTTP to a tracing tool's API, for everything that reads from one.

The stored-trace readers (:mod:`ragpulse.collector.stored`) page through a tool's
traces with it, and the Phoenix and Langfuse sinks read back a sample of the spans they
annotated (:mod:`ragpulse.exporters.support.target_check`): one client, so both bound
what they read, retry and count the same way. Requests are bounded in what is read back
(``page_bytes``, after decompression: :class:`PageTooLarge`); network errors, 408, 425,
429 and 5xx are retried with exponential backoff and jitter, honouring ``Retry-After``,
for ``retry_for_s``, after which :class:`~ragpulse.errors.BackendUnreachable` names the
tool and its URL; any other refusal is :class:`~ragpulse.errors.BackendRefused`, with its
status. Credentials go in headers only, and are never logged or put in an error message.
"""

from __future__ import annotations

import email.utils
import logging
import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import httpx
from prometheus_client import Counter

from ragpulse import safe_json
from ragpulse.config import StoredTracesSettings
from ragpulse.errors import BackendError, BackendRefused, BackendUnreachable

log = logging.getLogger(__name__)


class RequestMetrics(Protocol):
    """Where a client counts its requests: ``requests{backend,outcome}`` (ok, retried,
    too_large, failed)."""

    @property
    def requests(self) -> Counter: ...


M = TypeVar("M", bound=RequestMetrics)

Tool = str
"""A tracing tool, by the name of its registered source (``ragpulse.sources``)."""


@dataclass(frozen=True)
class BackendUrl:
    """A parsed ``phoenix://HOST:PORT/PROJECT`` (or ``mlflow://.../EXPERIMENT_ID``,
    ``langfuse://HOST:PORT``): the tool, its HTTP base URL, and the project or experiment."""

    tool: Tool
    base_url: str
    target: str | None = None

    def __str__(self) -> str:
        return f"{self.base_url}/{self.target}" if self.target else self.base_url


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


class BackendClient(Generic[M]):
    """JSON over HTTP to one tool: bounded answers, retries with backoff, counted
    (``metrics.requests{backend,outcome}``).

    Thread-safe (httpx's client is). ``stop`` cuts a backoff wait short (follow mode's
    shutdown); a stopped wait raises :class:`BackendUnreachable` like an exhausted one.
    """

    def __init__(
        self,
        url: BackendUrl,
        settings: StoredTracesSettings,
        credentials: Credentials,
        metrics: M,
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
            raise BackendRefused(_refusal(tool, self.url, status, raw), status)
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
