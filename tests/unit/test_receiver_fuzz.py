"""The OTLP/HTTP receiver under a deterministic stream of hostile bodies.

300 bodies of every kind in bench/hostile_intake.py (mutated protobuf, random
bytes, deep JSON and protobuf, gzip bombs, wrong JSON types, wrong media
types, truncated and oversized bodies), mixed, with a valid trace (protobuf or
JSON) every 20 bodies and at the end, over one keep-alive connection. Bad input
is answered 400/413/415 with a ``google.rpc.Status`` body in the request's
encoding, never 5xx; the connection is never dropped; every valid trace is
accepted and assembled. RSS is measured by the bench, not asserted here.
"""

from __future__ import annotations

import http.client
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from ragpulse.collector.service import Collector
from ragpulse.config import load_settings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from hostile_intake import JSON, PROTOBUF, Bodies

LIMIT = 256 * 1024  # above the deep bodies (up to ~130 KiB): they meet the depth bound
BODIES = 300
VALID_EVERY = 20
SEED = 20240611


@pytest.fixture
def collector() -> Iterator[Collector]:
    # Nothing completes during the test (long grace), so every valid trace can be
    # found in the assembler at the end, without waiting on the clock.
    settings = load_settings(
        otlp_http_port=0, max_body_bytes=LIMIT, assembly={"grace_s": 3600, "idle_s": 7200}
    )
    c = Collector(settings, evaluators=[], sinks=[], metrics_server=False)
    c.start()
    yield c
    c.stop()


class KeepAlive:
    """One HTTP/1.1 connection, reused; a dropped one fails the test (no silent reconnect)."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)

    def post(
        self, body: bytes, ctype: str | None, headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        h = dict(headers)
        if ctype is not None:
            h["Content-Type"] = ctype
        self.conn.request("POST", "/v1/traces", body=body, headers=h)
        resp = self.conn.getresponse()
        data = resp.read()
        assert not resp.will_close, f"the server closed the connection after {resp.status}"
        return resp.status, resp.getheader("Content-Type") or "", data


def status_message(ctype: str, data: bytes) -> str:
    if ctype.startswith(JSON):
        return str(json.loads(data).get("message", ""))
    assert ctype.startswith(PROTOBUF), ctype
    return str(status_pb2.Status.FromString(data).message)


def trace_ids(kind_body: bytes, ctype: str | None) -> set[str]:
    if ctype == JSON:
        doc = json.loads(kind_body)
        return {
            span["traceId"]
            for rs in doc["resourceSpans"]
            for ss in rs["scopeSpans"]
            for span in ss["spans"]
        }
    req = trace_service_pb2.ExportTraceServiceRequest.FromString(kind_body)
    return {
        span.trace_id.hex()
        for rs in req.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    }


def test_hostile_stream_never_gets_5xx_and_valid_traffic_still_flows(
    collector: Collector,
) -> None:
    assert collector.otlp_url is not None
    # 64 MiB of zeros per bomb: 256 times the limit.
    bodies = Bodies(SEED, LIMIT, bomb_zeros=64 << 20)
    client = KeepAlive(int(collector.otlp_url.rsplit(":", 1)[1]))
    seen: dict[str, Counter[int]] = {}
    expected: set[str] = set()

    def send_valid(i: int) -> None:
        _, body, ctype, headers = bodies.valid_json() if i % 2 else bodies.valid()
        status, _, _ = client.post(body, ctype, headers)
        assert status == 200, f"valid trace refused with {status} after {i} hostile bodies"
        expected.update(trace_ids(body, ctype))

    for i in range(1, BODIES + 1):
        kind, body, ctype, headers = bodies.next()
        status, resp_type, data = client.post(body, ctype, headers)
        seen.setdefault(kind, Counter())[status] += 1
        assert status < 500, f"{kind} body answered {status}"
        if status != 200:
            assert status in (400, 413, 415), f"{kind} body answered {status}"
            assert status_message(resp_type, data), f"{kind}: {status} without a Status message"
            if ctype == JSON and status != 415:
                assert resp_type.startswith(JSON)  # the answer is in the request's encoding
        if i % VALID_EVERY == 0:
            send_valid(i)
    send_valid(BODIES)

    # Every kind came up, and each was refused the way its kind should be.
    assert set(seen) == set(bodies.kinds)
    assert set(seen["deep_json"]) == {400}
    assert set(seen["deep_protobuf"]) == {400}
    assert set(seen["gzip_bomb"]) == {413}
    assert set(seen["too_large"]) == {413}
    assert set(seen["wrong_media_type"]) == {415}

    # Refusals are counted by reason, from a bounded set of reasons.
    registry = collector.metrics.registry
    outcomes = {
        s.labels["outcome"]
        for m in registry.collect()
        if m.name == "ragpulse_receiver_requests"
        for s in m.samples
        if s.name.endswith("_total")
    }
    assert outcomes <= {
        "ok",
        "partial",
        "malformed_body",
        "nesting_too_deep",
        "body_too_large",
        "unsupported_media_type",
    }
    too_deep = registry.get_sample_value("ragpulse_dropped_total", {"reason": "nesting_too_deep"})
    assert too_deep is not None
    assert too_deep >= sum(seen["deep_json"].values()) + sum(seen["deep_protobuf"].values())

    # ... and every valid trace sent among them was assembled.
    assembled = {t.trace_id for t in collector.assembler.drain()}
    assert expected and expected <= assembled
