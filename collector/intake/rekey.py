"""The re-key stage: unkeyed OTLP batches in, one message per trace (keyed by trace id) out.

Needed when producers do not key by trace id: the OpenTelemetry Collector
without ``partition_traces_by_id``, or collectors such as rotel, write whole
batches with an empty key, so spans of one trace can land on different
partitions and reach different ragpulse collectors, none of which would see
the whole trace. ``ragpulse rekey`` reads such a topic and re-produces the spans
grouped per trace, keyed by trace id, to the topic the evaluating group reads
(like the Collector's load-balancing exporter, but through Kafka).

At-least-once: input offsets are committed only after the producer has the
re-keyed messages acknowledged; a crash re-produces (the evaluating side then
sees a trace's spans twice within the same trace, which assembly tolerates).
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from prometheus_client import CollectorRegistry, Counter

from ragpulse.collector.intake import otlp
from ragpulse.collector.kafka_group import ERROR_HEADER
from ragpulse.config import KafkaSettings
from ragpulse.errors import DecodeError

log = logging.getLogger(__name__)


def split_by_trace(
    request: trace_service_pb2.ExportTraceServiceRequest,
) -> dict[bytes, trace_service_pb2.ExportTraceServiceRequest]:
    """One request per trace id, keeping each span's resource and scope."""
    out: dict[bytes, trace_service_pb2.ExportTraceServiceRequest] = {}
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            groups: dict[bytes, list[Any]] = defaultdict(list)
            for span in ss.spans:
                groups[bytes(span.trace_id)].append(span)
            for trace_id, spans in groups.items():
                req = out.setdefault(trace_id, trace_service_pb2.ExportTraceServiceRequest())
                # One ResourceSpans per (trace, source ResourceSpans): reuse the last
                # one when it came from the same resource.
                if not req.resource_spans or req.resource_spans[-1].resource != rs.resource:
                    new_rs = req.resource_spans.add()
                    new_rs.resource.CopyFrom(rs.resource)
                    new_rs.schema_url = rs.schema_url
                new_ss = req.resource_spans[-1].scope_spans.add()
                new_ss.scope.CopyFrom(ss.scope)
                new_ss.schema_url = ss.schema_url
                new_ss.spans.extend(spans)
    return out


class Rekeyer:
    """Consumes ``settings.rekey_input_topic`` and produces to ``settings.topic``."""

    def __init__(
        self,
        settings: KafkaSettings,
        registry: CollectorRegistry | None = None,
        consumer_factory: Callable[..., KafkaConsumer] = KafkaConsumer,
        producer_factory: Callable[..., KafkaProducer] = KafkaProducer,
    ) -> None:
        self._settings = settings
        registry = registry if registry is not None else CollectorRegistry()
        self.messages = Counter(
            "ragpulse_rekey_messages",
            "Input batches by outcome (ok, poison).",
            ["outcome"],
            registry=registry,
        )
        self.traces = Counter(
            "ragpulse_rekey_traces", "Per-trace messages produced.", registry=registry
        )
        self._consumer_factory = consumer_factory
        self._producer_factory = producer_factory
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Blocks until :meth:`stop`; reconnects on broker errors."""
        s = self._settings
        consumer = producer = None
        while not self._stop.is_set():
            try:
                if consumer is None:
                    consumer = self._consumer_factory(
                        s.rekey_input_topic,
                        group_id=s.rekey_group,
                        enable_auto_commit=False,
                        auto_offset_reset=s.auto_offset_reset,
                        session_timeout_ms=s.session_timeout_ms,
                        heartbeat_interval_ms=s.heartbeat_interval_ms,
                        max_poll_records=s.max_poll_records,
                        **{**s.client_config(), **s.consumer_options},
                    )
                if producer is None:
                    # A re-keyed message is one whole trace: allow what the consumers accept
                    # (kafka-python's default request limit is 1 MB).
                    producer = self._producer_factory(
                        acks="all", max_request_size=s.max_message_bytes, **s.client_config()
                    )
                self._step(consumer, producer)
            except KafkaError as exc:
                log.warning("re-key stage: Kafka error %r; retrying", exc)
                self._stop.wait(1.0)
        for client in (consumer, producer):
            if client is not None:
                client.close()

    def _step(self, consumer: KafkaConsumer, producer: KafkaProducer) -> None:
        batches = consumer.poll(timeout_ms=200)
        if not batches:
            return
        commits: dict[TopicPartition, OffsetAndMetadata] = {}
        futures = []
        for tp, messages in batches.items():
            for message in messages:
                futures.extend(self._rekey(message, producer))
                commits[tp] = OffsetAndMetadata(message.offset + 1, "", -1)
        producer.flush(timeout=30)
        for future in futures:
            future.get(timeout=30)  # raises: the batch is not committed and is re-read
        consumer.commit(commits)

    def _rekey(self, message: Any, producer: KafkaProducer) -> list[Any]:
        value: bytes = message.value or b""
        try:
            if len(value) > self._settings.max_message_bytes:
                raise DecodeError(f"message of {len(value)} bytes exceeds the limit")
            request = otlp.parse_request(value, otlp.ENCODINGS[self._settings.encoding])
        except DecodeError as exc:
            self.messages.labels("poison").inc()
            return self._dead_letter(message, str(exc), producer)
        self.messages.labels("ok").inc()
        futures = []
        for trace_id, per_trace in split_by_trace(request).items():
            futures.append(
                producer.send(
                    self._settings.topic,
                    key=trace_id.hex().encode(),
                    value=per_trace.SerializeToString(),
                )
            )
            self.traces.inc()
        return futures

    def _dead_letter(self, message: Any, error: str, producer: KafkaProducer) -> list[Any]:
        topic = self._settings.dead_letter_topic
        if not topic:
            log.warning("re-key stage: skipping poison message at offset %s: %s",
                        message.offset, error)  # fmt: skip
            return []
        headers = [(ERROR_HEADER, error[:1000].encode())]
        return [producer.send(topic, value=message.value, key=message.key, headers=headers)]
