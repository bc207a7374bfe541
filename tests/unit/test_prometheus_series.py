"""The sink's score histograms and result counters expose what prometheus_client's own
Histogram and Counter would for the same results (one lock per record instead of one per
increment), with one exemplar per bucket refreshed at most every EXEMPLAR_EVERY_S."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from ragpulse.exporters.support import prometheus_series
from ragpulse.exporters.support.prometheus_series import SCORE_BUCKETS, ScoreSeries
from ragpulse.record import EvalResult

METHODS = [("faithfulness", "lexical"), ("injection", "rules"), ("refusal", "rules")]


def _results(rng: random.Random) -> list[EvalResult]:
    out = []
    for metric, method in METHODS:
        roll = rng.random()
        if roll < 0.1:
            out.append(EvalResult(metric=metric, method=method, error="boom"))
        elif roll < 0.2:
            out.append(EvalResult(metric=metric, method=method, label="skipped"))
        elif roll < 0.3:
            out.append(EvalResult(metric=metric, method=method))
        else:  # bucket bounds themselves included: a score equal to a bound is inside it
            score = rng.choice([rng.random(), rng.choice(SCORE_BUCKETS), 0.0])
            out.append(EvalResult(metric=metric, method=method, score=score))
    return out


def test_the_same_samples_as_prometheus_client_histograms_and_counters() -> None:
    rng = random.Random(7)
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    series = ScoreSeries(ours)
    histogram = Histogram(
        "ragpulse_eval_score", "h", ["metric", "method", "service", "route"],
        buckets=SCORE_BUCKETS, registry=theirs,
    )  # fmt: skip
    counter = Counter(
        "ragpulse_eval_results", "c", ["metric", "method", "outcome"], registry=theirs
    )
    for i in range(2_000):
        service, route = f"svc-{i % 3}", f"/r{i % 5}"
        results = _results(rng)
        series.add(results, service, route, {"trace_id": f"{i:032x}", "span_id": f"{i:016x}"})
        for r in results:
            if r.error:
                outcome = "error"
            elif r.label == "skipped":
                outcome = "skipped"
            elif r.score is None:
                outcome = "not_applicable"
            else:
                outcome = "scored"
                histogram.labels(r.metric, r.method, service, route).observe(r.score)
            counter.labels(r.metric, r.method, outcome).inc()

    def samples(
        registry: CollectorRegistry,
    ) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect()
            for s in family.samples
            if not s.name.endswith("_created")
        }

    expected = samples(theirs)
    assert len(expected) > 100
    assert samples(ours) == expected


def test_one_exemplar_per_bucket_refreshed_at_most_every_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(prometheus_series.time, "monotonic", lambda: now[0])
    registry = CollectorRegistry()
    series = ScoreSeries(registry)

    def add(i: int, score: float) -> None:
        result = EvalResult(metric="faithfulness", method="lexical", score=score)
        series.add([result], "svc", "/r", {"trace_id": f"{i:032x}", "span_id": f"{i:016x}"})

    def exemplars() -> dict[str, str]:
        return {
            s.labels["le"]: s.exemplar.labels["trace_id"]
            for family in registry.collect()
            for s in family.samples
            if s.exemplar is not None
        }

    add(1, 0.55)
    add(2, 0.05)  # another bucket: its first score carries one too
    add(3, 0.56)  # same bucket, too soon: the first stays
    assert exemplars() == {"0.6": f"{1:032x}", "0.1": f"{2:032x}"}
    now[0] += prometheus_series.EXEMPLAR_EVERY_S
    add(4, 0.58)
    assert exemplars()["0.6"] == f"{4:032x}"


def test_the_known_evaluators_results_exist_at_0_before_their_first_result() -> None:
    registry = CollectorRegistry()
    known: list[tuple[str, str]] = []
    series = ScoreSeries(registry, lambda: known)
    value = registry.get_sample_value
    error = {"metric": "faithfulness", "method": "lexical", "outcome": "error"}
    assert value("ragpulse_eval_results_total", error) is None  # nothing loaded yet
    known.append(("faithfulness", "lexical"))  # loaded after the sink was built
    for outcome in prometheus_series.OUTCOMES:
        labels = {**error, "outcome": outcome}
        assert value("ragpulse_eval_results_total", labels) == 0
    series.add([EvalResult(metric="faithfulness", method="lexical", error="boom")], "s", "r", {})
    assert value("ragpulse_eval_results_total", error) == 1


def test_a_fresh_registry_has_every_drop_and_skip_reason_at_0() -> None:
    from ragpulse.collector.extract.records import NO_QUESTION, NO_RAG_SHAPE
    from ragpulse.telemetry import DROP_REASONS, TRACE_SKIP_REASONS, CollectorMetrics

    assert {NO_QUESTION, NO_RAG_SHAPE} <= set(TRACE_SKIP_REASONS)  # extraction's reasons
    metrics = CollectorMetrics()
    value = metrics.registry.get_sample_value
    for reason in DROP_REASONS:
        assert value("ragpulse_dropped_total", {"reason": reason}) == 0
    for reason in TRACE_SKIP_REASONS:
        assert value("ragpulse_traces_skipped_total", {"reason": reason}) == 0
    metrics.evaluator_loaded("consistency", "rules")
    labels = {"metric": "consistency", "method": "rules"}
    assert value("ragpulse_evaluator_errors_total", labels) == 0
    assert metrics.loaded_evaluators() == [("consistency", "rules")]
