"""``ragpulse.current_trace_id()`` / ``current_span_id()``: what an app passes to feedback().

Real OpenTelemetry SDK spans into an in-memory exporter; the ids an app reads inside
its pipeline must be the ones the exported pipeline span carries, so that feedback
given with them names the evaluated trace and span.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ragpulse
from ragpulse import semconv as sc


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    ragpulse.configure(exporter=spans, tracer_provider=TracerProvider())
    yield spans
    ragpulse.shutdown()


@ragpulse.retrieval
def retrieve(query: str) -> list[str]:
    return ["Reset your password under Settings > Security."]


@ragpulse.pipeline(route="/ask")
def answer(question: str) -> dict[str, Any]:
    ids = {"trace_id": ragpulse.current_trace_id(), "span_id": ragpulse.current_span_id()}
    docs = retrieve(question)
    return {"answer": docs[0], **ids}


def test_ids_inside_a_pipeline_name_the_pipeline_span(exporter: InMemorySpanExporter) -> None:
    reply = answer("How do I reset my password?")
    ragpulse.feedback(reply["trace_id"], -1, comment="wrong", span_id=reply["span_id"])
    spans = {s.name: s for s in exporter.get_finished_spans()}
    pipeline = spans["answer"]
    assert reply["trace_id"] == f"{pipeline.context.trace_id:032x}"
    assert reply["span_id"] == f"{pipeline.context.span_id:016x}"
    given = spans["ragpulse.feedback"]
    assert given.attributes is not None
    assert given.attributes[sc.RAGPULSE_FEEDBACK_TRACE_ID] == reply["trace_id"]
    assert given.links[0].context.span_id == pipeline.context.span_id


def test_ids_in_a_with_block_and_outside(exporter: InMemorySpanExporter) -> None:
    assert ragpulse.current_trace_id() is None and ragpulse.current_span_id() is None
    with ragpulse.pipeline_span("What can you do?") as s:
        trace_id, span_id = ragpulse.current_trace_id(), ragpulse.current_span_id()
        s.set_answer("I answer questions about the help center.")
    assert ragpulse.current_trace_id() is None
    (span,) = exporter.get_finished_spans()
    assert (trace_id, span_id) == (f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}")
