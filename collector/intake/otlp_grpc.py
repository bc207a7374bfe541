"""OTLP/gRPC receiver: ``TraceService/Export`` and ``LogsService/Export``.

The same rules as the OTLP/HTTP receiver (:mod:`ragpulse.collector.intake.otlp_http`), in
gRPC status codes: UNAUTHENTICATED without the bearer token (``authorization``
metadata), RESOURCE_EXHAUSTED over the size limit, INVALID_ARGUMENT for bodies
that do not decode, UNAVAILABLE with a ``google.rpc.RetryInfo`` when the collector
is near a bound (OTel exporters retry it), and partial success with rejected counts
for spans bad in themselves.
Every refusal is counted under the same ``ragpulse_dropped_total`` reasons.

Two choices make the counting exact:

* grpc's own decompression is turned off (``grpc.per_message_decompression``):
  messages arrive as sent and :class:`ragpulse.collector.intake.otlp.BodyReader` inflates
  them, bounded, exactly as HTTP bodies are, so a gzip bomb stops at the limit
  and a broken gzip stream is counted as ``malformed_body``.
* grpc's own size limit is twice ours, so a message over our limit reaches
  the handler and is counted as ``body_too_large``. Beyond twice the limit grpc
  answers RESOURCE_EXHAUSTED itself (the wire bytes are never buffered); the
  unary methods are served by a stream-request handler, which runs before the
  message is read, so such a refusal is still counted when grpc had already
  handed the call over (usually, not always: a call refused before that never
  reaches Python).
"""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from google.protobuf import duration_pb2
from google.protobuf.any_pb2 import Any as AnyProto
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from ragpulse.collector.intake import otlp
from ragpulse.collector.intake.otlp_http import (
    accept_logs,
    accept_traces,
    bearer_matches,
    refusal,
)
from ragpulse.errors import CollectorFull, DecodeError, PayloadTooLarge, UnsupportedMediaType
from ragpulse.source import Intake
from ragpulse.telemetry import (
    DROP_MALFORMED,
    DROP_TOO_DEEP,
    DROP_TOO_LARGE,
    DROP_UNAUTHORIZED,
    DROP_UNSUPPORTED,
    CollectorMetrics,
)

log = logging.getLogger(__name__)


def _method(module: Any, service: str) -> str:
    """``/package.Service/Export``, from the generated descriptors (no hand-typed names)."""
    return f"/{module.DESCRIPTOR.services_by_name[service].full_name}/Export"


TRACES_METHOD = _method(trace_service_pb2, "TraceService")
LOGS_METHOD = _method(logs_service_pb2, "LogsService")
GRPC_LIMIT_FACTOR = 2
"""grpc's own message limit, in multiples of ``max_body_bytes`` (see the module doc)."""


class _Refused(Exception):
    def __init__(self, code: grpc.StatusCode, reason: str | None, message: str) -> None:
        super().__init__(message)
        self.code, self.reason = code, reason


def _encoding(message: bytes) -> str | None:
    """The compression of a message grpc did not inflate, from its first bytes.

    The grpc-encoding header is not shown to handlers. A protobuf message never
    starts with 0x1f (wire type 7 does not exist), so the gzip magic is
    unambiguous; a zlib header (deflate) is 0x78 plus a checksum over both bytes.
    """
    if message[:2] == b"\x1f\x8b":
        return "gzip"
    if len(message) >= 2 and message[0] == 0x78 and (message[0] * 256 + message[1]) % 31 == 0:
        return "deflate"
    return None


class OtlpGrpcReceiver:
    """A grpc server on its own thread pool; ``start``/``stop`` from any thread."""

    def __init__(
        self,
        intake: Intake,
        metrics: CollectorMetrics,
        host: str = "127.0.0.1",
        port: int = 4317,
        max_body_bytes: int = 16 * 1024 * 1024,
        auth_token: str | None = None,
        workers: int = 8,
    ) -> None:
        self._intake = intake
        self._metrics = metrics
        self._host, self._port = host, port
        self._max_body = max_body_bytes
        self._token = auth_token
        self._workers = workers
        self._server: Any = None
        self.port: int | None = None

    @property
    def target(self) -> str:
        """``host:port`` as a grpc channel (or an exporter's endpoint) names it."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{host}:{self.port}"

    def start(self) -> None:
        handlers = {
            TRACES_METHOD: grpc.stream_unary_rpc_method_handler(self._export_traces),
            LOGS_METHOD: grpc.stream_unary_rpc_method_handler(self._export_logs),
        }
        server = grpc.server(
            ThreadPoolExecutor(self._workers, thread_name_prefix="ragpulse-otlp-grpc"),
            handlers=[_Routes(handlers)],
            options=[
                ("grpc.max_receive_message_length", GRPC_LIMIT_FACTOR * self._max_body),
                ("grpc.per_message_decompression", 0),
                # Without this a second process binds the same port and takes half the calls.
                ("grpc.so_reuseport", 0),
            ],
        )
        host = f"[{self._host}]" if ":" in self._host else self._host
        try:
            port = server.add_insecure_port(f"{host}:{self._port}")
        except RuntimeError as exc:  # grpc says "Failed to bind", not why
            server.stop(None)
            raise self._bind_error(exc) from exc
        if not port:
            server.stop(None)
            raise self._bind_error(None)
        server.start()
        self._server, self.port = server, port

    def _bind_error(self, cause: Exception | None) -> OSError:
        """The OSError a plain bind gets on this address (grpc hides it), for PortUnavailable."""
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((self._host, self._port))
            except OSError as exc:
                return exc
        return OSError(errno.EADDRINUSE, f"grpc could not bind: {cause}")

    def stop(self) -> None:
        if self._server is not None:
            # In-flight exports finish (grace); new ones are refused.
            self._server.stop(grace=2).wait(10)
            self._server = None

    # -- handlers (grpc worker threads) ----------------------------------------------
    def _export_traces(self, requests: Iterator[bytes], context: Any) -> bytes:
        def handle(raw: bytes) -> bytes:
            decoded = otlp.decode_request(otlp.parse_request(raw, otlp.PROTOBUF))
            rejected, message = accept_traces(decoded, self._metrics, self._intake.ingest, len(raw))
            return otlp.encode_response(otlp.PROTOBUF, rejected, message)

        return self._export(requests, context, handle)

    def _export_logs(self, requests: Iterator[bytes], context: Any) -> bytes:
        def handle(raw: bytes) -> bytes:
            decoded = otlp.decode_logs_request(otlp.parse_logs_request(raw, otlp.PROTOBUF))
            rejected, message = accept_logs(
                decoded, self._metrics, self._intake.ingest_logs, len(raw)
            )
            return otlp.encode_logs_response(otlp.PROTOBUF, rejected, message)

        return self._export(requests, context, handle)

    def _export(
        self, requests: Iterator[bytes], context: Any, handle: Callable[[bytes], bytes]
    ) -> bytes:
        try:
            if self._token is not None and not self._authorized(context, self._token):
                raise _Refused(
                    grpc.StatusCode.UNAUTHENTICATED,
                    DROP_UNAUTHORIZED,
                    "missing or invalid bearer token",
                )
            if self._intake.overloaded:
                self._metrics.intake_refused.labels("backlog").inc()
                raise self._retry_later(context, CollectorFull("backlog"))
            raw = self._read(requests, context)
            try:
                return handle(raw)
            except CollectorFull as full:
                raise self._retry_later(context, full) from None
            except otlp.NestingTooDeep as exc:
                raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, DROP_TOO_DEEP, str(exc)) from exc
            except DecodeError as exc:
                raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, DROP_MALFORMED, str(exc)) from exc
            except Exception as exc:  # a decoder bug must not become INTERNAL for the sender
                log.warning("OTLP/gRPC decode raised %s", type(exc).__name__, exc_info=True)
                raise _Refused(
                    grpc.StatusCode.INVALID_ARGUMENT, DROP_MALFORMED, f"undecodable: {exc}"
                ) from exc
        except _Refused as refused:
            context.abort(refused.code, refusal(self._metrics, refused.reason, str(refused)))
            raise  # abort raises; this line only tells type checkers so

    def _retry_later(self, context: Any, full: CollectorFull) -> _Refused:
        """UNAVAILABLE with RetryInfo: what OTLP exporters retry (the bound is counted)."""
        self._metrics.requests.labels("overloaded").inc()
        context.set_trailing_metadata(_retry_metadata(full.retry_after_s, str(full)))
        return _Refused(grpc.StatusCode.UNAVAILABLE, None, str(full))

    def _read(self, requests: Iterator[bytes], context: Any) -> bytes:
        """The one request message, inflated and bounded as HTTP bodies are."""
        try:
            message = next(requests)
        except StopIteration:
            raise _Refused(
                grpc.StatusCode.INVALID_ARGUMENT, DROP_MALFORMED, "no request message"
            ) from None
        except grpc.RpcError:
            # grpc refused the message itself (over max_receive_message_length) or the
            # client went away before sending it: only the first is our drop.
            remaining = context.time_remaining()
            if remaining is not None and remaining <= 0:
                self._metrics.requests.labels("cancelled").inc()
                raise _Refused(grpc.StatusCode.CANCELLED, None, "deadline passed") from None
            raise _Refused(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                DROP_TOO_LARGE,
                f"message exceeds limit of {self._max_body} bytes",
            ) from None
        try:
            return otlp.decompress(message, _encoding(message), self._max_body)
        except PayloadTooLarge as exc:
            raise _Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, DROP_TOO_LARGE, str(exc)) from exc
        except UnsupportedMediaType as exc:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, DROP_UNSUPPORTED, str(exc)) from exc
        except DecodeError as exc:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, DROP_MALFORMED, str(exc)) from exc

    def _authorized(self, context: Any, token: str) -> bool:
        values = [v for k, v in context.invocation_metadata() if k == "authorization"]
        return bearer_matches(str(values[0] if values else ""), token)


def _retry_metadata(seconds: int, message: str) -> list[tuple[str, bytes]]:
    """RetryInfo twice: as a google.rpc.Status detail (``grpc-status-details-bin``, read
    by the Collector and the Go and Java SDKs) and alone (``google.rpc.retryinfo-bin``,
    what the Python SDK's exporter reads)."""
    info = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds))
    detail = AnyProto()
    detail.Pack(info)
    status = status_pb2.Status(
        code=grpc.StatusCode.UNAVAILABLE.value[0],
        message=message,
        details=[detail],
    )
    return [
        ("grpc-status-details-bin", status.SerializeToString()),
        ("google.rpc.retryinfo-bin", info.SerializeToString()),
    ]


class _Routes(grpc.GenericRpcHandler):  # type: ignore[misc]
    def __init__(self, handlers: dict[str, Any]) -> None:
        self._handlers = handlers

    def service(self, handler_call_details: Any) -> Any:
        return self._handlers.get(handler_call_details.method)
