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
from collections import Counter
from multiprocessing import Queue
from pathlib import Path

from cheap_tier import free_port, peak_rss_mib, scrape_all
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.helpers import rag_request

WORDS = (
    "plan price month storage notes offline sync device account team admin billing "
    "invoice export import search folder share link password reset backup restore "
    "mobile desktop browser extension calendar reminder tag archive trash limit"
).split()


def body(traces: int, rng: random.Random) -> bytes:
    """One OTLP request: ``traces`` RAG traces of three spans each."""
    specs = [
        (secrets.token_bytes(16), " ".join(rng.choices(WORDS, k=8)) + "?",
         [" ".join(rng.choices(WORDS, k=100)) for _ in range(5)],
         " ".join(rng.choices(WORDS, k=30)) + ".")
        for _ in range(traces)
    ]  # fmt: skip
    return rag_request(specs, service="burst-app").SerializeToString()


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
    return sum(
        value
        for sample, have, value in scrape_all(url)
        if sample == name and all(have.get(k) == v for k, v in labels.items())
    )


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
            for bound in ("held_bytes", "backlog")
        }
        dropped = scraped(url, "ragpulse_dropped_total")
        closed_early = scraped(url, "ragpulse_traces_completed_total", trigger="open_traces")
        rss_peak = peak_rss_mib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(120)
    print(f"traces sent          {total} in {args.bodies} bodies from {args.senders} senders")
    print(f"answers              {dict(sorted(statuses.items()))}")
    print(f"refused by partial success (lost): {partial_spans} spans")
    print(f"dropped (any reason)              {dropped:.0f} spans")
    print(f"closed early to make room         {closed_early:.0f} traces")
    print(f"retryable refusals by bound       {refused}")
    print(f"scored (faithfulness/lexical)     {scored:.0f} of {total}")
    print(f"all sent after      {sent_s:.1f} s")
    print(f"all scored after    {done_s:.1f} s  ({scored / done_s:.0f} traces/s)")
    print(f"collector RSS       {rss_start:.0f} MiB at start, peak {rss_peak:.0f} MiB")


if __name__ == "__main__":
    main()
