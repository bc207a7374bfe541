"""``ragpulse demo``: the collector and an instrumented app in one process, live scores.

The app answers help-center questions three ways: a RAG pipeline, an agent that calls
tools (a search, a ticket reader, a status check that is down, an e-mail sender), and
two-turn conversations with that agent. Its first turns are what ragpulse is for: an
agent turn that retrieves through a tool, a conversation (closed into its conversation
record), and a ticket whose text carries a prompt injection that the agent obeys (the
hijack ``injection_followed/agent`` names).

The run has three phases, each reported with its time, so that ``--duration 20``
is not silently 30 s: starting (the collector, and the model tier's models when
one is configured: loaded before traffic starts so that its results make the
table), ``--duration`` seconds of traffic, and draining (the app's last spans are
sent, open traces closed, every conversation ended, and every turn evaluated by every
tier that runs) before the final table is printed. The table lists every evaluator
that runs, so a tier with nothing to show yet is a visible row, not a missing one.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.live import Live
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
FOLLOW_UP_S = 2.0
"""A conversation's second turn comes this long after its first: its user read the answer."""
SHOWN_SERIES = 4
"""Score series printed as examples after the run (the demo serves a few dozen)."""
NAMED_SERIES = (
    "ragpulse_injection_detected_total",
    "ragpulse_agent_hijacked_turns_total",
    "ragpulse_conversation_records_total",
)
"""Series printed whole after the run: injections, hijacks, conversation records."""


def _free_or_zero(port: int) -> int:
    """The requested port when it is free, else 0 (let the OS pick)."""
    with socket.socket() as s:
        # As the servers bind (aiohttp and prometheus_client reuse the address): the last
        # demo's connections in TIME_WAIT do not make the port taken, a listener does.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return 0
    return port


class _Traffic:
    """The demo app's turns, sent from a daemon thread at ``rate`` per second: first the
    agent turn, a conversation and the hijack, then a mix of RAG questions, agent turns
    and conversations (a conversation's second turn :data:`FOLLOW_UP_S` after its first)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.sent = 0  # turns answered by the app: each one is a trace on its way
        self.failed = 0
        self.agent_turns = 0
        self.conversations = 0  # started; each ends (its follow-up is sent) before finish
        self.stop = threading.Event()
        self._due: list[tuple[float, str, str]] = []  # (when, conversation id, follow-up)
        self._thread = threading.Thread(target=self._run, name="ragpulse-demo-app", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        self.stop.set()
        self._thread.join(30)

    def _send(self, ask: Callable[[], object]) -> None:
        try:
            ask()
            self.sent += 1
        except Exception:  # the demo app must keep sending whatever happens
            self.failed += 1

    def _agent(self, question: str) -> None:
        from ragpulse.cli.demo_agent import turn

        self.agent_turns += 1
        self._send(lambda: turn(question))

    def _converse(self, questions: list[str]) -> None:
        from ragpulse.cli.demo_agent import turn

        self.conversations += 1
        cid = f"demo-chat-{self.conversations}"
        self.agent_turns += 1
        self._send(lambda: turn(questions[0], cid))
        self._due.append((time.monotonic() + FOLLOW_UP_S, cid, questions[1]))

    def _follow_ups(self, all_of_them: bool = False) -> None:
        from ragpulse.cli.demo_agent import turn

        now = time.monotonic()
        for due in [d for d in self._due if all_of_them or d[0] <= now]:
            self._due.remove(due)
            _, cid, question = due
            self.agent_turns += 1
            self._send(partial(turn, question, cid, last=True))

    def _run(self) -> None:
        from ragpulse.cli.demo_agent import scenarios
        from ragpulse.cli.demo_app import answer, corpus

        questions = corpus()["questions"]
        agent = scenarios()
        rng = random.Random(7)
        first: list[Callable[[], None]] = [
            lambda: self._agent(agent["questions"][0]),
            lambda: self._converse(agent["conversations"][0]),
            lambda: self._agent(agent["hijack_question"]),
        ]
        while not self.stop.is_set():
            self._follow_ups()
            if first:
                first.pop(0)()
            elif (roll := rng.random()) < 0.55:
                question = rng.choice(questions)["question"]
                self._send(partial(answer, question))
            elif roll < 0.85:
                self._agent(rng.choice(agent["questions"]))
            else:
                self._converse(rng.choice(agent["conversations"]))
            self.stop.wait(1.0 / self.rate)
        self._follow_ups(all_of_them=True)  # every conversation ends


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
    sink: InMemorySink,
    evaluators: Sequence[AnyEvaluator],
    traffic: _Traffic,
    status: str,
    console: Console,
) -> Group:
    from ragpulse.cli.demo_view import score_table

    title = (
        f"ragpulse demo: {len(sink.items)} of {traffic.sent} turns evaluated "
        f"({traffic.agent_turns} agent turns, {len(sink.conversations)} of "
        f"{traffic.conversations} conversations closed)"
    )
    return Group(score_table(sink, evaluators, title, console), Text(status, style="dim"))


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="run the collector and an instrumented demo RAG app and agent, print live scores",
        description="Starts the collector and a small instrumented app in this process (a "
        "RAG pipeline, an agent that calls tools, two-turn conversations, and a ticket whose "
        "prompt injection the agent obeys), sends turns for --duration seconds, then waits "
        "until every turn sent has been evaluated (the last spans leave the app, the last "
        "traces close, every conversation ends) and prints the scores, what became of the "
        "agent turn, the conversation and the hijack, and the Prometheus series. Starting "
        "and that final wait add a few seconds to --duration; both are reported.",
    )
    demo.add_argument(
        "--duration", type=float, default=20.0, help="seconds of traffic (default 20)"
    )
    demo.add_argument("--rate", type=float, default=8.0, help="turns per second (default 8)")
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
    """Traffic, drain, the final table, story and series; the exit code and the phases'
    times."""
    from ragpulse.cli.demo_view import signal_guide, story
    from ragpulse.evaluation import load_evaluators_safely
    from ragpulse.evaluators.base import Tier
    from ragpulse.redaction import Redactor

    pipeline = collector.pipeline
    evaluators = pipeline.evaluators
    metrics_url = collector.metrics_url or ""
    console.print(f"collector: OTLP/HTTP {collector.otlp_url}/v1/traces, metrics {metrics_url}")
    judge_on = collector.settings.evaluation.judge.configured
    console.print(_tier_line(evaluators, judge_on), highlight=False)
    models = pipeline.by_tier.get(Tier.MODEL, [])
    if models:
        # Loaded here, before traffic, with the collector's context (shared models, so the
        # tier's own load finds them): else the first turns skip the tier while it loads.
        console.print("loading the model tier's models ...")
        load_evaluators_safely(models, collector.context)
    ragpulse.configure(service_name="ragpulse-demo", endpoint=collector.otlp_url)
    starting = time.monotonic() - began

    traffic = _Traffic(args.rate)
    screen = Console()
    with Live(console=screen, refresh_per_second=2) as live:
        start = time.monotonic()
        traffic.start()
        try:
            while (elapsed := time.monotonic() - start) < args.duration:
                status = f"{elapsed:5.1f}s of {args.duration:.0f}s of traffic - Prometheus: "
                live.update(_table(sink, evaluators, traffic, status + metrics_url, screen))
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        traffic.finish()
        sending = time.monotonic() - start
        drained = _drain(collector, sink, evaluators, traffic, live, screen)
        draining = time.monotonic() - start - sending
        evaluated = len(sink.items)
        if drained:
            status = f"all {traffic.sent} turns sent were evaluated"
        else:
            status = (
                f"{traffic.sent - evaluated} of {traffic.sent} turns not evaluated after "
                f"waiting {DRAIN_BOUND_S:.0f}s (still queued for a costly tier)"
            )
        live.update(_table(sink, evaluators, traffic, status, screen))
    out = Console()
    out.print()
    for line in story(sink, Redactor.from_settings(collector.settings, "logs")):
        out.print(line)
    import urllib.request  # here: only the demo fetches anything

    body = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    lines = body.splitlines()
    series = [line for line in lines if line.startswith("ragpulse_eval_score_count")]
    out.print(
        f"\n[bold]{metrics_url}[/bold] served {len(series)} score series before the demo "
        "stopped (run `ragpulse serve` to keep one up), e.g.:"
    )
    shown = [
        *series[:SHOWN_SERIES],
        *(line for line in lines if line.startswith(NAMED_SERIES)),
    ]
    for line in shown:
        out.print("  " + line, highlight=False, soft_wrap=True)
    out.print(signal_guide(out))
    loading = " and its models" if models else ""
    phases = [
        f"{starting:.1f}s starting the collector{loading}",
        f"{sending:.1f}s of traffic",
        f"{draining:.1f}s until the last turns were evaluated (spans leave the app every "
        f"{int(EXPORT_DELAY_MS) / 1000:.1f}s, a trace closes {GRACE_S:.1f}s after its last span)",
    ]
    return (0 if series else 1), phases


def _drain(
    collector: Collector,
    sink: InMemorySink,
    evaluators: Sequence[AnyEvaluator],
    traffic: _Traffic,
    live: Live,
    screen: Console,
) -> bool:
    """Send the app's last spans, close every open trace, and wait (bounded) until each
    turn sent has gone through every tier that runs and each conversation has its record;
    True when they all did."""
    ragpulse.shutdown()  # flushes the app's spans; the receiver ingests them before answering
    collector.pipeline.submit(collector.assembler.drain())
    deadline = time.monotonic() + DRAIN_BOUND_S
    while time.monotonic() < deadline:
        idle = collector.pipeline.wait_idle(0.5)
        turns = traffic.sent - len(sink.items)
        conversations = traffic.conversations - len(sink.conversations)
        if idle and turns <= 0 and conversations <= 0:
            return True
        status = f"waiting for the last {max(turns, 0)} turns and {max(conversations, 0)} "
        live.update(_table(sink, evaluators, traffic, status + "conversations ...", screen))
    return False
