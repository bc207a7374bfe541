"""``ragpulse demo``: the collector and an instrumented app in one process, live scores."""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import threading
import time
import urllib.request
from collections import defaultdict

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

import ragpulse
from ragpulse.collector.service import Collector
from ragpulse.config import load_settings
from ragpulse.exporters.memory import InMemorySink


def _free_or_zero(port: int) -> int:
    """The requested port when it is free, else 0 (let the OS pick)."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return 0
    return port


def _table(sink: InMemorySink, elapsed: float, sent: int, metrics_url: str) -> Group:
    items = sink.items
    scores: dict[str, list[float]] = defaultdict(list)
    labels: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for item in items:
        for r in item.results:
            if r.score is not None:
                scores[r.name].append(r.score)
            if r.label:
                labels[r.name][r.label] += 1
    table = Table(title=f"ragpulse demo: {len(items)} records evaluated / {sent} questions sent")
    for col in ("metric/method", "n", "mean", "min", "labels"):
        table.add_column(col, justify="left" if col in ("metric/method", "labels") else "right")
    for name in sorted(scores):
        vals = scores[name]
        label_text = ", ".join(f"{k}={v}" for k, v in sorted(labels[name].items()))
        table.add_row(
            name, str(len(vals)), f"{statistics.fmean(vals):.3f}", f"{min(vals):.2f}", label_text
        )
    footer = Text(f"{elapsed:5.1f}s elapsed - Prometheus: {metrics_url}", style="dim")
    return Group(table, footer)


def _traffic(stop: threading.Event, rate: float, sent: list[int]) -> None:
    from ragpulse.demo_app import answer, corpus

    questions = corpus()["questions"]
    rng = random.Random(7)
    while not stop.is_set():
        q = rng.choice(questions)
        try:
            answer(q["question"])
        except Exception:  # the demo app must keep sending whatever happens
            pass
        sent[0] += 1
        stop.wait(1.0 / rate)


def run_demo(args: argparse.Namespace, console: Console) -> int:
    # Spans leave the app every 0.5 s instead of the SDK's default 5 s.
    os.environ.setdefault("OTEL_BSP_SCHEDULE_DELAY", "500")
    settings = load_settings(
        otlp_http_port=_free_or_zero(args.otlp_http_port),
        metrics_port=_free_or_zero(args.metrics_port),
        results_jsonl=args.results_jsonl,
        assembly={"grace_s": 0.5},
    )
    sink = InMemorySink()
    collector = Collector(settings, extra_sinks=[sink]).start()
    metrics_url = collector.metrics_url or ""
    console.print(f"collector: OTLP/HTTP {collector.otlp_url}/v1/traces, metrics {metrics_url}")
    ragpulse.configure(service_name="ragpulse-demo", endpoint=collector.otlp_url)

    stop, sent = threading.Event(), [0]
    sender = threading.Thread(target=_traffic, args=(stop, args.rate, sent), daemon=True)
    start = time.monotonic()
    sender.start()
    try:
        with Live(console=Console(), refresh_per_second=2) as live:
            while time.monotonic() - start < args.duration:
                live.update(_table(sink, time.monotonic() - start, sent[0], metrics_url))
                time.sleep(0.5)
            stop.set()
            sender.join(5)
            ragpulse.shutdown()  # flush the app's last spans
            collector.flush()
            live.update(_table(sink, time.monotonic() - start, sent[0], metrics_url))
    except KeyboardInterrupt:
        stop.set()
    body = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    series = [line for line in body.splitlines() if line.startswith("ragpulse_eval_score_count")]
    out = Console()
    out.print(f"\n[bold]{metrics_url}[/bold] now serves {len(series)} score series, e.g.:")
    for line in series:
        out.print("  " + line, highlight=False, soft_wrap=True)
    injected = [
        line for line in body.splitlines() if line.startswith("ragpulse_injection_detected_total")
    ]
    for line in injected:
        out.print("  " + line, highlight=False, soft_wrap=True)
    collector.stop()
    return 0 if series else 1
