"""Trace assembly: completion rules (root + grace, idle, max trace), bounds that close the
least recent trace before refusing, closed traces kept so that late spans reopen them,
acknowledgements. Time is an injected clock."""

from __future__ import annotations

import logging

import pytest
from support.helpers import Clock, make_span, new_span_id, new_trace_id

from ragpulse.collector.assembly.assembler import Assembler
from ragpulse.config import AssemblySettings
from ragpulse.errors import CollectorFull
from ragpulse.source import Ack
from ragpulse.telemetry import CollectorMetrics


class Backlog:
    """What waits for evaluation, as the assembler counts it against max_held_bytes."""

    def __init__(self) -> None:
        self.backlog_bytes = 0


def setup(backlog: Backlog | None = None, **kw: float) -> tuple[Assembler, Clock, CollectorMetrics]:
    clock, metrics = Clock(), CollectorMetrics()
    settings = AssemblySettings(**{"grace_s": 1.0, "idle_s": 10.0, "max_trace_s": 100.0, **kw})
    return Assembler(settings, metrics, clock, held_elsewhere=backlog), clock, metrics


def value(metrics: CollectorMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_completes_after_root_and_quiet_period() -> None:
    asm, clock, metrics = setup()
    t, root = new_trace_id(), new_span_id()
    asm.add([make_span(t, "child", parent=root)])
    clock.now = 5
    assert asm.pop_complete() == []  # no root yet, and not idle for idle_s
    asm.add([make_span(t, "root", span_id=root)])
    clock.now = 5.5
    assert asm.pop_complete() == []  # inside the grace window
    clock.now = 6.0
    [done] = asm.pop_complete()
    assert done.trigger == "quiet" and len(done.spans) == 2 and done.partial is None
    assert value(metrics, "ragpulse_traces_completed_total", trigger="quiet") == 1


@pytest.mark.parametrize("quiet_s", [45.0, 240.0])
def test_a_slow_turn_closes_whole_with_the_default_settings(quiet_s: float) -> None:
    """One span early, then quiet for 45 s or 4 minutes, then the rest and the root."""
    clock, metrics = Clock(), CollectorMetrics()
    asm = Assembler(AssemblySettings(), metrics, clock)
    t, root = new_trace_id(), new_span_id()
    asm.add([make_span(t, "search", parent=root)])
    clock.now = quiet_s
    assert asm.pop_complete() == []
    asm.add([make_span(t, "chat", parent=root), make_span(t, "turn", span_id=root)])
    clock.now = quiet_s + AssemblySettings().grace_s
    [done] = asm.pop_complete()
    assert done.trigger == "quiet" and len(done.spans) == 3 and done.partial is None


def test_without_root_it_closes_as_partial_after_idle_s_of_quiet() -> None:
    asm, clock, _ = setup()
    t = new_trace_id()
    asm.add([make_span(t, "tool", parent=new_span_id())])
    clock.now = 9
    asm.add([make_span(t, "chat", parent=new_span_id())])  # quiet starts again
    clock.now = 18.9
    assert asm.pop_complete() == []
    clock.now = 19
    [done] = asm.pop_complete()
    assert (done.trigger, done.partial, len(done.spans)) == ("idle", "idle", 2)


def test_max_trace_s_closes_a_trace_that_keeps_getting_spans() -> None:
    asm, clock, _ = setup(max_trace_s=30)
    t = new_trace_id()
    for second in range(0, 30, 5):
        clock.now = second
        asm.add([make_span(t, f"step {second}", parent=new_span_id())])
        assert asm.pop_complete() == []
    clock.now = 30
    [done] = asm.pop_complete()
    assert (done.trigger, done.partial, len(done.spans)) == ("max_trace", "max_trace", 6)


def test_pipeline_span_with_remote_parent_counts_as_root() -> None:
    asm, clock, _ = setup()
    asm.add([make_span(new_trace_id(), "p", {"ragpulse.role": "pipeline"}, parent="ab" * 8)])
    clock.now = 1.0
    [done] = asm.pop_complete()
    assert done.trigger == "quiet" and done.partial is None


def test_a_new_trace_closes_the_least_recently_active_one_as_partial() -> None:
    asm, clock, metrics = setup(max_open_traces=2, max_spans_per_trace=3)
    old, busy = new_trace_id(), new_trace_id()
    assert asm.add([make_span(old, f"s{i}", parent=new_span_id()) for i in range(5)]) == 2
    clock.now = 1
    assert asm.add([make_span(busy, "x", parent=new_span_id())]) == 0
    clock.now = 2
    assert asm.add([make_span(new_trace_id(), "y", parent=new_span_id())]) == 0
    assert len(asm) == 2
    [closed] = asm.pop_complete()
    assert (closed.trace_id, closed.trigger, closed.partial) == (old, "open_traces", "open_traces")
    assert value(metrics, "ragpulse_dropped_total", reason="spans_per_trace_limit") == 2
    assert value(metrics, "ragpulse_traces_completed_total", trigger="open_traces") == 1
    assert value(metrics, "ragpulse_open_traces") == 2


def test_an_admitted_request_makes_room_among_open_traces_before_it_is_refused() -> None:
    asm, clock, _ = setup(max_open_traces=10)
    for i in range(9):
        clock.now = i
        asm.add([make_span(new_trace_id(), "t", parent=new_span_id())], admit=True)
    assert len(asm) == 9
    continuing = next(iter(asm._open))  # the least recently active: continued, so kept
    asm.add(
        [make_span(continuing, "more"), make_span(new_trace_id(), "new", parent=new_span_id())],
        admit=True,
    )
    assert len(asm) == 9  # 90% of the bound, the continued trace and the new one in it
    closed = asm.pop_complete()
    assert len(closed) == 1 and closed[0].trace_id != continuing
    assert closed[0].trigger == "open_traces"


def test_held_bytes_close_the_oldest_traces_for_evaluation_then_refuse_until_freed() -> None:
    mib = 1024 * 1024
    backlog = Backlog()
    asm, clock, metrics = setup(backlog, max_held_bytes=10 * mib)
    traces = [new_trace_id() for _ in range(5)]
    for i, t in enumerate(traces):
        clock.now = i
        asm.add([make_span(t, "big", parent=new_span_id())], nbytes=2 * mib, admit=True)
    assert asm.held_bytes == 10 * mib
    with pytest.raises(CollectorFull):
        asm.add([make_span(new_trace_id(), "new", parent=new_span_id())], nbytes=mib, admit=True)
    assert value(metrics, "ragpulse_intake_refused_total", bound="held_bytes") == 1
    # The oldest trace was closed for evaluation: open ones hold 90% less the request.
    [closed] = asm.pop_complete()
    assert (closed.trace_id, closed.trigger, closed.partial) == (
        traces[0],
        "held_bytes",
        "held_bytes",
    )
    backlog.backlog_bytes = closed.nbytes  # waiting for evaluation: still refused
    with pytest.raises(CollectorFull):
        asm.add([make_span(new_trace_id(), "new", parent=new_span_id())], nbytes=mib, admit=True)
    backlog.backlog_bytes = 0  # evaluated: the sender's retry is taken
    retry = [make_span(new_trace_id(), "new", parent=new_span_id())]
    assert asm.add(retry, nbytes=mib, admit=True) == 0


def test_a_late_span_reopens_its_kept_trace_and_it_closes_again_whole() -> None:
    asm, clock, metrics = setup()
    t, root = new_trace_id(), new_span_id()
    asm.add([make_span(t, "root", span_id=root)], nbytes=100)
    clock.now = 2
    [first] = asm.pop_complete()
    assert not first.reopened and asm.kept_bytes == 100
    clock.now = 50  # within keep_closed_s
    assert asm.add([make_span(t, "straggler", parent=root)], nbytes=50) == 0
    assert len(asm) == 1 and asm.kept_bytes == 0
    clock.now = 51
    [again] = asm.pop_complete()
    assert again.reopened and again.trigger == "quiet"
    assert {s.name for s in again.spans} == {"root", "straggler"} and again.nbytes == 150
    assert again.versions is first.versions  # the records so far, to be revised
    assert value(metrics, "ragpulse_traces_reopened_total") == 1
    assert value(metrics, "ragpulse_dropped_total", reason="late_span") == 0


def test_a_partial_trace_reopened_by_its_root_closes_after_grace() -> None:
    asm, clock, _ = setup()
    t, root = new_trace_id(), new_span_id()
    asm.add([make_span(t, "tool", parent=root)])
    clock.now = 10
    [partial] = asm.pop_complete()
    assert partial.partial == "idle"
    clock.now = 20
    asm.add([make_span(t, "turn", span_id=root)])
    clock.now = 21
    [whole] = asm.pop_complete()
    assert whole.reopened and whole.partial is None and len(whole.spans) == 2


def test_a_span_after_the_kept_spans_are_forgotten_is_counted_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    asm, clock, metrics = setup(keep_closed_s=60)
    t1, t2 = new_trace_id(), new_trace_id()
    asm.add([make_span(t1, "root"), make_span(t2, "root")])
    clock.now = 2
    assert len(asm.pop_complete()) == 2
    clock.now = 62.5
    asm.pop_complete()  # trims what is past keep_closed_s
    with caplog.at_level(logging.WARNING):
        assert asm.add([make_span(t1, "late", parent=new_span_id())]) == 1
        assert asm.add([make_span(t2, "late", parent=new_span_id())]) == 1
    assert value(metrics, "ragpulse_dropped_total", reason="late_span") == 2
    [warning] = [r for r in caplog.records if "keep_closed_s" in r.getMessage()]
    assert "assembly.keep_closed_s (now 60.0 s)" in warning.getMessage()
    assert len(asm) == 0


def test_kept_spans_use_only_the_room_the_open_and_waiting_traces_leave() -> None:
    mib = 1024 * 1024
    backlog = Backlog()
    asm, clock, metrics = setup(backlog, max_held_bytes=4 * mib)
    done = [new_trace_id() for _ in range(3)]
    for t in done:
        asm.add([make_span(t, "root")], nbytes=mib)
    clock.now = 2
    assert len(asm.pop_complete()) == 3 and asm.kept_bytes == 3 * mib
    backlog.backlog_bytes = 2 * mib  # evaluation falls behind: the oldest kept go first
    asm.add([make_span(new_trace_id(), "open", parent=new_span_id())], nbytes=0)
    assert asm.kept_bytes == 2 * mib
    assert value(metrics, "ragpulse_closed_traces_kept") == 2
    assert asm.add([make_span(done[0], "late", parent=new_span_id())]) == 1
    assert asm.add([make_span(done[2], "late", parent=new_span_id())]) == 0


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


def test_a_late_span_holds_its_own_ack_until_the_reopened_trace_is_finished() -> None:
    asm, clock, _ = setup()
    t = new_trace_id()
    asm.add([make_span(t, "root")])
    clock.now = 2
    asm.pop_complete()[0].release()
    fired: list[str] = []
    late = Ack(lambda: fired.append("late"))
    asm.add([make_span(t, "late", parent=new_span_id())], late)
    late.seal()
    assert fired == []
    clock.now = 4
    [again] = asm.pop_complete()
    again.release()
    assert fired == ["late"]


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


def test_abandon_forgets_the_kept_traces_of_a_revoked_partition() -> None:
    asm, clock, _ = setup()
    mine, theirs = new_trace_id(), new_trace_id()
    asm.add([make_span(mine, "root")], Ack(source="p0"), nbytes=10)
    asm.add([make_span(theirs, "root")], Ack(source="p1"), nbytes=20)
    clock.now = 2
    for trace in asm.pop_complete():
        trace.release()
    asm.abandon(lambda acks: any(a.source == "p1" for a in acks))
    assert asm.kept_bytes == 10


def test_drain_closes_everything() -> None:
    asm, _, _ = setup()
    asm.add([make_span(new_trace_id(), "a"), make_span(new_trace_id(), "b", parent="cd" * 8)])
    drained = asm.drain()
    assert {t.trigger for t in drained} == {"shutdown"} and len(asm) == 0
    assert sorted(str(t.partial) for t in drained) == ["None", "shutdown"]
