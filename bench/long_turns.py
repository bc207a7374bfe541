"""Long agent turns: what an open slow turn holds, and 10,000 slow turns at once.

An agent turn's spans reach ragpulse as each one ends: the first tool call early, then
nothing while a slow step runs (``--quiet-s`` of the turn, 240 s: a four-minute turn),
then the answering model call and the root span. Each turn here is an ``invoke_agent``
in the GenAI conventions (a model call asking for a search, the search with a JSON
result of ~2 KB, the answering model call, the root), sent as OTLP protobuf, decoded,
and added to the real collector (assembly, extraction, the default cheap evaluators,
a sink that notes when each record comes) as a receiver adds it (``admit=True``).
The collector's clock is a stand-in that the driver moves on, so minutes of agent time
take seconds; every other time is the machine's.

1. **Memory per open long trace**: ``--open`` turns whose first two spans came (their
   root not yet): the resident memory they add, per trace, and the OTLP bytes the
   assembler counts for them (``ragpulse_held_bytes``).
2. **``--turns`` concurrent slow turns** (10,000), started over ``--spread-s`` of agent
   time and finishing ``--quiet-s`` later, with the default bounds and with bounds
   raised to fit them: how many records came whole, partial (closed to make room) and
   revised (the rest arriving after the close), spans counted ``late_span``, the peak
   of open traces, throughput (turns evaluated per second of wall time, from the first
   rest sent to the last record exported), the latency from a turn's last spans being
   complete (its root came, and grace_s of agent time passed) to its record's export
   (p50/p95/p99), and the process's peak RSS.

    .venv/bin/python bench/long_turns.py [--turns 10000] [--open 5000] [--quiet-s 240]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import secrets
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from conversations import peak_rss_mib, rss_mib  # bench/conversations.py, beside this one
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from ragpulse.collector.intake import otlp
from ragpulse.collector.service import Collector
from ragpulse.config import Settings
from ragpulse.errors import CollectorFull
from ragpulse.exporters.base import Sink
from ragpulse.record import ExportItem, ExportKind, RagRecord

PASSAGES = [
    {"id": f"kb-{i}", "content": f"Ferry timetable {i}: the ferry leaves the north quay at "
     f"{7 + i} am on weekdays and at {9 + i} am on weekends; tickets are sold on board."}
    for i in range(12)
]  # fmt: skip
QUESTION = "When does the ferry leave on weekdays?"
ANSWER = "The ferry leaves the north quay at 7 am on weekdays."


class Clock:
    """The collector's clock: agent time, moved on by the driver."""

    def __init__(self) -> None:
        self.now = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def advance(self, to: float) -> None:
        with self._lock:
            self.now = max(self.now, to)


@dataclass
class Noted(Sink):
    """When each record reached the sinks, and of which kind."""

    name = "noted"
    exported: dict[str, float] = field(default_factory=dict)  # trace id -> wall time
    kinds: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        super().__init__()

    def export(self, item: ExportItem[RagRecord]) -> None:
        if item.kind is ExportKind.UPDATE:
            return
        with self.lock:
            self.exported[item.record.trace_id] = time.perf_counter()
            if item.kind is ExportKind.REVISION:
                self.kinds["revised"] += 1
            elif item.record.partial:
                self.kinds[f"partial:{item.record.partial}"] += 1
            else:
                self.kinds["whole"] += 1


def _kv(key: str, value: str) -> Any:
    from opentelemetry.proto.common.v1 import common_pb2

    return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=value))


def _span(scope: Any, trace: bytes, span_id: bytes, parent: bytes, name: str,
          attrs: dict[str, str], start: int, end: int) -> None:  # fmt: skip
    span = scope.spans.add()
    span.trace_id, span.span_id, span.parent_span_id = trace, span_id, parent
    span.name, span.start_time_unix_nano, span.end_time_unix_nano = name, start, end
    span.attributes.extend(_kv(k, v) for k, v in attrs.items())


def _messages(role: str, *parts: dict[str, Any]) -> str:
    return json.dumps([{"role": role, "parts": list(parts)}])


@dataclass
class Turn:
    trace: bytes
    root: bytes

    @classmethod
    def new(cls) -> Turn:
        return cls(secrets.token_bytes(16), secrets.token_bytes(8))


def requests(turns: Sequence[Turn], first: bool) -> bytes:
    """One OTLP request: the first spans of ``turns`` (a model call asking for a search,
    the search and its result), or their rest (the answering model call, the root)."""
    req = trace_service_pb2.ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.append(_kv("service.name", "slow-agent"))
    scope = rs.scope_spans.add()
    user = {"type": "text", "content": QUESTION}
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}
    for turn in turns:
        if first:
            call = {"type": "tool_call", "id": "c1", "name": "search_docs",
                    "arguments": {"query": "ferry"}}  # fmt: skip
            _span(scope, turn.trace, secrets.token_bytes(8), turn.root, "chat m", {**chat,
                  "gen_ai.input.messages": _messages("user", user),
                  "gen_ai.output.messages": _messages("assistant", call)}, 10, 20)  # fmt: skip
            _span(scope, turn.trace, secrets.token_bytes(8), turn.root, "execute_tool search_docs", {
                  "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_docs",
                  "gen_ai.tool.call.id": "c1", "gen_ai.tool.call.arguments": '{"query": "ferry"}',
                  "gen_ai.tool.call.result": json.dumps(PASSAGES)}, 21, 30)  # fmt: skip
        else:
            text = {"type": "text", "content": ANSWER}
            _span(scope, turn.trace, secrets.token_bytes(8), turn.root, "chat m", {**chat,
                  "gen_ai.input.messages": _messages("user", user),
                  "gen_ai.output.messages": _messages("assistant", text)}, 40, 50)  # fmt: skip
            _span(scope, turn.trace, turn.root, b"", "invoke_agent support",
                  {"gen_ai.operation.name": "invoke_agent"}, 0, 60)  # fmt: skip
    return req.SerializeToString()


def ingest(collector: Collector, body: bytes) -> None:
    """Decode and add one request as the OTLP receiver does, retrying while it is refused
    (what an OTLP exporter does after a 503)."""
    spans = otlp.decode_request(otlp.parse_request(body, otlp.PROTOBUF)).spans
    while True:
        try:
            collector.ingest(spans, nbytes=len(body), admit=True)
            return
        except CollectorFull:
            time.sleep(0.01)


def collector(assembly: dict[str, Any], clock: Clock, sink: Sink) -> Collector:
    settings = Settings(assembly=assembly, metrics_port=0)
    return Collector(
        settings, extra_sinks=[sink], receiver=False, metrics_server=False, clock=clock
    ).start()


def memory_per_open_trace(count: int, per_request: int) -> None:
    clock, sink = Clock(), Noted()
    c = collector({}, clock, sink)
    try:
        bodies = [requests([Turn.new() for _ in range(per_request)], first=True)
                  for _ in range(count // per_request)]  # fmt: skip
        gc.collect()
        before = rss_mib()
        for body in bodies:
            ingest(c, body)
        del bodies
        gc.collect()
        after = rss_mib()
        opened = len(c.assembler)
        held = c.assembler.held_bytes
    finally:
        c.stop(timeout=60)
    print(f"open long traces                 {opened}")
    print(f"resident memory per open trace   {(after - before) * 1024 / opened:.1f} KiB "
          f"(RSS {before:.0f} -> {after:.0f} MiB)")  # fmt: skip
    print(f"OTLP bytes counted per trace     {held / opened / 1024:.1f} KiB "
          f"(ragpulse_held_bytes {held / 2**20:.1f} MiB of max_held_bytes 128 MiB)")  # fmt: skip
    print(f"peak RSS of this process         {peak_rss_mib():.0f} MiB", flush=True)


def slow_turns(label: str, assembly: dict[str, Any], turns: int, spread_s: float,
               quiet_s: float, per_request: int) -> None:  # fmt: skip
    clock, sink = Clock(), Noted()
    c = collector(assembly, clock, sink)
    all_turns = [Turn.new() for _ in range(turns)]
    batches = [all_turns[i : i + per_request] for i in range(0, turns, per_request)]
    peak_open = 0
    try:
        # The first spans, over spread_s of agent time.
        for n, batch in enumerate(batches):
            clock.advance(spread_s * n / len(batches))
            ingest(c, requests(batch, first=True))
            peak_open = max(peak_open, len(c.assembler))
        # The rest, quiet_s later, in the same order. A turn is complete grace_s of agent
        # time after its root came: the latency counts from when the clock passes that
        # (what the collector adds: its ticker, extraction, the cheap tier, the sinks).
        grace = c.settings.assembly.grace_s
        due: list[tuple[float, list[str]]] = []  # (agent time complete, trace ids)
        closable: dict[str, float] = {}  # trace id -> wall time its clock passed that

        def passed() -> None:
            now = time.perf_counter()
            while due and due[0][0] <= clock.now:
                closable.update((t, now) for t in due.pop(0)[1])

        start = time.perf_counter()
        for n, batch in enumerate(batches):
            at = quiet_s + spread_s * n / len(batches)
            clock.advance(at)
            passed()
            ingest(c, requests(batch, first=False))
            due.append((at + grace, [t.trace.hex() for t in batch]))
            peak_open = max(peak_open, len(c.assembler))
        clock.advance(clock.now + grace)
        passed()

        def done() -> bool:
            with sink.lock:
                return all(sink.exported.get(t, 0.0) >= s for t, s in closable.items())

        deadline = time.perf_counter() + 600
        while not done() and time.perf_counter() < deadline:
            time.sleep(0.05)
        elapsed = max(sink.exported.values()) - start
        latencies = sorted((sink.exported[t] - s) * 1000 for t, s in closable.items()
                           if sink.exported.get(t, 0.0) >= s)  # fmt: skip
        value = c.metrics.registry.get_sample_value
        late = value("ragpulse_dropped_total", {"reason": "late_span"}) or 0.0
        closed = {
            trigger: value("ragpulse_traces_completed_total", {"trigger": trigger}) or 0.0
            for trigger in ("quiet", "idle", "max_trace", "open_traces", "held_bytes")
        }
        refused = value("ragpulse_intake_refused_total", {"bound": "held_bytes"}) or 0.0
    finally:
        c.stop(timeout=120)
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    print(f"\n{label}: {turns} turns over {spread_s:.0f} s, each quiet {quiet_s:.0f} s "
          f"({', '.join(f'{k}={v}' for k, v in assembly.items()) or 'defaults'})")  # fmt: skip
    print(f"  records                        {dict(sink.kinds)}")
    print(f"  traces closed by               { ({k: int(v) for k, v in closed.items() if v}) }")
    print(
        f"  late_span drops                {late:.0f}; requests refused (held_bytes) {refused:.0f}"
    )
    print(f"  peak open traces               {peak_open}")
    print(f"  turns finished per second      {len(latencies) / elapsed:.0f} "
          f"({len(latencies)} of {turns} in {elapsed:.1f} s)")  # fmt: skip
    print(f"  latency, complete -> exported  p50 {q[49]:.0f} ms  p95 {q[94]:.0f} ms  "
          f"p99 {q[98]:.0f} ms")  # fmt: skip
    print(f"  peak RSS of this process       {peak_rss_mib():.0f} MiB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--open", type=int, default=5_000)
    parser.add_argument("--spread-s", type=float, default=60.0)
    parser.add_argument("--quiet-s", type=float, default=240.0)
    parser.add_argument("--per-request", type=int, default=50)
    parser.add_argument("--part", choices=("memory", "default", "raised"), default=None,
                        help="run one part here (each part runs in a process of its own, "
                        "so that its peak RSS is its own)")  # fmt: skip
    args = parser.parse_args()
    if args.part is None:
        print(f"cpus available: {len(os.sched_getaffinity(0))}", flush=True)
        for part in ("memory", "default", "raised"):
            subprocess.run([sys.executable, __file__, *sys.argv[1:], "--part", part], check=True)
        return
    if args.part == "memory":
        memory_per_open_trace(args.open, args.per_request)
        return
    raised = {"max_open_traces": int(args.turns / 0.9) + 1_000}
    assembly = raised if args.part == "raised" else {}
    label = "bounds raised to fit" if args.part == "raised" else "default bounds"
    slow_turns(label, assembly, args.turns, args.spread_s, args.quiet_s, args.per_request)


if __name__ == "__main__":
    main()
