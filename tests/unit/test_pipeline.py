"""Pipeline: evaluator and sink failures are isolated, counted and never lose a record."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from support.helpers import make_span, new_trace_id
from support.kafka_env import wait_until

from ragpulse.collector.assembly.assembler import CompletedTrace
from ragpulse.collector.evaluate.exports import Exports
from ragpulse.collector.evaluate.pipeline import Pipeline
from ragpulse.config import (
    EvaluationSettings,
    JudgeSettings,
    ModelTierSettings,
    SamplingSettings,
    TierSettings,
)
from ragpulse.errors import ModelUnavailable
from ragpulse.evaluators.base import BatchEvaluator, Evaluator, Tier
from ragpulse.evaluators.faithfulness.lexical import LexicalFaithfulness
from ragpulse.exporters.base import Sink
from ragpulse.exporters.memory import InMemorySink
from ragpulse.plugin_context import PluginContext
from ragpulse.record import EvalResult, ExportItem, RagRecord, SpanStatus
from ragpulse.source import Ack
from ragpulse.telemetry import CollectorMetrics


class Exploding(Evaluator):
    metric, method = "explode", "test"

    def score(self, record: RagRecord) -> EvalResult:
        if "boom" in record.question:
            raise ValueError("kaboom")
        return self.result(0.5)


class BrokenSink(Sink):
    name = "broken"

    def export(self, item: ExportItem[RagRecord]) -> None:
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
    pipeline = Pipeline(
        [Exploding(), LexicalFaithfulness()], Exports([BrokenSink(), memory], metrics), metrics
    )
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
    pipeline = Pipeline([LexicalFaithfulness()], Exports([memory], metrics), metrics, settings)
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


class SlowModel(BatchEvaluator):
    """A model-tier evaluator stand-in: the pipeline's staging is what is tested."""

    metric, method = "slow", "model"
    tier = Tier.MODEL

    def __init__(self, delay: float = 0.0, fail_load: bool = False) -> None:
        super().__init__()
        self.delay, self.fail_load, self.batches = delay, fail_load, 0

    def load(self, context: PluginContext) -> None:
        super().load(context)
        if self.fail_load:
            raise ModelUnavailable("weights missing: set evaluation.options")

    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        self.batches += 1
        time.sleep(self.delay)
        return [self.result(0.9) for _ in records]


def run_pipeline(model: Evaluator, n: int, **tier: float) -> tuple[InMemorySink, CollectorMetrics]:
    """``n`` records through the cheap tier and ``model``; ``tier``: ``evaluation.model``."""
    metrics, memory = CollectorMetrics(), InMemorySink()
    settings = EvaluationSettings(model=ModelTierSettings(**tier))  # type: ignore[arg-type]
    pipeline = Pipeline(
        [LexicalFaithfulness(), model], Exports([memory], metrics), metrics, settings
    )
    pipeline.start()
    pipeline.submit([trace(f"q{i}?") for i in range(n)])
    assert pipeline.wait_idle(10)
    pipeline.stop()
    return memory, metrics


def test_model_tier_results_join_the_cheap_ones_in_one_export() -> None:
    model = SlowModel()
    memory, _ = run_pipeline(model, 20, rate=1.0, batch_size=8)
    assert len(memory.items) == 20  # one export per record
    assert all(
        [r.name for r in i.results] == ["faithfulness/lexical", "slow/model"] for i in memory.items
    )
    # Taken from the queue in batches, evaluated a record at a time so that the cheap
    # tier can have the CPU back between records.
    assert model.batches == 20


def test_model_rate_zero_and_sampling_by_trace_id() -> None:
    memory, _ = run_pipeline(SlowModel(), 10, rate=0.0)
    assert all(len(i.results) == 1 for i in memory.items)
    memory, _ = run_pipeline(SlowModel(), 200, rate=0.3)
    share = sum(len(i.results) == 2 for i in memory.items) / 200
    assert 0.15 < share < 0.45


def test_full_model_queue_skips_the_tier_and_counts() -> None:
    memory, metrics = run_pipeline(SlowModel(delay=0.05), 30, rate=1.0, max_queue=1, batch_size=1)
    assert len(memory.items) == 30
    skipped = metrics.registry.get_sample_value(
        "ragpulse_tier_skipped_total", {"tier": "model", "reason": "queue_full"}
    )
    assert skipped and skipped == sum(len(i.results) == 1 for i in memory.items)


def test_model_that_cannot_load_is_disabled_and_records_still_flow() -> None:
    memory, metrics = run_pipeline(SlowModel(fail_load=True), 5, rate=1.0)
    assert len(memory.items) == 5 and all(len(i.results) == 1 for i in memory.items)
    assert (
        metrics.registry.get_sample_value(
            "ragpulse_evaluator_available", {"metric": "slow", "method": "model"}
        )
        == 0
    )


class Gated(BatchEvaluator):
    """A model-tier stand-in whose load or batches wait for the test to let them go."""

    metric, method = "gated", "model"
    tier = Tier.MODEL

    def __init__(self, block_load: bool = False, block_batches: bool = False) -> None:
        super().__init__()
        self.loads, self.batches = 0, 0
        self.loading, self.release = threading.Event(), threading.Event()
        self.block_load, self.block_batches = block_load, block_batches
        self.release_batches = threading.Event()

    def load(self, context: PluginContext) -> None:
        super().load(context)
        self.loads += 1
        self.loading.set()
        if self.block_load:
            self.release.wait()

    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        self.batches += 1
        if self.block_batches:
            self.release_batches.wait()
        return [self.result(0.9) for _ in records]


def errored(question: str) -> CompletedTrace:
    t = new_trace_id()
    attributes = {"ragpulse.role": "pipeline", "input.value": question, "output.value": "No."}
    span = make_span(t, "p", attributes, status=SpanStatus.ERROR)
    return CompletedTrace(t, [span], "quiet", 0.0)


def skipped(metrics: CollectorMetrics, reason: str) -> float:
    labels = {"tier": "model", "reason": reason}
    return metrics.registry.get_sample_value("ragpulse_tier_skipped_total", labels) or 0.0


def test_a_tier_nothing_can_reach_never_loads() -> None:
    model = Gated()
    settings = EvaluationSettings(
        model=ModelTierSettings(rate=0.0), sampling=SamplingSettings(priorities=[])
    )
    metrics, memory = CollectorMetrics(), InMemorySink()
    pipeline = Pipeline(
        [LexicalFaithfulness(), model], Exports([memory], metrics), metrics, settings
    )
    pipeline.start()
    pipeline.submit([trace("a?"), errored("b?")])
    assert pipeline.wait_idle(10)
    pipeline.stop()
    assert model.loads == 0 and len(memory.items) == 2
    assert all(len(i.results) == 1 for i in memory.items)


def test_a_tier_only_priority_rules_reach_loads_on_the_first_record() -> None:
    model = Gated()
    metrics, memory = CollectorMetrics(), InMemorySink()
    settings = EvaluationSettings(
        model=ModelTierSettings(rate=0.0), max_wait_s=0.01
    )  # error -> model
    pipeline = Pipeline(
        [LexicalFaithfulness(), model], Exports([memory], metrics), metrics, settings
    )
    pipeline.start()
    pipeline.submit([trace("fine?")])
    assert pipeline.wait_idle(10)
    assert model.loads == 0  # nothing routed there yet
    pipeline.submit([errored("broken?")])
    assert pipeline.wait_idle(10)
    pipeline.stop()
    assert model.loads == 1
    by_q = {i.record.question: [r.name for r in i.results] for i in memory.items}
    assert by_q == {
        "fine?": ["faithfulness/lexical"],
        "broken?": ["faithfulness/lexical", "gated/model"],
    }


def test_spent_budget_skips_the_tier_and_counts() -> None:
    metrics, memory = CollectorMetrics(), InMemorySink()
    settings = EvaluationSettings(model=ModelTierSettings(rate=1.0, budget=0.01, batch_size=1))
    pipeline = Pipeline(
        [LexicalFaithfulness(), SlowModel(delay=0.3)], Exports([memory], metrics), metrics, settings
    )
    pipeline.start()
    pipeline.submit([trace("first?")])  # its batch takes 30 s of a 1% budget
    assert pipeline.wait_idle(10)
    pipeline.submit([trace(f"q{i}?") for i in range(10)])
    assert pipeline.wait_idle(10)
    pipeline.stop()
    assert len(memory.items) == 11
    assert skipped(metrics, "budget") == 10
    later = [i for i in memory.items if i.record.question != "first?"]
    assert all(i.sampled["model"] == "skipped:budget" for i in later)
    assert all([r.name for r in i.results] == ["faithfulness/lexical"] for i in later)


def test_records_wait_for_a_busy_model_tier_at_most_their_deadline() -> None:
    model = Gated(block_batches=True)
    metrics, memory = CollectorMetrics(), InMemorySink()
    settings = EvaluationSettings(
        model=ModelTierSettings(rate=1.0, batch_size=1, max_delay_s=0.05), max_wait_s=0.01
    )
    pipeline = Pipeline(
        [LexicalFaithfulness(), model], Exports([memory], metrics), metrics, settings
    )
    pipeline.start()
    pipeline.submit([trace(f"q{i}?") for i in range(5)])
    # One record is in the stuck batch; the four queued behind it go out without it.
    wait_until(lambda: len(memory.items) == 4, 30, "queued records were not released")
    assert skipped(metrics, "deadline") == 4
    model.release_batches.set()
    assert pipeline.wait_idle(10)
    pipeline.stop()
    assert sorted(len(i.results) for i in memory.items) == [1, 1, 1, 1, 2]


def test_stop_never_waits_for_a_model_load() -> None:
    model = Gated(block_load=True)
    metrics, memory = CollectorMetrics(), InMemorySink()
    pipeline = Pipeline(
        [LexicalFaithfulness(), model],
        Exports([memory], metrics),
        metrics,
        EvaluationSettings(model=ModelTierSettings(rate=1.0)),
    )
    pipeline.start()
    pipeline.submit([trace(f"q{i}?") for i in range(3)])
    assert model.loading.wait(10)
    pipeline.stop(timeout=300)  # returns while the load is still blocked
    assert not model.release.is_set()
    assert len(memory.items) == 3 and all(len(i.results) == 1 for i in memory.items)
    assert skipped(metrics, "shutdown") == 3
    model.release.set()  # let the abandoned loader thread finish


class JudgeStandIn(Evaluator):
    """A judge-tier evaluator that calls no endpoint: the staging is what is tested."""

    metric, method = "stand_in", "judge"
    tier = Tier.JUDGE

    def score(self, record: RagRecord) -> EvalResult:
        return self.result(0.5)


def test_both_costly_tiers_are_built_from_one_section_shape() -> None:
    """``evaluation.model`` and ``evaluation.judge`` share their keys (TierSettings), and
    the pipeline builds each tier's stage from its section alone."""
    shared = set(TierSettings.model_fields)
    assert shared == {"rate", "batch_size", "max_wait_s", "max_queue", "max_delay_s"}
    assert shared <= set(ModelTierSettings.model_fields) & set(JudgeSettings.model_fields)
    model = ModelTierSettings(
        rate=1.0, batch_size=3, max_wait_s=0.03, max_queue=7, max_delay_s=2.5, budget=0.5
    )
    judge = JudgeSettings(rate=1.0, batch_size=5, max_wait_s=0.05, max_queue=9, max_delay_s=4.5)
    settings = EvaluationSettings(model=model, judge=judge)
    metrics = CollectorMetrics()
    pipeline = Pipeline(
        [LexicalFaithfulness(), SlowModel(), JudgeStandIn()],
        Exports([InMemorySink()], metrics),
        metrics,
        settings,
    )
    for tier, section in ((Tier.MODEL, model), (Tier.JUDGE, judge)):
        stage = pipeline._stages[tier]
        built = (stage._batch_size, stage._max_wait_s, stage._max_queue, stage._max_delay_s)
        assert built == (
            section.batch_size, section.max_wait_s, section.max_queue, section.max_delay_s
        )  # fmt: skip
        assert pipeline._sampler.rates[tier] == section.rate
    budget = pipeline._stages[Tier.MODEL]._budget
    assert budget is not None and budget.share == 0.5  # the model tier's own key
    assert pipeline._stages[Tier.JUDGE]._budget is None  # judges count calls and tokens
