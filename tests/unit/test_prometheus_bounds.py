"""The score histograms' series count is bounded by the documented formula, whatever the
traffic: many services and routes (user input in a route) fold into ``other``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from ragpulse.exporters.prometheus import PrometheusSink
from ragpulse.record import EvalResult, ExportItem, RagRecord
from ragpulse.telemetry import PairLimiter

SERIES_PER_HISTOGRAM = 13  # 11 buckets, _sum, _count


def score_series(registry: CollectorRegistry) -> int:
    return sum(
        len(family.samples) for family in registry.collect() if family.name == "ragpulse_eval_score"
    )


def test_score_series_stay_within_the_documented_bound() -> None:
    settings = PrometheusSink.Options()
    registry = CollectorRegistry()
    sink = PrometheusSink(registry, settings)
    methods = [("faithfulness", "lexical"), ("context_relevance", "lexical"), ("refusal", "rules")]
    # 60 services x 200 routes: far past every bound.
    for i in range(12_000):
        record = RagRecord(
            trace_id=f"{i:032x}",
            span_id=f"{i:016x}",
            service=f"svc-{i % 60}",
            route=f"/item/{i // 60}",
        )
        sink.export(
            ExportItem(record, [EvalResult(metric=m, method=k, score=0.5) for m, k in methods])
        )
    bound = (
        len(methods) * (settings.max_route_pairs + settings.max_services + 1) * SERIES_PER_HISTOGRAM
    )
    assert 0 < score_series(registry) <= bound


def test_pairs_past_the_bound_keep_their_service_and_fold_the_route() -> None:
    pairs = PairLimiter(max_pairs=2)
    assert pairs("a", "/x") == "/x"
    assert pairs("a", "/y") == "/y"
    assert pairs("b", "/x") == "other"  # a third pair
    assert pairs("a", "/x") == "/x"  # pairs already seen keep their route
