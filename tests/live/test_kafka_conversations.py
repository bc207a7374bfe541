"""Conversations scaled out over Kafka, against a real Kafka-protocol broker (tansu).

A span topic is keyed by trace id, so one conversation's turns reach different replicas;
their turns meet again on the conversation topic, keyed by conversation id, in the member
of the conversation group that owns its partition. Every wait here is on an event (a
record in a sink, a committed offset, a series on /metrics), never on elapsed time.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.structs import TopicPartition
from opentelemetry.proto.common.v1 import common_pb2
from prometheus_client.parser import text_string_to_metric_families
from support.helpers import rag_request
from support.kafka_env import FAST_GROUP_CONFIG, Broker, free_port, wait_until

from ragpulse.collector.conversations.stage import END_MARKER
from ragpulse.collector.service import Collector
from ragpulse.config import Settings, load_settings
from ragpulse.exporters.memory import InMemorySink
from ragpulse.record import ConversationRecord, ExportItem

pytestmark = pytest.mark.integration

DOCS = ["The ferry to Harbour Island leaves at 8 and returns at 17.", "Tickets cost 6 euros."]
TURNS = "ragpulse_turns"  # the conversation topic for the default group "ragpulse"


def turn_message(
    conversation_id: str, question: str, answer: str, *, end: bool = False
) -> tuple[str, bytes]:
    """One turn of a chat as one trace (the shape ragpulse's decorators write), its root
    carrying the conversation's ``session.id`` (and the end marker on the last turn)."""
    trace_id = secrets.token_bytes(16)
    request = rag_request([(trace_id, question, DOCS, answer)])
    root = request.resource_spans[0].scope_spans[0].spans[0]
    root.attributes.append(
        common_pb2.KeyValue(
            key="session.id", value=common_pb2.AnyValue(string_value=conversation_id)
        )
    )
    if end:
        root.attributes.append(
            common_pb2.KeyValue(key=END_MARKER, value=common_pb2.AnyValue(bool_value=True))
        )
    return trace_id.hex(), request.SerializeToString()


def produce(bootstrap: str, trace_id: str, value: bytes, partition: int | None = None) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        producer.send("otlp_spans", key=trace_id.encode(), value=value, partition=partition)
        producer.flush(30)
    finally:
        producer.close()


def settings(bootstrap: str) -> Settings:
    return load_settings(
        source="kafka",
        metrics_port=0,
        assembly={"grace_s": 0.2, "tick_s": 0.05},
        # Closed by the end marker: idle closing is for the unit tests (injected clock).
        conversations={"idle_s": 600, "tick_s": 0.1},
        kafka={
            "bootstrap": bootstrap,
            "commit_interval_s": 0.2,
            "dead_letter_topic": "dlq",
            "session_timeout_ms": FAST_GROUP_CONFIG["session_timeout_ms"],
            "heartbeat_interval_ms": FAST_GROUP_CONFIG["heartbeat_interval_ms"],
            "consumer_options": {"max_poll_interval_ms": 10_000},
        },
    )


class ConversationLog(InMemorySink):
    """The in-memory sink (latest record per conversation, as a backend that upserts by
    identifier shows it), also keeping every conversation export in order."""

    def __init__(self) -> None:
        super().__init__()
        self.exports: list[ConversationRecord] = []

    def export_conversation(self, item: ExportItem[ConversationRecord]) -> None:
        self.exports.append(item.record)
        super().export_conversation(item)


@pytest.fixture
def collectors() -> Iterator[list[Collector]]:
    started: list[Collector] = []
    yield started
    for c in started:
        c.stop()


def evaluated(sinks: list[ConversationLog], trace_id: str) -> bool:
    return any(i.record.trace_id == trace_id for s in sinks for i in s.items)


def sample(c: Collector, name: str, **labels: str) -> float:
    return c.metrics.registry.get_sample_value(name, labels) or 0.0


def test_a_conversation_over_two_replicas_makes_one_record(
    kafka_broker: Broker, collectors: list[Collector]
) -> None:
    bootstrap = kafka_broker.bootstrap
    kafka_broker.create_topic("otlp_spans", partitions=4)
    kafka_broker.create_topic(TURNS, partitions=2)
    sinks = [ConversationLog(), ConversationLog()]
    pair = [
        Collector(settings(bootstrap), sinks=[sink], metrics_server=False).start() for sink in sinks
    ]
    collectors.extend(pair)

    def settled() -> bool:
        return all(
            sample(c, "ragpulse_kafka_assigned_partitions") == 2
            and sample(c, "ragpulse_kafka_turn_topic_assigned_partitions") == 1
            and sample(c, "ragpulse_kafka_turn_topic_catching_up") == 0
            for c in pair
        )

    wait_until(settled, 60, "both groups split between the replicas, each member caught up")
    # A poison message on the conversation topic: dead-lettered, counted, read past.
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    producer.send(TURNS, key=b"c0", value=b"{not a turn", partition=0)
    producer.flush(30)
    producer.close()

    chats = {f"chat-{n}": [] for n in range(4)}  # conversation id -> its turns' trace ids
    questions = ["When does the ferry leave?", "And when does it come back?", "What does it cost?"]
    answers = ["At 8.", "At 17.", "6 euros."]
    for i, (question, answer) in enumerate(zip(questions, answers, strict=True)):
        for n, (cid, trace_ids) in enumerate(chats.items()):
            trace_id, value = turn_message(cid, question, answer, end=i == 2)
            # Turns of one chat on different span partitions, so on both replicas
            # (whichever way the four partitions are split two and two).
            produce(bootstrap, trace_id, value, partition=(n + (0, 2, 1)[i]) % 4)
            trace_ids.append(trace_id)
        # A chat: the next question comes once the answer is out.
        for trace_ids in chats.values():
            wait_until(lambda t=trace_ids[-1]: evaluated(sinks, t), 60, f"turn {i + 1} evaluated")

    def recorded() -> dict[str, ConversationRecord]:
        shown = {cid: i.record for s in sinks for cid, i in s.conversations.items()}
        return {cid: c for cid, c in shown.items() if len(c.turns) == 3}

    wait_until(lambda: recorded().keys() == chats.keys(), 60, "a record of 3 turns per chat")
    for cid, record in recorded().items():
        assert [t.trace_id for t in record.turns] == chats[cid]
        assert [t.question for t in record.turns] == questions
        assert record.closed_by == "end" and record.turns[0].results
    # The turns went through both replicas; each record came from one of them only.
    by_replica = [{i.record.trace_id for i in s.items} for s in sinks]
    assert all(set(ids) & by_replica[0] and set(ids) & by_replica[1] for ids in chats.values())
    exporters = {
        cid: [n for n, s in enumerate(sinks) if any(c.conversation_id == cid for c in s.exports)]
        for cid in chats
    }
    assert all(len(found) == 1 for found in exporters.values()), exporters
    # The poison message went to the dead-letter topic, from whichever replica read it.
    poison = [
        ("ragpulse_kafka_turn_topic_messages_total", {"kind": "poison"}),
        ("ragpulse_kafka_turn_topic_dead_letters_total", {"result": "dead_lettered"}),
    ]
    for name, labels in poison:
        wait_until(lambda n=name, ls=labels: sum(sample(c, n, **ls) for c in pair) == 1, 60, name)


def test_a_replica_that_stops_mid_conversation_leaves_its_conversations_to_the_other(
    kafka_broker: Broker, collectors: list[Collector]
) -> None:
    """A graceful stop closes nothing half-way: the partitions' next owner reads the open
    conversations' turns again and exports each record once, whole."""
    bootstrap = kafka_broker.bootstrap
    kafka_broker.create_topic("otlp_spans", partitions=2)
    kafka_broker.create_topic(TURNS, partitions=2)
    sinks = [ConversationLog(), ConversationLog()]
    first, second = (
        Collector(settings(bootstrap), sinks=[sink], metrics_server=False).start() for sink in sinks
    )
    collectors.append(first)

    def owns(c: Collector, spans: int, turns: int) -> bool:
        return (
            sample(c, "ragpulse_kafka_assigned_partitions") == spans
            and sample(c, "ragpulse_kafka_turn_topic_assigned_partitions") == turns
            and sample(c, "ragpulse_kafka_turn_topic_catching_up") == 0
        )

    try:
        wait_until(lambda: owns(first, 1, 1) and owns(second, 1, 1), 60, "split one and one")
        chats: dict[str, list[str]] = {f"chat-{n}": [] for n in range(4)}
        for question in ("Where is the lighthouse?", "How tall is it?"):
            for cid, trace_ids in chats.items():
                trace_id, value = turn_message(cid, question, "On the pier, 40 metres.")
                produce(bootstrap, trace_id, value)
                trace_ids.append(trace_id)
            for trace_ids in chats.values():  # the next question once the answer is out
                wait_until(lambda t=trace_ids[-1]: evaluated(sinks, t), 60, "a turn evaluated")

        def turns_read() -> float:
            name = "ragpulse_kafka_turn_topic_messages_total"
            return sum(sample(c, name, kind="turn") for c in (first, second))

        wait_until(lambda: turns_read() == 8, 60, "both turns of every chat read")
    finally:
        second.stop()
    assert not sinks[1].exports  # nothing closed half-way
    wait_until(lambda: owns(first, 2, 2), 60, "the remaining replica owns every partition")
    for cid, trace_ids in chats.items():
        trace_id, value = turn_message(cid, "Can I climb it?", "Yes.", end=True)
        produce(bootstrap, trace_id, value)
        trace_ids.append(trace_id)
    wait_until(lambda: sinks[0].conversations.keys() == chats.keys(), 60, "every chat's record")
    for cid, item in sinks[0].conversations.items():
        assert [t.trace_id for t in item.record.turns] == chats[cid]
    assert sorted(c.conversation_id for c in sinks[0].exports) == sorted(chats)
    assert not sinks[1].exports


# -- SIGKILL in the middle of a conversation ------------------------------------------------


def _serve(bootstrap: str, results: Path, metrics_port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "RAGPULSE_ASSEMBLY__GRACE_S": "0.2",
        "RAGPULSE_CONVERSATIONS__IDLE_S": "600",
        "RAGPULSE_KAFKA__SESSION_TIMEOUT_MS": "2000",
        "RAGPULSE_KAFKA__HEARTBEAT_INTERVAL_MS": "500",
        "RAGPULSE_KAFKA__COMMIT_INTERVAL_S": "0.2",
        "RAGPULSE_EVALUATION__MODEL__RATE": "0",  # cheap tier only: records go out at once
    }
    return subprocess.Popen(
        [sys.executable, "-m", "ragpulse.cli", "--log-level", "WARNING", "serve",
         "--source", "kafka", "--kafka-bootstrap", bootstrap, "--metrics-port",
         str(metrics_port), "--results-jsonl", str(results)],
        env=env,
    )  # fmt: skip


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass  # a line cut short by SIGKILL
    return rows


def _conversation_lines(path: Path) -> list[dict[str, Any]]:
    return [row["conversation"] for row in _lines(path) if "conversation" in row]


def _metric(port: int, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int | None]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return [consumer.committed(TopicPartition(topic, p)) for p in range(partitions)]
    finally:
        consumer.close()


def _offsets_of(bootstrap: str, key: str, count: int) -> list[int]:
    """The conversation-topic offsets of the first ``count`` messages keyed ``key``."""
    consumer = KafkaConsumer(TURNS, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    found: list[int] = []

    def enough() -> bool:
        for batch in consumer.poll(timeout_ms=200).values():
            found.extend(m.offset for m in batch if m.key == key.encode())
        return len(found) >= count

    try:
        wait_until(enough, 60, f"{count} messages keyed {key!r} on the conversation topic")
    finally:
        consumer.close()
    return found[:count]


def test_sigkill_mid_conversation_then_restart_the_record_appears_once(
    kafka_broker: Broker, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap
    kafka_broker.create_topic("otlp_spans", partitions=2)
    kafka_broker.create_topic(TURNS, partitions=1)
    results = tmp_path / "results.jsonl"
    port = free_port()
    proc = _serve(bootstrap, results, port)
    produced: dict[str, list[str]] = {"done": [], "open": []}

    def turn(cid: str, question: str, answer: str, end: bool = False) -> None:
        trace_id, value = turn_message(cid, question, answer, end=end)
        produce(bootstrap, trace_id, value)
        produced[cid].append(trace_id)
        wait_until(
            lambda: any(r.get("trace_id") == trace_id for r in _lines(results)),
            60, f"the turn {question!r} evaluated",
        )  # fmt: skip

    try:
        wait_until(lambda: _metric(port, "ragpulse_kafka_turn_topic_assigned_partitions") == 1,
                   60, "serve owns the conversation topic", ignore=(OSError,))  # fmt: skip
        # "done" closes (end marker) before the kill; "open" begins between its turns, so
        # the conversation group's commit stays at "open"'s first turn, inside "done".
        turn("done", "When does the ferry leave?", "At 8.")
        turn("open", "Where is the lighthouse?", "On the north pier.")
        turn("done", "And when does it come back?", "At 17.")
        turn("done", "Thanks, bye.", "Bye.", end=True)
        wait_until(lambda: len(_conversation_lines(results)) == 1, 60, "done's record")
        turn("open", "How tall is it?", "40 metres.")
        # Every span committed, and the conversation group's commit held at "open"'s first
        # turn (after "done"'s first turn, before the rest of "done" and its record).
        wait_until(lambda: sum(o or 0 for o in _committed(bootstrap, "ragpulse", "otlp_spans", 2))
                   == 5, 60, "the span group committed all five turns")  # fmt: skip
        [open_first] = _offsets_of(bootstrap, "open", 1)
        done_first, *_ = _offsets_of(bootstrap, "done", 4)
        assert done_first < open_first
        wait_until(
            lambda: _committed(bootstrap, "ragpulse-conversations", TURNS, 1) == [open_first],
            60, "the conversation group's commit held at the open conversation",
        )  # fmt: skip
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
        assert [c["conversation_id"] for c in _conversation_lines(results)] == ["done"]

        proc = _serve(bootstrap, results, port)
        wait_until(lambda: _metric(port, "ragpulse_kafka_turn_topic_assigned_partitions") == 1
                   and _metric(port, "ragpulse_kafka_turn_topic_catching_up") == 0,
                   60, "the restarted serve caught up", ignore=(OSError,))  # fmt: skip
        assert _metric(port, "ragpulse_kafka_turn_topic_replayed_total") >= 4
        turn("open", "Can I climb it?", "Yes, on Sundays.", end=True)
        wait_until(
            lambda: any(c["conversation_id"] == "open" for c in _conversation_lines(results)),
            60, "the open conversation's record after the restart",
        )  # fmt: skip
    finally:
        proc.kill()
        proc.wait(60)
    lines = _conversation_lines(results)
    # Each conversation once: "done" was not exported again from its turns read again
    # (its record's message covered them), "open" was rebuilt from the re-read turns.
    assert sorted(c["conversation_id"] for c in lines) == ["done", "open"]
    shown = {c["conversation_id"]: c for c in lines}  # last line per identifier
    for cid in ("done", "open"):
        assert [t["trace_id"] for t in shown[cid]["turns"]] == produced[cid]
        assert [t["turn"] for t in shown[cid]["turns"]] == [1, 2, 3]
        assert shown[cid]["closed_by"] == "end"
    # The turn records themselves: each evaluated once (nothing past a commit was lost).
    evaluated = [r["trace_id"] for r in _lines(results) if "trace_id" in r]
    assert sorted(evaluated) == sorted(produced["done"] + produced["open"])
