"""Pipeline: evaluator and sink failures are isolated, counted and never lose a record."""

from __future__ import annotations

import time
from collections.abc import Sequence

from helpers import make_span, new_trace_id

from ragpulse.collector.assembly import Ack, CompletedTrace
from ragpulse.collector.pipeline import Pipeline
from ragpulse.config import EvaluationSettings
from ragpulse.errors import ModelUnavailable
from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.evaluators.lexical import LexicalFaithfulness
from ragpulse.exporters.base import Sink
from ragpulse.exporters.memory import InMemorySink
from ragpulse.record import EvalResult, RagRecord
from ragpulse.telemetry import CollectorMetrics


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


class SlowModel(Evaluator):
    """A model-tier evaluator stand-in: the pipeline's staging is what is tested."""

    metric, method = "slow", "model"
    tier = Tier.MODEL

    def __init__(self, delay: float = 0.0, fail_load: bool = False) -> None:
        self.delay, self.fail_load, self.batches = delay, fail_load, 0

    def load(self) -> None:
        if self.fail_load:
            raise ModelUnavailable("weights missing: set evaluation.options")

    def _score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        self.batches += 1
        time.sleep(self.delay)
        return [self.result(0.9) for _ in records]


def run_pipeline(
    model: Evaluator, n: int, **settings: float
) -> tuple[InMemorySink, CollectorMetrics]:
    metrics, memory = CollectorMetrics(), InMemorySink()
    pipeline = Pipeline(
        [LexicalFaithfulness(), model], [memory], metrics, EvaluationSettings(**settings)
    )
    pipeline.start()
    pipeline.submit([trace(f"q{i}?") for i in range(n)])
    assert pipeline.wait_idle(10)
    pipeline.stop()
    return memory, metrics


def test_model_tier_results_join_the_cheap_ones_in_one_export() -> None:
    model = SlowModel()
    memory, _ = run_pipeline(model, 20, model_rate=1.0, model_batch_size=8)
    assert len(memory.items) == 20  # one export per record
    assert all(
        [r.name for r in i.results] == ["faithfulness/lexical", "slow/model"] for i in memory.items
    )
    assert model.batches < 20  # batched across records


def test_model_rate_zero_and_sampling_by_trace_id() -> None:
    memory, _ = run_pipeline(SlowModel(), 10, model_rate=0.0)
    assert all(len(i.results) == 1 for i in memory.items)
    memory, _ = run_pipeline(SlowModel(), 200, model_rate=0.3)
    share = sum(len(i.results) == 2 for i in memory.items) / 200
    assert 0.15 < share < 0.45


def test_full_model_queue_skips_the_tier_and_counts() -> None:
    memory, metrics = run_pipeline(
        SlowModel(delay=0.05), 30, model_rate=1.0, model_max_queue=1, model_batch_size=1
    )
    assert len(memory.items) == 30
    skipped = metrics.registry.get_sample_value(
        "ragpulse_tier_skipped_total", {"tier": "model", "reason": "queue_full"}
    )
    assert skipped and skipped == sum(len(i.results) == 1 for i in memory.items)


def test_model_that_cannot_load_is_disabled_and_records_still_flow() -> None:
    memory, metrics = run_pipeline(SlowModel(fail_load=True), 5, model_rate=1.0)
    assert len(memory.items) == 5 and all(len(i.results) == 1 for i in memory.items)
    assert (
        metrics.registry.get_sample_value(
            "ragpulse_evaluator_available", {"metric": "slow", "method": "model"}
        )
        == 0
    )
