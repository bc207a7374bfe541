"""Test helpers: span builders, an OTLP/HTTP capture server (a test double of a
trace/log backend such as Jaeger or Tempo, which cannot run here), and starting and
stopping a `ragpulse serve` subprocess."""

from __future__ import annotations

import gzip
import os
import secrets
import subprocess
import sys
import threading
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple, Self

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from ragpulse.record import RagRecord, Span
from support.kafka_env import free_port, wait_until


def new_trace_id() -> str:
    return secrets.token_hex(16)


def new_span_id() -> str:
    return secrets.token_hex(8)


def make_span(
    trace_id: str,
    name: str,
    attributes: dict[str, Any] | None = None,
    parent: str | None = None,
    span_id: str | None = None,
    start: int = 1_000,
    end: int = 2_000,
    service: str = "svc",
    **kw: Any,
) -> Span:
    return Span(
        trace_id=trace_id,
        span_id=span_id or new_span_id(),
        parent_span_id=parent,
        name=name,
        start_time_ns=start,
        end_time_ns=end,
        attributes=attributes or {},
        resource={"service.name": service},
        **kw,
    )


class Clock:
    """A clock the test moves by setting ``now``, given where the code takes ``clock=``:
    what depends on time is decided by it, never by sleeping."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Routed:
    """Where a conversation stage routes turns held elsewhere (a ``TurnRoute``, the Kafka
    turn writer's place): the turn records, kept."""

    def __init__(self) -> None:
        self.turns: list[RagRecord] = []

    def turn(self, record: RagRecord, results: object, replaces: object = None) -> None:
        self.turns.append(record)

    def conversation(self, record: object, results: object) -> None:
        pass


@dataclass
class Captured:
    traces: list[trace_service_pb2.ExportTraceServiceRequest] = field(default_factory=list)
    logs: list[logs_service_pb2.ExportLogsServiceRequest] = field(default_factory=list)

    def spans(self) -> list[Any]:
        return [
            s
            for req in self.traces
            for rs in req.resource_spans
            for ss in rs.scope_spans
            for s in ss.spans
        ]

    def log_records(self) -> list[Any]:
        return [
            lr
            for req in self.logs
            for rl in req.resource_logs
            for sl in rl.scope_logs
            for lr in sl.log_records
        ]


Reply = tuple[int, dict[str, str], bytes]
"""An HTTP answer: status, headers, body."""


class LocalServer:
    """A threaded HTTP server on 127.0.0.1 (a free port) whose POSTs ``respond`` answers:
    ``respond(path, headers, body)`` -> (status, headers, body), and GETs ``respond_get``
    (``path`` with its query). The base of the test doubles of backends that cannot run
    here."""

    def respond(self, path: str, headers: Any, body: bytes) -> Reply:
        raise NotImplementedError

    def respond_get(self, path: str, headers: Any) -> Reply:
        return 405, {}, b""

    def __init__(self) -> None:
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, headers, payload = double.respond(self.path, self.headers, body)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                status, headers, payload = double.respond_get(self.path, self.headers)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class CaptureServer(LocalServer):
    """Accepts OTLP/HTTP protobuf on /v1/traces and /v1/logs and keeps what it got;
    ``logs_status`` (404, 405) answers /v1/logs as a backend without a logs intake does."""

    def __init__(self, logs_status: int | None = None) -> None:
        super().__init__()
        self.captured = Captured()
        self.logs_status = logs_status
        self.log_requests = 0

    def respond(self, path: str, headers: Any, body: bytes) -> Reply:
        if headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if path == "/v1/traces":
            req: Any = trace_service_pb2.ExportTraceServiceRequest()
            req.ParseFromString(body)
            self.captured.traces.append(req)
            resp: Any = trace_service_pb2.ExportTraceServiceResponse()
        elif path == "/v1/logs" and self.logs_status is not None:
            self.log_requests += 1
            return self.logs_status, {}, b""
        elif path == "/v1/logs":
            req = logs_service_pb2.ExportLogsServiceRequest()
            req.ParseFromString(body)
            self.captured.logs.append(req)
            resp = logs_service_pb2.ExportLogsServiceResponse()
        else:
            return 404, {}, b""
        return 200, {"Content-Type": "application/x-protobuf"}, resp.SerializeToString()


def _kv(key: str, value: str) -> Any:
    from opentelemetry.proto.common.v1 import common_pb2

    return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=value))


def rag_request(
    traces: list[tuple[bytes, str, list[str], str]], service: str = "svc"
) -> trace_service_pb2.ExportTraceServiceRequest:
    """An OTLP request with one pipeline -> retriever + LLM trace per
    (trace_id, question, documents, answer), shaped like ragpulse's decorators write."""
    req = trace_service_pb2.ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.append(_kv("service.name", service))
    scope = rs.scope_spans.add()
    for trace_id, question, docs, answer in traces:
        root = secrets.token_bytes(8)
        doc_attrs = [(f"retrieval.documents.{i}.document.content", d) for i, d in enumerate(docs)]
        specs = [
            (root, b"", "pipeline", [("ragpulse.role", "pipeline"), ("input.value", question),
                                     ("output.value", answer), ("ragpulse.route", "/ask")]),
            (secrets.token_bytes(8), root, "retrieve",
             [("openinference.span.kind", "RETRIEVER"), ("input.value", question), *doc_attrs]),
            (secrets.token_bytes(8), root, "generate",
             [("openinference.span.kind", "LLM"), ("output.value", answer)]),
        ]  # fmt: skip
        for span_id, parent, name, attrs in specs:
            span = scope.spans.add()
            span.trace_id, span.span_id, span.parent_span_id = trace_id, span_id, parent
            span.name, span.start_time_unix_nano, span.end_time_unix_nano = name, 1, 2
            span.attributes.extend(_kv(k, v) for k, v in attrs)
    return req


def post_rag_trace(
    port: int, trace_id: str, question: str, documents: list[str], answer: str
) -> None:
    """POST one question -> documents -> answer trace (:func:`rag_request`) to the OTLP/HTTP
    receiver on ``port``; asserts it was accepted."""
    body = rag_request([(bytes.fromhex(trace_id), question, documents, answer)])
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/traces",
        data=body.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200


def http_get(url: str, timeout: float = 30, openmetrics: bool = False) -> str:
    """GET ``url`` as text; ``openmetrics`` asks /metrics for OpenMetrics (with exemplars)."""
    req = urllib.request.Request(url)
    if openmetrics:
        req.add_header("Accept", "application/openmetrics-text; version=1.0.0")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return str(resp.read().decode())


def metrics_once_evaluated(url: str, records: int, openmetrics: bool = False) -> str:
    """/metrics once ``records`` records are evaluated. The pipeline counts
    ``ragpulse_records_evaluated_total`` after the last sink took a record, so this
    scrape has every sink's share; one taken as soon as a JSONL line appears may not
    (the sinks take a record one after another, the JSONL sink before Prometheus)."""

    def counted() -> str | None:
        text = http_get(url, openmetrics=openmetrics)
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == "ragpulse_records_evaluated_total" and float(value) >= records:
                return text
        return None

    text: str = wait_until(counted, 60, f"/metrics never counted {records} evaluated records")
    return text


def start_serve(
    *args: str, env: dict[str, str] | None = None, quiet: bool = False
) -> tuple[subprocess.Popen[bytes], str]:
    """``ragpulse serve *args`` on a free metrics port, once /metrics answers: (process,
    metrics URL). Stop it with :func:`stop_process`."""
    metrics = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragpulse.cli", "--log-level", "ERROR", "serve",
         "--metrics-port", str(metrics), *args],
        env={**os.environ, **(env or {})},
        stderr=subprocess.DEVNULL if quiet else None,
    )  # fmt: skip
    url = f"http://127.0.0.1:{metrics}/metrics"

    def up() -> bool:
        assert proc.poll() is None, "ragpulse serve exited"
        return bool(http_get(url))

    wait_until(up, 60, "ragpulse serve did not start", interval=0.1, ignore=(OSError,))
    return proc, url


def stop_process(proc: subprocess.Popen[bytes], grace_s: float = 60) -> None:
    """SIGTERM and wait up to ``grace_s`` for the exit (generous: a busy CI machine is
    slow, and a clean shutdown drains what is in flight). A process still running then
    is killed and the test fails, saying so: a shutdown that hangs is a bug to report,
    not to hide behind a SIGKILL."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(
            f"{' '.join(map(str, proc.args))} (pid {proc.pid}) did not exit within "
            f"{grace_s:.0f}s of SIGTERM; it was killed"
        ) from None


class Message(NamedTuple):
    """A consumer record as kafka-python's consumer yields it (what the span consumer reads)."""

    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes
