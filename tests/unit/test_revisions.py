"""Slow and unfinished turns: a trace without its root becomes one partial record, and a
span that comes after its trace closed rebuilds the record as a revision (same
``record_id``, next ``revision``), replacing the earlier one; tier work pending on an
older build is dropped and its acknowledgements wait for the revision.

The assembler runs on an injected clock; the pipeline is the real one (inline, or its
threads with a model-tier stand-in that waits on an event).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from support.helpers import Clock, make_span, new_span_id, new_trace_id
from support.kafka_env import wait_until

from ragpulse.collector.assembly.assembler import Assembler
from ragpulse.collector.evaluate.exports import Exports
from ragpulse.collector.evaluate.pipeline import Pipeline
from ragpulse.collector.extract.records import extract_records
from ragpulse.config import AssemblySettings, EvaluationSettings, ModelTierSettings
from ragpulse.evaluators.base import BatchEvaluator, Tier
from ragpulse.evaluators.faithfulness.lexical import LexicalFaithfulness
from ragpulse.exporters.base import Sink
from ragpulse.exporters.memory import InMemorySink
from ragpulse.record import EvalResult, ExportItem, ExportKind, RagRecord, Span
from ragpulse.source import Ack
from ragpulse.telemetry import CollectorMetrics

ANSWER = "The ferry leaves the north quay at 8 am on weekdays."
RESULT = [{"id": "kb-1", "content": "The ferry leaves the north quay at 8 am on weekdays."}]


def _messages(role: str, *parts: dict[str, Any]) -> str:
    return json.dumps([{"role": role, "parts": list(parts)}])


def turn(trace: str, root: str) -> dict[str, Span]:
    """An agent turn in the GenAI conventions: chat asks for a search, the tool answers,
    chat answers, and the root ``invoke_agent`` span ends last."""
    user = {"type": "text", "content": "When does the ferry leave?"}
    call = {"type": "tool_call", "id": "c1", "name": "search_docs", "arguments": {"q": "ferry"}}
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}
    return {
        "ask": make_span(trace, "chat m", {**chat,
            "gen_ai.input.messages": _messages("user", user),
            "gen_ai.output.messages": _messages("assistant", call)},
            parent=root, start=10, end=20),
        "tool": make_span(trace, "execute_tool search_docs", {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_docs",
            "gen_ai.tool.call.id": "c1", "gen_ai.tool.call.arguments": '{"q": "ferry"}',
            "gen_ai.tool.call.result": json.dumps(RESULT)}, parent=root, start=21, end=30),
        "answer": make_span(trace, "chat m", {**chat,
            "gen_ai.input.messages": _messages("user", user),
            "gen_ai.output.messages": _messages("assistant", {"type": "text", "content": ANSWER})},
            parent=root, start=40, end=50),
        "root": make_span(trace, "invoke_agent support", {"gen_ai.operation.name": "invoke_agent"},
                          span_id=root, start=0, end=60),
    }  # fmt: skip


def test_a_trace_without_its_root_is_one_partial_turn_with_its_answer() -> None:
    t, root = new_trace_id(), new_span_id()
    spans = turn(t, root)
    [record], skipped = extract_records(
        [spans["ask"], spans["tool"], spans["answer"]], partial="idle"
    )
    assert skipped is None
    assert (record.kind, record.partial, record.answer) == ("agent", "idle", ANSWER)
    assert record.question == "When does the ferry leave?"
    assert [d.content for d in record.documents] == [RESULT[0]["content"]]
    assert record.documents[0].source is not None
    assert record.documents[0].source.span_id == spans["tool"].span_id
    assert record.generation_span_id == spans["answer"].span_id
    # Rooted at a span the trace has: the earliest of those whose parent is missing.
    assert record.span_id == spans["ask"].span_id
    assert record.record_id == f"{t}/{spans['ask'].span_id}" and record.revision == 1


def test_the_same_spans_with_their_root_are_a_whole_record() -> None:
    t, root = new_trace_id(), new_span_id()
    [record], _ = extract_records(list(turn(t, root).values()))
    assert record.partial is None and record.span_id == root and record.answer == ANSWER


class Collected:
    """An assembler on a clock feeding the real pipeline (inline), its exports in memory."""

    def __init__(self, pipeline: Pipeline | None = None, **assembly: float) -> None:
        self.clock, self.metrics, self.memory = Clock(), CollectorMetrics(), InMemorySink()
        self.items: list[ExportItem[RagRecord]] = []
        settings = AssemblySettings(**{"grace_s": 1.0, "idle_s": 10.0, **assembly})
        self.assembler = Assembler(settings, self.metrics, self.clock)
        exports = Exports([self.memory, _Recording(self.items)], self.metrics)
        self.pipeline = pipeline or Pipeline([LexicalFaithfulness()], exports, self.metrics)

    def add(self, *spans: Span, ack: Ack | None = None) -> None:
        self.assembler.add(list(spans), ack)
        if ack is not None:
            ack.seal()

    def tick(self, to: float) -> None:
        self.clock.now = to
        self.pipeline.process(self.assembler.pop_complete())

    def value(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


class _Recording(Sink):
    name = "recording"

    def __init__(self, items: list[ExportItem[RagRecord]]) -> None:
        super().__init__()
        self.items = items

    def export(self, item: ExportItem[RagRecord]) -> None:
        self.items.append(item)


def test_a_partial_record_is_revised_whole_when_its_root_comes_late() -> None:
    c = Collected()
    t, root = new_trace_id(), new_span_id()
    spans = turn(t, root)
    c.add(spans["ask"], spans["tool"], spans["answer"])
    c.tick(10)  # idle_s of quiet without the root: partial
    [first] = c.items
    assert first.kind is ExportKind.FIRST and first.record.partial == "idle"
    assert c.value("ragpulse_partial_records_total", reason="idle") == 1
    late = Ack()
    c.add(spans["root"], ack=late)
    assert not late.done
    c.tick(11)
    [_, revised] = c.items
    assert revised.kind is ExportKind.REVISION
    assert revised.record.record_id == first.record.record_id
    assert (revised.record.revision, revised.record.partial) == (2, None)
    assert revised.record.span_id == root  # rooted at the root now
    assert revised.previous == first.record and list(revised.previous_results) == list(
        first.results
    )
    assert late.done  # the late span's acknowledgement, once the revision was exported
    # What a sink keeps: one record, the revision.
    [kept] = c.memory.items
    assert kept.record.revision == 2
    assert c.value("ragpulse_record_revisions_total", outcome="exported") == 1
    assert c.value("ragpulse_dropped_total", reason="late_span") == 0


def test_a_turn_first_built_from_its_early_spans_only_is_revised_not_doubled() -> None:
    """The first build read only the first model call (the search ran after it, so it is
    no document of that call); the rebuild reads other spans: still the same record."""
    c = Collected(max_open_traces=1)
    t, root = new_trace_id(), new_span_id()
    spans = turn(t, root)
    c.add(spans["ask"], spans["tool"])
    c.add(make_span(new_trace_id(), "another turn", parent=new_span_id()))  # takes its room
    c.tick(0)
    [first] = c.items
    assert first.record.partial == "open_traces" and first.record.answer == ""
    c.add(spans["answer"], spans["root"])
    c.tick(1)
    revised = [i for i in c.items if i.record.trace_id == t][-1]
    assert revised.kind is ExportKind.REVISION and revised.record.revision == 2
    assert revised.record.record_id == first.record.record_id
    assert revised.record.answer == ANSWER and revised.record.partial is None


def test_each_late_span_numbers_the_next_revision_and_a_span_that_changes_nothing_is_not_one() -> (
    None
):
    c = Collected()
    t, root = new_trace_id(), new_span_id()
    spans = turn(t, root)
    c.add(spans["root"], spans["ask"], spans["answer"])
    c.tick(1)
    c.add(spans["tool"])  # the tool's result, late
    c.tick(3)
    assert [(i.kind, i.record.revision) for i in c.items] == [
        (ExportKind.FIRST, 1),
        (ExportKind.REVISION, 2),
    ]
    assert len(c.items[1].record.documents) == 1 and not c.items[0].record.documents
    unchanged = Ack()
    c.add(make_span(t, "SELECT ferries", parent=root), ack=unchanged)  # read by no metric
    c.tick(5)
    assert len(c.items) == 2 and unchanged.done
    assert c.value("ragpulse_record_revisions_total", outcome="unchanged") == 1
    c.add(make_span(t, "chat m", {"gen_ai.operation.name": "chat",
        "gen_ai.output.messages": _messages("assistant", {"type": "text", "content": "Bye."})},
        parent=root, start=52, end=55))  # fmt: skip
    c.tick(7)
    assert [(i.kind, i.record.revision) for i in c.items][-1] == (ExportKind.REVISION, 3)
    assert c.items[-1].record.answer == "Bye."
    assert len({i.record.record_id for i in c.items}) == 1


class GatedModel(BatchEvaluator):
    """A model-tier stand-in that waits for the test to let each batch through."""

    metric, method = "slow", "model"
    tier = Tier.MODEL

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.seen: list[tuple[str, int]] = []

    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        self.gate.wait(10)
        self.seen += [(r.record_id, r.revision) for r in records]
        return [self.result(0.5) for _ in records]


def test_tier_work_on_an_older_build_is_dropped_and_its_acks_wait_for_the_revision() -> None:
    metrics, items = CollectorMetrics(), []
    model = GatedModel()
    settings = EvaluationSettings(
        max_wait_s=0.01, max_export_delay_s=0, model=ModelTierSettings(rate=1.0, max_wait_s=0)
    )
    pipeline = Pipeline(
        [LexicalFaithfulness(), model], Exports([_Recording(items)], metrics), metrics, settings
    )
    clock = Clock()
    assembler = Assembler(AssemblySettings(grace_s=1, idle_s=10), metrics, clock)
    pipeline.start()
    try:
        # A first record holds the model tier, so the next ones wait in its queue.
        busy_t, busy_root = new_trace_id(), new_span_id()
        assembler.add(list(turn(busy_t, busy_root).values()))
        clock.now = 1
        pipeline.submit(assembler.pop_complete())
        t, root = new_trace_id(), new_span_id()
        spans = turn(t, root)
        first_ack = Ack()
        assembler.add([spans["root"], spans["ask"], spans["answer"]], first_ack)
        first_ack.seal()
        clock.now = 2
        pipeline.submit(assembler.pop_complete())
        wait_until(lambda: any(i.record.trace_id == t for i in items), 10, "no first export")
        late_ack = Ack()
        assembler.add([spans["tool"]], late_ack)
        late_ack.seal()
        clock.now = 4
        pipeline.submit(assembler.pop_complete())
        wait_until(lambda: sum(i.record.trace_id == t for i in items) == 2, 10, "no revision")
        assert not first_ack.done  # the first build was superseded before it was finished
        model.gate.set()
        assert pipeline.wait_idle(10)
    finally:
        pipeline.stop()
    mine = [i for i in items if i.record.trace_id == t]
    assert [(i.kind, i.record.revision) for i in mine] == [
        (ExportKind.FIRST, 1),
        (ExportKind.REVISION, 2),
        (ExportKind.UPDATE, 2),
    ]
    assert [r.name for r in mine[-1].results] == ["slow/model"]
    assert (mine[0].record.record_id, 1) not in model.seen  # never evaluated
    skipped = {"tier": "model", "reason": "superseded"}
    assert metrics.registry.get_sample_value("ragpulse_tier_skipped_total", skipped) == 1
    assert first_ack.done and late_ack.done
