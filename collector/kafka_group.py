"""What the two Kafka consumer groups share: the span group (:mod:`~ragpulse.collector.
intake.kafka`, spans keyed by trace id) and the conversation group (:mod:`~ragpulse.
collector.conversations.turn_consumer`, turns keyed by conversation id) each read on a
:class:`ConsumerThread` and commit per partition up to a :class:`PartitionOffsets` low
watermark; their consumers are configured by ``KafkaSettings.consumer_config``, and
both dead-letter their poison messages alike.

Per-partition low watermark of finished offsets, for at-least-once commits: a Kafka
message is *finished* when every trace it carried spans for has been evaluated and
exported, or deliberately dropped and counted. Messages finish out of order (traces
complete at different times), so the offset that may be committed is the lowest offset
still in flight: committing past it could lose a message if the process died now.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import abstractmethod
from collections import deque
from collections.abc import Callable
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition
from prometheus_client import Counter

from ragpulse.config import KafkaSettings

log = logging.getLogger(__name__)

ERROR_HEADER = "ragpulse.error"
"""The header a dead-lettered message carries its error in."""


class PartitionOffsets:
    """Offsets of one partition in read order; thread-safe.

    ``started`` is called by the consumer thread in increasing offset order;
    ``finished`` by whichever thread finished the message (the evaluation
    worker, or the consumer itself for poison messages).
    """

    def __init__(self) -> None:
        self._in_flight: deque[int] = deque()
        self._finished: set[int] = set()
        self._next = -1  # one past the highest offset read
        self._lock = threading.Lock()

    def started(self, offset: int) -> None:
        with self._lock:
            self._in_flight.append(offset)
            self._next = max(self._next, offset + 1)

    def finished(self, offset: int) -> None:
        with self._lock:
            self._finished.add(offset)
            while self._in_flight and self._in_flight[0] in self._finished:
                self._finished.discard(self._in_flight.popleft())

    def committable(self) -> int | None:
        """The offset to commit (next to read after a restart), or None if nothing was read."""
        with self._lock:
            if self._in_flight:
                return self._in_flight[0]
            return self._next if self._next >= 0 else None

    @property
    def read_mark(self) -> int:
        """One past the highest offset read (recorded in commit metadata)."""
        return self._next

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)


class ConsumerThread(ConsumerRebalanceListener):  # type: ignore[misc]  # kafka: untyped
    """A Kafka group member reading ``topic`` in ``group`` on a thread of its own: the span
    group (``SpanConsumer``) and the conversation group (``TurnConsumer``) alike.

    ``start`` returns once the broker answered (or the first attempt failed: the thread
    keeps trying, every 2 s, until stopped). ``stop`` stops reading: what is held stays
    uncommitted and is read again after a restart or by the next owner; while the broker
    was never reached there is nothing to wait for (the daemon thread may sit in a
    bootstrap attempt, holding no messages). ``close``, after the collector drained, lets
    the thread make its last commits and leave. Subclasses give ``_round`` (one poll and
    what it read), ``_commit_last`` and, where they hold work for the partitions they read,
    ``_leave_partitions``; commits, dead letters and a revoked partition given back again
    are handled here alike."""

    _thread_name = "ragpulse-kafka"
    _what = "the span topic"
    """What the member reads, as its log lines say it."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        group: str,
        *,
        dead_letters: Counter,
        commits: Counter,
        consumer_factory: Callable[..., KafkaConsumer] = KafkaConsumer,
        producer_factory: Callable[..., KafkaProducer] = KafkaProducer,
    ) -> None:
        """``dead_letters`` counts poison messages by result (dead_lettered, skipped,
        dlq_failed); ``commits`` offset commits by outcome (ok, failed)."""
        self._settings = settings
        self._topic, self._group = topic, group
        self._dead_letters, self._commits = dead_letters, commits
        self._consumer_factory = consumer_factory
        self._producer_factory = producer_factory
        self._stopping = threading.Event()
        self._drained = threading.Event()
        self._reading_stopped = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: KafkaConsumer | None = None
        self._producer: KafkaProducer | None = None
        self._rewind: dict[TopicPartition, int] = {}  # revoked here: where to read from
        self._last_commit = 0.0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        self._thread.start()
        self._ready.wait(30)

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None and self._consumer is not None:
            self._reading_stopped.wait(30)

    def close(self) -> None:
        self._drained.set()
        if self._thread is not None and self._consumer is not None:
            self._thread.join(30)
        self._thread = None

    def _run(self) -> None:
        consumer = self._connect_until_stopped()
        self._consumer = consumer
        self._ready.set()
        try:
            if consumer is not None:
                self._consume(consumer)
        finally:
            self._reading_stopped.set()

    def _connect_until_stopped(self) -> KafkaConsumer | None:
        while not self._stopping.is_set():
            try:
                consumer = self._consumer_factory(**self._settings.consumer_config(self._group))
                consumer.subscribe([self._topic], listener=self)
                return consumer
            except KafkaError as exc:  # broker not up yet: keep trying until stopped
                log.warning("Kafka at %s unreachable (%r); retrying", self._settings.bootstrap, exc)
                self._ready.set()
                self._stopping.wait(2.0)
        return None

    def _consume(self, consumer: KafkaConsumer) -> None:
        while not self._stopping.is_set():
            try:
                self._round(consumer)
            except KafkaError as exc:
                # Broker gone or restarting: kafka-python reconnects by itself;
                # keep polling (with a pause so a dead broker is not hammered).
                log.warning("Kafka error while reading %s: %r", self._what, exc)
                time.sleep(0.5)
            except Exception:
                log.exception("unexpected error while reading %s", self._what)
                time.sleep(0.5)
        # Stop reading; once the collector has exported what completed, close() lets us
        # commit and leave the group.
        self._leave_partitions()
        self._reading_stopped.set()
        self._drained.wait(60)
        self._commit_last(consumer)
        try:
            consumer.close(autocommit=False)
        except Exception:
            log.debug("error closing the consumer of %s", self._what, exc_info=True)
        if self._producer is not None:
            self._producer.close(5)

    @abstractmethod
    def _round(self, consumer: KafkaConsumer) -> None:
        """One poll, and what it read handled (on the consumer thread)."""

    @abstractmethod
    def _commit_last(self, consumer: KafkaConsumer) -> None:
        """The last commit, once the collector drained."""

    def _leave_partitions(self) -> None:
        """Reading stopped: let go of what is held for the partitions read (the next owner
        reads it again)."""

    # -- offsets ----------------------------------------------------------------------------

    def _commit_due(self) -> bool:
        """Whether ``commit_interval_s`` passed since the last interval's commit."""
        now = time.monotonic()
        if now - self._last_commit < self._settings.commit_interval_s:
            return False
        self._last_commit = now
        return True

    def _commit_offsets(
        self,
        consumer: KafkaConsumer,
        commits: dict[TopicPartition, OffsetAndMetadata],
        *,
        wait: bool = True,
    ) -> None:
        """Commit ``commits`` (without waiting: from a rebalance callback), counted."""
        try:
            if not wait:
                consumer.commit_async(commits, callback=self._on_async_commit)
                return
            consumer.commit(commits)
            self._commits.labels("ok").inc()
        except Exception as exc:  # retried at the next interval; nothing is lost
            self._commits.labels("failed").inc()
            log.warning("offset commit on %s failed: %r", self._what, exc)

    def _on_async_commit(self, offsets: Any, response: Any) -> None:
        failed = isinstance(response, Exception)
        self._commits.labels("failed" if failed else "ok").inc()
        if failed:
            log.warning("offset commit on %s failed: %r", self._what, response)

    def _read_again(self, assigned: set[TopicPartition], rewind: dict[TopicPartition, int]) -> None:
        """A partition revoked and given back in the same rebalance keeps the client's read
        position (kafka-python keeps a partition's state across it), but what was held of
        it was let go: read it again from the commit, as a new owner would."""
        for tp in assigned & rewind.keys():
            if self._consumer is not None:
                self._consumer.seek(tp, rewind[tp])

    # -- producing: dead letters --------------------------------------------------------------

    def _producer_now(self) -> KafkaProducer:
        if self._producer is None:
            self._producer = self._producer_factory(**self._producer_config())
        return self._producer

    def _producer_config(self) -> dict[str, Any]:
        return self._settings.client_config()

    def _dead_letter(self, message: Any, error: str) -> None:
        """A poison message to ``dead_letter_topic`` (skipped without one), counted."""
        topic = self._settings.dead_letter_topic
        if not topic:
            self._dead_letters.labels("skipped").inc()
            log.warning("skipping poison message %s:%s@%s: %s", message.topic,
                        message.partition, message.offset, error)  # fmt: skip
            return
        headers = [
            (ERROR_HEADER, error[:1000].encode()),
            ("ragpulse.source", f"{message.topic}:{message.partition}:{message.offset}".encode()),
        ]
        try:
            self._producer_now().send(
                topic, value=message.value, key=message.key, headers=headers
            ).get(timeout=10)
            self._dead_letters.labels("dead_lettered").inc()
        except Exception as exc:  # the partition must go on: count, skip
            self._dead_letters.labels("dlq_failed").inc()
            log.error("could not dead-letter %s:%s@%s: %r", message.topic, message.partition,
                      message.offset, exc)  # fmt: skip
