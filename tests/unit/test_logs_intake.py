"""OTLP log records (GenAI events) in over HTTP and gRPC, joined to their spans."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogs
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogs
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from support.helpers import Clock, free_port, make_span, new_span_id, new_trace_id

from ragpulse.collector.assembly.assembler import Assembler
from ragpulse.collector.intake import otlp
from ragpulse.collector.service import Collector
from ragpulse.config import AssemblySettings, load_settings
from ragpulse.record import LogEvent, SpanEvent
from ragpulse.telemetry import CollectorMetrics


def dropped(metrics: CollectorMetrics, reason: str) -> float:
    return metrics.registry.get_sample_value("ragpulse_dropped_total", {"reason": reason}) or 0


def log_event(trace_id: str, span_id: str | None, name: str = "gen_ai.user.message") -> LogEvent:
    return LogEvent(
        trace_id=trace_id,
        span_id=span_id,
        event=SpanEvent(name=name, time_ns=5, body={"content": "hi"}, source="log"),
    )


def test_assembler_joins_logs_to_their_span_and_counts_the_rest(
    metrics: CollectorMetrics,
) -> None:
    clock = Clock()
    asm = Assembler(AssemblySettings(grace_s=1, idle_s=10, keep_closed_s=0), metrics, clock)
    trace, chat = new_trace_id(), new_span_id()
    # Logs may come before any span of their trace: they wait with it.
    assert asm.add_logs([log_event(trace, chat), log_event(trace, new_span_id())]) == 0
    span_event = SpanEvent(name="span.event", time_ns=9)
    asm.add([make_span(trace, "chat", span_id=chat, parent=new_span_id(), events=[span_event]),
             make_span(trace, "pipeline")])  # fmt: skip
    assert asm.add_logs([log_event(trace, None)]) == 0  # no span id: cannot be joined
    clock.now = 2
    [done] = asm.pop_complete()
    [chat_span] = [s for s in done.spans if s.name == "chat"]
    assert [(e.name, e.source) for e in chat_span.events] == [
        ("gen_ai.user.message", "log"),
        ("span.event", "span"),
    ]  # by time
    assert chat_span.events[0].body == {"content": "hi"}
    assert dropped(metrics, "log_unjoined") == 2
    # After the trace closed (its spans not kept: keep_closed_s 0): late, counted.
    assert asm.add_logs([log_event(trace, chat)]) == 1
    assert dropped(metrics, "log_late") == 1


def test_trace_of_logs_only_yields_nothing_and_counts_them(metrics: CollectorMetrics) -> None:
    clock = Clock()
    settings = AssemblySettings(grace_s=1, idle_s=10, max_open_traces=1)
    asm = Assembler(settings, metrics, clock)
    asm.add_logs([log_event(new_trace_id(), new_span_id())])
    # The second trace closes the first to make room: its log had no span to join.
    assert asm.add_logs([log_event(new_trace_id(), new_span_id())]) == 0
    assert dropped(metrics, "log_unjoined") == 1
    clock.now = 11
    assert asm.pop_complete() == [] and len(asm) == 0
    assert dropped(metrics, "log_unjoined") == 2


def test_span_events_are_kept_at_decode() -> None:
    req = otlp.trace_service_pb2.ExportTraceServiceRequest()
    span: trace_pb2.Span = req.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id = b"\x01" * 16, b"\x02" * 8
    event = span.events.add(name="gen_ai.choice", time_unix_nano=7)
    kv = event.attributes.add(key="index")
    kv.value.int_value = 0
    [decoded] = otlp.decode_request(req).spans
    assert decoded.events == [SpanEvent(name="gen_ai.choice", time_ns=7, attributes={"index": 0})]


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    settings = load_settings(
        otlp_http_port=0,
        otlp_grpc_port=free_port(),
        assembly={"grace_s": 3600, "idle_s": 7200},  # open until the test drains them
    )
    c = Collector(settings, evaluators=[], sinks=[], metrics_server=False).start()
    yield c
    c.stop(timeout=5)


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_sdk_log_exporters_put_genai_events_on_the_chat_span(
    collector: Collector, transport: str
) -> None:
    """A chat span without content attributes; its messages come as GenAI event log records."""
    if transport == "grpc":
        target = collector.otlp_grpc_target
        spans, logs = GrpcSpans(target, insecure=True), GrpcLogs(target, insecure=True)
    else:
        url = collector.otlp_url
        spans, logs = HttpSpans(f"{url}/v1/traces"), HttpLogs(f"{url}/v1/logs")
    resource = Resource.create({"service.name": "genai-app"})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    logger = logger_provider.get_logger("genai")
    tracer = tracer_provider.get_tracer("genai")
    with tracer.start_as_current_span("pipeline"), tracer.start_as_current_span("chat") as chat:
        chat.set_attribute("gen_ai.operation.name", "chat")
        logger.emit(event_name="gen_ai.user.message", body={"content": "What is OTLP?"})
        logger.emit(
            event_name="gen_ai.choice",
            body={"index": 0, "message": {"content": "A protocol."}},
            attributes={"gen_ai.system": "openai"},
        )
        trace_id = f"{chat.get_span_context().trace_id:032x}"
    # Simple processors export synchronously: everything is in the assembler by now.
    logger_provider.shutdown()
    tracer_provider.shutdown()
    [trace] = [t for t in collector.assembler.drain() if t.trace_id == trace_id]
    [chat_span] = [s for s in trace.spans if s.name == "chat"]
    assert [(e.name, e.source) for e in chat_span.events] == [
        ("gen_ai.user.message", "log"),
        ("gen_ai.choice", "log"),
    ]
    assert chat_span.events[0].body == {"content": "What is OTLP?"}
    assert chat_span.events[1].body == {"index": 0, "message": {"content": "A protocol."}}
    assert chat_span.events[1].attributes == {"gen_ai.system": "openai"}


def test_http_json_logs_with_event_name_attribute(collector: Collector) -> None:
    """Older SDKs name the event in the ``event.name`` attribute; OTLP/JSON ids are hex."""
    trace_id, span_id = new_trace_id(), new_span_id()
    record = {
        "traceId": trace_id,
        "spanId": span_id,
        "timeUnixNano": "10",
        "body": {"kvlistValue": {"values": [{"key": "content", "value": {"stringValue": "q"}}]}},
        "attributes": [{"key": "event.name", "value": {"stringValue": "gen_ai.user.message"}}],
    }
    payload = {"resourceLogs": [{"scopeLogs": [{"logRecords": [record, {"body": {}}]}]}]}
    req = urllib.request.Request(
        f"{collector.otlp_url}/v1/logs",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        answer = json.loads(resp.read())
    assert answer["partialSuccess"]["rejectedLogRecords"] == "1"  # the one without a trace
    collector.ingest([make_span(trace_id, "chat", span_id=span_id)])
    [trace] = [t for t in collector.assembler.drain() if t.trace_id == trace_id]
    [event] = trace.spans[0].events
    assert (event.name, event.body, event.time_ns) == ("gen_ai.user.message", {"content": "q"}, 10)
