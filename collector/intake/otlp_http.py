"""OTLP/HTTP receiver (``POST /v1/traces``, ``POST /v1/logs``), the embedded default source.

Answers follow the OTLP/HTTP specification: 200 with an
``ExportTraceServiceResponse`` (``partial_success`` when spans were refused),
400 for undecodable bodies (not retryable; also for JSON or attribute values
nested deeper than :data:`ragpulse.safe_json.MAX_DEPTH`, and for any decoder
failure, so bad input never gets a 5xx), 413 for bodies over the limit,
415 for other media types, 401 without the bearer token, and 503 with
``Retry-After`` when the collector is near a bound (evaluation backlog, open
traces, held bytes), decided before anything of the request is kept, so senders
retry instead of losing data. Partial success is only for spans bad in themselves
(invalid, late, over the per-trace bound), never for capacity. Error bodies are
``google.rpc.Status`` in the request's encoding.
Decompression is done here, chunk by chunk as the body arrives, bounded, so a
gzip bomb costs at most the limit. ``/v1/logs`` takes OTLP log records (GenAI
events) under the same rules; the assembler joins them to their spans.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
from collections.abc import Sequence
from typing import Protocol

from aiohttp import web

from ragpulse.collector.intake import otlp
from ragpulse.errors import CollectorFull, DecodeError, PayloadTooLarge, UnsupportedMediaType
from ragpulse.record import LogEvent, Span
from ragpulse.source import Intake
from ragpulse.telemetry import (
    DROP_INVALID_SPAN,
    DROP_LOG_INVALID,
    DROP_LOG_WITHOUT_TRACE,
    DROP_MALFORMED,
    DROP_TOO_DEEP,
    DROP_TOO_LARGE,
    DROP_UNAUTHORIZED,
    DROP_UNSUPPORTED,
    CollectorMetrics,
)

log = logging.getLogger(__name__)

TRACES_PATH = "/v1/traces"
LOGS_PATH = "/v1/logs"


class Ingest(Protocol):
    def __call__(self, spans: Sequence[Span], /, *, nbytes: int = 0, admit: bool = False) -> int:
        """Take decoded spans that came in ``nbytes``; return how many were refused (counted
        by reason). With ``admit``, all or nothing: raises CollectorFull near the bounds."""
        ...


class IngestLogs(Protocol):
    def __call__(
        self, events: Sequence[LogEvent], /, *, nbytes: int = 0, admit: bool = False
    ) -> int:
        """As :class:`Ingest`, for decoded log events."""
        ...


def accept_traces(
    decoded: otlp.DecodedTraces, metrics: CollectorMetrics, ingest: Ingest, nbytes: int = 0
) -> tuple[int, str]:
    """Ingest and count decoded spans: (spans rejected, partial-success message).

    Shared by the HTTP and gRPC receivers so both count the same way. Raises
    CollectorFull, with nothing kept or counted, when the request must be retried.
    """
    refused = ingest(decoded.spans, nbytes=nbytes, admit=True) if decoded.spans else 0
    metrics.spans_received.inc(len(decoded.spans) + decoded.rejected)
    if decoded.rejected:
        metrics.dropped.labels(DROP_INVALID_SPAN).inc(decoded.rejected)
    messages = list(decoded.errors)
    if refused:
        messages.append(f"{refused} spans refused by collector limits")
    rejected = decoded.rejected + refused
    metrics.requests.labels("partial" if rejected else "ok").inc()
    return rejected, "; ".join(messages)


def accept_logs(
    decoded: otlp.DecodedLogs, metrics: CollectorMetrics, ingest: IngestLogs, nbytes: int = 0
) -> tuple[int, str]:
    """Ingest and count decoded log events: (log records rejected, partial-success message).

    Records without a trace id are valid OTLP but cannot be joined to a span: they
    are reported as rejected (the sender learns they were not kept) and counted.
    Raises CollectorFull, with nothing kept or counted, when the request must be retried.
    """
    refused = ingest(decoded.events, nbytes=nbytes, admit=True) if decoded.events else 0
    metrics.log_records_received.inc(len(decoded.events) + decoded.rejected + decoded.without_trace)
    messages = list(decoded.errors)
    if decoded.rejected:
        metrics.dropped.labels(DROP_LOG_INVALID).inc(decoded.rejected)
    if decoded.without_trace:
        metrics.dropped.labels(DROP_LOG_WITHOUT_TRACE).inc(decoded.without_trace)
        messages.append(f"{decoded.without_trace} log records without a trace id not kept")
    if refused:
        messages.append(f"{refused} log records refused by collector limits")
    rejected = decoded.rejected + decoded.without_trace + refused
    metrics.requests.labels("partial" if rejected else "ok").inc()
    return rejected, "; ".join(messages)


MAX_MESSAGE = 512
"""Status messages are cut here: decoder messages can quote the offending value."""


def refusal(metrics: CollectorMetrics, reason: str | None, message: str) -> str:
    """Count a request refused for ``reason`` (dropped and answered so; None: counted
    already, as a retry asked for is); the message to answer with, cut to
    :data:`MAX_MESSAGE`. Shared by the HTTP and gRPC receivers."""
    if reason is not None:
        metrics.dropped.labels(reason).inc()
        metrics.requests.labels(reason).inc()
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    return message


def bearer_matches(authorization: str, token: str) -> bool:
    """Whether an ``Authorization`` value (HTTP header, gRPC metadata) is ``Bearer <token>``."""
    scheme, _, given = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode()
    )


# gRPC status codes used in google.rpc.Status bodies.
_INVALID_ARGUMENT, _UNAUTHENTICATED, _RESOURCE_EXHAUSTED, _UNAVAILABLE = 3, 16, 8, 14


class OtlpHttpReceiver:
    """Runs an aiohttp server on its own event-loop thread; ``start``/``stop`` from any thread."""

    def __init__(
        self,
        intake: Intake,
        metrics: CollectorMetrics,
        host: str = "127.0.0.1",
        port: int = 4318,
        max_body_bytes: int = 16 * 1024 * 1024,
        auth_token: str | None = None,
    ) -> None:
        self._intake = intake
        self._metrics = metrics
        self._host, self._port = host, port
        self._max_body = max_body_bytes
        self._token = auth_token
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None
        self._unexpected = 0

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def app(self) -> web.Application:
        # The handler reads through otlp.BodyReader, which bounds the wire and the
        # decoded bytes; client_max_size is the same bound for any other reader.
        app = web.Application(client_max_size=self._max_body)
        app.router.add_post(TRACES_PATH, self._handle)
        app.router.add_post(LOGS_PATH, self._handle)
        app.router.add_get("/healthz", self._health)
        return app

    def start(self) -> None:
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve())
            except BaseException as exc:  # reported to start()'s caller (port in use, say)
                errors.append(exc)
                loop.run_until_complete(self._cleanup())
                loop.close()
                self._loop = None  # nothing for stop() to stop
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="ragpulse-otlp-http", daemon=True)
        self._thread.start()
        ready.wait()
        if errors:
            raise errors[0]

    async def _serve(self) -> None:
        self._runner = web.AppRunner(self.app(), auto_decompress=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])  # port 0 -> the port the OS chose

    async def _cleanup(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._thread = None

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _handle(self, request: web.Request) -> web.Response:
        try:
            mtype = otlp.media_type(request.content_type)
        except UnsupportedMediaType as exc:
            # Answer in protobuf: the client's encoding is unknown.
            return self._refuse(415, otlp.PROTOBUF, DROP_UNSUPPORTED, str(exc))
        authorization = request.headers.get("Authorization", "")
        if self._token is not None and not bearer_matches(authorization, self._token):
            return self._refuse(401, mtype, DROP_UNAUTHORIZED, "missing or invalid bearer token")
        if self._intake.overloaded:
            self._metrics.intake_refused.labels("backlog").inc()
            return self._retry_later(mtype, CollectorFull("backlog"))
        if request.content_length is not None and request.content_length > self._max_body:
            return self._refuse(413, mtype, DROP_TOO_LARGE, "body exceeds the size limit")
        try:
            raw = await self._read_body(request)
        except PayloadTooLarge as exc:
            return self._refuse(413, mtype, DROP_TOO_LARGE, str(exc))
        except UnsupportedMediaType as exc:
            return self._refuse(415, mtype, DROP_UNSUPPORTED, str(exc))
        except DecodeError as exc:
            return self._refuse(400, mtype, DROP_MALFORMED, str(exc))
        logs = request.path == LOGS_PATH
        nbytes = len(raw)
        try:
            if logs:
                decoded_logs = otlp.decode_logs_request(otlp.parse_logs_request(raw, mtype))
            else:
                decoded = otlp.decode_request(otlp.parse_request(raw, mtype))
        except otlp.NestingTooDeep as exc:
            return self._refuse(400, mtype, DROP_TOO_DEEP, str(exc))
        except DecodeError as exc:
            return self._refuse(400, mtype, DROP_MALFORMED, str(exc))
        except Exception as exc:  # a decoder bug must not become a 500 for the sender
            self._unexpected += 1
            if self._unexpected in (1, 10, 100) or self._unexpected % 1000 == 0:
                log.warning(
                    "OTLP decode raised %s (%d so far), answered 400",
                    type(exc).__name__,
                    self._unexpected,
                    exc_info=True,
                )
            return self._refuse(400, mtype, DROP_MALFORMED, f"undecodable body: {exc}")
        finally:
            del raw  # the body is not kept past decoding, whatever the outcome

        try:
            if logs:
                rejected, message = accept_logs(
                    decoded_logs, self._metrics, self._intake.ingest_logs, nbytes
                )
                body = otlp.encode_logs_response(mtype, rejected, message)
            else:
                rejected, message = accept_traces(
                    decoded, self._metrics, self._intake.ingest, nbytes
                )
                body = otlp.encode_response(mtype, rejected, message)
        except CollectorFull as full:
            return self._retry_later(mtype, full)
        return web.Response(status=200, body=body, content_type=mtype)

    def _retry_later(self, mtype: str, full: CollectorFull) -> web.Response:
        """503 + Retry-After: what OTLP exporters retry (the bound is counted already)."""
        self._metrics.requests.labels("overloaded").inc()
        return self._error(503, mtype, str(full), retry_after=full.retry_after_s)

    async def _read_body(self, request: web.Request) -> bytes:
        """The decoded body, read as it arrives: bounded on the wire and after inflation.

        ``Content-Encoding`` is undone chunk by chunk, so neither the compressed
        body nor more than ``max_body_bytes`` of its output is ever held.
        """
        reader = otlp.BodyReader(request.headers.get("Content-Encoding"), self._max_body)
        async for chunk in request.content.iter_any():
            reader.feed(chunk)
        return reader.finish()

    def _refuse(self, status: int, mtype: str, reason: str, message: str) -> web.Response:
        message = refusal(self._metrics, reason, message)
        log.debug("refused OTLP request (%s): %s", status, message)
        return self._error(status, mtype, message)

    @staticmethod
    def _error(
        status: int, mtype: str, message: str, retry_after: int | None = None
    ) -> web.Response:
        code = {401: _UNAUTHENTICATED, 413: _RESOURCE_EXHAUSTED, 503: _UNAVAILABLE}.get(
            status, _INVALID_ARGUMENT
        )
        response = web.Response(
            status=status, body=otlp.encode_status(mtype, code, message), content_type=mtype
        )
        if status == 401:
            response.headers["WWW-Authenticate"] = "Bearer"
        if retry_after:
            response.headers["Retry-After"] = str(retry_after)
        return response
