"""KafkaSource logic that the test broker cannot exercise.

tansu (the Kafka-protocol broker the integration tests use) stores commit
metadata but never returns it, so counting redeliveries after a crash, which
reads the previous owner's read mark from that metadata, is tested here with a
stand-in consumer that returns metadata as Apache Kafka does. Everything else
about KafkaSource is tested against the real broker in test_kafka_intake.py.
"""

from __future__ import annotations

import json
import time
from typing import Any, NamedTuple

from helpers import rag_request
from kafka.structs import OffsetAndMetadata, TopicPartition

from ragpulse.collector.kafka_source import KafkaSource
from ragpulse.collector.service import Collector
from ragpulse.config import load_settings


class Message(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes


class MetadataConsumer:
    """Stand-in for a consumer on a broker that returns commit metadata."""

    def __init__(self, committed: OffsetAndMetadata) -> None:
        self._committed = committed

    def committed(self, tp: TopicPartition, metadata: bool = False) -> Any:
        return self._committed if metadata else self._committed.offset


def test_rereads_below_the_previous_read_mark_are_counted_as_redeliveries() -> None:
    settings = load_settings(source="kafka")
    collector = Collector(settings, evaluators=[], sinks=[], receiver=False, metrics_server=False)
    source = KafkaSource(settings.kafka, collector, collector.metrics)
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


def test_stop_is_prompt_while_the_broker_was_never_reached() -> None:
    """A real kafka-python consumer against a port nobody listens on: start() gives up
    waiting after one bootstrap attempt, and stop/close return at once (a SIGTERM during
    a broker outage must not hang past the orchestrator's grace period)."""
    settings = load_settings(source="kafka", kafka={"bootstrap": "127.0.0.1:1"})
    collector = Collector(settings, evaluators=[], sinks=[], receiver=False, metrics_server=False)
    source = KafkaSource(settings.kafka, collector, collector.metrics)
    t0 = time.monotonic()
    source.start()
    assert time.monotonic() - t0 < 15
    t1 = time.monotonic()
    source.stop()
    source.close()
    assert time.monotonic() - t1 < 2
