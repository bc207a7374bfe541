"""Cheap-tier throughput, two ways, with peak memory.

1. Evaluators alone: records/s of every cheap evaluator over the SummEdits dev
   set (faithfulness_summedits_dev.jsonl), with per-record latency percentiles.
2. End to end: traces/s from OTLP/HTTP POST to the Prometheus sink, against a
   ``ragpulse serve`` subprocess pinned to one CPU core; the load generator
   runs in this process (on the other cores) with keep-alive connections.

    .venv/bin/python bench/cheap_tier.py [--traces 6000] [--traces-per-request 60]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import secrets
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

from ragpulse.evaluation import evaluate_records
from ragpulse.evaluators.base import Tier
from ragpulse.evaluators.text import content_tokens
from ragpulse.plugins import load_evaluators
from ragpulse.record import Document, RagRecord

DEFAULT_DATA = (
    Path(__file__).resolve().parents[2] / "shared/data/dev/faithfulness_summedits_dev.jsonl"
)


def load_records(path: Path) -> list[RagRecord]:
    rows = [json.loads(line) for line in path.open(encoding="utf-8")]
    return [
        RagRecord(
            question=r["question"],
            documents=[Document(content=c) for c in r["contexts"]],
            answer=r["answer"],
        )
        for r in rows
    ]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_evaluators(records: list[RagRecord], repeat: int) -> None:
    evaluators = [e for e in load_evaluators(None) if e.tier == Tier.CHEAP]
    # First pass from a cold token cache, then warm passes: SummEdits repeats each source
    # document across several edited summaries, as production re-retrieves the
    # same documents; the cache hit rate is part of what is measured.
    content_tokens.cache_clear()
    rates = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for i in range(0, len(records), 64):
            evaluate_records(records[i : i + 64], evaluators)
        rates.append(len(records) / (time.perf_counter() - t0))
    per_record: list[float] = []
    for r in records:
        t1 = time.perf_counter()
        evaluate_records([r], evaluators)
        per_record.append((time.perf_counter() - t1) * 1000)
    mean_chars = statistics.fmean(sum(len(d.content) for d in r.documents) for r in records)
    print(f"\n[1] cheap tier alone ({', '.join(e.name() for e in evaluators)})")
    print(f"    records: {len(records)} x {repeat}, mean document text {mean_chars:,.0f} chars")
    print(f"    throughput, first pass (cold token cache): {rates[0]:,.0f} records/s")
    if len(rates) > 1:
        warm = statistics.fmean(rates[1:])
        print(f"    throughput, later passes (warm cache): {warm:,.0f} records/s")
    print("    (batches of 64, one thread)")
    print(
        f"    latency per record, warm (all {len(evaluators)} evaluators): "
        f"p50 {pct(per_record, 0.5):.3f} ms, p95 {pct(per_record, 0.95):.3f} ms, "
        f"p99 {pct(per_record, 0.99):.3f} ms"
    )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"    peak RSS of this process: {rss:.0f} MiB")


def _kv(key: str, value: str) -> common_pb2.KeyValue:
    return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=value))


def build_requests(records: list[RagRecord], traces: int, per_request: int) -> list[bytes]:
    """OTLP requests of ``per_request`` traces each: pipeline, retriever and LLM spans."""
    bodies, req = [], None
    now = time.time_ns()
    for i in range(traces):
        if i % per_request == 0:
            if req is not None:
                bodies.append(req.SerializeToString())
            req = trace_service_pb2.ExportTraceServiceRequest()
            rs = req.resource_spans.add()
            rs.resource.attributes.append(_kv("service.name", "bench"))
            scope = rs.scope_spans.add()
        r = records[i % len(records)]
        trace_id, root = secrets.token_bytes(16), secrets.token_bytes(8)
        specs = [
            (
                root,
                b"",
                "pipeline",
                [
                    ("ragpulse.role", "pipeline"),
                    ("input.value", r.question),
                    ("output.value", r.answer),
                    ("ragpulse.route", "/bench"),
                ],
            ),
            (
                secrets.token_bytes(8),
                root,
                "retrieve",
                [("openinference.span.kind", "RETRIEVER"), ("input.value", r.question)]
                + [
                    (f"retrieval.documents.{j}.document.content", d.content)
                    for j, d in enumerate(r.documents)
                ],
            ),
            (
                secrets.token_bytes(8),
                root,
                "generate",
                [
                    ("openinference.span.kind", "LLM"),
                    ("llm.model_name", "bench-model"),
                    ("output.value", r.answer),
                ],
            ),
        ]
        for span_id, parent, name, attrs in specs:
            span = scope.spans.add()  # type: ignore[union-attr]
            span.trace_id, span.span_id, span.parent_span_id = trace_id, span_id, parent
            span.name, span.start_time_unix_nano, span.end_time_unix_nano = name, now, now + 1000
            span.attributes.extend(_kv(k, v) for k, v in attrs)
    if req is not None:
        bodies.append(req.SerializeToString())
    return bodies


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(url: str, name: str) -> float:
    body = urllib.request.urlopen(url, timeout=5).read().decode()
    for line in body.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def bench_end_to_end(records: list[RagRecord], traces: int, per_request: int, clients: int) -> None:
    otlp_port, metrics_port = free_port(), free_port()
    env = {
        **os.environ,
        "RAGPULSE_ASSEMBLY__GRACE_S": "0.05",
        "RAGPULSE_ASSEMBLY__TICK_S": "0.02",
        "RAGPULSE_ASSEMBLY__MAX_OPEN_TRACES": str(traces + 1),
        "RAGPULSE_EVALUATION__MAX_BACKLOG": str(traces + 1),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ragpulse.cli",
            "--log-level",
            "WARNING",
            "serve",
            "--otlp-http-port",
            str(otlp_port),
            "--metrics-port",
            str(metrics_port),
        ],
        env=env,
        preexec_fn=lambda: os.sched_setaffinity(0, {0}),  # the collector gets one core
    )
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                scrape(metrics_url, "ragpulse_records_evaluated_total")
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("ragpulse serve did not start") from None
                time.sleep(0.1)
        os.sched_setaffinity(0, set(range(1, os.cpu_count() or 2)) or {0})
        bodies = build_requests(records, traces, per_request)
        post_ms: list[float] = []

        def send(chunk: list[bytes]) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", otlp_port, timeout=60)
            for body in chunk:
                while True:
                    t0 = time.perf_counter()
                    conn.request(
                        "POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"}
                    )
                    resp = conn.getresponse()
                    resp.read()
                    post_ms.append((time.perf_counter() - t0) * 1000)
                    if resp.status != 503:
                        break
                    time.sleep(0.05)  # backpressure: retry like an OTLP exporter would
            conn.close()

        t0 = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(send, [bodies[i::clients] for i in range(clients)]))
        sent = time.perf_counter() - t0
        while scrape(metrics_url, "ragpulse_records_evaluated_total") < traces:
            if time.perf_counter() - t0 > 600:
                raise SystemExit("timed out waiting for evaluation")
            time.sleep(0.05)
        elapsed = time.perf_counter() - t0
        spans = traces * 3
        p50, p95, p99 = (pct(post_ms, q) for q in (0.5, 0.95, 0.99))
        print("\n[2] end to end: OTLP/HTTP POST -> assembly -> cheap tier -> Prometheus sink")
        print(f"    collector pinned to 1 core; {traces} traces ({spans} spans)")
        print(f"    in {len(bodies)} requests of {per_request} traces, {clients} connections")
        print(f"    throughput: {traces / elapsed:,.0f} traces/s ({spans / elapsed:,.0f} spans/s)")
        print(f"    intake alone (POSTs answered): {spans / sent:,.0f} spans/s")
        print(f"    POST latency: p50 {p50:.1f} ms, p95 {p95:.1f} ms, p99 {p99:.1f} ms")
        print(f"    collector peak RSS: {peak_rss_mib(proc.pid):.0f} MiB")
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--repeat", type=int, default=3, help="passes over the data set in [1]")
    parser.add_argument("--traces", type=int, default=6000)
    parser.add_argument("--traces-per-request", type=int, default=60)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    if not args.data.is_file():
        raise SystemExit(f"data set not found: {args.data} (see ../shared/data/dev)")
    records = load_records(args.data)
    print(
        f"ragpulse cheap-tier benchmark on {os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
    )
    bench_evaluators(records, args.repeat)
    bench_end_to_end(records, args.traces, args.traces_per_request, args.clients)


if __name__ == "__main__":
    main()
