"""Conversations: turns joined by their conversation id, numbered, given their history,
closed when idle into a conversation record, revised when they resume; bounded.

The clock is injected: closing on idle is decided by it, never by sleeping."""

from __future__ import annotations

import json
from typing import Any

from support.helpers import Clock, Routed, make_span, new_span_id, new_trace_id

from ragpulse.collector.conversations.stage import END_MARKER, ConversationStage
from ragpulse.collector.extract.records import extract_records
from ragpulse.config import ConversationSettings
from ragpulse.evaluators.conversation_groundedness.rules import ConversationGroundedness
from ragpulse.evaluators.user_frustration.rules import UserFrustration
from ragpulse.record import ConversationRecord, Document, EvalResult, RagRecord
from ragpulse.telemetry import CollectorMetrics


def stage(
    **settings: Any,
) -> tuple[
    ConversationStage, Clock, list[tuple[ConversationRecord, list[EvalResult]]], CollectorMetrics
]:
    clock, exported, metrics = Clock(1_000.0), [], CollectorMetrics()
    evaluators = [ConversationGroundedness(), UserFrustration()]
    found = ConversationStage(
        ConversationSettings(**settings),
        evaluators,
        lambda item: exported.append((item.record, list(item.results))),
        metrics,
        clock,
    )
    return found, clock, exported, metrics


def turn(cid: str | None, question: str, answer: str = "", **fields: Any) -> RagRecord:
    return RagRecord(
        trace_id=new_trace_id(), span_id=new_span_id(), conversation_id=cid,
        question=question, answer=answer, **fields,
    )  # fmt: skip


FAITHFUL = EvalResult(metric="faithfulness", method="lexical", score=0.9)


def count(metrics: CollectorMetrics, outcome: str) -> float:
    value = metrics.registry.get_sample_value("ragpulse_conversations_total", {"outcome": outcome})
    return value or 0.0


def test_turns_without_history_are_numbered_and_given_the_earlier_turns() -> None:
    conversations, _, _, _ = stage()
    first = conversations.prepare(
        turn("c1", "When was the Harbour lighthouse built?", "In 1857.",
             documents=[Document(content="The Harbour lighthouse was built in 1857.")])
    )  # fmt: skip
    assert first.turn == 1 and not first.history
    conversations.observe(first, [FAITHFUL])
    second = conversations.prepare(turn("c1", "And how tall is it?"))
    assert second.turn == 2
    assert [(m.role, m.turn) for m in second.history] == [("user", 1), ("assistant", 1)]
    [carried] = second.documents
    assert carried.carried and carried.source is not None and carried.source.turn == 1
    assert second.standalone_question == "And how tall is it? (harbour lighthouse built)"
    again = conversations.prepare(first)  # the first turn delivered again keeps its number
    assert again.turn == 1


def test_two_turns_prepared_in_one_batch_are_joined_and_numbered_in_order() -> None:
    """An app's exporter sends spans every few seconds: both turns can reach one batch,
    so the second is prepared before the first is exported (observed)."""
    conversations, _, _, _ = stage()
    first = conversations.prepare(
        turn("c1", "When was the Harbour lighthouse built?", "In 1857.",
             documents=[Document(content="The Harbour lighthouse was built in 1857.")])
    )  # fmt: skip
    second = conversations.prepare(turn("c1", "And how tall is it?", "31 metres."))
    assert (first.turn, second.turn) == (1, 2)
    assert [m.content for m in second.history] == [first.question, first.answer]
    assert [d.source.turn for d in second.documents if d.source] == [1]
    conversations.observe(first, [FAITHFUL])
    conversations.observe(second, [FAITHFUL])
    third = conversations.prepare(turn("c1", "Can I climb it?"))
    assert third.turn == 3 and [m.turn for m in third.history] == [1, 1, 2, 2]
    routed = Routed()
    conversations.hold_elsewhere(routed)  # held elsewhere (Kafka): routed, forgotten here
    conversations.turn_exported(third, [FAITHFUL], first=True)
    assert routed.turns == [third]
    assert conversations.prepare(turn("c1", "And the museum?")).turn == 3


# --- turns that arrive out of order ------------------------------------------------------

TURNS = (
    ("When was the Harbour lighthouse built?", "In 1857.", "The lighthouse was built in 1857."),
    ("How tall is it?", "40 metres.", "The lighthouse is 40 metres tall."),
    ("How many keepers live there?", "Two.", "Two keepers live in the lighthouse."),
)


def turns_started_in_order(cid: str = "c1") -> list[RagRecord]:
    """Three turns of one conversation whose spans carry no number or history (ragpulse's
    decorators), started 10 s apart."""
    return [
        turn(cid, q, a, documents=[Document(content=passage)],
             start_time_ns=(i + 1) * 10**10, end_time_ns=(i + 1) * 10**10 + 10**9)
        for i, (q, a, passage) in enumerate(TURNS)
    ]  # fmt: skip


def only_earlier_turns(record: RagRecord, taken: list[RagRecord]) -> bool:
    """Whether every history message and carried document of ``record`` comes from a turn
    of ``taken`` (in the order they started) that started before it."""
    place = next(i for i, t in enumerate(taken) if t.trace_id == record.trace_id)
    before = taken[:place]
    said = {t.question for t in before} | {t.answer for t in before}
    passages = {d.content for t in before for d in t.documents}
    carried = [d.content for d in record.documents if d.carried]
    return all(m.content in said for m in record.history) and set(carried) <= passages


def test_a_turn_that_started_later_is_never_an_earlier_ones_history() -> None:
    """Newest first (as Phoenix serves them): each turn is scored with no history, none
    with a later turn's question, answer or passage, and the conversation record still
    puts the turns in the order they started, numbered 1 to 3."""
    conversations, _, exported, _ = stage()
    taken = turns_started_in_order()
    prepared = {}
    for record in reversed(taken):
        prepared[record.trace_id] = ready = conversations.prepare(record)
        conversations.observe(ready, [FAITHFUL])
        assert ready.history == [] and not any(d.carried for d in ready.documents)
        assert ready.turn == 1  # numbered on arrival: no turn that started earlier is here
    conversations.close_all("end_of_run")
    [(record, _)] = exported
    assert [(t.turn, t.trace_id) for t in record.turns] == [
        (i, t.trace_id) for i, t in enumerate(taken, 1)
    ]


def test_shuffled_turns_join_only_the_turns_that_started_before_them() -> None:
    """2, 3, 1: the third joins the second (the first is not here yet), the first joins
    nothing; a fourth turn afterwards joins all three, in their order and numbers."""
    conversations, _, exported, _ = stage()
    first, second, third = taken = turns_started_in_order()
    got = {}
    for record in (second, third, first):
        got[record.trace_id] = ready = conversations.prepare(record)
        conversations.observe(ready, [FAITHFUL])
        assert only_earlier_turns(ready, taken), ready.history
    assert [m.content for m in got[third.trace_id].history] == [second.question, second.answer]
    assert got[first.trace_id].history == []
    fourth = conversations.prepare(
        turn("c1", "Can I climb it?", start_time_ns=4 * 10**10, end_time_ns=4 * 10**10 + 1)
    )
    assert fourth.turn == 4
    assert [(m.turn, m.content) for m in fourth.history if m.role == "user"] == [
        (1, first.question), (2, second.question), (3, third.question),
    ]  # fmt: skip
    assert [d.source.turn for d in fourth.documents if d.source] == [1, 2, 3]
    conversations.observe(fourth, [])
    conversations.close_all("end_of_run")
    [(record, _)] = exported
    assert [t.turn for t in record.turns] == [1, 2, 3, 4]
    assert [t.trace_id for t in record.turns] == [*(t.trace_id for t in taken), fourth.trace_id]


def test_turns_numbered_by_their_spans_are_ordered_by_those_numbers() -> None:
    """Turn numbers from the spans win over start times (clocks of two hosts may differ):
    the turn numbered 1 does not join the turn numbered 2 although it started later."""
    conversations, _, exported, _ = stage()
    second = turn("c1", "How tall is it?", "40 metres.", turn=2, start_time_ns=10**10)
    first = turn("c1", "When was it built?", "In 1857.", turn=1, start_time_ns=2 * 10**10)
    for record in (second, first):
        ready = conversations.prepare(record)
        conversations.observe(ready, [])
    assert conversations.prepare(first).history == []
    assert [m.content for m in conversations.prepare(second).history] == [
        first.question, first.answer,
    ]  # fmt: skip
    conversations.close_all("end_of_run")
    [(record, _)] = exported
    assert [(t.turn, t.trace_id) for t in record.turns] == [
        (1, first.trace_id), (2, second.trace_id),
    ]  # fmt: skip


def test_a_batch_that_holds_a_later_turn_first_prepares_the_earlier_one_first() -> None:
    """Both turns' spans in one export, the second turn's first: the pipeline prepares the
    turns of a batch in the order they started, so the second still joins the first."""
    from ragpulse.collector.assembly.assembler import CompletedTrace
    from ragpulse.collector.service import Evaluation
    from ragpulse.evaluators.faithfulness.lexical import LexicalFaithfulness
    from ragpulse.exporters.memory import InMemorySink
    from ragpulse.plugin_context import PluginContext

    def traced(question: str, answer: str, start: int) -> CompletedTrace:
        t = new_trace_id()
        attrs = {"ragpulse.role": "pipeline", "input.value": question, "output.value": answer,
                 "session.id": "c1"}  # fmt: skip
        return CompletedTrace(t, [make_span(t, "p", attrs, start=start, end=start + 1)], "quiet", 0)

    memory = InMemorySink()
    pipeline = Evaluation.build([LexicalFaithfulness()], [memory], PluginContext()).pipeline
    first = traced("When was the Harbour lighthouse built?", "In 1857.", 10**10)
    second = traced("How tall is it?", "40 metres.", 2 * 10**10)
    pipeline.process([second, first])
    by_trace = {item.record.trace_id: item.record for item in memory.items}
    assert by_trace[first.trace_id].turn == 1 and by_trace[first.trace_id].history == []
    later = by_trace[second.trace_id]
    assert later.turn == 2
    assert [m.content for m in later.history] == ["When was the Harbour lighthouse built?",
                                                  "In 1857."]  # fmt: skip


def test_turns_held_for_another_replica_are_numbered_by_start_not_arrival() -> None:
    """The Kafka turn path: summaries numbered 0 (their replica numbered them on arrival)
    reach the holder newest first; the conversation record numbers them by start."""
    from ragpulse.collector.conversations.stage import summarize

    conversations, _, exported, _ = stage()
    taken = turns_started_in_order()
    for record in reversed(taken):
        summary = summarize(record, [FAITHFUL]).model_copy(update={"turn": 0})
        conversations.add_turn("c1", "svc", None, summary)
    conversations.close_all("end_of_run")
    [(record, _)] = exported
    assert [(t.turn, t.question) for t in record.turns] == [
        (i, t.question) for i, t in enumerate(taken, 1)
    ]


def test_an_idle_conversation_closes_into_a_record_and_is_revised_when_it_resumes() -> None:
    conversations, clock, exported, metrics = stage(idle_s=300, keep_closed_s=3600)
    for question in ("When does the ferry leave?", "And when does it come back?"):
        conversations.observe(conversations.prepare(turn("c1", question, "At 8.")), [FAITHFUL])
    clock.now += 299
    conversations.tick()
    assert not exported  # not idle long enough
    clock.now += 1
    conversations.tick()
    [(record, results)] = exported
    assert (record.conversation_id, record.revision, record.closed_by) == ("c1", 1, "idle")
    assert [t.turn for t in record.turns] == [1, 2]
    assert {r.name for r in results} == {
        "conversation_groundedness/rules",
        "user_frustration/rules",
    }
    clock.now += 600  # resumes within keep_closed_s: the record is revised
    conversations.observe(conversations.prepare(turn("c1", "Is there a bar on board?")), [])
    clock.now += 300
    conversations.tick()
    revised, _ = exported[1]
    assert revised.revision == 2 and len(revised.turns) == 3
    assert revised.identifier == record.identifier
    assert (count(metrics, "closed"), count(metrics, "revised")) == (1, 1)
    clock.now += 3600  # past keep_closed_s: forgotten; a new turn starts anew
    conversations.tick()
    assert conversations.prepare(turn("c1", "Hello again")).turn == 1


def test_an_end_marker_closes_at_once_and_one_turn_makes_no_record() -> None:
    conversations, _, exported, metrics = stage()
    conversations.observe(turn("alone", "Hi", "Hello"), [])
    conversations.close_all("end_of_run")
    assert not exported and count(metrics, "single_turn") == 1
    conversations.observe(turn("c2", "Question one?", "One."), [])
    conversations.observe(turn("c2", "Bye", "Bye", attributes={END_MARKER: True}), [])
    [(record, _)] = exported
    assert record.closed_by == "end"


def test_no_id_no_conversation() -> None:
    conversations, _, exported, _ = stage()
    for cid in (None, ""):
        record = turn(cid, "Where is it?")
        assert conversations.prepare(record) is record
        conversations.observe(record, [])
    conversations.close_all("end_of_run")
    assert not exported


def test_state_is_bounded() -> None:
    conversations, clock, exported, metrics = stage(max_open=2, max_turns=3)
    for cid in ("a", "b", "c"):
        clock.now += 1
        conversations.observe(turn(cid, "First?", "1"), [])
        conversations.observe(turn(cid, "Second?", "2"), [])
    # "a" was least recently active: closed early, counted.
    assert [r.conversation_id for r, _ in exported] == ["a"] and count(metrics, "evicted") == 1
    for i in range(5):
        conversations.observe(turn("c", f"More {i}?", "x"), [])
    conversations.close_all("shutdown")
    record = next(r for r, _ in exported if r.conversation_id == "c")
    assert len(record.turns) == 3 and record.attributes["ragpulse.conversation.turns_dropped"] == 4
    assert metrics.registry.get_sample_value("ragpulse_conversation_turns_dropped_total") == 4


def test_a_repeated_question_is_a_frustration_signal() -> None:
    conversations, _, exported, _ = stage()
    for question in ("How do I reset my password?", "How can I reset my password?", "Thanks"):
        conversations.observe(turn("c", question, "Use the link."), [])
    conversations.close_all("end_of_run")
    [(_, results)] = exported
    frustration = next(r for r in results if r.metric == "user_frustration")
    assert frustration.details["repeated_turns"] == [2] and frustration.score == 0.5


# --- a turn's place, read from its spans ------------------------------------------------


def _chat(t: str, parent: str, messages: list[dict[str, Any]], answer: str, **attrs: Any) -> Any:
    return make_span(t, "chat m", {
        "gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(messages),
        "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]),
        **attrs}, parent=parent, start=10, end=20)  # fmt: skip


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def test_a_follow_up_carries_its_history_and_the_earlier_passage_as_evidence() -> None:
    passage = [{"id": "lh-1", "content": "The Harbour lighthouse is 40 metres tall."}]
    history = [
        _text("system", "Answer from the handbook."),
        _text("user", "Tell me about the Harbour lighthouse."),
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "search_docs",
                                         "arguments": {"query": "Harbour lighthouse"}}]},
        {"role": "user", "parts": [{"type": "tool_call_response", "id": "c1",
                                    "name": "search_docs", "result": passage}]},
        _text("assistant", "It is a lighthouse on the north pier."),
        _text("user", "How tall is it?"),
    ]  # fmt: skip
    t, root = new_trace_id(), new_span_id()
    spans = [
        make_span(t, "invoke_agent a", {"gen_ai.operation.name": "invoke_agent",
                                        "gen_ai.conversation.id": "chat-7"}, span_id=root),
        _chat(t, root, history, "It is 40 metres tall."),
    ]  # fmt: skip
    [record], _ = extract_records(spans)
    assert (record.conversation_id, record.turn) == ("chat-7", 2)
    assert [m.role for m in record.history] == ["user", "tool", "assistant"]
    kinds = [(d.source.kind, d.source.turn) for d in record.documents if d.source]
    assert kinds == [("history", 1), ("system", None)]
    assert record.standalone_question == "How tall is it? (harbour lighthouse)"
    from ragpulse.evaluators.faithfulness.lexical import LexicalFaithfulness

    [faithful] = LexicalFaithfulness().evaluate([record])
    assert faithful.score == 1.0  # answered from the first turn's passage: faithful


def test_ids_empty_or_in_langchain_metadata() -> None:
    t, root = new_trace_id(), new_span_id()
    base = {"openinference.span.kind": "CHAIN", "input.value": "q?", "output.value": "a"}
    found = {"openinference.span.kind": "RETRIEVER", "retrieval.documents.0.document.content": "a"}
    retriever = make_span(t, "r", found, parent=root)
    for attrs, expected in [
        ({"gen_ai.conversation.id": ""}, None),
        ({"session.id": "s-1"}, "s-1"),
        ({"metadata": json.dumps({"thread_id": "thread-9"})}, "thread-9"),
    ]:
        spans = [make_span(t, "chain", {**base, **attrs}, span_id=root), retriever]
        [record], _ = extract_records(spans)
        assert record.conversation_id == expected


def test_every_method_of_a_metric_with_several_is_ranked() -> None:
    """A conversation metric reads each turn's result of a metric from the most informed
    method (``turn_results.METHOD_ORDER``): a registered method missing from the ranking
    would silently rank last."""
    from ragpulse.evaluators.turn_results import METHOD_ORDER
    from ragpulse.plugins import evaluator_names

    methods: dict[str, set[str]] = {}
    for name in evaluator_names():
        metric, method = name.split("/")
        methods.setdefault(metric, set()).add(method)
    several = {m for ms in methods.values() if len(ms) > 1 for m in ms}
    assert several, "no metric has several methods: the registry was not read"
    assert not several - set(METHOD_ORDER), "rank these in evaluators/turn_results.py"
    assert len(set(METHOD_ORDER)) == len(METHOD_ORDER)


def test_a_revised_turn_takes_its_earlier_builds_place_and_number() -> None:
    """A turn first built without its root span (rooted at another span) and revised once
    the root came: one turn in the conversation, with the revision's texts and results."""
    conversations, _, exported, _ = stage()
    first = conversations.prepare(turn("c1", "When was the Harbour lighthouse built?", "In 1857."))
    conversations.observe(first, [FAITHFUL])
    partial = conversations.prepare(turn("c1", "And how tall is it?", "", partial="idle"))
    conversations.observe(partial, [EvalResult(metric="faithfulness", method="lexical")])
    whole = partial.model_copy(
        update={"span_id": new_span_id(), "answer": "31 metres.", "revision": 2, "partial": None}
    )
    conversations.turn_exported(whole, [FAITHFUL], first=True, replaces=partial)
    conversations.close_all("end_of_run")
    [(record, _)] = exported
    assert [(t.turn, t.answer) for t in record.turns] == [(1, "In 1857."), (2, "31 metres.")]
    assert record.turns[1].span_id == whole.span_id
    assert [r.score for r in record.turns[1].results] == [FAITHFUL.score]
