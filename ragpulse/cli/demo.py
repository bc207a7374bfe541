"""``ragpulse demo``: the collector and an instrumented app in one process, live scores.

The run has three phases, each reported with its time, so that ``--duration 20``
is not silently 30 s: starting (the collector, and the model tier's models when
one is configured: loaded before traffic starts so that its results make the
table), ``--duration`` seconds of traffic, and draining (the app's last spans are
sent, open traces closed, and every question evaluated by every tier that runs)
before the final table is printed. The table lists every evaluator that runs, so
a tier with nothing to show yet is a visible row, not a missing one.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

import ragpulse

if TYPE_CHECKING:
    from ragpulse.collector.service import Collector
    from ragpulse.evaluators.base import AnyEvaluator
    from ragpulse.exporters.memory import InMemorySink

DRAIN_BOUND_S = 60.0
"""Longest wait for the last questions once traffic stops (a slow judge, say)."""
EXPORT_DELAY_MS = "500"
"""Spans leave the app every 0.5 s instead of the SDK's default 5 s."""
GRACE_S = 0.5
"""A trace closes this long after its last span (the collector's default is 1 s)."""


def _free_or_zero(port: int) -> int:
    """The requested port when it is free, else 0 (let the OS pick)."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return 0
    return port


class _Traffic:
    """The demo app's questions, sent from a daemon thread at ``rate`` per second."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.sent = 0  # answered by the app: each one is a trace on its way to the collector
        self.failed = 0
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ragpulse-demo-app", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        self.stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        from ragpulse.cli.demo_app import answer, corpus

        questions = corpus()["questions"]
        rng = random.Random(7)
        while not self.stop.is_set():
            q = rng.choice(questions)
            try:
                answer(q["question"])
                self.sent += 1
            except Exception:  # the demo app must keep sending whatever happens
                self.failed += 1
            self.stop.wait(1.0 / self.rate)


def _tier_line(evaluators: Sequence[AnyEvaluator], judge_on: bool) -> str:
    from ragpulse.evaluators.base import Tier

    by_tier: dict[Tier, list[str]] = defaultdict(list)
    for e in evaluators:
        by_tier[e.tier].append(e.name)
    parts = []
    for tier in Tier:
        names = by_tier.get(tier)
        if names:
            parts.append(f"{tier.value} tier: {', '.join(sorted(names))}")
        elif tier.value == "judge" and not judge_on:
            parts.append("judge tier off (set RAGPULSE_JUDGE_BASE_URL and RAGPULSE_JUDGE_MODEL)")
        else:
            parts.append(f"{tier.value} tier off (none of its evaluators selected)")
    return "; ".join(parts)


def _table(
    sink: InMemorySink, evaluators: Sequence[AnyEvaluator], traffic: _Traffic, status: str
) -> Group:
    items = sink.items
    scores: dict[str, list[float]] = defaultdict(list)
    labels: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for item in items:
        for r in item.results:
            if r.score is not None:
                scores[r.name].append(r.score)
            if r.label:
                labels[r.name][r.label] += 1
    title = f"ragpulse demo: {len(items)} of {traffic.sent} questions sent evaluated"
    table = Table(title=title)
    for col in ("metric/method", "tier", "n", "mean", "min", "labels"):
        left = col in ("metric/method", "tier", "labels")
        # Names are never cut (the labels column wraps instead on a narrow terminal).
        no_wrap = col in ("metric/method", "tier")
        table.add_column(col, justify="left" if left else "right", no_wrap=no_wrap)
    tiers = {e.name: e.tier.value for e in evaluators}
    for name in sorted(set(tiers) | set(scores)):
        vals = scores.get(name, [])
        label_text = ", ".join(f"{k}={v}" for k, v in sorted(labels[name].items()))
        mean = f"{statistics.fmean(vals):.3f}" if vals else "-"
        low = f"{min(vals):.2f}" if vals else "-"
        table.add_row(name, tiers.get(name, "?"), str(len(vals)), mean, low, label_text)
    return Group(table, Text(status, style="dim"))


def signal_table() -> Table:
    """What each local score can see on the dev sets, and what to switch on for accuracy."""
    from ragpulse.evaluators.signal_guide import COLUMNS, rows

    table = Table(title="what these scores can see (dev AUROC; alerts read scores at 0.5)")
    for col in COLUMNS:
        table.add_column(col, overflow="fold")  # names are never cut
    for row in rows():
        table.add_row(*(cell.replace("`", "") for cell in row))
    return table


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="run the collector and an instrumented demo RAG app, print live scores",
        description="Starts the collector and a small instrumented RAG app in this process, "
        "sends questions for --duration seconds, then waits until every question sent has "
        "been evaluated (the last spans leave the app, the last traces close) and prints "
        "the scores and the Prometheus series. Starting and that final wait add a few "
        "seconds to --duration; both are reported.",
    )
    demo.add_argument(
        "--duration", type=float, default=20.0, help="seconds of traffic (default 20)"
    )
    demo.add_argument("--rate", type=float, default=8.0, help="questions per second (default 8)")
    demo.add_argument(
        "--otlp-http-port",
        type=int,
        default=4318,
        help="OTLP/HTTP receiver port (default 4318; a free one is used if it is taken)",
    )
    demo.add_argument(
        "--metrics-port",
        type=int,
        default=9464,
        help="Prometheus /metrics port (default 9464; a free one is used if it is taken)",
    )
    demo.add_argument(
        "--results-jsonl", type=Path, help="also append one line per evaluated record here"
    )


def run_demo(args: argparse.Namespace, console: Console) -> int:
    began = time.monotonic()  # "starting" includes the collector's imports
    from ragpulse.cli.common import load_settings, sink_overrides
    from ragpulse.collector.service import Collector
    from ragpulse.exporters.memory import InMemorySink
    from ragpulse.plugins import load_evaluators

    os.environ.setdefault("OTEL_BSP_SCHEDULE_DELAY", EXPORT_DELAY_MS)
    ports = {}
    for what, asked in (("OTLP/HTTP", args.otlp_http_port), ("metrics", args.metrics_port)):
        ports[what] = _free_or_zero(asked)
        if ports[what] != asked:
            console.print(f"port {asked} is taken: {what} goes to a free port instead")
    settings = load_settings(
        None,
        otlp_http_port=ports["OTLP/HTTP"],
        otlp_grpc_port=0,  # the demo app exports over HTTP; a taken 4317 must not stop it
        metrics_port=ports["metrics"],
        sinks=sink_overrides({"jsonl.path": args.results_jsonl}),
        assembly={"grace_s": GRACE_S},
    )
    sink = InMemorySink()
    # Which tiers are off, and how to turn the judge on, is the demo's own tier line.
    ev = settings.evaluation
    evaluators = load_evaluators(ev.evaluators, ev, say_off=False)
    collector = Collector(settings, evaluators=evaluators, extra_sinks=[sink]).start()
    try:
        code, phases = _run(args, console, collector, sink, began)
    finally:
        stopping = time.monotonic()
        collector.stop()
    phases.append(f"{time.monotonic() - stopping:.1f}s stopping")
    total = time.monotonic() - began
    Console().print(f"{total:.1f}s in all: " + ", ".join(phases), highlight=False)
    return code


def _run(
    args: argparse.Namespace,
    console: Console,
    collector: Collector,
    sink: InMemorySink,
    began: float,
) -> tuple[int, list[str]]:
    """Traffic, drain, the final table and series; the exit code and the phases' times."""
    from ragpulse.evaluation import load_evaluators_safely
    from ragpulse.evaluators.base import Tier

    pipeline = collector.pipeline
    evaluators = pipeline.evaluators
    metrics_url = collector.metrics_url or ""
    console.print(f"collector: OTLP/HTTP {collector.otlp_url}/v1/traces, metrics {metrics_url}")
    judge_on = collector.settings.evaluation.judge.configured
    console.print(_tier_line(evaluators, judge_on), highlight=False)
    models = pipeline.by_tier.get(Tier.MODEL, [])
    if models:
        # Loaded here, before traffic, with the collector's context (shared models, so the
        # tier's own load finds them): else the first questions skip the tier while it loads.
        console.print("loading the model tier's models ...")
        load_evaluators_safely(models, collector.context)
    ragpulse.configure(service_name="ragpulse-demo", endpoint=collector.otlp_url)
    starting = time.monotonic() - began

    traffic = _Traffic(args.rate)
    with Live(console=Console(), refresh_per_second=2) as live:
        start = time.monotonic()
        traffic.start()
        try:
            while (elapsed := time.monotonic() - start) < args.duration:
                status = f"{elapsed:5.1f}s of {args.duration:.0f}s of traffic - Prometheus: "
                live.update(_table(sink, evaluators, traffic, status + metrics_url))
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        traffic.finish()
        sending = time.monotonic() - start
        drained = _drain(collector, sink, evaluators, traffic, live)
        draining = time.monotonic() - start - sending
        evaluated = len(sink.items)
        if drained and evaluated >= traffic.sent:
            status = f"all {traffic.sent} questions sent were evaluated"
        else:
            status = (
                f"{traffic.sent - evaluated} of {traffic.sent} questions not evaluated after "
                f"waiting {DRAIN_BOUND_S:.0f}s (still queued for a costly tier)"
            )
        live.update(_table(sink, evaluators, traffic, status))
    import urllib.request  # here: only the demo fetches anything

    body = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    series = [line for line in body.splitlines() if line.startswith("ragpulse_eval_score_count")]
    out = Console()
    out.print(
        f"\n[bold]{metrics_url}[/bold] served {len(series)} score series before the demo "
        "stopped (run `ragpulse serve` to keep one up), e.g.:"
    )
    for line in series:
        out.print("  " + line, highlight=False, soft_wrap=True)
    injected = [
        line for line in body.splitlines() if line.startswith("ragpulse_injection_detected_total")
    ]
    for line in injected:
        out.print("  " + line, highlight=False, soft_wrap=True)
    out.print(signal_table())
    loading = " and its models" if models else ""
    phases = [
        f"{starting:.1f}s starting the collector{loading}",
        f"{sending:.1f}s of traffic",
        f"{draining:.1f}s until the last questions were evaluated (spans leave the app every "
        f"{int(EXPORT_DELAY_MS) / 1000:.1f}s, a trace closes {GRACE_S:.1f}s after its last span)",
    ]
    return (0 if series else 1), phases


def _drain(
    collector: Collector,
    sink: InMemorySink,
    evaluators: Sequence[AnyEvaluator],
    traffic: _Traffic,
    live: Live,
) -> bool:
    """Send the app's last spans, close every open trace, and wait (bounded) until each
    question sent has gone through every tier that runs; True when they all did."""
    ragpulse.shutdown()  # flushes the app's spans; the receiver ingests them before answering
    collector.pipeline.submit(collector.assembler.drain())
    deadline = time.monotonic() + DRAIN_BOUND_S
    while time.monotonic() < deadline:
        if collector.pipeline.wait_idle(0.5):
            return True
        waiting = traffic.sent - len(sink.items)
        status = f"waiting for the last {waiting} questions to be evaluated ..."
        live.update(_table(sink, evaluators, traffic, status))
    return False
