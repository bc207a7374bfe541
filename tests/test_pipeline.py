"""Pipeline: evaluator and sink failures are isolated, counted and never lose a record."""

from __future__ import annotations

from collections.abc import Sequence

from helpers import make_span, new_trace_id

from ragpulse.collector.assembly import Ack, CompletedTrace
from ragpulse.collector.pipeline import Pipeline
from ragpulse.collector.telemetry import CollectorMetrics
from ragpulse.config import EvaluationSettings
from ragpulse.evaluators.base import Evaluator
from ragpulse.evaluators.lexical import LexicalFaithfulness
from ragpulse.exporters.base import Sink
from ragpulse.exporters.memory import InMemorySink
from ragpulse.record import EvalResult, RagRecord


class Exploding(Evaluator):
    metric, method = "explode", "test"

    def _score(self, record: RagRecord) -> EvalResult:
        if "boom" in record.question:
            raise ValueError("kaboom")
        return self.result(0.5)


class BrokenSink(Sink):
    name = "broken"

    def export(self, record: RagRecord, results: Sequence[EvalResult]) -> None:
        raise OSError("disk full")


def trace(question: str, ack: Ack | None = None) -> CompletedTrace:
    t = new_trace_id()
    spans = [
        make_span(
            t,
            "p",
            {
                "ragpulse.role": "pipeline",
                "input.value": question,
                "output.value": "Paris is the capital.",
            },
        )
    ]
    return CompletedTrace(t, spans, "quiet", 0.0, [ack] if ack else [])


def test_failures_are_isolated_and_counted() -> None:
    metrics, memory = CollectorMetrics(), InMemorySink()
    acks = [Ack(), Ack()]
    for a in acks:
        a.hold()
        a.seal()
    pipeline = Pipeline([Exploding(), LexicalFaithfulness()], [BrokenSink(), memory], metrics)
    pipeline.process([trace("fine?", acks[0]), trace("boom?", acks[1])])
    by_q = {i.record.question: i.results for i in memory.items}
    assert by_q["fine?"][0].score == 0.5
    boom = by_q["boom?"][0]
    assert boom.error == "ValueError: kaboom" and boom.label == "error" and boom.score is None
    assert by_q["boom?"][1].label == "not_applicable"  # no documents
    value = metrics.registry.get_sample_value
    assert value("ragpulse_evaluator_errors_total", {"metric": "explode", "method": "test"}) == 1
    assert value("ragpulse_sink_errors_total", {"sink": "broken"}) == 2
    assert value("ragpulse_records_evaluated_total") == 2
    assert all(a.done for a in acks)


def test_worker_thread_and_skipped_traces() -> None:
    metrics, memory = CollectorMetrics(), InMemorySink()
    settings = EvaluationSettings(max_wait_s=0.01)
    pipeline = Pipeline([LexicalFaithfulness()], [memory], metrics, settings)
    pipeline.start()
    t = new_trace_id()
    no_rag = CompletedTrace(t, [make_span(t, "GET /")], "quiet", 0.0)
    pipeline.submit([trace("a?"), no_rag, trace("b?")])
    assert pipeline.wait_idle(5)
    pipeline.stop()
    assert len(memory.items) == 2
    assert (
        metrics.registry.get_sample_value(
            "ragpulse_traces_skipped_total", {"reason": "no_rag_shape"}
        )
        == 1
    )
