"""The conversation group: turns read from the Kafka turn topic into the conversation stage.

Every ``ragpulse serve --source kafka`` is a member of two groups: the span group (its
traces, keyed by trace id) and the conversation group (``kafka.conversation_group``), which
reads ``kafka.conversation_topic``, keyed by conversation id (written by
:mod:`.turn_writer`): the member owning a conversation's partition holds
all of its turns, closes it and exports its record. The span group commits as soon as a
trace's turns are written; only this group waits for conversations.

At-least-once, with its own offsets: a partition's commit stops at the oldest message
still needed to rebuild a conversation held (its first turn, or the ``closed`` message of
its last export), so a restart or the next owner reads again every open conversation's
turns, and every closed one kept for resuming. What is read again is held back until the
member has read its own ``caught_up`` marker, written into the partition when it got it
(everything before the marker was written before it got the partition): a turn read
again after its conversation's ``closed`` message only rebuilds the state that message
gives, nothing is exported again; a conversation exported just before a SIGKILL whose
``closed`` message was never written is exported again, complete, under the same
identifier (sinks upsert by it; JSONL holds a repeat).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaConsumer, KafkaProducer
from kafka.structs import OffsetAndMetadata, TopicPartition

from ragpulse.collector.conversations.turn_messages import (
    CaughtUpMessage,
    ClosedMessage,
    TurnMessage,
    decode,
    encode,
)
from ragpulse.collector.conversations.turn_writer import TurnTopicMetrics
from ragpulse.collector.kafka_group import ConsumerThread
from ragpulse.config import KafkaSettings
from ragpulse.errors import DecodeError
from ragpulse.source import ConversationHooks

log = logging.getLogger(__name__)

MARKER_KEY = b"ragpulse.caught_up"

_Key = tuple[str, str]


@dataclass
class _Replayed:
    """A conversation as read again before the member caught up: the last ``closed`` record
    and what came after it (turns it lacks, results it lacks)."""

    closed: ClosedMessage | None = None
    turns: dict[_Key, TurnMessage] = field(default_factory=dict)

    def turn(self, message: TurnMessage) -> None:
        key = (message.turn.trace_id, message.turn.span_id)
        if message.replaces is not None:  # a revision: in place of the turn it replaces
            self.turns.pop((message.turn.trace_id, message.replaces), None)
            self.turns[key] = message
            return
        known = self.turns.get(key)
        if known is None:
            self.turns[key] = message
            return
        results = [*known.turn.results,
                   *(r for r in message.turn.results if r not in known.turn.results)]  # fmt: skip
        self.turns[key] = known.model_copy(
            update={"turn": known.turn.model_copy(update={"results": results}),
                    "end": known.end or message.end}
        )  # fmt: skip

    def closed_again(self, message: ClosedMessage) -> None:
        """A later record: it covers the turns it names, and their results up to its count."""
        if self.closed and message.conversation.revision <= self.closed.conversation.revision:
            return
        before = {(t.trace_id, t.span_id): len(t.results)
                  for t in (self.closed.conversation.turns if self.closed else ())}  # fmt: skip
        now = {(t.trace_id, t.span_id): len(t.results) for t in message.conversation.turns}
        for key, later in list(self.turns.items()):
            if key not in now:
                continue
            tail = before.get(key, 0) + len(later.turn.results) - now[key]
            if tail <= 0:
                del self.turns[key]
            else:  # results that came after this record: an update on top of it
                kept = later.turn.model_copy(update={"results": later.turn.results[-tail:]})
                self.turns[key] = later.model_copy(update={"turn": kept})
        self.closed = message


@dataclass
class _Partition:
    epoch: str | None = None  # this member's marker, once written
    live: bool = False  # its marker was read back: messages go to the stage as they come
    next: int = -1  # one past the last offset handled
    pins: dict[str, int] = field(default_factory=dict)  # conversation -> rebuilt from here
    replay: OrderedDict[str, _Replayed] = field(default_factory=OrderedDict)

    def position(self) -> int:
        return min(self.pins.values(), default=self.next)


class TurnConsumer(ConsumerThread):
    """Consumes ``settings.turn_topic()`` in ``settings.turn_group()`` into ``stage``."""

    name = "kafka_turns"
    _thread_name = "ragpulse-turn-topic"
    _what = "the conversation topic"

    def __init__(
        self,
        settings: KafkaSettings,
        stage: ConversationHooks,
        metrics: TurnTopicMetrics,
        consumer_factory: Callable[..., KafkaConsumer] = KafkaConsumer,
        producer_factory: Callable[..., KafkaProducer] = KafkaProducer,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        topic = settings.turn_topic()
        assert topic, "no conversation topic"
        super().__init__(
            settings, topic, settings.turn_group(),
            dead_letters=metrics.dead_letters, commits=metrics.commits,
            consumer_factory=consumer_factory, producer_factory=producer_factory,
        )  # fmt: skip
        self._stage = stage
        self._metrics = metrics
        self._wall_clock = wall_clock
        # Partition state: changed by the consumer thread and by the rebalance callbacks
        # (kafka-python's network thread); the stage is changed by the consumer thread only.
        self._lock = threading.Lock()
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._revoked: list[str] = []  # conversations of revoked partitions, to drop

    # -- the consumer thread ----------------------------------------------------------------

    def _round(self, consumer: KafkaConsumer) -> None:
        self._drop_revoked()
        self._write_markers()
        batches = consumer.poll(timeout_ms=200)
        for tp, messages in batches.items():
            for message in messages:
                self._handle_guarded(tp, message)
        self._drop_revoked()
        if self._commit_due():
            self._commit(consumer)

    def _commit_last(self, consumer: KafkaConsumer) -> None:
        self._drop_revoked()
        self._commit(consumer)

    def _handle_guarded(self, tp: TopicPartition, message: Any) -> None:
        """One message; a failure costs that message only (logged), not the rest of its
        batch, which the client has already moved past."""
        try:
            self._handle(tp, message)
        except Exception:
            log.exception("conversation-topic message %s@%s failed", tp, message.offset)

    def _handle(self, tp: TopicPartition, message: Any) -> None:
        with self._lock:
            partition = self._partitions.get(tp)
        if partition is None:  # no longer ours
            return
        offset: int = message.offset
        value: bytes = message.value or b""
        decoded: TurnMessage | ClosedMessage | CaughtUpMessage | None = None
        if len(value) > self._settings.max_message_bytes:
            self._metrics.read.labels("oversized").inc()
            self._dead_letter(message, f"message of {len(value)} bytes exceeds the limit")
        else:
            try:
                decoded = decode(value)
            except DecodeError as exc:
                self._metrics.read.labels("poison").inc()
                self._dead_letter(message, str(exc))
        if decoded is not None:
            self._metrics.read.labels(decoded.kind).inc()
        if isinstance(decoded, CaughtUpMessage):
            if decoded.epoch == partition.epoch and not partition.live:
                self._catch_up(partition)
        elif decoded is not None and not partition.live:
            self._metrics.replayed.inc()
            self._replay(partition, decoded, offset)
        elif isinstance(decoded, TurnMessage):
            self._turn(partition, decoded, offset)
        elif isinstance(decoded, ClosedMessage):
            self._closed(partition, decoded, offset)
        with self._lock:
            partition.next = offset + 1

    # -- live: straight into the stage -------------------------------------------------------

    def _turn(self, partition: _Partition, message: TurnMessage, offset: int) -> None:
        cid = message.conversation_id
        if not self._stage.holds(cid):
            with self._lock:  # before the stage has it: a commit never passes it
                partition.pins[cid] = offset
        self._stage.add_turn(cid, message.service, message.route, message.turn,
                             documents=message.documents, end=message.end,
                             replaces=message.replaces)  # fmt: skip

    def _closed(self, partition: _Partition, message: ClosedMessage, offset: int) -> None:
        ago = max(0.0, self._wall_clock() - message.closed_at_unix)
        if self._stage.restore(message.conversation, ago):
            with self._lock:  # this record alone rebuilds the conversation now
                partition.pins[message.conversation.conversation_id] = offset

    # -- read again: held back until this member's marker ----------------------------------

    def _replay(
        self, partition: _Partition, message: TurnMessage | ClosedMessage, offset: int
    ) -> None:
        if isinstance(message, TurnMessage):
            cid = message.conversation_id
        else:
            cid = message.conversation.conversation_id
        with self._lock:
            partition.pins.setdefault(cid, offset)
            replayed = partition.replay.get(cid)
            if replayed is None:
                replayed = partition.replay[cid] = _Replayed()
            if isinstance(message, TurnMessage):
                if len(replayed.turns) < self._stage.settings.max_turns:
                    replayed.turn(message)
            else:
                replayed.closed_again(message)
                if not replayed.turns:
                    partition.pins[cid] = offset
            # Bounded as the stage is: past max_open, the longest-held goes to the stage now.
            early = (
                [partition.replay.popitem(last=False)]
                if sum(len(p.replay) for p in self._partitions.values())
                > self._stage.settings.max_open
                else []
            )
        for early_cid, early_state in early:
            self._rebuild(early_cid, early_state)

    def _catch_up(self, partition: _Partition) -> None:
        with self._lock:
            replayed, partition.replay = partition.replay, OrderedDict()
            partition.live = True
            self._metrics.catching_up.set(sum(not p.live for p in self._partitions.values()))
        for cid, state in replayed.items():
            self._rebuild(cid, state)

    def _rebuild(self, cid: str, state: _Replayed) -> None:
        """Into the stage as it was: the last record, then what came after it, in order (an
        end marker among them closes it again, exporting what its record had not)."""
        if state.closed is not None:
            ago = max(0.0, self._wall_clock() - state.closed.closed_at_unix)
            self._stage.restore(state.closed.conversation, ago)
        for message in state.turns.values():
            self._stage.add_turn(cid, message.service, message.route, message.turn,
                                 documents=message.documents, end=message.end,
                                 replaces=message.replaces)  # fmt: skip

    def _write_markers(self) -> None:
        with self._lock:
            waiting = [(tp, p) for tp, p in self._partitions.items() if p.epoch is None]
        for tp, partition in waiting:
            epoch = uuid.uuid4().hex
            marker = encode(CaughtUpMessage(epoch=epoch))
            try:
                self._producer_now().send(
                    self._topic, value=marker, key=MARKER_KEY, partition=tp.partition
                ).get(timeout=10)
            except Exception as exc:  # tried again next round; the partition waits
                log.warning("could not write the caught-up marker to %s: %r", tp, exc)
                return
            with self._lock:
                partition.epoch = epoch

    # -- offsets ----------------------------------------------------------------------------

    def _commit(self, consumer: KafkaConsumer) -> None:
        held = self._stage.held_ids()
        commits = {}
        with self._lock:
            for tp, partition in self._partitions.items():
                if partition.next < 0:
                    continue
                partition.pins = {
                    cid: offset
                    for cid, offset in partition.pins.items()
                    if cid in held or cid in partition.replay
                }
                commits[tp] = OffsetAndMetadata(partition.position(), "", -1)
        if commits:
            self._commit_offsets(consumer, commits)

    def _drop_revoked(self) -> None:
        with self._lock:
            revoked, self._revoked = self._revoked, []
        if revoked:
            self._stage.drop(revoked)

    # -- rebalance listener (kafka-python's network thread: quick, non-blocking) ----------

    def on_partitions_revoked(self, revoked: Any) -> None:
        with self._lock:
            leaving = {tp: self._partitions.pop(tp) for tp in revoked if tp in self._partitions}
            for partition in leaving.values():
                self._revoked.extend(partition.pins)  # the next owner rebuilds them
            self._rewind = {tp: p.position() for tp, p in leaving.items() if p.next >= 0}
            self._gauges()
        if self._rewind and self._consumer is not None:
            commits = {tp: OffsetAndMetadata(at, "", -1) for tp, at in self._rewind.items()}
            self._commit_offsets(self._consumer, commits, wait=False)

    def on_partitions_assigned(self, assigned: Any) -> None:
        with self._lock:
            rewind, self._rewind = self._rewind, {}
            for tp in assigned:
                self._partitions.setdefault(tp, _Partition())
            self._gauges()
        self._read_again(set(assigned), rewind)  # its conversations were dropped

    def _gauges(self) -> None:
        self._metrics.assigned.set(len(self._partitions))
        self._metrics.catching_up.set(sum(not p.live for p in self._partitions.values()))

    def _producer_config(self) -> dict[str, Any]:
        """The producer of the markers, which the dead letters share."""
        s = self._settings
        return {"acks": "all", "max_block_ms": 10_000, "max_request_size": s.max_message_bytes,
                **s.client_config()}  # fmt: skip
