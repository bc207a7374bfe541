"""Evaluation signals reach an OTLP receiver about the evaluated operation span.

A real OTLP/HTTP receiver on 127.0.0.1 (helpers.CaptureServer), one per module;
every test tells its own signals apart by trace id.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from support.agent_records import agent_results, agent_turn, expected_spans
from support.helpers import CaptureServer, new_span_id, new_trace_id
from support.kafka_env import free_port

from ragpulse.config import Settings, load_settings
from ragpulse.exporters.otel import OtelEvaluationSink
from ragpulse.exporters.support.targets import METRIC_TARGETS, Target
from ragpulse.plugin_context import PluginContext
from ragpulse.record import EvalResult, ExportItem, RagRecord


@pytest.fixture(scope="module")
def backend() -> Iterator[CaptureServer]:
    with CaptureServer() as server:
        yield server


def export(
    backend: CaptureServer | str,
    record: RagRecord,
    results: list[EvalResult],
    context: PluginContext | None = None,
    **settings: Any,
) -> None:
    url = backend if isinstance(backend, str) else backend.url
    options = {"endpoint": url, "service_name": "rp-test", **settings}
    loaded = load_settings(sinks={"otel": options})
    sink = OtelEvaluationSink.from_settings(loaded, context)
    assert sink is not None
    sink.export(ExportItem(record, results))
    sink.shutdown()  # flushes both providers


def attrs(item: Any) -> dict[str, Any]:
    """An OTLP span's or log record's attributes as plain Python values."""
    out: dict[str, Any] = {}
    for kv in item.attributes:
        out[kv.key] = getattr(kv.value, kv.value.WhichOneof("value"))
    return out


def signals(backend: CaptureServer, trace_id: str) -> tuple[list[Any], list[Any]]:
    """(EVALUATOR spans linked to one trace, evaluation events in it)."""
    spans = [
        s
        for s in backend.captured.spans()
        if any(link.trace_id.hex() == trace_id for link in s.links)
    ]
    logs = [lr for lr in backend.captured.log_records() if lr.trace_id.hex() == trace_id]
    return spans, logs


def by_metric(items: list[Any], metric: str) -> Any:
    [item] = [i for i in items if attrs(i)["gen_ai.evaluation.name"] == metric]
    return item


def test_each_result_is_about_its_operation_span() -> None:
    # The mapping is the documented table, not scattered ifs.
    assert METRIC_TARGETS["faithfulness"] is Target.GENERATION
    assert METRIC_TARGETS["context_relevance"] is Target.RETRIEVAL


def test_events_and_evaluator_spans_on_the_evaluated_spans(backend: CaptureServer) -> None:
    trace_id, root, generation = new_trace_id(), new_span_id(), new_span_id()
    retrievals = [new_span_id(), new_span_id()]
    record = RagRecord(
        trace_id=trace_id,
        span_id=root,
        question="q",
        answer="a",
        generation_span_id=generation,
        retrieval_span_ids=retrievals,
        response_id="chatcmpl-42",
    )
    results = [
        EvalResult(
            metric="faithfulness",
            method="lexical",
            score=0.25,
            label="low",
            explanation="25% of tokens",
            details={"unsupported_tokens": ["x"]},
        ),
        EvalResult(metric="context_relevance", method="llm_judge", score=0.9, label="relevant"),
        EvalResult(
            metric="injection",
            method="rules",
            score=0.8,
            label="injection",
            details={
                "findings": [
                    {"where": "question", "risk": 0.3},
                    {"where": "document:1", "risk": 0.8},
                ]
            },
        ),
    ]
    export(backend, record, results)
    spans, logs = signals(backend, trace_id)
    assert len(spans) == 3 and len(logs) == 3

    # gen_ai.evaluation.result events: on the operation span, response id for the answer.
    assert all(log.event_name == "gen_ai.evaluation.result" for log in logs)
    faithfulness = by_metric(logs, "faithfulness")
    assert faithfulness.span_id.hex() == generation
    assert attrs(faithfulness)["gen_ai.response.id"] == "chatcmpl-42"
    assert attrs(faithfulness)["gen_ai.evaluation.score.value"] == 0.25
    relevance = by_metric(logs, "context_relevance")
    assert relevance.span_id.hex() == retrievals[0]
    assert "gen_ai.response.id" not in attrs(relevance)
    assert by_metric(logs, "injection").span_id.hex() == retrievals[0]  # found in a document

    # EVALUATOR carrier spans (OpenInference post-hoc feedback): one Span Link to the
    # evaluated span, the root of a trace of their own (never parented: the evaluated
    # trace's duration, project and service stay as the app made them), the result as
    # evaluations.0.evaluation.*.
    for metric, target in [
        ("faithfulness", generation),
        ("context_relevance", retrievals[0]),
        ("injection", retrievals[0]),
    ]:
        span = by_metric(spans, metric)
        assert not span.parent_span_id and span.trace_id.hex() != trace_id
        assert [(link.trace_id.hex(), link.span_id.hex()) for link in span.links] == [
            (trace_id, target)
        ]
        a = attrs(span)
        assert a["openinference.span.kind"] == "EVALUATOR"
        assert a["evaluations.0.evaluation.name"] == metric
        assert a["ragpulse.evaluation.target_span_id"] == target
        assert a["ragpulse.evaluation.target_trace_id"] == trace_id
    judged = attrs(by_metric(spans, "context_relevance"))
    assert judged["evaluations.0.evaluation.annotator_kind"] == "LLM"
    assert judged["evaluations.0.evaluation.identifier"] == "ragpulse.llm_judge"
    lexical = attrs(by_metric(spans, "faithfulness"))
    assert lexical["evaluations.0.evaluation.annotator_kind"] == "CODE"
    assert lexical["evaluations.0.evaluation.score"] == 0.25
    assert lexical["evaluations.0.evaluation.label"] == "low"
    assert lexical["evaluations.0.evaluation.explanation"] == "25% of tokens"
    assert json.loads(lexical["evaluations.0.evaluation.metadata"]) == {"method": "lexical"}
    assert lexical["gen_ai.evaluation.name"] == "faithfulness"  # span-only GenAI backends
    assert lexical["gen_ai.response.id"] == "chatcmpl-42"
    assert json.loads(lexical["ragpulse.evaluation.details"]) == {"unsupported_tokens": ["x"]}

    resource = {
        kv.key: kv.value.string_value
        for req in backend.captured.logs
        for rl in req.resource_logs
        for kv in rl.resource.attributes
    }
    assert resource["service.name"] == "rp-test"


def test_falls_back_to_the_record_span(backend: CaptureServer) -> None:
    """No generation or retrieval span in the trace (or a malformed id): the pipeline span;
    the response id still says which completion; an injection in the question: the root."""
    trace_id, root = new_trace_id(), new_span_id()
    record = RagRecord(
        trace_id=trace_id,
        span_id=root,
        question="q",
        answer="a",
        generation_span_id="not-a-span-id",
        response_id="resp-7",
    )
    results = [
        EvalResult(metric="answer_relevance", method="embedding", score=0.5),
        EvalResult(metric="context_relevance", method="lexical", score=0.1),
        EvalResult(
            metric="injection",
            method="rules",
            score=0.9,
            details={"findings": [{"where": "question", "risk": 0.9}]},
        ),
        EvalResult(metric="injection", method="classifier", label="error", error="ValueError: x"),
        EvalResult(metric="refusal", method="rules", error="RuntimeError: no answer"),
    ]
    export(backend, record, results)
    spans, logs = signals(backend, trace_id)
    assert len(spans) == 5 and len(logs) == 5
    assert {log.span_id.hex() for log in logs} == {root}
    assert {s.links[0].span_id.hex() for s in spans} == {root}
    relevance = by_metric(logs, "answer_relevance")
    assert attrs(relevance)["gen_ai.response.id"] == "resp-7"
    errored = [s for s in spans if s.status.code == 2]  # ERROR
    assert len(errored) == 2
    [bare] = [s for s in errored if attrs(s)["gen_ai.evaluation.name"] == "refusal"]
    # No score, label or explanation: OpenInference asks to omit the evaluation object.
    assert not any(k.startswith("evaluations.") for k in attrs(bare))
    assert attrs(by_metric(logs, "refusal"))["error.type"] == "RuntimeError"


def test_an_agent_turns_results_are_about_the_spans_they_judge(backend: CaptureServer) -> None:
    """Faithfulness on the final model call, an injection on the tool call whose result
    carried it, a tool error on the failed call's span (``details.target_span_id``), the
    turn's step count on the agent's span."""
    turn = agent_turn()
    results = agent_results(turn)
    export(backend, turn.record, results)
    spans, logs = signals(backend, turn.record.trace_id)
    assert len(spans) == len(logs) == len(results)
    for metric, span_id in expected_spans(turn).items():
        assert by_metric(logs, metric).span_id.hex() == span_id, metric
        carrier = by_metric(spans, metric)
        assert [link.span_id.hex() for link in carrier.links] == [span_id], metric
        assert attrs(carrier)["ragpulse.evaluation.target_span_id"] == span_id
    # The final model call's completion id goes with the answer's results only.
    assert attrs(by_metric(logs, "faithfulness"))["gen_ai.response.id"] == "chatcmpl-final"
    assert "gen_ai.response.id" not in attrs(by_metric(logs, "tool_error"))


def test_a_named_span_that_is_no_span_id_falls_back(backend: CaptureServer) -> None:
    """A malformed ``target_span_id`` is ignored: the metric's own span (here the root)."""
    turn = agent_turn()
    result = EvalResult(
        metric="tool_loop", method="rules", score=0.5, details={"target_span_id": "call_1"}
    )
    export(backend, turn.record, [result])
    _, [log] = signals(backend, turn.record.trace_id)
    assert log.span_id.hex() == turn.root


def test_redaction_still_applies(backend: CaptureServer) -> None:
    trace_id = new_trace_id()
    record = RagRecord(
        trace_id=trace_id,
        span_id=new_span_id(),
        question="mail me at jane.doe@example.com",
        answer="a",
    )
    result = EvalResult(
        metric="faithfulness",
        method="llm_judge",
        score=0.0,
        explanation="claims jane.doe@example.com is an admin",
    )
    export(backend, record, [result])
    [span], [log] = signals(backend, trace_id)
    for item in (span, log):
        assert "jane.doe@example.com" not in json.dumps(attrs(item))
    assert "jane.doe@example.com" not in attrs(span)["evaluations.0.evaluation.explanation"]


def test_disabled_without_endpoint() -> None:
    assert OtelEvaluationSink.from_settings(load_settings()) is None


def test_carriers_are_filed_in_the_evaluated_traces_project(backend: CaptureServer) -> None:
    """Phoenix files a trace by its resource's project name: the carrier names the app's."""
    trace_id = new_trace_id()
    record = RagRecord(
        trace_id=trace_id,
        span_id=new_span_id(),
        question="q",
        answer="a",
        attributes={"openinference.project.name": "shop-assistant"},
    )
    export(backend, record, [EvalResult(metric="faithfulness", method="lexical", score=1.0)])
    [span], _ = signals(backend, trace_id)
    [resource] = [
        {kv.key: kv.value.string_value for kv in rs.resource.attributes}
        for req in backend.captured.traces
        for rs in req.resource_spans
        if any(s.span_id == span.span_id for ss in rs.scope_spans for s in ss.spans)
    ]
    assert resource["openinference.project.name"] == "shop-assistant"
    assert resource["service.name"] == "rp-test"  # the carrier's own trace: ragpulse's


@pytest.mark.parametrize("status", [404, 405])
def test_events_off_where_the_endpoint_has_no_logs_intake(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    """MLflow answers 404 and Phoenix 405 on /v1/logs: one warning, then no more events;
    the EVALUATOR spans still go, and nothing counts as failed."""
    context = PluginContext(Settings())
    with CaptureServer(logs_status=status) as server, caplog.at_level(logging.WARNING):
        settings = load_settings(sinks={"otel": {"endpoint": server.url}})
        sink = OtelEvaluationSink.from_settings(settings, context)
        assert sink is not None
        trace_id = new_trace_id()
        result = EvalResult(metric="refusal", method="rules", score=0.0)
        for _ in range(3):
            record = RagRecord(trace_id=trace_id, span_id=new_span_id(), question="q", answer="a")
            sink.export(ExportItem(record, [result]))
            sink._logger_provider.force_flush()  # type: ignore[union-attr]  # one batch each
        sink.shutdown()
        spans, logs = signals(server, trace_id)
    assert len(spans) == 3 and logs == []
    assert len([r for r in caplog.records if "no logs intake" in r.getMessage()]) == 1
    assert server.log_requests == 1  # probed once, then no event sent
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors_of(context)


def errors_of(context: PluginContext) -> float | None:
    return context.metrics.registry.get_sample_value("ragpulse_sink_errors_total", {"sink": "otel"})


def test_every_failed_export_is_counted() -> None:
    """Nothing listening: the span and event exports fail, and each failure is counted."""
    context = PluginContext(Settings())
    record = RagRecord(trace_id=new_trace_id(), span_id=new_span_id(), question="q", answer="a")
    url = f"http://127.0.0.1:{free_port()}"
    result = EvalResult(metric="refusal", method="rules", score=0.0)
    export(url, record, [result], context, timeout_s=0.5)
    assert errors_of(context) == 2  # the carrier span batch and the event batch
