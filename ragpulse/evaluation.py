"""Running evaluators over records: shared by the collector, ``ragpulse eval`` and replay.

Lives in the core (not the collector) so that offline scoring, benchmarks and
plug-ins use it without importing the collector.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from ragpulse.errors import ModelUnavailable
from ragpulse.evaluators.base import Evaluator
from ragpulse.plugin_context import PluginContext
from ragpulse.record import EvalResult, RagRecord
from ragpulse.telemetry import CollectorMetrics

log = logging.getLogger(__name__)


def evaluate_records(
    records: Sequence[RagRecord],
    evaluators: Sequence[Evaluator],
    metrics: CollectorMetrics | None = None,
) -> list[list[EvalResult]]:
    """Run every evaluator over the batch; results[i] belongs to records[i]."""
    results: list[list[EvalResult]] = [[] for _ in records]
    if not records:
        return results
    for evaluator in evaluators:
        start = time.perf_counter()
        scored = evaluator.evaluate(records)
        if metrics is not None:
            metrics.evaluator_duration.labels(evaluator.metric, evaluator.method).observe(
                time.perf_counter() - start
            )
        for i, result in enumerate(scored):
            results[i].append(result)
            if result.error and metrics is not None:
                metrics.evaluator_errors.labels(result.metric, result.method).inc()
    return results


def load_evaluators_safely(
    evaluators: Sequence[Evaluator], context: PluginContext | None = None
) -> list[Evaluator]:
    """Load each evaluator with ``context``; drop (log once, count) those that cannot run.

    Without a context (tests, notebooks) each call gets a fresh one with default settings.
    """
    context = context if context is not None else PluginContext()
    metrics = context.metrics
    ready = []
    for evaluator in evaluators:
        reason = evaluator.missing()
        if reason is None:
            try:
                evaluator.load(context)
            except ModelUnavailable as exc:
                reason = str(exc)
            except Exception as exc:  # a broken model must not crash-loop the collector
                reason = f"{type(exc).__name__}: {exc}"
        metrics.evaluator_available.labels(evaluator.metric, evaluator.method).set(
            0 if reason else 1
        )
        if reason:
            log.error("evaluator %s disabled: %s", evaluator.name(), reason)
        else:
            labels = (evaluator.metric, evaluator.method, evaluator.tier.value)
            metrics.evaluator_info.labels(*labels, evaluator.direction.value).set(1)
            ready.append(evaluator)
    return ready
