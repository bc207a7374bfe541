"""The span consumer's logic that the test broker cannot exercise.

tansu (the Kafka-protocol broker the integration tests use) stores commit
metadata but never returns it, so counting redeliveries after a crash, which
reads the previous owner's read mark from that metadata, is tested here with a
stand-in consumer that returns metadata as Apache Kafka does. Everything else
about it is tested against the real broker in test_kafka_intake.py.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from kafka.structs import OffsetAndMetadata, TopicPartition
from support.helpers import Message, rag_request

from ragpulse.collector.intake.kafka import SpanConsumer
from ragpulse.collector.service import Collector
from ragpulse.config import load_settings


class MetadataConsumer:
    """Stand-in for a consumer on a broker that returns commit metadata."""

    def __init__(self, committed: OffsetAndMetadata) -> None:
        self._committed = committed

    def committed(self, tp: TopicPartition, metadata: bool = False) -> Any:
        return self._committed if metadata else self._committed.offset


def test_rereads_below_the_previous_read_mark_are_counted_as_redeliveries() -> None:
    settings = load_settings(source="kafka")
    collector = Collector(settings, evaluators=[], sinks=[], receiver=False, metrics_server=False)
    source = SpanConsumer(settings.kafka, collector, collector.metrics)
    tp = TopicPartition("otlp_spans", 0)
    source.on_partitions_assigned({tp})
    # The previous owner committed 5 having read up to (not including) 8.
    consumer = MetadataConsumer(OffsetAndMetadata(5, json.dumps({"read": 8}), -1))
    value = rag_request([(bytes(range(16)), "q?", ["d"], "a")]).SerializeToString()
    for offset in range(5, 10):
        source._handle(consumer, tp, Message(tp.topic, 0, offset, b"k", value))  # type: ignore[arg-type]
    registry = collector.metrics.registry
    assert registry.get_sample_value("ragpulse_kafka_redelivered_messages_total") == 3
    assert registry.get_sample_value("ragpulse_kafka_messages_total", {"outcome": "ok"}) == 5


class WatchedEvent(threading.Event):
    """An Event that records each wait(): True if it was set, False if it timed out."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[bool] = []

    def wait(self, timeout: float | None = None) -> bool:
        result = super().wait(timeout)
        self.waits.append(result)
        return result


def test_stop_is_prompt_while_the_broker_was_never_reached(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real kafka-python consumer against a port nobody listens on: start() gives up
    waiting after one bootstrap attempt, and stop/close do not wait for the consumer
    thread (a SIGTERM during a broker outage must not hang past the orchestrator's
    grace period). Asserted by what they waited for, not by a clock; the durations
    are printed by bench/failure_latency.py."""
    settings = load_settings(source="kafka", kafka={"bootstrap": "127.0.0.1:1"})
    collector = Collector(settings, evaluators=[], sinks=[], receiver=False, metrics_server=False)
    source = SpanConsumer(settings.kafka, collector, collector.metrics)
    ready, reading_stopped = WatchedEvent(), WatchedEvent()
    monkeypatch.setattr(source, "_ready", ready)
    monkeypatch.setattr(source, "_reading_stopped", reading_stopped)
    source.start()
    assert ready.waits == [True], "start() waited out its timeout instead of the first attempt"
    thread = source._thread
    assert thread is not None
    joins: list[float | None] = []
    monkeypatch.setattr(thread, "join", lambda timeout=None: joins.append(timeout))
    source.stop()
    source.close()
    assert reading_stopped.waits == [], "stop() waited for a consumer that never connected"
    assert joins == [], "close() joined a consumer thread that never connected"
