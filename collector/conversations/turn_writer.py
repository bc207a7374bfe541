"""The replica's side of the Kafka turn topic: every exported turn of a conversation, and
every conversation record exported, written to ``kafka.conversation_topic`` keyed by
conversation id (see :mod:`ragpulse.collector.conversations.turn_messages`).

A span topic is keyed by trace id, so one conversation's turns reach different replicas;
re-keyed by conversation id, they meet again in the one member of the conversation group
that owns their partition (:mod:`ragpulse.collector.conversations.turn_consumer`).

It is where the conversation stage routes turns when they are held elsewhere
(:class:`~ragpulse.source.TurnRoute`): each export of a turn record (the first, then each
costly tier's update) and each conversation record, after the sinks had it. Neither
waits for the broker: messages queue (bounded; past the bound dropped and counted) for a
writer thread. The span intake asks :meth:`TurnWriter.delivered` before it commits:
a span offset is committed only once the turns of its traces are on the broker, so a
SIGKILL loses none of them (at-least-once, as for the spans themselves).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from kafka import KafkaProducer
from prometheus_client import CollectorRegistry, Counter, Gauge

from ragpulse.collector.conversations.stage import END_MARKER, kept_documents, summarize
from ragpulse.collector.conversations.turn_messages import ClosedMessage, TurnMessage, encode
from ragpulse.collector.kafka_group import PartitionOffsets
from ragpulse.config import KafkaSettings
from ragpulse.record import ConversationRecord, EvalResult, RagRecord
from ragpulse.source import ConversationHooks

log = logging.getLogger(__name__)

MAX_QUEUED = 10_000
"""Messages waiting for the writer thread; past it a message is dropped and counted."""
MAX_BLOCK_MS = 5_000
"""How long a send may wait for the topic's metadata (no broker, a topic that does not
exist); then it is tried again, with a growing pause."""


class TurnTopicMetrics:
    """Series of the turn topic, on both sides (written here, read by the conversation group)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.written = Counter(
            "ragpulse_kafka_turns_written",
            "Messages for the conversation topic by outcome: ok, failed (the broker refused "
            "it or did not answer in time; logged), dropped (the writer's queue was full).",
            ["outcome"],
            registry=registry,
        )
        self.read = Counter(
            "ragpulse_kafka_turn_topic_messages",
            "Conversation-topic messages read by kind: turn, closed (a conversation record "
            "written after its export), caught_up (a member's marker), poison, oversized.",
            ["kind"],
            registry=registry,
        )
        self.replayed = Counter(
            "ragpulse_kafka_turn_topic_replayed",
            "Conversation-topic messages read before this member caught up with its "
            "partition (read again after a restart or rebalance: state rebuilt, not exported).",
            registry=registry,
        )
        self.dead_letters = Counter(
            "ragpulse_kafka_turn_topic_dead_letters",
            "Poison conversation-topic messages by what became of them (dead_lettered, "
            "skipped, dlq_failed).",
            ["result"],
            registry=registry,
        )
        self.commits = Counter(
            "ragpulse_kafka_turn_topic_commits",
            "Conversation-group offset commits by outcome (ok, failed).",
            ["outcome"],
            registry=registry,
        )
        self.assigned = Gauge(
            "ragpulse_kafka_turn_topic_assigned_partitions",
            "Conversation-topic partitions owned now.",
            registry=registry,
        )
        self.catching_up = Gauge(
            "ragpulse_kafka_turn_topic_catching_up",
            "Owned conversation-topic partitions not read up to this member's marker yet.",
            registry=registry,
        )


class TurnWriter:
    """Writes turns and conversation records to ``settings.turn_topic()`` (a
    :class:`~ragpulse.source.TurnRoute`); ``conversations`` says which turns this replica
    numbered on arrival (their holder numbers them)."""

    def __init__(
        self,
        settings: KafkaSettings,
        metrics: TurnTopicMetrics,
        conversations: ConversationHooks,
        producer_factory: Callable[..., KafkaProducer] = KafkaProducer,
    ) -> None:
        topic = settings.turn_topic()
        assert topic, "no conversation topic"
        self._settings, self._topic = settings, topic
        self._metrics = metrics
        self._conversations = conversations
        self._producer_factory = producer_factory
        self._producer: KafkaProducer | None = None
        self._queue: deque[tuple[int, bytes, bytes]] = deque()
        self._cond = threading.Condition()
        self._sent = PartitionOffsets()  # message sequence numbers: handed over -> acknowledged
        self._next_seq = 0
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="ragpulse-turns", daemon=True)

    def start(self) -> None:
        if self._thread.ident is None:  # not started yet
            self._thread.start()

    # -- what the conversation stage hands over (one call at a time) ------------------------

    def turn(
        self,
        record: RagRecord,
        results: Sequence[EvalResult],
        *,
        replaces: RagRecord | None = None,
    ) -> None:
        cid = record.conversation_id
        if not cid:
            return
        summary = summarize(record, results)
        if self._conversations.numbered_on_arrival(record.trace_id, record.span_id):
            summary = summary.model_copy(update={"turn": 0})  # the holder numbers it
        message = TurnMessage(
            conversation_id=cid,
            service=record.service,
            route=record.route,
            turn=summary,
            documents=kept_documents(record),
            end=record.attributes.get(END_MARKER) is True,
            replaces=replaces.span_id if replaces is not None else None,
        )
        self._put(cid, encode(message))

    def conversation(self, conversation: ConversationRecord, results: Sequence[EvalResult]) -> None:
        message = ClosedMessage(conversation=conversation, closed_at_unix=time.time())
        self._put(conversation.conversation_id, encode(message))

    def _put(self, key: str, value: bytes) -> None:
        with self._cond:
            if self._stopping or len(self._queue) >= MAX_QUEUED:
                self._metrics.written.labels("dropped").inc()
                return
            seq = self._next_seq
            self._next_seq += 1
            self._sent.started(seq)
            self._queue.append((seq, key.encode(), value))
            self._cond.notify_all()

    # -- the span intake's question before it commits -----------------------------------------

    def delivered(self, timeout_s: float) -> bool:
        """True when every message handed over before this call is on the broker (or failed
        and counted), waiting at most ``timeout_s``."""
        with self._cond:
            mark = self._next_seq
            return self._cond.wait_for(lambda: self._done_through(mark), timeout_s)

    def _done_through(self, mark: int) -> bool:
        position = self._sent.committable()
        return position is None or position >= mark

    def _finished(self, seq: int, outcome: str) -> None:
        self._metrics.written.labels(outcome).inc()
        with self._cond:
            self._sent.finished(seq)
            self._cond.notify_all()

    # -- the writer thread --------------------------------------------------------------------

    def _run(self) -> None:
        backoff = 0.0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._stopping)
                if not self._queue or (self._stopping and backoff):
                    return  # all written; or stopping while the broker refuses: left unsent
                seq, key, value = self._queue[0]
            try:
                future = self._connect().send(self._topic, key=key, value=value)
            except Exception as exc:  # no broker, no topic: the message waits, and so do
                # the span intake's commits (the spans are read again after a restart)
                if not backoff:
                    log.error("cannot write to the conversation topic %s (%r); retrying",
                              self._topic, exc)  # fmt: skip
                backoff = min(5.0, backoff * 2 or 0.5)
                with self._cond:
                    self._cond.wait_for(lambda: self._stopping, backoff)
                continue
            backoff = 0.0
            with self._cond:
                self._queue.popleft()
            future.add_callback(self._ok, seq)
            future.add_errback(self._failed, seq)

    def _connect(self) -> KafkaProducer:
        if self._producer is None:
            s = self._settings
            self._producer = self._producer_factory(
                acks="all",
                linger_ms=5,
                max_block_ms=MAX_BLOCK_MS,
                max_request_size=s.max_message_bytes,
                **s.client_config(),
            )
        return self._producer

    def _ok(self, seq: int, _metadata: Any) -> None:
        self._finished(seq, "ok")

    def _failed(self, seq: int, exc: Exception) -> None:
        # After the producer's own retries (delivery_timeout_ms): the broker refuses it.
        log.error("could not write to the conversation topic %s: %r (counted)",
                  self._topic, exc)  # fmt: skip
        self._finished(seq, "failed")

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Write what is queued (bounded), then close the producer."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(10)
        self.delivered(5.0)
        if self._producer is not None:
            try:
                self._producer.close(5)
            except Exception:
                log.debug("error closing the turn producer", exc_info=True)
