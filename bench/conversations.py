"""Conversations at scale: memory per open conversation, turns/s with 100,000 open.

The conversation stage (collector/conversations/stage.py) in this process, driven as the
pipeline drives it: for every turn record ``prepare`` (its number, and the earlier turns
joined as its history when its spans carried none, as for apps traced by ragpulse's
decorators: the costly case) then ``observe`` (the turn kept with its results), the
default cheap conversation metrics loaded, the ticker running (``tick`` every
``conversations.tick_s``, 1 s, as in serve). ``conversations.max_open`` is raised to
100,000: the default (10,000) would close the least recently active conversations early.

Each turn is a record like a traced RAG turn: a question of ~60 characters, an answer of
~300, 3 documents of ~1,000 characters and 6 cheap results, every text its own string
(as decoded from a span). Phases, one process, pinned to one core (``taskset -c 0``)
unless ``--no-pin``:

1. fill: ``--open`` conversations of ``--turns`` turns each. Memory per open conversation
   = the growth of the RSS over the fill, and of the Python heap (tracemalloc, a separate
   fill of ``--traced`` conversations at the end), divided by the conversations.
2. steady: ``--steady`` more turns, each to a conversation drawn at random among the open
   ones: turns/s, and the latency of ``prepare`` + ``observe`` per turn (percentiles);
   the ticker's scans meanwhile (each takes the stage's lock over every conversation held).
3. close: every conversation idle at once (the clock moved past ``idle_s``), one ``tick``:
   conversation records/s (the cheap conversation metrics scored, the record handed to an
   export that keeps nothing).

Prints the figures and the peak RSS (VmHWM).

    .venv/bin/python bench/conversations.py [--open 100000] [--turns 2] [--steady 200000]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import threading
import time
import tracemalloc
from pathlib import Path

from ragpulse.collector.conversations.stage import ConversationStage
from ragpulse.config import ConversationSettings
from ragpulse.evaluation import load_evaluators_safely
from ragpulse.evaluators.base import ConversationEvaluator
from ragpulse.plugins import load_evaluators
from ragpulse.record import ConversationRecord, Document, EvalResult, ExportItem, RagRecord
from ragpulse.telemetry import CollectorMetrics

WORDS = (
    "ferry harbour lighthouse ticket pier timetable island bridge museum keeper tower storm "
    "season summer winter station platform coast village market bay route weather north "
    "south east west river valley castle garden"
).split()


class Clock:
    """Real time, plus an offset the close phase moves forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


_POOLS: dict[int, list[str]] = {}


def text(rng: random.Random, chars: int, serial: int) -> str:
    """About ``chars`` characters of words, a new string each time (as a decoded span's)."""
    pool = _POOLS.get(chars)
    if pool is None:
        pool = _POOLS[chars] = []
        for _ in range(64):
            words: list[str] = []
            while sum(len(w) + 1 for w in words) < chars:
                words.append(rng.choice(WORDS))
            pool.append(" ".join(words))
    return f"t{serial} {pool[serial % len(pool)]}"


RESULTS = [
    EvalResult(metric=m, method="lexical", score=0.8)
    for m in ("faithfulness", "context_relevance", "answer_relevance")
] + [
    EvalResult(metric="injection", method="rules", score=0.0, label="benign"),
    EvalResult(metric="refusal", method="rules", score=0.0),
    EvalResult(metric="consistency", method="rules", score=1.0, label="consistent"),
]


def turn_record(rng: random.Random, cid: str, serial: int) -> RagRecord:
    return RagRecord(
        trace_id=f"{serial:032x}",
        span_id=f"{serial:016x}",
        conversation_id=cid,
        question=text(rng, 60, serial) + "?",
        answer=text(rng, 300, serial) + ".",
        documents=[Document(content=text(rng, 1000, serial * 3 + i)) for i in range(3)],
    )


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def build(open_: int, clock: Clock) -> tuple[ConversationStage, list[int]]:
    defaults = [e for e in load_evaluators() if isinstance(e, ConversationEvaluator)]
    evaluators = [
        e for e in load_evaluators_safely(defaults) if isinstance(e, ConversationEvaluator)
    ]
    exported = [0]

    def export(item: ExportItem[ConversationRecord]) -> None:
        exported[0] += 1

    settings = ConversationSettings(max_open=open_)  # idle_s 300, keep_closed_s 3600
    return ConversationStage(settings, evaluators, export, CollectorMetrics(), clock), exported


def one_turn(stage: ConversationStage, record: RagRecord) -> None:
    stage.observe(stage.prepare(record), RESULTS)


def fill(stage: ConversationStage, open_: int, turns: int, seed: int) -> float:
    """Seconds spent in the stage (building the records is not counted)."""
    rng = random.Random(seed)
    spent, serial = 0.0, 0
    for _ in range(turns):
        for c in range(open_):
            serial += 1
            record = turn_record(rng, f"conv-{c}", serial)
            t0 = time.perf_counter()
            one_turn(stage, record)
            spent += time.perf_counter() - t0
    return spent


def heap_per_conversation(traced: int, turns: int) -> float:
    """Python heap bytes per open conversation (tracemalloc over a fill of ``traced``)."""
    stage, _ = build(traced, Clock())
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    fill(stage, traced, turns, seed=1)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / traced


def percentiles(values: list[float]) -> str:
    q = statistics.quantiles(values, n=1000, method="inclusive")
    return (
        f"p50 {q[499] * 1e6:.1f} us  p90 {q[899] * 1e6:.1f} us  p99 {q[989] * 1e6:.1f} us  "
        f"p99.9 {q[998] * 1e6:.1f} us  max {max(values) * 1e6:.0f} us"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--open", type=int, default=100_000, help="open conversations")
    parser.add_argument("--turns", type=int, default=2, help="turns per conversation at fill")
    parser.add_argument("--steady", type=int, default=200_000, help="turns after the fill")
    parser.add_argument("--traced", type=int, default=10_000, help="tracemalloc's fill")
    parser.add_argument("--no-pin", action="store_true", help="do not pin to core 0")
    args = parser.parse_args()
    if not args.no_pin and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    print(f"python {sys.version.split()[0]}, pinned: {not args.no_pin}")
    run(args)
    gc.collect()
    heap = heap_per_conversation(args.traced, args.turns)
    print(f"heap per open conversation ({args.turns} turns, tracemalloc over {args.traced:,}): "
          f"{heap / 1024:.1f} KiB")  # fmt: skip


def run(args: argparse.Namespace) -> None:
    """The fill, steady and close phases (their stage is freed on return)."""

    clock = Clock()
    stage, exported = build(args.open, clock)
    gc.collect()
    base = rss_mib()
    filled_s = fill(stage, args.open, args.turns, seed=2)
    gc.collect()
    grown = rss_mib() - base
    print(f"fill: {args.open:,} conversations x {args.turns} turns, {filled_s:.1f} s in the "
          f"stage ({args.open * args.turns / filled_s:,.0f} turns/s); RSS +{grown:.0f} MiB = "
          f"{grown * 1024 / args.open:.1f} KiB per open conversation")  # fmt: skip

    ticks: list[float] = []
    stop = threading.Event()

    def ticker() -> None:  # what the stage's own ticker does, timed
        while not stop.wait(stage.settings.tick_s):
            t0 = time.perf_counter()
            stage.tick()
            ticks.append(time.perf_counter() - t0)

    thread = threading.Thread(target=ticker, daemon=True)
    thread.start()
    rng = random.Random(3)
    records = [turn_record(rng, "", 10**9 + i) for i in range(4096)]
    latencies = []
    began = time.perf_counter()
    for i in range(args.steady):
        record = records[i % len(records)]
        record = record.model_copy(
            update={"trace_id": f"{2 * 10**9 + i:032x}",
                    "conversation_id": f"conv-{rng.randrange(args.open)}"}
        )  # fmt: skip
        t0 = time.perf_counter()
        one_turn(stage, record)
        latencies.append(time.perf_counter() - t0)
    steady_s = time.perf_counter() - began
    stop.set()
    thread.join()
    print(f"steady: {args.steady:,} turns over {args.open:,} open conversations in "
          f"{steady_s:.1f} s: {args.steady / steady_s:,.0f} turns/s (a record copy per turn "
          f"included); prepare+observe {percentiles(latencies)}")  # fmt: skip
    if ticks:
        print(f"ticker: {len(ticks)} scans of {args.open:,} held, median "
              f"{statistics.median(ticks) * 1e3:.1f} ms, max {max(ticks) * 1e3:.1f} ms")  # fmt: skip

    clock.offset += stage.settings.idle_s  # every conversation idle
    began = time.perf_counter()
    stage.tick()
    closed_s = time.perf_counter() - began
    print(f"close: {exported[0]:,} conversation records (cheap conversation metrics scored) "
          f"in {closed_s:.1f} s: {exported[0] / closed_s:,.0f} records/s")  # fmt: skip
    print(f"peak RSS {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
