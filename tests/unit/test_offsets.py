"""Low-watermark offset tracking and the re-key split (no broker needed)."""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from ragpulse.collector.intake.rekey import split_by_trace
from ragpulse.collector.kafka_group import PartitionOffsets


def test_committable_is_lowest_unfinished_offset() -> None:
    p = PartitionOffsets()
    assert p.committable() is None
    for offset in (10, 11, 12, 13):
        p.started(offset)
    assert p.committable() == 10
    p.finished(12)
    p.finished(11)
    assert p.committable() == 10  # 10 still in flight: committing 11+ could lose it
    p.finished(10)
    assert p.committable() == 13
    p.finished(13)
    assert p.committable() == 14 and p.in_flight == 0 and p.read_mark == 14


def test_split_by_trace_keeps_resource_and_scope() -> None:
    req = trace_service_pb2.ExportTraceServiceRequest()
    for service in ("a", "b"):
        rs = req.resource_spans.add()
        kv = rs.resource.attributes.add()
        kv.key, kv.value.string_value = "service.name", service
        ss = rs.scope_spans.add()
        ss.scope.name = f"scope-{service}"
        for trace in (1, 2):
            span = ss.spans.add()
            span.trace_id, span.span_id = bytes([trace] * 16), bytes([trace] * 8)
            span.name = f"{service}-{trace}"
    parts = split_by_trace(req)
    assert set(parts) == {bytes([1] * 16), bytes([2] * 16)}
    one = parts[bytes([1] * 16)]
    assert [rs.resource.attributes[0].value.string_value for rs in one.resource_spans] == ["a", "b"]
    assert [s.name for rs in one.resource_spans for ss in rs.scope_spans for s in ss.spans] == [
        "a-1",
        "b-1",
    ]
    assert one.resource_spans[1].scope_spans[0].scope.name == "scope-b"


def test_bare_resource_spans_array_as_rotel_writes_json() -> None:
    import json

    from ragpulse.collector.intake import otlp

    body = json.dumps(
        [
            {
                "resource": {"attributes": []},
                "scopeSpans": [{"spans": [{"traceId": "ab" * 16, "spanId": "cd" * 8}]}],
            }
        ]
    ).encode()
    decoded = otlp.decode_request(otlp.parse_request(body, otlp.JSON))
    assert [s.trace_id for s in decoded.spans] == ["ab" * 16]
