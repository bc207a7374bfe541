"""OTLP trace and log payloads -> ragpulse :class:`Span` / :class:`LogEvent` models.

Protobuf stops here: callers get pydantic models and a count of items rejected
as invalid. OTLP/JSON is normalised into the protobuf message (hex ids become
bytes) so both encodings share one conversion path.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError as ProtobufDecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from ragpulse import safe_json
from ragpulse.errors import DecodeError, PayloadTooLarge, UnsupportedMediaType
from ragpulse.record import AttributeValue, LogEvent, Span, SpanEvent, SpanStatus

_M = TypeVar("_M")  # a parsed export request
_D = TypeVar("_D")  # what it decodes to

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
ENCODINGS = {"otlp_proto": PROTOBUF, "otlp_json": JSON}
"""The media type of each ``kafka.encoding`` (the OpenTelemetry Collector's Kafka
exporter's names)."""

_KINDS = {
    trace_pb2.Span.SPAN_KIND_INTERNAL: "internal",
    trace_pb2.Span.SPAN_KIND_SERVER: "server",
    trace_pb2.Span.SPAN_KIND_CLIENT: "client",
    trace_pb2.Span.SPAN_KIND_PRODUCER: "producer",
    trace_pb2.Span.SPAN_KIND_CONSUMER: "consumer",
}
_STATUS = {
    trace_pb2.Status.STATUS_CODE_OK: SpanStatus.OK,
    trace_pb2.Status.STATUS_CODE_ERROR: SpanStatus.ERROR,
}


MAX_VALUE_DEPTH = safe_json.MAX_DEPTH
"""Nesting of attribute values (AnyValue arrays / kvlists) accepted from either encoding."""


class NestingTooDeep(DecodeError):
    """The payload nests deeper than the limit (JSON brackets or AnyValue values)."""


@dataclass
class DecodedTraces:
    spans: list[Span] = field(default_factory=list)
    rejected: int = 0
    """Spans present in the payload but unusable (bad ids); reported as partial success."""
    errors: list[str] = field(default_factory=list)


@dataclass
class DecodedLogs:
    events: list[LogEvent] = field(default_factory=list)
    without_trace: int = 0
    """Log records with no trace id: valid OTLP, but nothing to join them to."""
    rejected: int = 0
    """Log records with malformed ids (a trace or span id of the wrong length)."""
    errors: list[str] = field(default_factory=list)


def media_type(content_type: str | None) -> str:
    """``application/x-protobuf`` or ``application/json``; anything else is refused."""
    base = (content_type or "").split(";")[0].strip().lower()
    if base in (PROTOBUF, "application/protobuf"):
        return PROTOBUF
    if base == JSON:
        return JSON
    raise UnsupportedMediaType(
        f"unsupported Content-Type {content_type!r}; OTLP/HTTP accepts {PROTOBUF} or {JSON}"
    )


def decompress(body: bytes, encoding: str | None, max_bytes: int) -> bytes:
    """Undo Content-Encoding, refusing output beyond ``max_bytes`` (gzip bombs)."""
    reader = BodyReader(encoding, max_bytes)
    reader.feed(body)
    return reader.finish()


class BodyReader:
    """Undoes Content-Encoding as the body arrives, bounded on both sides.

    ``feed`` each chunk as it is read from the socket; it raises
    :class:`PayloadTooLarge` as soon as the wire bytes or the decoded bytes pass
    ``max_bytes``, so a gzip bomb is stopped after ``max_bytes`` of output,
    inflated in steps of at most ``STEP`` bytes (never one buffer the size of
    the bomb), and the compressed body is never held whole.
    """

    STEP = 1 << 20

    def __init__(self, encoding: str | None, max_bytes: int) -> None:
        enc = (encoding or "identity").strip().lower()
        if enc not in ("", "identity", "gzip", "deflate"):
            raise UnsupportedMediaType(f"unsupported Content-Encoding {encoding!r}; use gzip")
        self._enc = enc
        # wbits 32+15 auto-detects gzip or zlib headers.
        self._inflater = (
            zlib.decompressobj(32 + zlib.MAX_WBITS if enc == "gzip" else zlib.MAX_WBITS)
            if enc in ("gzip", "deflate")
            else None
        )
        self._max = max_bytes
        self._wire = 0
        self._size = 0
        self._parts: list[bytes] = []

    def feed(self, chunk: bytes) -> None:
        self._wire += len(chunk)
        if self._wire > self._max:
            raise PayloadTooLarge(f"body exceeds limit of {self._max} bytes")
        if self._inflater is None:
            self._keep(chunk)
            return
        data = chunk
        while data and not self._inflater.eof:
            step = min(self.STEP, self._max - self._size + 1)
            try:
                out = self._inflater.decompress(data, step)
            except zlib.error as exc:
                raise DecodeError(f"invalid {self._enc} stream: {exc}") from exc
            if self._size + len(out) > self._max:
                raise PayloadTooLarge(f"decompressed body exceeds limit of {self._max} bytes")
            self._keep(out)
            data = self._inflater.unconsumed_tail

    def _keep(self, data: bytes) -> None:
        if data:
            self._parts.append(data)
            self._size += len(data)

    def finish(self) -> bytes:
        """The whole decoded body; a compressed stream must have ended."""
        if self._inflater is not None and not self._inflater.eof:
            raise DecodeError(f"truncated {self._enc} stream")
        parts, self._parts = self._parts, []
        return parts[0] if len(parts) == 1 else b"".join(parts)


def parse_request(body: bytes, mtype: str) -> trace_service_pb2.ExportTraceServiceRequest:
    """Parse one OTLP trace payload; every failure is a :class:`DecodeError` (never a crash).

    Protobuf nesting is bounded by the runtime's recursion limit (100 messages,
    about 47 levels of attribute values), JSON nesting by :mod:`ragpulse.safe_json`
    before anything recurses; both raise :class:`NestingTooDeep`.
    """
    request = trace_service_pb2.ExportTraceServiceRequest()
    _parse(body, mtype, request, "resourceSpans", _hex_ids_to_base64)
    return request


def parse_logs_request(body: bytes, mtype: str) -> logs_service_pb2.ExportLogsServiceRequest:
    """Parse one OTLP logs payload, as :func:`parse_request` does traces."""
    request = logs_service_pb2.ExportLogsServiceRequest()
    _parse(body, mtype, request, "resourceLogs", _log_hex_ids_to_base64)
    return request


def _parse(body: bytes, mtype: str, request: Any, top: str, fix_ids: Any) -> None:
    name = type(request).__name__
    if mtype == PROTOBUF:
        try:
            request.ParseFromString(body)
        except RecursionError as exc:  # the pure-Python runtime recurses in Python
            raise NestingTooDeep(f"protobuf {name} nested too deeply") from exc
        except (ProtobufDecodeError, RuntimeError, ValueError) as exc:
            # upb says "Exceeded upb_DecodeOptions_MaxDepth" past 100 nested messages.
            error = NestingTooDeep if "MaxDepth" in str(exc) else DecodeError
            raise error(f"invalid protobuf {name}: {exc}") from exc
        return
    try:
        payload = safe_json.loads(body)
        if isinstance(payload, list):
            # Some collectors (rotel's Kafka exporter) write a bare ResourceSpans array.
            payload = {top: payload}
        fix_ids(payload)
        json_format.ParseDict(payload, request, ignore_unknown_fields=True)
    except safe_json.NestingTooDeep as exc:
        raise NestingTooDeep(f"invalid OTLP/JSON {name}: {exc}") from exc
    except (
        ValueError,
        TypeError,
        AttributeError,
        RecursionError,
        json_format.ParseError,
    ) as exc:
        raise DecodeError(f"invalid OTLP/JSON {name}: {exc}") from exc


def request_from_json(
    payload: Any, *, hex_ids: bool = True
) -> trace_service_pb2.ExportTraceServiceRequest:
    """An OTLP/JSON trace payload that is JSON-decoded already (a tool's API answer) as
    the request :func:`parse_request` would give: ids in OTLP/JSON's hex, or in proto3
    JSON's base64 (``hex_ids=False``, as MLflow writes them). Failures are DecodeErrors."""
    request = trace_service_pb2.ExportTraceServiceRequest()
    try:
        if hex_ids:
            _hex_ids_to_base64(payload)
        json_format.ParseDict(payload, request, ignore_unknown_fields=True)
    except (ValueError, TypeError, AttributeError, RecursionError, json_format.ParseError) as exc:
        raise DecodeError(f"invalid OTLP/JSON {type(request).__name__}: {exc}") from exc
    return request


def decode_request(request: trace_service_pb2.ExportTraceServiceRequest) -> DecodedTraces:
    """Spans of a parsed request; a value nested beyond the limit is a :class:`DecodeError`."""
    return _decoded(_decode_request, request, "span")


def _decoded(decode: Callable[[_M], _D], request: _M, item: str) -> _D:
    """``decode(request)``, its failures (pydantic's are ValueErrors) as :class:`DecodeError`."""
    try:
        return decode(request)
    except NestingTooDeep:
        raise
    except (ValueError, TypeError, RecursionError) as exc:
        name = type(request).__name__
        raise DecodeError(f"undecodable {item} in {name}: {exc}") from exc


def _decode_request(request: trace_service_pb2.ExportTraceServiceRequest) -> DecodedTraces:
    out = DecodedTraces()
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name or None
            for pb in scope_spans.spans:
                if len(pb.trace_id) != 16 or len(pb.span_id) != 8 or not any(pb.trace_id):
                    out.rejected += 1
                    if len(out.errors) < 5:
                        out.errors.append(f"span {pb.name!r} has an invalid trace or span id")
                    continue
                out.spans.append(_span(pb, resource, scope))
    return out


def decode_logs_request(request: logs_service_pb2.ExportLogsServiceRequest) -> DecodedLogs:
    """Log events of a parsed request; a value nested beyond the limit is a :class:`DecodeError`."""
    return _decoded(_decode_logs, request, "log record")


def _decode_logs(request: logs_service_pb2.ExportLogsServiceRequest) -> DecodedLogs:
    out = DecodedLogs()
    for resource_logs in request.resource_logs:
        resource = _attributes(resource_logs.resource.attributes)
        for scope_logs in resource_logs.scope_logs:
            for pb in scope_logs.log_records:
                if not any(pb.trace_id):
                    out.without_trace += 1
                    continue
                if len(pb.trace_id) != 16 or len(pb.span_id) not in (0, 8):
                    out.rejected += 1
                    if len(out.errors) < 5:
                        out.errors.append("log record has an invalid trace or span id")
                    continue
                out.events.append(_log_event(pb, resource))
    return out


def _log_event(pb: logs_pb2.LogRecord, resource: dict[str, AttributeValue]) -> LogEvent:
    attributes = _attributes(pb.attributes)
    # event_name is the field newer SDKs set; older ones put it in the event.name attribute.
    name = pb.event_name or str(attributes.get("event.name") or "")
    return LogEvent(
        trace_id=pb.trace_id.hex(),
        span_id=pb.span_id.hex() if any(pb.span_id) else None,
        event=SpanEvent(
            name=name,
            time_ns=pb.time_unix_nano or pb.observed_time_unix_nano,
            attributes=attributes,
            body=_value(pb.body) if pb.HasField("body") else None,
            source="log",
        ),
        resource=resource,
    )


def encode_response(mtype: str, rejected: int = 0, message: str = "") -> bytes:
    response = trace_service_pb2.ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    return _encode(response, mtype)


def encode_logs_response(mtype: str, rejected: int = 0, message: str = "") -> bytes:
    response = logs_service_pb2.ExportLogsServiceResponse()
    if rejected or message:
        response.partial_success.rejected_log_records = rejected
        response.partial_success.error_message = message
    return _encode(response, mtype)


def encode_status(mtype: str, code: int, message: str) -> bytes:
    """A ``google.rpc.Status`` error body, as OTLP/HTTP asks for failures."""
    return _encode(status_pb2.Status(code=code, message=message), mtype)


def _encode(message: Any, mtype: str) -> bytes:
    if mtype == JSON:
        return str(json_format.MessageToJson(message, indent=None)).encode()
    return bytes(message.SerializeToString())


def _span(pb: trace_pb2.Span, resource: dict[str, AttributeValue], scope: str | None) -> Span:
    # Strict: every field already has its exact type here (hex ids, integer times, values
    # from _value), so pydantic checks types instead of trying conversions (an attribute
    # value's union resolves at its first exact member): ~40% less per retriever span.
    return Span.model_validate(
        {
            "trace_id": pb.trace_id.hex(),
            "span_id": pb.span_id.hex(),
            "parent_span_id": pb.parent_span_id.hex() if any(pb.parent_span_id) else None,
            "name": pb.name,
            "kind": _KINDS.get(pb.kind, "internal"),
            "start_time_ns": pb.start_time_unix_nano,
            "end_time_ns": pb.end_time_unix_nano,
            "status": _STATUS.get(pb.status.code, SpanStatus.UNSET),
            "status_message": pb.status.message or None,
            "attributes": _attributes(pb.attributes),
            "resource": resource,
            "scope": scope,
            "events": [
                SpanEvent(
                    name=e.name, time_ns=e.time_unix_nano, attributes=_attributes(e.attributes)
                )
                for e in pb.events
            ],
        },
        strict=True,
    )


_SCALARS = frozenset({"string_value", "bool_value", "int_value", "double_value"})


def _attributes(kvs: Any) -> dict[str, AttributeValue]:
    out: dict[str, AttributeValue] = {}
    for kv in kvs:
        v = kv.value
        # Most values are non-empty strings: those need no call to find the field.
        if s := v.string_value:
            out[kv.key] = s
            continue
        which = v.WhichOneof("value")
        # Scalars (document scores, token counts) are read here, not in a second call.
        out[kv.key] = getattr(v, which) if which in _SCALARS else _value(v)
    return out


def _value(v: common_pb2.AnyValue, depth: int = 1) -> AttributeValue:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which in ("array_value", "kvlist_value") and depth >= MAX_VALUE_DEPTH:
        raise NestingTooDeep(f"attribute value nested deeper than {MAX_VALUE_DEPTH} levels")
    if which == "array_value":
        return [_value(x, depth + 1) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value, depth + 1) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    value: AttributeValue = getattr(v, which)
    return value


_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


def _hex_ids_to_base64(payload: Any) -> None:
    """OTLP/JSON encodes ids as hex, proto3 JSON as base64: translate in place."""
    if not isinstance(payload, dict):
        raise TypeError("OTLP/JSON body must be an object")
    for rs in payload.get("resourceSpans", payload.get("resource_spans")) or []:
        for ss in rs.get("scopeSpans", rs.get("scope_spans")) or []:
            for span in ss.get("spans") or []:
                for obj in [span, *(span.get("links") or [])]:
                    for key in _ID_KEYS:
                        value = obj.get(key)
                        if isinstance(value, str) and value:
                            try:
                                obj[key] = base64.b64encode(bytes.fromhex(value)).decode()
                            except ValueError:
                                # Not hex: leave it, the span is rejected by id length.
                                obj[key] = ""


def _log_hex_ids_to_base64(payload: Any) -> None:
    """The same translation for log records (``traceId``/``spanId`` are hex in OTLP/JSON)."""
    if not isinstance(payload, dict):
        raise TypeError("OTLP/JSON body must be an object")
    for rl in payload.get("resourceLogs", payload.get("resource_logs")) or []:
        for sl in rl.get("scopeLogs", rl.get("scope_logs")) or []:
            for record in sl.get("logRecords", sl.get("log_records")) or []:
                for key in ("traceId", "spanId", "trace_id", "span_id"):
                    value = record.get(key)
                    if isinstance(value, str) and value:
                        try:
                            record[key] = base64.b64encode(bytes.fromhex(value)).decode()
                        except ValueError:
                            record[key] = "AA=="  # not hex: one byte, rejected by id length
