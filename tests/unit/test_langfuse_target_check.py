"""The langfuse sink notices scores for observations Langfuse never got.

No Langfuse server can run here (it needs ClickHouse, Redis, S3 and Postgres): the read-back
goes to the Langfuse double (tests/support/langfuse_double.py), whose
``GET /api/public/v2/observations`` takes the generated client's query parameters and
answers as the published API says. Scores on observations the double does not have count
as ``no_target`` with one warning; observations it has count nothing; a read-back it
refuses counts ``unchecked``, never ``no_target``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from support.helpers import new_span_id, new_trace_id
from support.kafka_env import wait_until
from support.langfuse_double import LangfuseDouble

from ragpulse.config import Settings
from ragpulse.exporters.langfuse import LangfuseSink
from ragpulse.plugin_context import PluginContext
from ragpulse.record import EvalResult, ExportItem, RagRecord

RESULTS = [
    EvalResult(metric="faithfulness", method="lexical", score=0.9),
    EvalResult(metric="answer_relevance", method="lexical", score=0.8),
]


@pytest.fixture
def double() -> Iterator[LangfuseDouble]:
    with LangfuseDouble() as server:
        yield server


@pytest.fixture
def sink(double: LangfuseDouble) -> Iterator[tuple[LangfuseSink, PluginContext]]:
    options = {
        "host": double.url,
        "public_key": "pk-lf-test",
        "secret_key": "sk-lf-test",
        "max_wait_s": 0,
        "verify_after_s": 0.05,
    }
    settings = Settings(sinks={"langfuse": options})
    context = PluginContext(settings)
    made = LangfuseSink.create(LangfuseSink.options_from(settings), context)
    assert isinstance(made, LangfuseSink)
    yield made, context
    made.shutdown()


def items(context: PluginContext, outcome: str) -> float:
    labels = {"sink": "langfuse", "outcome": outcome}
    return context.metrics.registry.get_sample_value("ragpulse_sink_items_total", labels) or 0.0


def record_of(trace_id: str, span_id: str, chat_id: str) -> RagRecord:
    return RagRecord(
        trace_id=trace_id, span_id=span_id, generation_span_id=chat_id, question="q", answer="a"
    )


def app_trace() -> tuple[RagRecord, list[Any]]:
    """A pipeline -> chat trace recorded by the OpenTelemetry SDK, and its spans."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    recorded = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(recorded))
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("answer") as root, tracer.start_span("chat m") as chat:
        pass
    record = record_of(
        format(root.get_span_context().trace_id, "032x"),
        format(root.get_span_context().span_id, "016x"),
        format(chat.get_span_context().span_id, "016x"),
    )
    return record, list(recorded.get_finished_spans())


def test_scores_for_observations_langfuse_never_got_count_as_no_target_with_one_warning(
    sink: tuple[LangfuseSink, PluginContext],
    double: LangfuseDouble,
    caplog: pytest.LogCaptureFixture,
) -> None:
    langfuse, context = sink
    with caplog.at_level(logging.WARNING):
        for count in (2, 4):
            langfuse.export(
                ExportItem(record_of(new_trace_id(), new_span_id(), new_span_id()), RESULTS)
            )

            def counted(count: int = count) -> bool:
                return items(context, "no_target") == count

            wait_until(counted, 30, "the missing observations were not counted", 0.02)
    assert items(context, "delivered") == 4 and double.invalid == []
    warnings = [r.getMessage() for r in caplog.records if "no_target" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "OpenTelemetry intake too" in warnings[0] and "docs/how-to/backends.md" in warnings[0]


def test_observations_langfuse_has_count_nothing(
    sink: tuple[LangfuseSink, PluginContext], double: LangfuseDouble
) -> None:
    langfuse, context = sink
    record, spans = app_trace()
    double.add_spans(spans)
    langfuse.export(ExportItem(record, RESULTS))

    def read_back() -> bool:
        return any(q.get("traceId") == [record.trace_id] for q in double.gets)

    wait_until(read_back, 30, "the judged observations were not read back", 0.02)
    assert langfuse.force_flush()
    langfuse.shutdown()  # the read-back in flight ends before shutdown returns
    assert items(context, "delivered") == 2
    assert items(context, "no_target") == 0 and items(context, "unchecked") == 0


def test_a_refused_read_back_is_unchecked_never_no_target(
    sink: tuple[LangfuseSink, PluginContext], double: LangfuseDouble
) -> None:
    langfuse, context = sink
    double.answer_next_get(403, {"message": "no read access"})
    langfuse.export(ExportItem(record_of(new_trace_id(), new_span_id(), new_span_id()), RESULTS))
    wait_until(lambda: items(context, "unchecked") == 2, 30, "not counted unchecked", 0.02)
    assert items(context, "no_target") == 0
