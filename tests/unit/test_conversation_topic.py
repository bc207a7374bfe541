"""Conversations held through the Kafka turn topic, the parts that need no broker: the
message format, the stage's state taken from a record exported earlier, and what a
member rebuilds from messages read again (the broker end to end:
tests/live/test_kafka_conversations.py).

The clock is injected: closing on idle is decided by it, never by sleeping."""

from __future__ import annotations

import pytest
from support.helpers import Clock, new_span_id, new_trace_id

from ragpulse.collector.conversations.stage import ConversationStage, summarize
from ragpulse.collector.conversations.turn_consumer import _Replayed
from ragpulse.collector.conversations.turn_messages import (
    CaughtUpMessage,
    ClosedMessage,
    TurnMessage,
    decode,
    encode,
)
from ragpulse.config import ConversationSettings, KafkaSettings
from ragpulse.errors import DecodeError
from ragpulse.record import ConversationRecord, EvalResult, RagRecord, TurnSummary

FAITHFUL = EvalResult(metric="faithfulness", method="lexical", score=0.9)
JUDGED = EvalResult(metric="faithfulness", method="judge", score=1.0)


def stage(**settings: float) -> tuple[ConversationStage, Clock, list[ConversationRecord]]:
    clock, exported = Clock(1_000.0), []
    found = ConversationStage(
        ConversationSettings(**settings), [], lambda item: exported.append(item.record), clock=clock
    )
    return found, clock, exported


def summary(question: str, *results: EvalResult, number: int = 0) -> TurnSummary:
    record = RagRecord(trace_id=new_trace_id(), span_id=new_span_id(), question=question,
                       answer="A.", turn=number or None)  # fmt: skip
    return summarize(record, list(results))


def test_a_repeated_turn_changes_nothing_and_does_not_revise_a_closed_conversation() -> None:
    conversations, clock, exported = stage(idle_s=300)
    first, second = summary("One?", FAITHFUL), summary("Two?", FAITHFUL)
    for turn in (first, second):
        conversations.add_turn("c", "svc", "/chat", turn)
    clock.now += 300
    conversations.tick()
    [record] = exported
    assert [t.turn for t in record.turns] == [1, 2]  # numbered on arrival
    conversations.add_turn("c", "svc", "/chat", second)  # a redelivered trace
    clock.now += 300
    conversations.tick()
    assert len(exported) == 1
    conversations.add_turn("c", "svc", "/chat", second.model_copy(update={"results": [JUDGED]}))
    clock.now += 300
    conversations.tick()  # a result it lacked: revised
    assert exported[-1].revision == 2 and exported[-1].turns[1].results == [FAITHFUL, JUDGED]


def test_a_conversation_restored_from_its_record_is_revised_when_it_resumes() -> None:
    original, _, exported = stage(idle_s=300)
    for question in ("One?", "Two?"):
        original.add_turn("c", "svc", None, summary(question, FAITHFUL))
    original.close_all("end_of_run")
    [record] = exported
    # Another process (a restart, the partition's next owner) takes it from the record.
    conversations, clock, again = stage(idle_s=300, keep_closed_s=3600)
    assert conversations.restore(record, closed_ago_s=60)
    assert conversations.holds("c") and conversations.held_ids() == {"c"}
    assert conversations.restore(record, closed_ago_s=60)  # the same record: no change
    conversations.add_turn("c", "svc", None, summary("Three?", FAITHFUL))
    assert not conversations.restore(record, closed_ago_s=60)  # it has more now
    clock.now += 300
    conversations.tick()
    [revised] = again
    assert revised.revision == 2 and revised.identifier == record.identifier
    assert [t.question for t in revised.turns] == ["One?", "Two?", "Three?"]
    assert [t.turn for t in revised.turns] == [1, 2, 3]
    # Past keep_closed_s, a record is not held; dropped ones are forgotten unclosed.
    late, _, _ = stage(keep_closed_s=3600)
    assert late.restore(record, closed_ago_s=3600) and not late.holds("c")
    assert conversations.drop(["c", "unknown"]) == 1 and not conversations.holds("c")


def test_turns_read_again_are_covered_by_the_record_that_follows_them() -> None:
    one, two = summary("One?", FAITHFUL, number=1), summary("Two?", FAITHFUL, number=2)
    record = ConversationRecord(conversation_id="c", turns=[one, two], revision=1)
    closed = ClosedMessage(conversation=record, closed_at_unix=0.0)

    def turn(s: TurnSummary, end: bool = False) -> TurnMessage:
        return TurnMessage(conversation_id="c", turn=s, end=end)

    replayed = _Replayed()
    replayed.turn(turn(two, end=True))  # read again without the first turn (before a commit)
    replayed.closed_again(closed)
    assert replayed.closed is closed and not replayed.turns  # the record alone rebuilds it
    # A result that came after the record, and a turn after it: kept on top of it.
    replayed.turn(turn(two.model_copy(update={"results": [JUDGED]})))
    three = summary("Three?", number=3)
    replayed.turn(turn(three))
    assert [m.turn.results for m in replayed.turns.values()] == [[JUDGED], []]
    # The conversation closed again with both: the next record covers them.
    revised = record.model_copy(update={"revision": 2, "turns": [
        one, two.model_copy(update={"results": [FAITHFUL, JUDGED]}), three]})  # fmt: skip
    replayed.closed_again(ClosedMessage(conversation=revised, closed_at_unix=1.0))
    assert not replayed.turns
    replayed.closed_again(closed)  # an older record changes nothing
    assert replayed.closed is not None and replayed.closed.conversation.revision == 2


def test_a_result_read_before_the_record_but_missing_from_it_is_kept() -> None:
    """The stage closed the conversation while it had not read that result yet (it lagged)."""
    one = summary("One?", FAITHFUL, number=1)
    replayed = _Replayed()
    replayed.turn(TurnMessage(conversation_id="c", turn=one))
    replayed.turn(
        TurnMessage(conversation_id="c", turn=one.model_copy(update={"results": [JUDGED]}))
    )
    record = ConversationRecord(conversation_id="c", turns=[one], revision=1)
    replayed.closed_again(ClosedMessage(conversation=record, closed_at_unix=0.0))
    [(_, kept)] = replayed.turns.items()
    assert kept.turn.results == [JUDGED]


def test_messages_round_trip_and_anything_else_is_poison() -> None:
    turn = TurnMessage(conversation_id="c", service="svc", turn=summary("One?", FAITHFUL),
                       documents=["The ferry leaves at 8."], end=True)  # fmt: skip
    closed = ClosedMessage(
        conversation=ConversationRecord(conversation_id="c", turns=[turn.turn]),
        closed_at_unix=1.5,
    )
    for message in (turn, closed, CaughtUpMessage(epoch="e1")):
        assert decode(encode(message)) == message
    for poison in (b"", b"{not json", b'{"kind": "turn"}', b'{"kind": "other"}',
                   b'{"kind": "turn", "conversation_id": "", "turn": {"turn": 1, '
                   b'"trace_id": "t", "span_id": "s"}}'):  # fmt: skip
        with pytest.raises(DecodeError):
            decode(poison)


def test_the_conversation_topic_and_group_follow_the_span_group() -> None:
    assert (KafkaSettings().turn_topic(), KafkaSettings().turn_group()) == (
        "ragpulse_turns",
        "ragpulse-conversations",
    )
    custom = KafkaSettings(group="shop", conversation_group="chats")
    assert (custom.turn_topic(), custom.turn_group()) == ("shop_turns", "chats")
    assert KafkaSettings(conversation_topic="").turn_topic() is None  # kept in each process


def test_a_pipeline_whose_conversations_are_held_elsewhere_keeps_none_of_its_own() -> None:
    """With the Kafka turn topic, turns reach the stage from the topic: an export does not
    add them, and a stop leaves what is open for the next owner (nothing closed half-way)."""
    from support.helpers import Routed, make_span

    from ragpulse.collector.assembly.assembler import CompletedTrace
    from ragpulse.collector.service import Evaluation
    from ragpulse.exporters.memory import InMemorySink
    from ragpulse.plugin_context import PluginContext

    def chat_turn(question: str) -> CompletedTrace:
        t = new_trace_id()
        attributes = {"ragpulse.role": "pipeline", "input.value": question,
                      "output.value": "At 8.", "session.id": "chat-1"}  # fmt: skip
        return CompletedTrace(t, [make_span(t, "p", attributes)], "quiet", 0.0, [])

    for local in (True, False):
        sink = InMemorySink()
        evaluation, topic = Evaluation.build([], [sink], PluginContext()), Routed()
        if not local:
            evaluation.conversations.hold_elsewhere(topic)
        pipeline = evaluation.pipeline
        pipeline.start()
        pipeline.process([chat_turn("When does the ferry leave?"), chat_turn("And back?")])
        assert evaluation.conversations.holds("chat-1") is local
        assert len(topic.turns) == (0 if local else 2)
        evaluation.conversations.add_turn("chat-1", "svc", None, summary("From the topic?"))
        pipeline.stop()
        assert [len(i.record.turns) for i in sink.conversations.values()] == ([3] if local else [])
