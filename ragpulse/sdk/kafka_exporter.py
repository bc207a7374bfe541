"""App-side span exporter writing OTLP protobuf batches to Kafka, keyed by trace id.

For apps that write to Kafka without an OpenTelemetry Collector in between
(``ragpulse.configure(exporter="kafka")``). Each message holds the spans of one
trace as an ``ExportTraceServiceRequest`` (the Collector's ``otlp_proto``
encoding) keyed by the hex trace id, so every span of a trace lands on the
same partition and thus the same ragpulse collector.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from kafka import KafkaProducer
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

log = logging.getLogger(__name__)


def trace_batches(spans: Sequence[ReadableSpan]) -> list[tuple[bytes, bytes]]:
    """(key, value) per trace: hex trace id, serialised ExportTraceServiceRequest."""
    by_trace: dict[int, list[ReadableSpan]] = defaultdict(list)
    for span in spans:
        if span.context is not None:
            by_trace[span.context.trace_id].append(span)
    return [
        (f"{trace_id:032x}".encode(), encode_spans(group).SerializeToString())
        for trace_id, group in by_trace.items()
    ]


class KafkaSpanExporter(SpanExporter):
    """Contract as in the OTel SDK: ``export`` is called from the batch processor's
    thread, never raises, and returns FAILURE when the broker did not take the
    batch within ``timeout_s`` (the processor then drops it and OTel logs it)."""

    def __init__(
        self,
        bootstrap: str = "127.0.0.1:9092",
        topic: str = "otlp_spans",
        *,
        timeout_s: float = 10.0,
        client_config: dict[str, Any] | None = None,
    ) -> None:
        self._topic = topic
        self._timeout_s = timeout_s
        # One message per trace, up to what ragpulse's consumers accept (8 MiB); kafka-python's
        # own default (1 MB) would refuse a trace with a few long documents.
        self._config = {
            "bootstrap_servers": bootstrap.split(","),
            "max_request_size": 8 * 1024 * 1024,
            **(client_config or {}),
        }
        self._producer: KafkaProducer | None = None
        self._lock = threading.Lock()

    def _get_producer(self) -> KafkaProducer:
        # Created lazily: a broker that is down at app start must not break the app.
        with self._lock:
            if self._producer is None:
                self._producer = KafkaProducer(acks="all", linger_ms=5, retries=5, **self._config)
            return self._producer

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            producer = self._get_producer()
            futures = [
                producer.send(self._topic, key=key, value=value)
                for key, value in trace_batches(spans)
            ]
            producer.flush(timeout=self._timeout_s)
            for future in futures:
                future.get(timeout=self._timeout_s)
        except Exception as exc:
            log.warning("Kafka span export to %s failed: %r", self._topic, exc)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        if self._producer is not None:
            try:
                self._producer.flush(timeout=timeout_millis / 1000)
            except Exception:
                return False
        return True

    def shutdown(self) -> None:
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.close(timeout=self._timeout_s)
            except Exception:
                log.debug("closing the Kafka producer failed", exc_info=True)
