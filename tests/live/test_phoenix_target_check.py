"""The phoenix sink notices annotations for spans Phoenix never got, against a real Phoenix.

Phoenix takes an annotation for any span id (``sync=false``: it queues it) and answers
202, so the sink counts it ``delivered``. ``verify_after_s`` later the sink reads the
judged spans back (exporters/support/target_check.py): an annotation on a span Phoenix
does not have counts as ``no_target``, with one warning line per sink that names the fix
and the docs page; a span Phoenix has counts nothing; a Phoenix that does not answer the
read-back counts ``unchecked``, never ``no_target``.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Iterator

import pytest
from support.helpers import new_span_id, new_trace_id
from support.kafka_env import free_port, wait_until
from support.tracing_backends import PhoenixServer, request

from ragpulse import semconv as sc
from ragpulse.config import Settings
from ragpulse.exporters.phoenix import PhoenixSink
from ragpulse.plugin_context import PluginContext
from ragpulse.record import EvalResult, ExportItem, RagRecord

pytestmark = pytest.mark.integration

PROJECT = "target-check"
RESULTS = [
    EvalResult(metric="faithfulness", method="lexical", score=0.9),
    EvalResult(metric="answer_relevance", method="lexical", score=0.8),
]


def make_sink(endpoint: str) -> tuple[PhoenixSink, PluginContext]:
    options = {"endpoint": endpoint, "max_wait_s": 0, "verify_after_s": 0.2, "retry_for_s": 2}
    settings = Settings(sinks={"phoenix": options})
    context = PluginContext(settings)
    sink = PhoenixSink.create(PhoenixSink.options_from(settings), context)
    assert isinstance(sink, PhoenixSink)
    return sink, context


@pytest.fixture
def sink(phoenix_server: PhoenixServer) -> Iterator[tuple[PhoenixSink, PluginContext]]:
    made = make_sink(phoenix_server.url)
    yield made
    made[0].shutdown()


def sample(context: PluginContext, name: str, outcome: str) -> float:
    labels = {"sink": "phoenix", "outcome": outcome}
    return context.metrics.registry.get_sample_value(name, labels) or 0.0


def record_of(trace_id: str, span_id: str, chat_id: str) -> RagRecord:
    return RagRecord(
        trace_id=trace_id,
        span_id=span_id,
        generation_span_id=chat_id,
        question="q",
        answer="a",
        attributes={sc.OPENINFERENCE_PROJECT_NAME: PROJECT},
    )


def sent_to_phoenix(server: PhoenixServer) -> RagRecord:
    """A trace (pipeline -> chat) the app sent to Phoenix, once Phoenix shows both spans."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    resource = Resource.create({"service.name": PROJECT, sc.OPENINFERENCE_PROJECT_NAME: PROJECT})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(f"{server.url}/v1/traces")))
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("answer") as root, tracer.start_span("chat m") as chat:
        pass
    provider.shutdown()
    trace_id = format(root.get_span_context().trace_id, "032x")
    query = urllib.parse.urlencode({"trace_id": trace_id})

    def shown() -> bool:
        answer = request(f"{server.url}/v1/projects/{PROJECT}/spans/otlpv1?{query}")
        return len(answer["data"]) == 2

    wait_until(shown, 60, "Phoenix did not show the app's spans", 0.2, (OSError,))
    return record_of(
        trace_id,
        format(root.get_span_context().span_id, "016x"),
        format(chat.get_span_context().span_id, "016x"),
    )


def test_annotations_for_spans_phoenix_never_got_count_as_no_target_with_one_warning(
    sink: tuple[PhoenixSink, PluginContext], caplog: pytest.LogCaptureFixture
) -> None:
    phoenix, context = sink
    with caplog.at_level(logging.WARNING):
        for count in (2, 4):  # two traces the app sent to ragpulse only
            phoenix.export(
                ExportItem(record_of(new_trace_id(), new_span_id(), new_span_id()), RESULTS)
            )

            def counted(count: int = count) -> bool:
                return sample(context, "ragpulse_sink_items_total", "no_target") == count

            wait_until(counted, 60, "the missing spans were not counted", 0.05)
    assert sample(context, "ragpulse_sink_items_total", "delivered") == 4  # as Phoenix said
    warnings = [r for r in caplog.records if "no_target" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    text = warnings[0].getMessage()
    assert "send them to Phoenix too" in text and "docs/how-to/backends.md" in text


def test_a_span_phoenix_has_counts_nothing(
    phoenix_server: PhoenixServer, sink: tuple[PhoenixSink, PluginContext]
) -> None:
    phoenix, context = sink
    phoenix.export(ExportItem(sent_to_phoenix(phoenix_server), RESULTS))

    def read_back() -> bool:
        return sample(context, "ragpulse_sink_checks_total", "ok") >= 1

    wait_until(read_back, 60, "the judged span was not read back", 0.05)
    assert phoenix.force_flush()
    assert sample(context, "ragpulse_sink_items_total", "delivered") == 2
    assert sample(context, "ragpulse_sink_items_total", "no_target") == 0
    assert sample(context, "ragpulse_sink_items_total", "unchecked") == 0


def test_a_phoenix_that_does_not_answer_the_read_back_is_never_no_target() -> None:
    """Nothing listens on the port: delivery fails and the read-back gets no answer."""
    phoenix, context = make_sink(f"http://127.0.0.1:{free_port()}")
    try:
        phoenix.export(ExportItem(record_of(new_trace_id(), new_span_id(), new_span_id()), RESULTS))

        def unchecked() -> bool:
            return sample(context, "ragpulse_sink_items_total", "unchecked") == 2

        wait_until(unchecked, 60, "the read-back was not counted unchecked", 0.05)
        assert sample(context, "ragpulse_sink_items_total", "no_target") == 0
    finally:
        phoenix.shutdown()
