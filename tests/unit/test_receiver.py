"""The OTLP/HTTP receiver against malformed, hostile and valid bodies."""

from __future__ import annotations

import gzip
import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from ragpulse.collector.service import Collector
from ragpulse.config import load_settings
from ragpulse.evaluators.faithfulness.lexical import LexicalFaithfulness

LIMIT = 64 * 1024


def request_proto(n_spans: int = 1, bad_ids: int = 0) -> bytes:
    req = trace_service_pb2.ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "t"
    ss = rs.scope_spans.add()
    for i in range(n_spans + bad_ids):
        span = ss.spans.add()
        span.trace_id = bytes(range(1, 17)) if i < n_spans else b"\x01\x02"
        span.span_id = bytes([i + 1] * 8)
        span.name = f"s{i}"
        span.start_time_unix_nano, span.end_time_unix_nano = 1, 2
        a = span.attributes.add()
        a.key, a.value.string_value = "input.value", "hello"
    return bytes(req.SerializeToString())


def post(
    url: str, body: bytes, content_type: str = "application/x-protobuf", **headers: str
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(
        url + "/v1/traces", data=body, method="POST", headers={"Content-Type": content_type}
    )
    for k, v in headers.items():
        req.add_header(k.replace("_", "-"), v)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


@pytest.fixture
def collector() -> Iterator[Collector]:
    settings = load_settings(otlp_http_port=0, max_body_bytes=LIMIT, auth_token="s3cret")
    c = Collector(settings, evaluators=[LexicalFaithfulness()], sinks=[], metrics_server=False)
    c.start()
    yield c
    c.stop()


def dropped(c: Collector, reason: str) -> float:
    return c.metrics.registry.get_sample_value("ragpulse_dropped_total", {"reason": reason}) or 0


AUTH = {"Authorization": "Bearer s3cret"}


def test_valid_protobuf_and_partial_success(collector: Collector) -> None:
    status, headers, body = post(collector.otlp_url or "", request_proto(2, bad_ids=1), **AUTH)
    assert status == 200 and headers["Content-Type"].startswith("application/x-protobuf")
    resp = trace_service_pb2.ExportTraceServiceResponse.FromString(body)
    assert resp.partial_success.rejected_spans == 1
    assert "invalid trace or span id" in resp.partial_success.error_message
    assert collector.metrics.registry.get_sample_value("ragpulse_spans_received_total") == 3
    assert dropped(collector, "invalid_span") == 1
    assert len(collector.assembler) == 1


def test_valid_json_body_with_hex_ids(collector: Collector) -> None:
    payload = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "j"}}]
                },
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "name": "json-span",
                                "kind": 1,
                                "startTimeUnixNano": "1544712660000000000",
                                "endTimeUnixNano": "1544712661000000000",
                                "attributes": [{"key": "n", "value": {"intValue": "3"}}],
                            }
                        ]
                    }
                ],
            }
        ]
    }
    status, headers, body = post(
        collector.otlp_url or "", json.dumps(payload).encode(), "application/json", **AUTH
    )
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert json.loads(body) == {}
    trace = collector.assembler.drain()[0]
    assert trace.trace_id == "5b8efff798038103d269b633813fc60c"
    assert trace.spans[0].attributes == {"n": 3} and trace.spans[0].service == "j"


@pytest.mark.parametrize(
    ("body", "ctype", "encoding", "status", "reason"),
    [
        (b"\xff\xfe garbage \x00\x01", "application/x-protobuf", None, 400, "malformed_body"),
        (request_proto(3)[:-7], "application/x-protobuf", None, 400, "malformed_body"),
        (b"{not json", "application/json", None, 400, "malformed_body"),
        (b"[1, 2]", "application/json", None, 400, "malformed_body"),
        (b"[" * 5000 + b"]" * 5000, "application/json", None, 400, "nesting_too_deep"),
        (request_proto(), "text/plain", None, 415, "unsupported_media_type"),
        (request_proto(), "application/x-protobuf", "br", 415, "unsupported_media_type"),
        (b"\x1f\x8b\x08\x00garbage", "application/x-protobuf", "gzip", 400, "malformed_body"),
        (gzip.compress(request_proto())[:-10], "application/x-protobuf", "gzip", 400, None),
        (b"x" * (LIMIT + 1), "application/x-protobuf", None, 413, "body_too_large"),
        # 64 MiB of zeros gzip to ~64 KiB: a bomb that must not be inflated.
        (gzip.compress(b"\0" * (64 << 20)), "application/x-protobuf", "gzip", 413, None),
    ],
    ids=[
        "garbage",
        "truncated-protobuf",
        "bad-json",
        "json-not-object",
        "json-5000-deep",
        "wrong-content-type",
        "unknown-encoding",
        "bad-gzip",
        "truncated-gzip",
        "oversized",
        "gzip-bomb",
    ],
)
def test_malformed_bodies_get_the_right_status_and_are_counted(
    collector: Collector,
    body: bytes,
    ctype: str,
    encoding: str | None,
    status: int,
    reason: str | None,
) -> None:
    headers = dict(AUTH)
    if encoding:
        headers["Content-Encoding"] = encoding
    got, resp_headers, resp_body = post(collector.otlp_url or "", body, ctype, **headers)
    assert got == status
    if reason:
        assert dropped(collector, reason) == 1
    if resp_headers.get("Content-Type", "").startswith("application/x-protobuf"):
        assert status_pb2.Status.FromString(resp_body).message
    else:  # a JSON request is answered in JSON (OTLP/HTTP), but 415 (encoding unknown)
        assert resp_headers["Content-Type"].startswith("application/json")
        assert json.loads(resp_body)["code"] == 3 and json.loads(resp_body)["message"]
    # ... and the server keeps serving.
    assert post(collector.otlp_url or "", request_proto(), **AUTH)[0] == 200


def test_bearer_token_required(collector: Collector) -> None:
    status, headers, _ = post(collector.otlp_url or "", request_proto())
    assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
    wrong = {"Authorization": "Bearer nope"}
    assert post(collector.otlp_url or "", request_proto(), **wrong)[0] == 401
    assert dropped(collector, "unauthorized") == 2
    assert post(collector.otlp_url or "", request_proto(), **AUTH)[0] == 200


def test_backpressure_answers_retryable_503(
    collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Force the overloaded state rather than filling a 5,000-trace backlog.
    monkeypatch.setattr(type(collector.pipeline), "overloaded", property(lambda self: True))
    status, headers, _ = post(collector.otlp_url or "", request_proto(), **AUTH)
    assert status == 503 and headers["Retry-After"] == "1"
    count = collector.metrics.registry.get_sample_value(
        "ragpulse_receiver_requests_total", {"outcome": "overloaded"}
    )
    assert count == 1


def _spans(*traces: int) -> bytes:
    """A request with one span of each trace number (no root: the traces stay open)."""
    req = trace_service_pb2.ExportTraceServiceRequest()
    ss = req.resource_spans.add().scope_spans.add()
    for i in traces:
        span: trace_pb2.Span = ss.spans.add()
        span.trace_id, span.span_id = bytes([i] * 16), secrets.token_bytes(8)
        span.parent_span_id = bytes([i] * 8)
    return bytes(req.SerializeToString())


def test_open_trace_limit_closes_the_least_recent_traces_for_new_ones_never_refuses() -> None:
    settings = load_settings(
        otlp_http_port=0, assembly={"max_open_traces": 2, "grace_s": 3600, "idle_s": 3600}
    )
    with Collector(settings, evaluators=[], sinks=[], metrics_server=False) as c:
        url = c.otlp_url or ""
        # Room: the request is taken whole, even past the bound (by its own size at most).
        status, _, body = post(url, _spans(1, 2, 3))
        assert status == 200
        resp = trace_service_pb2.ExportTraceServiceResponse.FromString(body)
        assert resp.partial_success.rejected_spans == 0
        # Full: a request opening a new trace first closes the open traces it does not
        # continue (as partial: their roots never came), and is taken.
        status, _, body = post(url, _spans(3, 4))
        assert status == 200
        assert len(c.assembler) == 2
        completed = {"trigger": "open_traces"}
        value = c.metrics.registry.get_sample_value
        assert value("ragpulse_traces_completed_total", completed) == 2
        assert value("ragpulse_intake_refused_total", {"bound": "open_traces"}) is None
