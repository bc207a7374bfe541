"""The app's span exporter when no collector listens: no wait worth noticing, one line.

:func:`ragpulse.configure` puts its network exporter (OTLP/HTTP, or Kafka) behind a
:class:`GuardedExporter`. OpenTelemetry's OTLP exporter keeps its own timeout and retry
logic; the guard only sets what it is given:

* a :class:`BoundedSession` as its HTTP session: a connection is given up after
  :data:`CONNECT_TIMEOUT_S` (the exporter's own timeout bounds the whole request), and
  while retries are not allowed a second request within one export is refused at once
  (:class:`ExportAbandoned`: not a connection error, so the exporter does not back off
  and try again; it gives the batch up);
* retries are allowed only while the collector is known to be there (its last answer
  was an HTTP response) and the process is not exiting (:meth:`GuardedExporter.closing`):
  they ride out a restart or a "retry later" (503), never a collector that is absent.
  An app run without a collector, a short script or ``ragpulse eval`` importing the app,
  so costs one refused connection per batch, at exit too;
* the exporter's own log lines (a warning per retry, an error per batch) stay out of
  the app's log: one WARNING per process names the target, the reason and the fix
  (:data:`WARN_ONCE`); later failures are logged at DEBUG.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import requests
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

logger = logging.getLogger("ragpulse.instrument")

CONNECT_TIMEOUT_S = 2.0
"""Longest wait for a connection to the collector (OTel's exporter would wait its whole
export timeout, 10 s by default, for a host that drops the connection attempt)."""

EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http",
    "opentelemetry.exporter.otlp.common.http",
    "ragpulse.sdk.kafka_exporter",
)
"""The loggers the wrapped exporters write their failures to (OpenTelemetry's, by release,
and ragpulse's Kafka exporter): what they log inside a guarded export is held back."""


class ExportAbandoned(Exception):
    """A retry refused by :class:`BoundedSession`; the exporter gives the batch up."""


class BoundedSession(requests.Session):
    """The OTLP exporter's HTTP session: a short connect timeout, and at most one request
    per export unless :meth:`begin` allows retries. Used by one export at a time (the
    batch processor serialises them); records how the last request went."""

    def __init__(self, connect_timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        super().__init__()
        self.connect_timeout_s = connect_timeout_s
        self.retries = False
        self.attempts = 0
        """Requests made in the current export (refused ones not counted)."""
        self.answered: bool | None = None
        """Whether the last request got an HTTP response; None before the first."""
        self.problem: str | None = None
        """The current export's last failure, in a few words."""

    def begin(self, *, retries: bool) -> None:
        """A new export starts; ``retries``: whether a failed request may be repeated."""
        self.retries, self.attempts, self.problem = retries, 0, None

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> Any:
        if self.attempts and not self.retries:
            raise ExportAbandoned(f"not retried: {self.problem or 'the first attempt failed'}")
        self.attempts += 1
        timeout = kwargs.get("timeout")
        if isinstance(timeout, int | float):
            kwargs["timeout"] = (min(self.connect_timeout_s, timeout), timeout)
        try:
            response = super().request(method, url, *args, **kwargs)
        except requests.ConnectionError as exc:
            self.answered, self.problem = False, self._connection_problem(exc)
            raise
        except requests.RequestException as exc:  # a read timeout: connected, no answer
            self.answered, self.problem = False, f"no answer: {type(exc).__name__}"
            raise
        self.answered = True
        if response.status_code >= 400:
            self.problem = f"HTTP {response.status_code} {response.reason}".strip()
        return response

    def _connection_problem(self, exc: requests.ConnectionError) -> str:
        if isinstance(exc, requests.ConnectTimeout):
            return f"no connection within {self.connect_timeout_s:g} s"
        text = str(exc)
        for marker, words in (
            ("Connection refused", "connection refused"),
            ("Name or service not known", "host name not found"),
            ("nodename nor servname", "host name not found"),
            ("NameResolutionError", "host name not found"),
            ("Network is unreachable", "network unreachable"),
        ):
            if marker in text:
                return words
        return _short(f"cannot connect: {text}")


class Once:
    """True the first time it is asked, False after: one warning per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False

    def first(self) -> bool:
        with self._lock:
            done, self._done = self._done, True
            return not done


WARN_ONCE = Once()
"""Shared by every guard of the process: reconfiguring does not warn again."""

_held = threading.local()


class _HoldBack(logging.Filter):
    """Keeps the wrapped exporter's records out of the log while the current thread is in
    a guarded export (the app's own exporters, on other threads, log as they do)."""

    def filter(self, record: logging.LogRecord) -> bool:
        records: list[logging.LogRecord] | None = getattr(_held, "records", None)
        if records is None:
            return True
        records.append(record)
        return False


_HOLD_BACK = _HoldBack()


def _hold_back_exporter_logs() -> None:
    for name in EXPORTER_LOGGERS:
        exporter_logger = logging.getLogger(name)
        if _HOLD_BACK not in exporter_logger.filters:
            exporter_logger.addFilter(_HOLD_BACK)


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class GuardedExporter(SpanExporter):
    """``inner`` (a network exporter) with the bounds and the one warning described in
    the module doc. ``session``: the :class:`BoundedSession` the OTLP exporter was built
    with (None for an exporter without one: Kafka); ``fix``: what the warning suggests
    first. Same contract as ``inner``: called
    from the batch processor (its thread, or the one that flushes), never raises."""

    def __init__(
        self,
        inner: SpanExporter,
        target: str,
        session: BoundedSession | None = None,
        *,
        fix: str = "",
        once: Once | None = None,
    ) -> None:
        self.inner = inner
        self.target = target
        self.session = session
        self.fix = fix
        self.dropped = 0
        """Spans whose export failed (the batch processor drops them)."""
        self._once = once or WARN_ONCE
        self._closing = False
        _hold_back_exporter_logs()

    def closing(self) -> None:
        """No retries from now on: the process exits or ragpulse is reconfigured (an
        export in flight on the batch processor's thread makes no further request)."""
        self._closing = True
        if self.session is not None:
            self.session.retries = False

    @property
    def retries_allowed(self) -> bool:
        """Whether the next export may retry: the collector answered last time and the
        process is not exiting."""
        return not self._closing and self.session is not None and self.session.answered is True

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.session is not None:
            self.session.begin(retries=self.retries_allowed)
        held: list[logging.LogRecord] = []
        error: Exception | None = None
        _held.records = held
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # an older exporter lets an abandoned retry through
            result, error = SpanExportResult.FAILURE, exc
        finally:
            _held.records = None
        if result is SpanExportResult.SUCCESS:
            return result
        self.dropped += len(spans)
        problem = self._problem(held, error)
        if self._once.first():
            logger.warning(
                "ragpulse: spans could not be sent to %s (%s) and were dropped; %sor set "
                "RAGPULSE_EXPORTER=none to turn export off (said once per process, later "
                "failures at DEBUG)",
                self.target,
                problem,
                f"{self.fix}, " if self.fix else "",
            )
        else:
            logger.debug("ragpulse: %d spans not sent to %s (%s)", len(spans), self.target, problem)
        return SpanExportResult.FAILURE

    def _problem(self, held: list[logging.LogRecord], error: Exception | None) -> str:
        if self.session is not None and self.session.problem:
            return self.session.problem
        for record in held:
            if record.levelno >= logging.WARNING:
                return _short(record.getMessage())
        if error is not None:
            return _short(f"{type(error).__name__}: {error}")
        return "export failed"

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        _held.records = []  # "already shut down" and the like, on this thread
        try:
            self.inner.shutdown()
        except Exception:
            logger.debug("ragpulse: closing the span exporter failed", exc_info=True)
        finally:
            _held.records = None
