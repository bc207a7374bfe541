"""Cheap-tier throughput, two ways, with peak memory.

1. Evaluators alone: records/s of every cheap evaluator over the SummEdits dev
   set (faithfulness_summedits_dev.jsonl), with per-record latency percentiles.
2. End to end: traces/s from OTLP/HTTP POST to the Prometheus sink, against a
   ``ragpulse serve`` subprocess pinned to one CPU core; the load generator
   runs in this process (on the other cores) with keep-alive connections. Three
   collectors side by side: serve's defaults, ``evaluation.model.rate: 0`` and
   the model tier's probes on at ``evaluation.model.rate: 0.1``; each reports traces/s, traces per CPU-second of the
   collector (steadier than traces/s on a shared machine), POST latency
   percentiles, peak RSS, whether torch was imported and what the model tier did.

    .venv/bin/python bench/cheap_tier.py [--traces 6000] [--traces-per-request 60]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
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

from ragpulse.config import EvaluationSettings
from ragpulse.evaluation import evaluate_records, load_evaluators_safely
from ragpulse.evaluators.base import Tier
from ragpulse.plugin_context import PluginContext
from ragpulse.plugins import evaluator_class, load_evaluators, resolve_evaluator_names
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
    # Loaded with one plug-in context: its text analyses start cold. The first pass
    # analyses every distinct text; later passes find them analysed: SummEdits repeats
    # each source document across several edited summaries, as production re-retrieves
    # the same documents, and the hit rate is part of what is measured.
    evaluators = load_evaluators_safely(
        [e for e in load_evaluators(None) if e.tier == Tier.CHEAP], PluginContext()
    )
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
    print(f"\n[1] cheap tier alone ({', '.join(e.name for e in evaluators)})")
    print(f"    records: {len(records)} x {repeat}, mean document text {mean_chars:,.0f} chars")
    print(f"    throughput, first pass (cold analyses): {rates[0]:,.0f} records/s")
    if len(rates) > 1:
        warm = statistics.fmean(rates[1:])
        print(f"    throughput, later passes (warm analyses): {warm:,.0f} records/s")
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


def post_until_taken(conn: http.client.HTTPConnection, body: bytes) -> list[tuple[float, float]]:
    """POST an OTLP/HTTP body until it is taken: a 503 (refused for now) is retried after
    50 ms, as an OTLP exporter would. Each attempt's (start, end) ``perf_counter`` times,
    the taken one last."""
    attempts: list[tuple[float, float]] = []
    while True:
        start = time.perf_counter()
        conn.request("POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"})
        response = conn.getresponse()
        response.read()
        attempts.append((start, time.perf_counter()))
        if response.status != 503:
            return attempts
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape_all(url: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of /metrics as (name, labels, value)."""
    body = urllib.request.urlopen(url, timeout=5).read().decode()
    samples = []
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        samples.append((name, labels, float(value)))
    return samples


def scrape(url: str, name: str) -> float:
    return sum(v for n, _, v in scrape_all(url) if n == name)


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def torch_loaded(pid: int) -> bool:
    """Whether the process mapped torch's library (it imported torch)."""
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


# The model tier's probes are opt-in: the third column names them with the cheap tier.
MODEL_TIER = ["faithfulness", "context_relevance", "answer_relevance", "injection/rules",
              "refusal", "injection/probe", "faithfulness/probe"]  # fmt: skip
CONFIGS: list[tuple[str, dict[str, str]]] = [
    ("defaults", {}),
    ("model rate 0", {"RAGPULSE_EVALUATION__MODEL__RATE": "0"}),
    (
        "model tier 10%",
        {
            "RAGPULSE_EVALUATION__MODEL__RATE": "0.1",
            "RAGPULSE_EVALUATION__EVALUATORS": json.dumps(MODEL_TIER),
        },
    ),
]


def loads_models(env_extra: dict[str, str]) -> bool:
    """Whether serve under ``env_extra`` loads model-tier evaluators at start."""
    defaults = EvaluationSettings()
    rate = float(env_extra.get("RAGPULSE_EVALUATION__MODEL__RATE", defaults.model.rate))
    chosen = env_extra.get("RAGPULSE_EVALUATION__EVALUATORS")
    names = resolve_evaluator_names(json.loads(chosen) if chosen else defaults.evaluators)
    return rate > 0 and any(evaluator_class(n).tier == Tier.MODEL for n in names)


def run_config(
    env_extra: dict[str, str], bodies: list[bytes], traces: int, clients: int, settle_s: float
) -> dict[str, float | str]:
    """One ``ragpulse serve`` (pinned to core 0) under the load; its figures."""
    otlp_port, metrics_port = free_port(), free_port()
    env = {
        **os.environ,
        "RAGPULSE_ASSEMBLY__GRACE_S": "0.05",
        "RAGPULSE_ASSEMBLY__TICK_S": "0.02",
        "RAGPULSE_ASSEMBLY__MAX_OPEN_TRACES": str(traces + 1),
        "RAGPULSE_EVALUATION__MAX_BACKLOG": str(traces + 1),
        **env_extra,
    }
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "ragpulse.cli", "--log-level", "WARNING", "serve",
            "--otlp-http-port", str(otlp_port), "--metrics-port", str(metrics_port),
        ],
        env=env,
        preexec_fn=lambda: os.sched_setaffinity(0, {0}),  # the collector gets one core
    )  # fmt: skip
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                samples = scrape_all(metrics_url)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("ragpulse serve did not start") from None
                time.sleep(0.1)

        # Steady state: a model tier that loads at start (a model rate above 0) is given
        # time to load first; its evaluators then report ragpulse_evaluator_available.
        def available() -> int:
            return sum(
                1 for n, _, _ in scrape_all(metrics_url) if n == "ragpulse_evaluator_available"
            )

        if loads_models(env_extra):
            before, settle_until = available(), time.monotonic() + settle_s
            while available() == before and time.monotonic() < settle_until:
                time.sleep(0.2)
        post_ms: list[float] = []

        def send(chunk: list[bytes]) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", otlp_port, timeout=60)
            for body in chunk:
                attempts = post_until_taken(conn, body)
                post_ms.extend((end - start) * 1000 for start, end in attempts)
            conn.close()

        cpu0 = cpu_seconds(proc.pid)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(send, [bodies[i::clients] for i in range(clients)]))
        sent = time.perf_counter() - t0
        # Two ends: the cheap tier has taken every trace (all assembled, its queue
        # empty), and every record is exported; records sampled for the model tier
        # may wait for it up to evaluation.model.max_delay_s, so the second end
        # includes that wait.
        cheap_done = None
        while True:
            got = {n: v for n, _, v in scrape_all(metrics_url)} | {
                "ragpulse_traces_completed_total": scrape(
                    metrics_url, "ragpulse_traces_completed_total"
                )
            }
            now = time.perf_counter()
            assembled = got["ragpulse_traces_completed_total"] >= traces
            if cheap_done is None and assembled and got.get("ragpulse_eval_backlog_traces") == 0:
                cheap_done = now - t0
            if got.get("ragpulse_records_evaluated_total", 0) >= traces:
                break
            if now - t0 > 600:
                raise SystemExit("timed out waiting for evaluation")
            time.sleep(0.1)  # each scrape costs the collector CPU: not too often
        elapsed = time.perf_counter() - t0
        cpu = cpu_seconds(proc.pid) - cpu0
        samples = scrape_all(metrics_url)
        model = {
            lab["reason"]: v
            for n, lab, v in samples
            if n == "ragpulse_sampled_total" and lab.get("tier") == "model"
        }
        evaluated = sum(v for r, v in model.items() if not r.startswith("skipped:"))
        skipped = {
            r.removeprefix("skipped:"): v for r, v in model.items() if r.startswith("skipped:")
        }
        return {
            "traces/s, cheap tier": traces / (cheap_done or elapsed),
            "traces/s, all exported": traces / elapsed,
            "traces per CPU-second": traces / cpu if cpu > 0 else float("nan"),
            "intake spans/s": traces * 3 / sent,
            "POST p50 ms": pct(post_ms, 0.5),
            "POST p99 ms": pct(post_ms, 0.99),
            "peak RSS MiB": peak_rss_mib(proc.pid),
            "torch imported": "yes" if torch_loaded(proc.pid) else "no",
            "model tier": f"{evaluated:.0f} records evaluated, skipped: "
            + (", ".join(f"{v:.0f} {r}" for r, v in sorted(skipped.items())) or "none skipped"),
        }
    finally:
        proc.terminate()
        proc.wait(60)


def bench_end_to_end(
    records: list[RagRecord], traces: int, per_request: int, clients: int, settle_s: float
) -> None:
    bodies = build_requests(records, traces, per_request)
    os.sched_setaffinity(0, set(range(1, os.cpu_count() or 2)) or {0})
    columns = [(name, run_config(env, bodies, traces, clients, settle_s)) for name, env in CONFIGS]
    print("\n[2] end to end: OTLP/HTTP POST -> assembly -> evaluation -> Prometheus sink")
    print(f"    `ragpulse serve` pinned to 1 core; {traces} traces ({traces * 3} spans)")
    print(f"    in {len(bodies)} requests of {per_request} traces, {clients} connections;")
    print("    the load generator runs on the other cores. Columns: serve's defaults; with")
    print("    evaluation.model.rate 0; with the model tier's probes on at rate 0.1.")
    width = max(len(k) for k in columns[0][1]) + 2
    print("    " + " " * width + "".join(f"{name:>22}" for name, _ in columns))
    for key in [k for k in columns[0][1] if k != "model tier"]:
        cells = []
        for _, figures in columns:
            v = figures[key]
            cells.append(f"{v:>22,.1f}" if isinstance(v, float) else f"{v:>22}")
        print(f"    {key:<{width}}" + "".join(cells))
    for name, figures in columns:
        print(f"    model tier, {name}: {figures['model tier']}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--repeat", type=int, default=3, help="passes over the data set in [1]")
    parser.add_argument("--traces", type=int, default=6000)
    parser.add_argument("--traces-per-request", type=int, default=60)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--settle-s",
        type=float,
        default=120,
        help="longest wait for a model tier that loads at start before the load begins",
    )
    args = parser.parse_args()
    if not args.data.is_file():
        raise SystemExit(f"data set not found: {args.data} (see ../shared/data/dev)")
    records = load_records(args.data)
    print(
        f"ragpulse cheap-tier benchmark on {os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
    )
    bench_evaluators(records, args.repeat)
    bench_end_to_end(records, args.traces, args.traces_per_request, args.clients, args.settle_s)


if __name__ == "__main__":
    main()
