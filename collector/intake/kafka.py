"""``kafka``: a consumer-group member reading what the OpenTelemetry Collector's Kafka
exporter writes (``otlp_proto`` or ``otlp_json``); options: the ``kafka`` section.

At-least-once: offsets are committed manually, per partition, up to the low
watermark of finished messages (see :mod:`ragpulse.collector.kafka_group`). A
message is finished when every trace it fed has been exported, or dropped and
counted. A crash re-reads from the last commit; the commit metadata records
how far this member had read, so re-read messages are counted as
redeliveries (the bound on duplicates).

All consumer calls happen on one thread (kafka-python clients are not
thread-safe); acknowledgements arrive from the evaluation worker and only
touch the thread-safe offset tracker.

With a conversation topic (``kafka.conversation_topic``, on by default), a conversation's
turns, which reach different replicas, go through the broker too: the source writes every
exported turn there, keyed by conversation id (:mod:`~ragpulse.collector.conversations.
turn_writer`), and reads, in a consumer group of its own, the partitions it owns into the
conversation stage (:mod:`~ragpulse.collector.conversations.turn_consumer`). A span offset
is committed only once the turns of its traces are on the broker.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from kafka import KafkaConsumer, KafkaProducer
from kafka.structs import OffsetAndMetadata, TopicPartition
from prometheus_client import CollectorRegistry, Counter, Gauge

from ragpulse.collector.conversations.turn_consumer import TurnConsumer
from ragpulse.collector.conversations.turn_writer import TurnTopicMetrics, TurnWriter
from ragpulse.collector.intake import otlp
from ragpulse.collector.kafka_group import ConsumerThread, PartitionOffsets
from ragpulse.config import KafkaSettings, Settings
from ragpulse.errors import CollectorFull, DecodeError
from ragpulse.options import PluginOptions
from ragpulse.source import Ack, Intake, Source, SourceContext
from ragpulse.telemetry import CollectorMetrics

log = logging.getLogger(__name__)

FULL_WAIT_S = 0.1  # a message the collector has no room for is offered again this often


class KafkaMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.messages = Counter(
            "ragpulse_kafka_messages",
            "Kafka messages read, by outcome (ok, poison, oversized).",
            ["outcome"],
            registry=registry,
        )
        self.dead_letters = Counter(
            "ragpulse_kafka_dead_letters",
            "Poison messages by what became of them (dead_lettered, skipped, dlq_failed).",
            ["result"],
            registry=registry,
        )
        self.commits = Counter(
            "ragpulse_kafka_commits",
            "Offset commits by outcome (ok, failed, deferred: turns for the conversation "
            "topic still being written).",
            ["outcome"],
            registry=registry,
        )
        self.rebalances = Counter(
            "ragpulse_kafka_rebalances",
            "Partition assignment changes (assigned, revoked).",
            ["event"],
            registry=registry,
        )
        self.abandoned = Counter(
            "ragpulse_kafka_abandoned_traces",
            "Open traces left to the new owner of a revoked partition.",
            registry=registry,
        )
        self.redelivered = Counter(
            "ragpulse_kafka_redelivered_messages",
            "Messages read again after a restart or rebalance (possible duplicate evaluations).",
            registry=registry,
        )
        self.lag = Gauge(
            "ragpulse_kafka_consumer_lag",
            "End offset minus committable offset (approximate on brokers with odd watermarks).",
            ["topic", "partition"],
            registry=registry,
        )
        self.paused = Gauge(
            "ragpulse_kafka_paused", "1 while fetching is paused (backpressure).", registry=registry
        )
        self.assigned = Gauge(
            "ragpulse_kafka_assigned_partitions", "Partitions owned now.", registry=registry
        )


class SpanConsumer(ConsumerThread):
    """Consumes ``settings.topic`` in group ``settings.group`` into an :class:`Intake`."""

    name = "kafka"

    def __init__(
        self,
        settings: KafkaSettings,
        intake: Intake,
        metrics: CollectorMetrics,
        consumer_factory: Callable[..., KafkaConsumer] = KafkaConsumer,
        producer_factory: Callable[..., KafkaProducer] = KafkaProducer,
        before_commit: Callable[[float], bool] | None = None,
    ) -> None:
        """``before_commit(timeout_s)``: whether what the finished messages gave on is
        delivered (the conversation topic's turns); False defers the commit."""
        kafka_metrics = KafkaMetrics(metrics.registry)
        super().__init__(
            settings, settings.topic, settings.group,
            dead_letters=kafka_metrics.dead_letters, commits=kafka_metrics.commits,
            consumer_factory=consumer_factory, producer_factory=producer_factory,
        )  # fmt: skip
        self._intake = intake
        self._before_commit = before_commit
        self._metrics = metrics
        self._kafka_metrics = kafka_metrics
        self._offsets: dict[TopicPartition, PartitionOffsets] = {}
        self._redelivery_marks: dict[TopicPartition, int] = {}  # fetched lazily
        self._paused = False
        self._last_lag = 0.0

    @property
    def assignment(self) -> set[TopicPartition]:
        return set(self._offsets)

    # -- consumer thread ---------------------------------------------------------
    def _round(self, consumer: KafkaConsumer) -> None:
        self._backpressure(consumer)
        batches = consumer.poll(timeout_ms=200)
        for tp, messages in batches.items():
            for message in messages:
                self._handle(consumer, tp, message)
        if self._commit_due():
            self._commit(consumer, self._offsets)
        self._maybe_update_lag(consumer)

    def _leave_partitions(self) -> None:
        # Open traces go to the next reader.
        mine = set(self._offsets)
        self._kafka_metrics.abandoned.inc(
            self._intake.abandon(lambda acks: any(a.source in mine for a in acks))
        )

    def _commit_last(self, consumer: KafkaConsumer) -> None:
        self._commit(consumer, self._offsets, deliveries_s=10.0)

    def _handle(self, consumer: KafkaConsumer, tp: TopicPartition, message: Any) -> None:
        offsets = self._offsets.get(tp)
        if offsets is None:  # a partition we no longer own
            return
        offsets.started(message.offset)
        if message.offset < self._redelivery_mark(consumer, tp):
            self._kafka_metrics.redelivered.inc()
        value: bytes = message.value or b""
        if len(value) > self._settings.max_message_bytes:
            self._kafka_metrics.messages.labels("oversized").inc()
            self._dead_letter(message, f"message of {len(value)} bytes exceeds the limit")
            offsets.finished(message.offset)
            return
        try:
            request = otlp.parse_request(value, otlp.ENCODINGS[self._settings.encoding])
            decoded = otlp.decode_request(request)
        except DecodeError as exc:
            self._kafka_metrics.messages.labels("poison").inc()
            self._dead_letter(message, str(exc))
            offsets.finished(message.offset)
            return
        self._kafka_metrics.messages.labels("ok").inc()
        self._metrics.spans_received.inc(len(decoded.spans) + decoded.rejected)
        if decoded.rejected:
            self._metrics.dropped.labels("invalid_span").inc(decoded.rejected)
        offset = message.offset
        ack = Ack(lambda: offsets.finished(offset), source=tp)
        # Near the collector's bounds the message waits here (fetching is paused by
        # then); when stopping first, it stays unacknowledged and is read again later.
        while True:
            try:
                self._intake.ingest(decoded.spans, ack, nbytes=len(value), admit=True)
                return
            except CollectorFull:
                if self._stopping.wait(FULL_WAIT_S):
                    return

    def _backpressure(self, consumer: KafkaConsumer) -> None:
        """Pause fetching while the bounded stages are nearly full; resume at half."""
        pressure = self._intake.pressure()
        if not self._paused and pressure >= self._settings.pause_ratio:
            consumer.pause(*consumer.assignment())
            self._paused = True
            self._kafka_metrics.paused.set(1)
        elif self._paused and pressure <= self._settings.pause_ratio / 2:
            consumer.resume(*consumer.paused())
            self._paused = False
            self._kafka_metrics.paused.set(0)

    def _commit(
        self,
        consumer: KafkaConsumer,
        partitions: dict[TopicPartition, PartitionOffsets],
        wait: bool = True,
        deliveries_s: float = 1.0,
    ) -> None:
        commits = {}
        for tp, offsets in partitions.items():
            position = offsets.committable()
            if position is not None:
                # The metadata says how far we had read: after a crash, anything
                # between the commit and this mark may be evaluated twice.
                mark = json.dumps({"read": offsets.read_mark})
                commits[tp] = OffsetAndMetadata(position, mark, -1)
        if not commits:
            return
        # The turns these messages' traces gave (for the conversation topic) must be on the
        # broker first: committing while one is in a buffer could lose it to a SIGKILL.
        if self._before_commit is not None and not self._before_commit(
            deliveries_s if wait else 0.0
        ):
            self._kafka_metrics.commits.labels("deferred").inc()
            return
        self._commit_offsets(consumer, commits, wait=wait)

    def _maybe_update_lag(self, consumer: KafkaConsumer) -> None:
        now = time.monotonic()
        if now - self._last_lag < self._settings.lag_interval_s or not self._offsets:
            return
        self._last_lag = now
        try:
            ends = consumer.end_offsets(list(self._offsets))
        except Exception:
            log.debug("end_offsets failed", exc_info=True)
            return
        for tp, end in ends.items():
            offsets = self._offsets.get(tp)
            position = offsets.committable() if offsets else None
            if position is None:
                position = consumer.committed(tp) or 0
            self._kafka_metrics.lag.labels(tp.topic, str(tp.partition)).set(max(0, end - position))

    # -- rebalance listener --------------------------------------------------------
    # kafka-python 3 runs these on its network thread, where blocking client calls
    # are refused and would stall heartbeats: only quick, non-blocking work here.
    def on_partitions_revoked(self, revoked: Any) -> None:
        revoked = set(revoked)
        if not revoked:
            return
        self._kafka_metrics.rebalances.labels("revoked").inc(len(revoked))
        # Open traces of these partitions go to the new owner, which re-reads them
        # from our last commit; commit (without waiting) what has finished so far.
        gone = self._intake.abandon(lambda acks: any(a.source in revoked for a in acks))
        self._kafka_metrics.abandoned.inc(gone)
        leaving = {tp: o for tp, o in self._offsets.items() if tp in revoked}
        if self._consumer is not None:
            self._commit(self._consumer, leaving, wait=False)
        self._rewind = {tp: at for tp, o in leaving.items() if (at := o.committable()) is not None}
        for tp in revoked:
            self._offsets.pop(tp, None)
            self._redelivery_marks.pop(tp, None)
            try:
                self._kafka_metrics.lag.remove(tp.topic, str(tp.partition))
            except KeyError:
                pass  # no lag reported yet for it
        self._kafka_metrics.assigned.set(len(self._offsets))

    def on_partitions_assigned(self, assigned: Any) -> None:
        assigned = set(assigned)
        self._kafka_metrics.rebalances.labels("assigned").inc(len(assigned))
        for tp in assigned:
            self._offsets.setdefault(tp, PartitionOffsets())
        rewind, self._rewind = self._rewind, {}
        self._read_again(assigned, rewind)  # its open traces were abandoned
        if self._paused and self._consumer is not None:
            self._consumer.pause(*assigned)  # stay paused for newly assigned partitions
        self._kafka_metrics.assigned.set(len(self._offsets))

    def _redelivery_mark(self, consumer: KafkaConsumer, tp: TopicPartition) -> int:
        """How far the previous owner had read (commit metadata), fetched once per assignment.

        Brokers that do not return commit metadata (tansu) give -1: re-reads
        are then not counted.
        """
        mark = self._redelivery_marks.get(tp)
        if mark is None:
            mark = -1
            try:
                committed = consumer.committed(tp, metadata=True)
                if committed is not None and committed.metadata:
                    mark = int(json.loads(committed.metadata).get("read", -1))
            except Exception:
                log.debug("no commit metadata for %s", tp, exc_info=True)
            self._redelivery_marks[tp] = mark
        return mark


class KafkaSource(Source):
    """``kafka``: the span group's member, and, with a conversation topic, the turn path
    (the writer and the conversation group's member); options: the ``kafka`` section."""

    name = "kafka"
    Options = KafkaSettings
    options: KafkaSettings

    def __init__(self, options: PluginOptions, context: SourceContext) -> None:
        super().__init__(options, context)
        settings = self.options
        self.writer: TurnWriter | None = None
        self.turns: TurnConsumer | None = None
        if settings.turn_topic():
            turn_metrics = TurnTopicMetrics(context.metrics.registry)
            self.writer = TurnWriter(settings, turn_metrics, context.conversations)
            self.turns = TurnConsumer(settings, context.conversations, turn_metrics)
            context.conversations.hold_elsewhere(self.writer)
        self.spans = SpanConsumer(
            settings,
            context.intake,
            context.metrics,
            before_commit=self.writer.delivered if self.writer is not None else None,
        )

    @classmethod
    def options_from(cls, settings: Settings) -> KafkaSettings:
        return settings.kafka

    def start(self) -> None:
        if self.writer is not None:
            self.writer.start()
        self.spans.start()
        if self.turns is not None:
            self.turns.start()

    def stop(self) -> None:
        self.spans.stop()
        if self.turns is not None:
            self.turns.stop()

    def close(self) -> None:
        # The turns the drained traces gave reach the broker before the spans' last commit.
        if self.writer is not None:
            self.writer.close()
        self.spans.close()
        if self.turns is not None:
            self.turns.close()

    def describe(self) -> list[str]:
        k = self.options
        return [f"consuming {k.topic} from {k.bootstrap} as group {k.group} ({k.encoding})"]
