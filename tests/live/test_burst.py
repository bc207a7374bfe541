"""A burst is refused retryably, never for good: no well-formed span is refused through
OTLP partial success for capacity, refusals are 503 + Retry-After / UNAVAILABLE +
RetryInfo, and senders that retry get every trace scored.

A real ``ragpulse serve`` with small bounds, so that a burst the size of a test
reaches them (``bench/burst.py`` runs the full-size burst: 30,000 traces, default
settings, one core). Nothing here measures time: the tests wait for the scores.
"""

from __future__ import annotations

import http.client
import random
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from support.helpers import http_get, start_serve, stop_process
from support.kafka_env import free_port, wait_until

from ragpulse import semconv as sc

pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[2] / "bench" / "burst.py"
SMALL_BOUNDS = {
    "RAGPULSE_ASSEMBLY__MAX_OPEN_TRACES": "300",
    "RAGPULSE_EVALUATION__MAX_BACKLOG": "300",
    "RAGPULSE_ASSEMBLY__GRACE_S": "1.0",
    "RAGPULSE_EVALUATION__MODEL__RATE": "0",
}
"""Small bounds: open traces past 90% of theirs close early (they came whole: nothing is
lost), and the evaluation backlog refuses the rest of the burst with retryable answers."""


def _bench_body() -> object:
    """bench/burst.py's body builder (one source for the burst's traces)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("burst_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Its sibling modules (cheap_tier) import from bench/, as when it runs as a script.
    sys.path.insert(0, str(BENCH.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH.parent))
    return module.body


def metric(url: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in http_get(url).splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def scored(url: str) -> float:
    return metric(url, "ragpulse_eval_score_count", metric="faithfulness", method="lexical")


def test_a_burst_gets_retryable_refusals_and_every_trace_is_scored() -> None:
    body = _bench_body()
    rng = random.Random(3)
    bodies: list[bytes] = [body(30, rng) for _ in range(100)]  # type: ignore[operator]
    port = free_port()
    proc, url = start_serve(
        "--otlp-http-port", str(port), "--otlp-grpc-port", "0", env=SMALL_BOUNDS
    )
    statuses: Counter[int] = Counter()
    retry_after: set[str | None] = set()
    partial = 0
    lock = threading.Lock()

    def sender(mine: list[bytes]) -> None:
        nonlocal partial
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for data in mine:
            while True:
                conn.request("POST", "/v1/traces", body=data,
                             headers={"Content-Type": "application/x-protobuf"})  # fmt: skip
                resp = conn.getresponse()
                payload = resp.read()
                with lock:
                    statuses[resp.status] += 1
                if resp.status == 200:
                    answer = trace_service_pb2.ExportTraceServiceResponse.FromString(payload)
                    with lock:
                        partial += answer.partial_success.rejected_spans
                    break
                assert resp.status == 503, (resp.status, payload)
                with lock:
                    retry_after.add(resp.getheader("Retry-After"))
                threading.Event().wait(float(resp.getheader("Retry-After") or 1))
        conn.close()

    try:
        threads = [threading.Thread(target=sender, args=(bodies[i::4],)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wait_until(lambda: scored(url) == 3000, 120, "every trace scored")
        dropped = metric(url, "ragpulse_dropped_total")
        refused = metric(url, "ragpulse_intake_refused_total")
        rss_mib = _peak_rss_mib(proc.pid)
    finally:
        stop_process(proc)
    assert partial == 0 and dropped == 0
    assert statuses[503] > 0 and statuses[200] == 100, statuses
    assert retry_after == {"1"}
    assert refused == statuses[503]
    assert rss_mib < 1024


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


DOCUMENT = "Plan costs 6 dollars a month. " + "Billing is monthly and can be paused. " * 160
"""~6 KB a trace: one SDK export (512 spans) holds more than ``SDK_BOUNDS``' held bytes."""

SDK_BOUNDS = {
    **SMALL_BOUNDS,
    "RAGPULSE_ASSEMBLY__MAX_HELD_BYTES": str(1024 * 1024),
    "RAGPULSE_ASSEMBLY__GRACE_S": "10",
}
"""Bounds the SDK's exports meet whatever the machine's pace: the first export is taken
whole and holds more than ``max_held_bytes`` (its traces stay open for ``grace_s``), so
the next one, sent as soon as the first is answered, is refused (the held traces are
closed for evaluation, which frees the room for the retry)."""


def _sdk_traces(exporter: SpanExporter, n: int, service: str) -> None:
    """``n`` RAG traces through the SDK's batch processor and ``exporter`` (which retries
    503 / UNAVAILABLE by itself), then flushed."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=4 * n))
    tracer = provider.get_tracer("burst")
    for i in range(n):
        question = f"How much does plan {i} cost?"
        with tracer.start_as_current_span("pipeline") as root:
            root.set_attributes({sc.RAGPULSE_ROLE: sc.ROLE_PIPELINE, "input.value": question,
                                 "output.value": "It costs 6 dollars."})  # fmt: skip
            with tracer.start_as_current_span("retrieve") as retrieve:
                retrieve.set_attributes({
                    "openinference.span.kind": "RETRIEVER", "input.value": question,
                    "retrieval.documents.0.document.content": DOCUMENT,
                })  # fmt: skip
            with tracer.start_as_current_span("generate") as generate:
                generate.set_attributes({"openinference.span.kind": "LLM",
                                         "output.value": "It costs 6 dollars."})  # fmt: skip
    assert provider.force_flush(120_000)
    provider.shutdown()


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_sdk_exporters_retry_the_refusals_and_every_trace_is_scored(transport: str) -> None:
    http_port, grpc_port = free_port(), free_port()
    proc, url = start_serve(
        "--otlp-http-port", str(http_port), "--otlp-grpc-port", str(grpc_port), env=SDK_BOUNDS
    )
    try:
        exporter: SpanExporter = (
            HttpSpanExporter(endpoint=f"http://127.0.0.1:{http_port}/v1/traces")
            if transport == "http"
            else GrpcSpanExporter(endpoint=f"127.0.0.1:{grpc_port}", insecure=True)
        )
        _sdk_traces(exporter, 600, f"sdk-{transport}")
        wait_until(lambda: scored(url) == 600, 120, "every trace scored")
        overloaded = metric(url, "ragpulse_receiver_requests_total", outcome="overloaded")
        held = metric(url, "ragpulse_intake_refused_total", bound="held_bytes")
        dropped = metric(url, "ragpulse_dropped_total")
    finally:
        stop_process(proc)
    assert overloaded > 0 and held > 0  # the SDK met refusals and retried them
    assert dropped == 0
