"""A burst against ``ragpulse serve``: is anything refused for good, and what does it cost?

Default ``ragpulse serve`` (or another checkout's, with ``--pythonpath``, to compare)
pinned to one CPU core with taskset; ``--senders`` processes post ``--bodies`` OTLP/HTTP
protobuf bodies of ``--traces-per-body`` RAG traces each (a pipeline span, a retriever
with 5 documents of ~100 words, an LLM span) as fast as the receiver answers. A
sender that gets 503 waits what Retry-After says and posts the same body again, as
OTLP exporters do; spans refused through partial success are lost (exporters must
not retry those). Prints the answers by status, the spans refused through partial
success, 503s, the time until every trace's faithfulness is counted in /metrics
(or until nothing moved for ``--settle`` s), traces/s, and the collector's peak RSS.

    .venv/bin/python bench/burst.py [--bodies 1000] [--traces-per-body 30] [--senders 4]
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import os
import random
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from multiprocessing import Queue
from pathlib import Path

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

WORDS = (
    "plan price month storage notes offline sync device account team admin billing "
    "invoice export import search folder share link password reset backup restore "
    "mobile desktop browser extension calendar reminder tag archive trash limit"
).split()


def _kv(key: str, value: str) -> common_pb2.KeyValue:
    return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=value))


def body(traces: int, rng: random.Random) -> bytes:
    """One OTLP request: ``traces`` RAG traces of three spans each."""
    req = trace_service_pb2.ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.append(_kv("service.name", "burst-app"))
    scope = rs.scope_spans.add()
    for _ in range(traces):
        trace_id, root = secrets.token_bytes(16), secrets.token_bytes(8)
        question = " ".join(rng.choices(WORDS, k=8)) + "?"
        docs = [" ".join(rng.choices(WORDS, k=100)) for _ in range(5)]
        answer = " ".join(rng.choices(WORDS, k=30)) + "."
        specs = [
            (root, b"", "pipeline", [("ragpulse.role", "pipeline"), ("input.value", question),
                                     ("output.value", answer), ("ragpulse.route", "/ask")]),
            (secrets.token_bytes(8), root, "retrieve",
             [("openinference.span.kind", "RETRIEVER"), ("input.value", question)]
             + [(f"retrieval.documents.{i}.document.content", d) for i, d in enumerate(docs)]),
            (secrets.token_bytes(8), root, "generate",
             [("openinference.span.kind", "LLM"), ("output.value", answer)]),
        ]  # fmt: skip
        for span_id, parent, name, attrs in specs:
            span = scope.spans.add()
            span.trace_id, span.span_id, span.parent_span_id = trace_id, span_id, parent
            span.name, span.start_time_unix_nano, span.end_time_unix_nano = name, 1, 2
            span.attributes.extend(_kv(k, v) for k, v in attrs)
    return req.SerializeToString()


def send(port: int, bodies: list[bytes], results: Queue) -> None:  # type: ignore[type-arg]
    """One sender process: post each body until it is taken; report (statuses, partial)."""
    statuses: Counter[int] = Counter()
    partial = 0
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/x-protobuf"}
    for data in bodies:
        while True:
            conn.request("POST", "/v1/traces", body=data, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
            statuses[resp.status] += 1
            if resp.status == 200:
                answer = trace_service_pb2.ExportTraceServiceResponse.FromString(payload)
                partial += answer.partial_success.rejected_spans
                break
            if resp.status in (429, 503):
                time.sleep(float(resp.getheader("Retry-After") or 1))
                continue
            raise SystemExit(f"unexpected answer {resp.status}: {payload[:200]!r}")
    conn.close()
    results.put((statuses, partial))


def scraped(url: str, name: str, **labels: str) -> float:
    with urllib.request.urlopen(url, timeout=30) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bodies", type=int, default=1000)
    parser.add_argument("--traces-per-body", type=int, default=30)
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--core", default="0", help="taskset CPU list for the collector")
    parser.add_argument("--settle", type=float, default=60.0, help="give up after no progress")
    parser.add_argument(
        "--serve-python",
        default=sys.executable,
        help="the Python whose ragpulse serves (default: this one)",
    )
    parser.add_argument("--pythonpath", default=None, help="PYTHONPATH for that Python")
    args = parser.parse_args()

    rng = random.Random(7)
    print(f"building {args.bodies} bodies of {args.traces_per_body} traces ...", flush=True)
    bodies = [body(args.traces_per_body, rng) for _ in range(args.bodies)]
    total = args.bodies * args.traces_per_body
    http_port, metrics_port = free_port(), free_port()
    cmd = [args.serve_python, "-m", "ragpulse.cli", "--log-level", "WARNING", "serve",
           "--otlp-http-port", str(http_port), "--otlp-grpc-port", "0",
           "--metrics-port", str(metrics_port)]  # fmt: skip
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", args.core, *cmd]
    env = dict(os.environ)
    if args.pythonpath:
        env["PYTHONPATH"] = args.pythonpath
    proc = subprocess.Popen(cmd, env=env)
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        for _ in range(600):
            try:
                scraped(url, "ragpulse_spans_received_total")
                break
            except OSError:
                time.sleep(0.1)
        rss_start = peak_rss_mib(proc.pid)
        # Sender processes (forked: the bodies are shared, not copied): threads of one
        # process would be held back by its interpreter lock, not by the collector.
        fork = multiprocessing.get_context("fork")
        results = fork.Queue()
        per_sender = [bodies[i :: args.senders] for i in range(args.senders)]
        senders = [fork.Process(target=send, args=(http_port, b, results)) for b in per_sender]
        t0 = time.perf_counter()
        for p in senders:
            p.start()
        statuses: Counter[int] = Counter()
        partial_spans = 0
        for _ in senders:
            got, partial = results.get()
            statuses.update(got)
            partial_spans += partial
        for p in senders:
            p.join()
        sent_s = time.perf_counter() - t0
        scored, last, moved_at = 0.0, -1.0, time.perf_counter()
        while scored < total and time.perf_counter() - moved_at < args.settle:
            scored = scraped(url, "ragpulse_eval_score_count", metric="faithfulness",
                             method="lexical")  # fmt: skip
            if scored != last:
                last, moved_at = scored, time.perf_counter()
            time.sleep(0.05)
        done_s = time.perf_counter() - t0
        refused = {
            bound: scraped(url, "ragpulse_intake_refused_total", bound=bound)
            for bound in ("open_traces", "held_bytes", "backlog")
        }
        dropped_capacity = scraped(url, "ragpulse_dropped_total", reason="open_traces_limit")
        rss_peak = peak_rss_mib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(120)
    print(f"traces sent          {total} in {args.bodies} bodies from {args.senders} senders")
    print(f"answers              {dict(sorted(statuses.items()))}")
    print(f"refused by partial success (lost): {partial_spans} spans")
    print(f"dropped open_traces_limit         {dropped_capacity:.0f} spans")
    print(f"retryable refusals by bound       {refused}")
    print(f"scored (faithfulness/lexical)     {scored:.0f} of {total}")
    print(f"all sent after      {sent_s:.1f} s")
    print(f"all scored after    {done_s:.1f} s  ({scored / done_s:.0f} traces/s)")
    print(f"collector RSS       {rss_start:.0f} MiB at start, peak {rss_peak:.0f} MiB")


if __name__ == "__main__":
    main()
