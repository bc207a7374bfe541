"""The OTLP/gRPC receiver with real grpc clients and the OTel SDK's gRPC exporters."""

from __future__ import annotations

import gzip
from collections.abc import Iterator

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from support.helpers import (
    free_port,
    http_get,
    new_trace_id,
    rag_request,
    start_serve,
    stop_process,
)
from support.kafka_env import wait_until

from ragpulse.collector.intake.otlp_grpc import LOGS_METHOD, TRACES_METHOD
from ragpulse.collector.service import Collector
from ragpulse.config import load_settings

LIMIT = 64 * 1024
TOKEN = "s3cret"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    settings = load_settings(
        otlp_http_port=0,
        otlp_grpc_port=free_port(),
        max_body_bytes=LIMIT,
        auth_token=TOKEN,
        assembly={"grace_s": 3600, "idle_s": 7200},  # traces stay open: tests drain them
    )
    c = Collector(settings, evaluators=[], sinks=[], metrics_server=False).start()
    yield c
    c.stop(timeout=5)


@pytest.fixture(scope="module")
def channel(collector: Collector) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(collector.otlp_grpc_target or "") as ch:
        yield ch


def export(
    channel: grpc.Channel,
    body: bytes,
    method: str = TRACES_METHOD,
    metadata: tuple[tuple[str, str], ...] = AUTH,
    compression: grpc.Compression | None = None,
) -> bytes:
    call = channel.unary_unary(method)
    return bytes(call(body, metadata=metadata, compression=compression, timeout=30))


def count(c: Collector, name: str, **labels: str) -> float:
    return c.metrics.registry.get_sample_value(name, labels) or 0


def rag_bytes(n: int = 1) -> bytes:
    traces = [(bytes.fromhex(new_trace_id()), "q", ["doc"], "a") for _ in range(n)]
    return bytes(rag_request(traces).SerializeToString())


def error_of(channel: grpc.Channel, body: bytes, **kw: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        export(channel, body, **kw)  # type: ignore[arg-type]
    return info.value


def test_export_plain_and_gzip_with_partial_success(
    collector: Collector, channel: grpc.Channel
) -> None:
    before = count(collector, "ragpulse_spans_received_total")
    resp = trace_service_pb2.ExportTraceServiceResponse.FromString(export(channel, rag_bytes()))
    assert not resp.HasField("partial_success")
    req = rag_request([(bytes.fromhex(new_trace_id()), "q", ["d"], "a")])
    bad = req.resource_spans[0].scope_spans[0].spans.add()
    bad.trace_id, bad.span_id = b"\x01\x02", b"\x01" * 8
    raw = export(channel, req.SerializeToString(), compression=grpc.Compression.Gzip)
    resp = trace_service_pb2.ExportTraceServiceResponse.FromString(raw)
    assert resp.partial_success.rejected_spans == 1
    assert "invalid trace or span id" in resp.partial_success.error_message
    assert count(collector, "ragpulse_spans_received_total") == before + 7
    assert count(collector, "ragpulse_dropped_total", reason="invalid_span") == 1


def test_bearer_token(collector: Collector, channel: grpc.Channel) -> None:
    before = count(collector, "ragpulse_dropped_total", reason="unauthorized")
    for metadata in ((), (("authorization", "Bearer nope"),)):
        err = error_of(channel, rag_bytes(), metadata=metadata)
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    assert count(collector, "ragpulse_dropped_total", reason="unauthorized") == before + 2
    export(channel, rag_bytes())


@pytest.mark.parametrize(
    ("body", "compression", "code", "reason"),
    [
        (b"\x0a" + b"x" * LIMIT, None, grpc.StatusCode.RESOURCE_EXHAUSTED, "body_too_large"),
        (
            b"x" * (LIMIT + 1),
            grpc.Compression.Gzip,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "body_too_large",
        ),
        # 64 MiB of zeros gzip to ~64 KiB: inflated by us, bounded, stopped at the limit.
        (
            b"\0" * (64 << 20),
            grpc.Compression.Gzip,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "body_too_large",
        ),
        (b"\xff\xfe garbage \x00\x01", None, grpc.StatusCode.INVALID_ARGUMENT, "malformed_body"),
        (gzip.compress(b"abc")[:-6], None, grpc.StatusCode.INVALID_ARGUMENT, "malformed_body"),
    ],
    ids=["oversize", "oversize-gzip", "gzip-bomb", "garbage", "truncated-gzip"],
)
def test_refusals_are_counted_and_serving_goes_on(
    collector: Collector,
    channel: grpc.Channel,
    body: bytes,
    compression: grpc.Compression | None,
    code: grpc.StatusCode,
    reason: str,
) -> None:
    before = count(collector, "ragpulse_dropped_total", reason=reason)
    err = error_of(channel, body, compression=compression)
    assert err.code() == code and err.details()
    assert count(collector, "ragpulse_dropped_total", reason=reason) == before + 1
    export(channel, rag_bytes())  # ... and the receiver keeps serving


def test_far_over_the_limit_grpc_refuses_itself(channel: grpc.Channel) -> None:
    """Past twice the limit grpc answers before ragpulse reads a byte (counted only when
    grpc had handed the call over, so not asserted here)."""
    err = error_of(channel, b"\x0a" + b"x" * (3 * LIMIT))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    export(channel, rag_bytes())


def test_backpressure_is_unavailable_with_retry_info(
    collector: Collector, channel: grpc.Channel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Force the overloaded state rather than filling a 5,000-trace backlog (as the HTTP test).
    monkeypatch.setattr(type(collector.pipeline), "overloaded", property(lambda self: True))
    err = error_of(channel, rag_bytes())
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    trailers = dict(err.trailing_metadata())  # type: ignore[attr-defined]
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    info = error_details_pb2.RetryInfo()
    assert status.code == grpc.StatusCode.UNAVAILABLE.value[0] and status.details[0].Unpack(info)
    assert info.retry_delay.seconds == 1
    assert error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"]) == info
    assert count(collector, "ragpulse_receiver_requests_total", outcome="overloaded") >= 1


def test_sdk_exporter_retries_after_unavailable(
    collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Python SDK's exporter waits the RetryInfo delay and sends again: nothing lost."""
    answers = iter([True])  # overloaded for the first export only
    monkeypatch.setattr(
        type(collector.pipeline), "overloaded", property(lambda self: next(answers, False))
    )
    overloaded = count(collector, "ragpulse_receiver_requests_total", outcome="overloaded")
    received = count(collector, "ragpulse_spans_received_total")
    exporter = OTLPSpanExporter(
        endpoint=collector.otlp_grpc_target, insecure=True, headers={"authorization": AUTH[0][1]}
    )
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))  # exports (and retries) in end()
    with provider.get_tracer("test").start_as_current_span("pipeline"):
        pass
    provider.shutdown()
    assert count(collector, "ragpulse_receiver_requests_total", outcome="overloaded") == (
        overloaded + 1
    )
    assert count(collector, "ragpulse_spans_received_total") == received + 1


def test_logs_without_trace_id_are_counted(collector: Collector, channel: grpc.Channel) -> None:
    req = logs_service_pb2.ExportLogsServiceRequest()
    records = req.resource_logs.add().scope_logs.add().log_records
    records.add(trace_id=bytes.fromhex(new_trace_id()), span_id=b"\x02" * 8, event_name="e")
    records.add(event_name="no trace")
    raw = export(channel, req.SerializeToString(), method=LOGS_METHOD)
    resp = logs_service_pb2.ExportLogsServiceResponse.FromString(raw)
    assert resp.partial_success.rejected_log_records == 1
    assert count(collector, "ragpulse_dropped_total", reason="log_without_trace") == 1
    assert count(collector, "ragpulse_log_records_received_total") >= 2


def test_sdk_grpc_exporter_by_endpoint_alone_to_ragpulse_serve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = free_port()
    proc, metrics_url = start_serve(
        "--otlp-http-port", "0", "--otlp-grpc-port", str(port), "--evaluators",
        "faithfulness/lexical", env={"RAGPULSE_ASSEMBLY__GRACE_S": "0.2"},
    )  # fmt: skip
    try:
        # Nothing but the endpoint: the SDK's default protocol for this exporter is gRPC.
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
        provider = TracerProvider(resource=Resource.create({"service.name": "grpc-app"}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
        tracer = provider.get_tracer("test")
        with tracer.start_as_current_span("pipeline") as root:
            root.set_attributes(
                {"ragpulse.role": "pipeline", "input.value": "What is the capital of France?",
                 "output.value": "Paris is the capital of France."}
            )  # fmt: skip
            with tracer.start_as_current_span("retrieve") as span:
                span.set_attributes(
                    {"openinference.span.kind": "RETRIEVER",
                     "retrieval.documents.0.document.content": "Paris is the capital of France."}
                )  # fmt: skip
        provider.shutdown()

        def scored() -> bool:
            text = http_get(metrics_url)
            return any(
                line.startswith("ragpulse_records_evaluated_total") and float(line.split()[-1]) >= 1
                for line in text.splitlines()
            )

        wait_until(scored, 60, "the trace sent over gRPC was not scored")
        scores = [
            line
            for line in http_get(metrics_url).splitlines()
            if line.startswith("ragpulse_eval_score_count{") and 'metric="faithfulness"' in line
        ]
        assert scores and 'service="grpc-app"' in scores[0] and float(scores[0].split()[-1]) == 1
    finally:
        stop_process(proc)


def test_grpc_port_in_use_is_a_one_line_error() -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "ragpulse.cli", "serve", "--otlp-http-port", "0",
             "--metrics-port", "0", "--otlp-grpc-port", str(port)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 2
    lines = done.stdout.strip().splitlines() + done.stderr.strip().splitlines()
    assert any(f"port {port} (OTLP/gRPC receiver) is in use" in line for line in lines), lines
    assert any("--otlp-grpc-port" in line and "RAGPULSE_OTLP_GRPC_PORT" in line for line in lines)
