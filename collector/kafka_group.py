"""What the two Kafka consumer groups share: the span group (:mod:`~ragpulse.collector.
intake.kafka`, spans keyed by trace id) and the conversation group (:mod:`~ragpulse.
collector.conversations.turn_consumer`, turns keyed by conversation id) each read on a
:class:`ConsumerThread` and commit per partition up to a :class:`PartitionOffsets` low
watermark; their consumers are configured by ``KafkaSettings.consumer_config``.

Per-partition low watermark of finished offsets, for at-least-once commits: a Kafka
message is *finished* when every trace it carried spans for has been evaluated and
exported, or deliberately dropped and counted. Messages finish out of order (traces
complete at different times), so the offset that may be committed is the lowest offset
still in flight: committing past it could lose a message if the process died now.
"""

from __future__ import annotations

import logging
import threading
from abc import abstractmethod
from collections import deque

from kafka import ConsumerRebalanceListener, KafkaConsumer
from kafka.errors import KafkaError

from ragpulse.config import KafkaSettings

log = logging.getLogger(__name__)


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
    """A Kafka group member reading on a thread of its own: the span group
    (``SpanConsumer``) and the conversation group (``TurnConsumer``) alike.

    ``start`` returns once the broker answered (or the first attempt failed: the thread
    keeps trying, every 2 s, until stopped). ``stop`` stops reading: what is held stays
    uncommitted and is read again after a restart or by the next owner; while the broker
    was never reached there is nothing to wait for (the daemon thread may sit in a
    bootstrap attempt, holding no messages). ``close``, after the collector drained, lets
    the thread make its last commits and leave. Subclasses give ``_connect`` and
    ``_consume``, which returns once ``_drained`` is set."""

    _thread_name = "ragpulse-kafka"

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._stopping = threading.Event()
        self._drained = threading.Event()
        self._reading_stopped = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: KafkaConsumer | None = None

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
                return self._connect()
            except KafkaError as exc:  # broker not up yet: keep trying until stopped
                log.warning("Kafka at %s unreachable (%r); retrying", self._settings.bootstrap, exc)
                self._ready.set()
                self._stopping.wait(2.0)
        return None

    @abstractmethod
    def _connect(self) -> KafkaConsumer: ...

    @abstractmethod
    def _consume(self, consumer: KafkaConsumer) -> None: ...
