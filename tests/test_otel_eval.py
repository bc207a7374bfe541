"""Evaluation signals reach an OTLP receiver parented to the evaluated span."""

from __future__ import annotations

import json

from helpers import CaptureServer, new_span_id, new_trace_id

from ragpulse.config import load_settings
from ragpulse.exporters.otel_eval import OtelEvaluationSink
from ragpulse.record import EvalResult, RagRecord


def test_events_and_evaluator_spans_parented_to_evaluated_span() -> None:
    trace_id, span_id = new_trace_id(), new_span_id()
    record = RagRecord(trace_id=trace_id, span_id=span_id, question="q", answer="a")
    results = [
        EvalResult(
            metric="faithfulness",
            method="lexical",
            score=0.25,
            label="low",
            explanation="25% of tokens",
            details={"unsupported_tokens": ["x"]},
        ),
        EvalResult(metric="injection", method="rules", label="error", error="ValueError: bad"),
    ]
    with CaptureServer() as backend:
        settings = load_settings(otlp_export_endpoint=backend.url, service_name="rp-test")
        sink = OtelEvaluationSink.from_settings(settings)
        assert sink is not None
        sink.export(record, results)
        sink.shutdown()  # flushes both providers

    spans = backend.captured.spans()
    assert len(spans) == 2
    for span in spans:
        assert span.trace_id.hex() == trace_id
        assert span.parent_span_id.hex() == span_id
    attrs = {kv.key: kv.value for kv in spans[0].attributes}
    assert attrs["openinference.span.kind"].string_value == "EVALUATOR"
    assert attrs["gen_ai.evaluation.name"].string_value == "faithfulness"
    assert attrs["gen_ai.evaluation.score.value"].double_value == 0.25
    assert attrs["gen_ai.evaluation.score.label"].string_value == "low"
    assert attrs["gen_ai.evaluation.explanation"].string_value == "25% of tokens"
    assert json.loads(attrs["ragpulse.evaluation.details"].string_value) == {
        "unsupported_tokens": ["x"]
    }
    assert spans[1].status.code == 2  # ERROR

    logs = backend.captured.log_records()
    assert len(logs) == 2
    for log in logs:
        assert log.event_name == "gen_ai.evaluation.result"
        assert log.trace_id.hex() == trace_id and log.span_id.hex() == span_id
    log_attrs = {kv.key: kv.value for kv in logs[1].attributes}
    assert log_attrs["error.type"].string_value == "ValueError"
    resource = {
        kv.key: kv.value.string_value
        for kv in backend.captured.logs[0].resource_logs[0].resource.attributes
    }
    assert resource["service.name"] == "rp-test"


def test_disabled_without_endpoint() -> None:
    assert OtelEvaluationSink.from_settings(load_settings()) is None
