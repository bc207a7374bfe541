"""What redaction (on by default) costs where content leaves the process.

Records: the ARES NQ dev set (faithfulness_ares_nq.jsonl: question, one or more
Wikipedia passages, answer), with an e-mail address, a card number and a phone
number written into a share of them (``--pii-share``, default 10%). Each record
is scored once by the cheap tier; then, redaction off and on:

1. the results JSONL sink: lines/s and microseconds per line, written to a file;
2. the OTel evaluation export's redaction (each result's explanation, error and
   details, and the words of the record's redacted values): microseconds per record
   (the OTLP export itself is not timed);
3. log lines through a handler with and without the redacting filter: lines/s;
4. end to end in one process: the collector (assembly, the cheap tier, the
   Prometheus, results JSONL and OTel evaluation sinks, the last exporting to an
   OTLP receiver in another process) fed decoded spans: CPU microseconds per
   trace of the collector's process (the exporters' background threads included);
5. beside them, the cheap tier's own cost per record, for scale.

Best of ``--repeat`` passes each (a shared machine adds noise, never removes it).

    .venv/bin/python bench/redaction_cost.py [--repeat 5] [--pii-share 0.1]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ragpulse.collector.intake import otlp
from ragpulse.collector.service import Collector
from ragpulse.config import RedactionSettings, load_settings
from ragpulse.evaluation import evaluate_records
from ragpulse.evaluators.base import Tier
from ragpulse.exporters.jsonl import JsonlSink
from ragpulse.exporters.support.results import redact_results
from ragpulse.log_redaction import RedactingFilter
from ragpulse.plugins import load_evaluators
from ragpulse.record import Document, EvalResult, ExportItem, RagRecord
from ragpulse.redaction import Redactor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.helpers import rag_request
from support.kafka_env import free_port, wait_until

DATA = Path(__file__).resolve().parents[2] / "shared/data/dev/faithfulness_ares_nq.jsonl"
# An OTLP/HTTP receiver in its own process (its CPU is not the collector's): answers
# every export with an empty success response.
RECEIVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""
PII = " Contact jane.doe@example.com, card 4111 1111 1111 1111, phone +1 (555) 123-4567."
OFF = RedactionSettings(enabled=False)
ON = RedactionSettings()


def load(path: Path, pii_share: float) -> list[RagRecord]:
    records = []
    every = round(1 / pii_share) if pii_share > 0 else 0
    for i, line in enumerate(path.open(encoding="utf-8")):
        row = json.loads(line)
        extra = PII if every and i % every == 0 else ""
        records.append(
            RagRecord(
                trace_id=f"{i:032x}",
                span_id=f"{i:016x}",
                question=row["question"] + extra,
                documents=[Document(id=f"d{j}", content=c) for j, c in enumerate(row["contexts"])],
                answer=row["answer"] + extra,
            )
        )
    return records


def best(repeat: int, run: Callable[[], None]) -> float:
    """Fastest of ``repeat`` runs, in seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench_jsonl(
    scored: list[tuple[RagRecord, list[EvalResult]]], repeat: int, tmp: Path
) -> dict[str, float]:
    out = {}
    for name, settings in (("off", OFF), ("on", ON)):
        path = tmp / f"results-{name}.jsonl"

        def run(path: Path = path, settings: RedactionSettings = settings) -> None:
            path.unlink(missing_ok=True)
            sink = JsonlSink(path, settings)
            for record, results in scored:
                sink.export(ExportItem(record, results))
            sink.shutdown()

        out[name] = best(repeat, run)
    return out


def bench_otel(scored: list[tuple[RagRecord, list[EvalResult]]], repeat: int) -> float:
    redactor = Redactor(ON)

    def run() -> None:
        for record, results in scored:
            redact_results(record, results, redactor)

    return best(repeat, run)


def bench_logs(records: list[RagRecord], repeat: int, lines: int) -> dict[str, float]:
    logger = logging.getLogger("bench.redaction")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    out = {}
    with open(os.devnull, "w") as devnull:
        handler = logging.StreamHandler(devnull)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        questions = [r.question for r in records]

        def run() -> None:
            for i in range(lines):
                logger.debug("refused OTLP request (%s): %s", 400, questions[i % len(questions)])

        out["off"] = best(repeat, run)
        handler.addFilter(RedactingFilter(Redactor(ON)))
        out["on"] = best(repeat, run)
        logger.removeHandler(handler)
    return out


def bench_collector(records: list[RagRecord], repeat: int, tmp: Path) -> dict[str, float]:
    """CPU seconds of this process per trace, collector fed decoded spans, best of runs."""
    batches = []
    for i in range(0, len(records), 50):
        request = rag_request(
            [(secrets.token_bytes(16), r.question, [d.content for d in r.documents], r.answer)
             for r in records[i : i + 50]]
        )  # fmt: skip
        batches.append(otlp.decode_request(request).spans)
    out = {}
    port = free_port()
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER, str(port)])
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: socket.create_connection(("127.0.0.1", port), 5).close() or True,
                   60, "the OTLP receiver did not start", ignore=(OSError,))  # fmt: skip
        for name, redaction in (("off", OFF), ("on", ON)):
            best_cpu = float("inf")
            for run in range(repeat):
                settings = load_settings(
                    sinks={
                        "jsonl": {"path": tmp / f"collector-{name}-{run}.jsonl"},
                        "otel": {"endpoint": endpoint},
                    },
                    redaction=redaction,
                    evaluation={"model": {"rate": 0}},
                )
                collector = Collector(settings, receiver=False, metrics_server=False).start()
                cpu = time.process_time()
                for spans in batches:
                    collector.ingest(spans)
                assert collector.flush(timeout=600), "the collector did not drain"
                collector.stop()  # flushes the OTel exporters: their work is counted
                best_cpu = min(best_cpu, time.process_time() - cpu)
            out[name] = best_cpu
    finally:
        receiver.terminate()
        receiver.wait()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--pii-share", type=float, default=0.1)
    parser.add_argument("--log-lines", type=int, default=50_000)
    args = parser.parse_args()

    records = load(args.data, args.pii_share)
    evaluators = [e for e in load_evaluators(None) if e.tier == Tier.CHEAP]
    t0 = time.perf_counter()
    all_results = evaluate_records(records, evaluators)
    cheap_s = time.perf_counter() - t0
    scored = list(zip(records, [list(r) for r in all_results], strict=True))
    n = len(scored)
    chars = sum(len(r.question) + len(r.answer) + sum(len(d.content) for d in r.documents)
                for r in records) / n  # fmt: skip
    print(f"records: {n} from {args.data.name}, {chars:,.0f} chars each on average, "
          f"{args.pii_share:.0%} with an e-mail, a card and a phone number")  # fmt: skip
    print(f"cheap tier ({len(evaluators)} evaluators), for scale: "
          f"{cheap_s / n * 1e6:,.0f} us/record ({n / cheap_s:,.0f} records/s, first pass)")  # fmt: skip

    with tempfile.TemporaryDirectory() as tmp:
        jsonl = bench_jsonl(scored, args.repeat, Path(tmp))
    print("\n[1] results JSONL sink (record + results per line, flushed)")
    for name in ("off", "on"):
        print(f"    redaction {name:3}: {n / jsonl[name]:>9,.0f} lines/s, "
              f"{jsonl[name] / n * 1e6:7.1f} us/line")  # fmt: skip
    extra = (jsonl["on"] - jsonl["off"]) / n * 1e6
    print(f"    cost of redaction: +{extra:.1f} us/line "
          f"(+{100 * (jsonl['on'] / jsonl['off'] - 1):.0f}% of the sink, "
          f"{100 * extra / (cheap_s / n * 1e6):.0f}% of the cheap tier's time)")  # fmt: skip

    otel = bench_otel(scored, args.repeat)
    print("\n[2] OTel evaluation export: redacting the results of one record")
    print(f"    {otel / n * 1e6:.1f} us/record ({n / otel:,.0f} records/s)")

    logs = bench_logs(records, args.repeat, args.log_lines)
    print(f"\n[3] log lines carrying a question ({args.log_lines:,} lines, to /dev/null)")
    for name in ("off", "on"):
        print(f"    filter {name:3}: {args.log_lines / logs[name]:>9,.0f} lines/s, "
              f"{logs[name] / args.log_lines * 1e6:5.1f} us/line")  # fmt: skip

    with tempfile.TemporaryDirectory() as tmp:
        collector = bench_collector(records, max(1, args.repeat // 2), Path(tmp))
    print("\n[4] collector end to end: spans -> assembly -> cheap tier -> Prometheus, results")
    print("    JSONL and OTel export (to a receiver in another process); CPU of this process")
    for name in ("off", "on"):
        print(f"    redaction {name:3}: {collector[name] / n * 1e6:7.0f} CPU-us/trace "
              f"({n / collector[name]:,.0f} traces per CPU-second)")  # fmt: skip
    print(f"    cost of redaction: +{100 * (collector['on'] / collector['off'] - 1):.0f}%")


if __name__ == "__main__":
    main()
