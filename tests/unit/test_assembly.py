"""Trace assembly: completion rules, bounds, late spans, acknowledgements."""

from __future__ import annotations

from support.helpers import make_span, new_span_id, new_trace_id

from ragpulse.collector.assembly.assembler import Assembler
from ragpulse.config import AssemblySettings
from ragpulse.source import Ack
from ragpulse.telemetry import CollectorMetrics


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def setup(**kw: float) -> tuple[Assembler, Clock, CollectorMetrics]:
    clock, metrics = Clock(), CollectorMetrics()
    settings = AssemblySettings(**{"grace_s": 1.0, "timeout_s": 10.0, **kw})
    return Assembler(settings, metrics, clock), clock, metrics


def test_completes_after_root_and_quiet_period() -> None:
    asm, clock, metrics = setup()
    t, root = new_trace_id(), new_span_id()
    asm.add([make_span(t, "child", parent=root)])
    clock.now = 5
    assert asm.pop_complete() == []  # no root yet
    asm.add([make_span(t, "root", span_id=root)])
    clock.now = 5.5
    assert asm.pop_complete() == []  # inside the grace window
    clock.now = 6.0
    [done] = asm.pop_complete()
    assert done.trigger == "quiet" and len(done.spans) == 2
    assert (
        metrics.registry.get_sample_value("ragpulse_traces_completed_total", {"trigger": "quiet"})
        == 1
    )


def test_hard_timeout_without_root() -> None:
    asm, clock, _ = setup()
    asm.add([make_span(new_trace_id(), "orphan", parent=new_span_id())])
    clock.now = 9.9
    assert asm.pop_complete() == []
    clock.now = 10.0
    [done] = asm.pop_complete()
    assert done.trigger == "timeout"


def test_pipeline_span_with_remote_parent_counts_as_root() -> None:
    asm, clock, _ = setup()
    asm.add([make_span(new_trace_id(), "p", {"ragpulse.role": "pipeline"}, parent="ab" * 8)])
    clock.now = 1.0
    assert [t.trigger for t in asm.pop_complete()] == ["quiet"]


def test_bounds_drop_and_count() -> None:
    asm, _, metrics = setup(max_open_traces=2, max_spans_per_trace=3)
    t = new_trace_id()
    assert asm.add([make_span(t, f"s{i}") for i in range(5)]) == 2
    assert asm.add([make_span(new_trace_id(), "x")]) == 0
    assert asm.add([make_span(new_trace_id(), "y")]) == 1
    value = metrics.registry.get_sample_value
    assert value("ragpulse_dropped_total", {"reason": "spans_per_trace_limit"}) == 2
    assert value("ragpulse_dropped_total", {"reason": "open_traces_limit"}) == 1
    assert value("ragpulse_open_traces") == 2


def test_late_spans_of_closed_traces_are_counted() -> None:
    asm, clock, metrics = setup()
    t = new_trace_id()
    asm.add([make_span(t, "root")])
    clock.now = 2
    assert len(asm.pop_complete()) == 1
    assert asm.add([make_span(t, "straggler", parent=new_span_id())]) == 1
    assert metrics.registry.get_sample_value("ragpulse_dropped_total", {"reason": "late_span"}) == 1


def test_ack_fires_when_every_trace_of_a_batch_is_finished() -> None:
    asm, clock, _ = setup()
    fired: list[str] = []
    ack = Ack(lambda: fired.append("done"))
    t1, t2 = new_trace_id(), new_trace_id()
    asm.add([make_span(t1, "a"), make_span(t1, "b"), make_span(t2, "c")], ack)
    ack.seal()
    clock.now = 2
    first, second = asm.pop_complete()
    first.release()
    assert fired == []
    second.release()
    assert fired == ["done"]


def test_empty_batch_ack_fires_on_seal_and_abandon_keeps_it_pending() -> None:
    fired: list[int] = []
    empty = Ack(lambda: fired.append(1))
    empty.seal()
    assert fired == [1]
    asm, _, _ = setup()
    ack = Ack(lambda: fired.append(2), source="partition-3")
    asm.add([make_span(new_trace_id(), "a")], ack)
    ack.seal()
    assert asm.abandon(lambda acks: any(a.source == "partition-3" for a in acks)) == 1
    assert fired == [1] and not ack.done and len(asm) == 0


def test_drain_closes_everything() -> None:
    asm, _, _ = setup()
    asm.add([make_span(new_trace_id(), "a"), make_span(new_trace_id(), "b")])
    assert {t.trigger for t in asm.drain()} == {"shutdown"} and len(asm) == 0
