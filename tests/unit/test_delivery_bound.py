"""The tracing-tool sinks' bound counts every item they hold, retries included; the
delivery talks to any transport.

A backend that answers 503 to everything stands in for one that is down (an
``httpx.MockTransport``: the outage is the point here, not the backend's API, which the
live tests and the Langfuse double check). The sink retries for longer than the test
runs; every item past ``max_queue`` is dropped and counted, never held.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import httpx

from ragpulse.exporters.phoenix import PhoenixSink
from ragpulse.exporters.support.delivery import (
    ApiRequest,
    Delivery,
    DeliveryOptions,
    Outcome,
    Reply,
)
from ragpulse.record import EvalResult, ExportItem, RagRecord
from ragpulse.telemetry import CollectorMetrics

MAX_QUEUE = 8


def _record(i: int) -> RagRecord:
    return RagRecord(
        trace_id=f"{i:032x}", span_id=f"{i:016x}", question="q", answer="a", documents=[]
    )


def _result(i: int) -> EvalResult:
    return EvalResult(metric="faithfulness", method="lexical", score=i / 100)


def _sample(metrics: CollectorMetrics, outcome: str) -> float:
    value = metrics.registry.get_sample_value(
        "ragpulse_sink_items_total", {"sink": "phoenix", "outcome": outcome}
    )
    return value or 0.0


def test_a_backend_down_longer_than_the_queue_holds_drops_and_counts_the_rest() -> None:
    calls = threading.Event()

    def down(request: httpx.Request) -> httpx.Response:
        calls.set()
        return httpx.Response(503)

    metrics = CollectorMetrics()
    sink = PhoenixSink(
        PhoenixSink.Options(
            endpoint="http://127.0.0.1:9",
            max_queue=MAX_QUEUE,
            batch_size=1,
            max_wait_s=0,
            concurrency=2,
            retry_for_s=3600,  # longer than the test: nothing leaves by giving up
            backoff_s=0.01,
            max_backoff_s=0.05,
            flush_timeout_s=0.2,
        ),
        metrics=metrics,
        transport=httpx.MockTransport(down),
    )
    held: list[int] = []
    try:
        for i in range(50):
            sink.export(ExportItem(_record(i), [_result(i)]))
            held.append(sink.delivery.held)
            if i == 0:
                assert calls.wait(10), "the sink never tried the backend"
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:  # retries keep going: the count stays put
            held.append(sink.delivery.held)
            time.sleep(0.01)
        assert max(held) <= MAX_QUEUE
        assert held[-1] == MAX_QUEUE
        assert _sample(metrics, "dropped") == 50 - MAX_QUEUE
        assert _sample(metrics, "delivered") == 0
        assert metrics.registry.get_sample_value("ragpulse_sink_retries_total", {"sink": "phoenix"})
        assert not sink.force_flush(timeout_s=0.05)  # still down: not flushed, says so
    finally:
        sink.shutdown()
    # What the flush timeout left is counted as failed: every item has one outcome.
    assert _sample(metrics, "failed") == MAX_QUEUE


def test_force_flush_sends_what_waits_for_a_batch() -> None:
    bodies: list[bytes] = []

    def up(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        return httpx.Response(200, json={"data": []})

    metrics = CollectorMetrics()
    sink = PhoenixSink(
        PhoenixSink.Options(endpoint="http://127.0.0.1:9", batch_size=100, max_wait_s=3600),
        metrics=metrics,
        transport=httpx.MockTransport(up),
    )
    try:
        sink.export(ExportItem(_record(1), [_result(1)]))
        assert sink.force_flush(timeout_s=10)
        assert bodies and _sample(metrics, "delivered") == 1
    finally:
        sink.shutdown()


class Ledger:
    """A transport of the delivery's own kind that keeps what it is sent, in process: any
    tool's API reaches the delivery through these three methods."""

    def __init__(self, answers: list[Reply]) -> None:
        self.answers = answers
        self.sent: list[object] = []
        self.closed = False

    def requests(self, batch: Sequence[str]) -> list[ApiRequest]:
        return [ApiRequest("/ledger", list(batch), len(batch))]

    def send(self, request: ApiRequest) -> Reply:
        self.sent.append(request.body)
        return self.answers.pop(0) if self.answers else Reply(Outcome.DELIVERED)

    def close(self) -> None:
        self.closed = True


def test_a_delivery_retries_counts_partial_success_and_closes_its_transport() -> None:
    ledger = Ledger([Reply(Outcome.RETRY, retry_after_s=0), Reply(Outcome.DELIVERED, 1, "bad")])
    metrics = CollectorMetrics()
    options = DeliveryOptions(batch_size=3, max_wait_s=3600, backoff_s=0.01, max_backoff_s=0.05)
    delivery = Delivery("ledger", ledger, options, metrics)
    try:
        assert delivery.put(["a", "b", "c"]) == ["a", "b", "c"]
        assert delivery.force_flush(timeout_s=10)  # without waiting an hour for a batch
    finally:
        delivery.shutdown()
    assert ledger.sent == [["a", "b", "c"], ["a", "b", "c"]] and ledger.closed
    counted = {
        outcome: metrics.registry.get_sample_value(
            "ragpulse_sink_items_total", {"sink": "ledger", "outcome": outcome}
        )
        for outcome in ("delivered", "failed")
    }
    assert counted == {"delivered": 2, "failed": 1}
    retries = {"sink": "ledger"}
    assert metrics.registry.get_sample_value("ragpulse_sink_retries_total", retries) == 1
    assert delivery.put(["late"]) == []  # shut down: nothing is taken
