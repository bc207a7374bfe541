"""Scores as Prometheus histograms with trace-id exemplars.

Exemplars appear only in the OpenMetrics exposition, which Prometheus
negotiates on scrape (``--enable-feature=exemplar-storage`` keeps them).
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram

from ragpulse.config import PrometheusSettings, Settings
from ragpulse.exporters.base import Sink
from ragpulse.record import EvalResult, RagRecord
from ragpulse.telemetry import CollectorMetrics, LabelLimiter

SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def injection_locations(result: EvalResult) -> set[str]:
    """``question`` and/or ``document`` for an injection result that fired."""
    if result.label != "injection":
        return set()
    findings = result.details.get("findings") or []
    where = {str(f.get("where", "")).split(":")[0] for f in findings if isinstance(f, dict)}
    return {w for w in where if w in ("question", "document")}


class PrometheusSink(Sink):
    name = "prometheus"

    def __init__(
        self, registry: CollectorRegistry, settings: PrometheusSettings | None = None
    ) -> None:
        settings = settings or PrometheusSettings()
        self._routes = LabelLimiter(settings.routes, settings.max_routes)
        self._services = LabelLimiter(settings.services, settings.max_services)
        self.score = Histogram(
            "ragpulse_eval_score",
            "Evaluation scores in [0, 1] (injection: risk; others: higher is better).",
            ["metric", "method", "service", "route"],
            buckets=SCORE_BUCKETS,
            registry=registry,
        )
        self.results = Counter(
            "ragpulse_eval_results",
            "Evaluation results by outcome (scored, not_applicable, skipped, error).",
            ["metric", "method", "outcome"],
            registry=registry,
        )
        self.injections = Counter(
            "ragpulse_injection_detected",
            "Records with a prompt injection detected, by where it was found.",
            ["where"],
            registry=registry,
        )

    @classmethod
    def from_settings(cls, settings: Settings, metrics: CollectorMetrics) -> PrometheusSink:
        return cls(metrics.registry, settings.prometheus)

    def export(self, record: RagRecord, results: Sequence[EvalResult]) -> None:
        service, route = self._services(record.service), self._routes(record.route)
        exemplar = {"trace_id": record.trace_id, "span_id": record.span_id}
        for result in results:
            if result.error:
                outcome = "error"
            elif result.label == "skipped":  # e.g. the judge budget was spent
                outcome = "skipped"
            elif result.score is None:
                outcome = "not_applicable"
            else:
                outcome = "scored"
                self.score.labels(result.metric, result.method, service, route).observe(
                    result.score, exemplar=exemplar
                )
            self.results.labels(result.metric, result.method, outcome).inc()
            for where in injection_locations(result):
                self.injections.labels(where).inc()
