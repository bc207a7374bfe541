"""How long the app and the collector wait when what they talk to is down.

The tests check what happens (tests/unit/test_instrument.py, test_kafka_source_unit.py,
test_judge.py); how long it takes depends on the machine and its load, so it is
printed here instead of asserted:

- instrumentation with a dead OTLP endpoint (nothing listening / never answers):
  20 decorated calls, then ``ragpulse.shutdown()`` (export_timeout_s=0.5);
- the Kafka source with no broker: ``start()``, then ``stop()`` + ``close()``;
- a judge call (timeout_s=0.3, no retries) to a server that never answers.

    .venv/bin/python bench/failure_latency.py
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from opentelemetry.sdk.trace import TracerProvider

import ragpulse
from ragpulse.collector.intake.kafka import SpanConsumer
from ragpulse.collector.service import Collector
from ragpulse.config import EvaluationSettings, JudgeSettings, Settings, load_settings
from ragpulse.evaluation import load_evaluators_safely
from ragpulse.evaluators.answer_relevance.llm_judge import JudgeAnswerRelevance
from ragpulse.plugin_context import PluginContext
from ragpulse.record import Document, RagRecord


@contextmanager
def dead_port(silent: bool) -> Iterator[int]:
    """A port where nothing listens, or (``silent``) where nobody reads."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
        if silent:
            sock.listen(16)
            yield port
            return
    yield port


def seconds(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def dead_otlp_endpoint(silent: bool) -> None:
    with dead_port(silent) as port:
        ragpulse.configure(
            "bench", f"http://127.0.0.1:{port}", export_timeout_s=0.5,
            tracer_provider=TracerProvider(),
        )  # fmt: skip

        @ragpulse.pipeline
        def run(question: str) -> str:
            return "still fine"

        calls = seconds(lambda: [run("q") for _ in range(20)])
        shutdown = seconds(ragpulse.shutdown)
    kind = "never answers" if silent else "nothing listening"
    print(f"OTLP endpoint, {kind}: 20 app calls {calls:.3f}s, shutdown {shutdown:.3f}s")


def kafka_without_broker() -> None:
    settings = load_settings(source="kafka", kafka={"bootstrap": "127.0.0.1:1"})
    collector = Collector(settings, evaluators=[], sinks=[], receiver=False, metrics_server=False)
    source = SpanConsumer(settings.kafka, collector, collector.metrics)
    start = seconds(source.start)
    stop = seconds(lambda: (source.stop(), source.close()))
    print(f"Kafka source, no broker: start {start:.3f}s, stop + close {stop:.3f}s")


def judge_timeout() -> None:
    with dead_port(silent=True) as port:
        settings = JudgeSettings(
            base_url=f"http://127.0.0.1:{port}/v1", model="m", api_key="k",
            timeout_s=0.3, max_retries=0,
        )  # fmt: skip
        context = PluginContext(Settings(evaluation=EvaluationSettings(judge=settings)))
        [judge] = load_evaluators_safely([JudgeAnswerRelevance()], context)
        record = RagRecord(
            trace_id="0" * 32, question="Price?", documents=[Document(content="6 dollars")],
            answer="6 dollars.",
        )  # fmt: skip
        results: list[object] = []
        took = seconds(lambda: results.extend(judge.evaluate([record])))
    label = getattr(results[0], "label", None)
    print(f"judge call, server never answers (timeout_s=0.3): {took:.3f}s, label {label}")


def main() -> None:
    dead_otlp_endpoint(silent=False)
    dead_otlp_endpoint(silent=True)
    kafka_without_broker()
    judge_timeout()


if __name__ == "__main__":
    main()
