"""Scores as Prometheus histograms with trace-id exemplars.

Exemplars appear only in the OpenMetrics exposition, which Prometheus
negotiates on scrape (``--enable-feature=exemplar-storage`` keeps them). Each
bucket shows one exemplar, refreshed at most every ``EXEMPLAR_EVERY_S``.

Exemplars carry only the trace and span ids (hex), never content. The
``service`` and ``route`` label values come from the app and may hold user input
(``/users/jane@example.com``), so they are redacted (the ``redaction`` section,
path ``prometheus``) before they are bounded and exposed.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from pydantic import Field

from ragpulse.config import PrometheusSettings, RedactionSettings, Settings
from ragpulse.exporters.base import Sink
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import EvalResult, RagRecord
from ragpulse.redaction import Redactor
from ragpulse.telemetry import LabelLimiter, PairLimiter

SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
_BUCKETS = len(SCORE_BUCKETS) + 1  # and +Inf
EXEMPLAR_EVERY_S = 1.0
"""A bucket keeps one exemplar (the latest), so a new one is attached at most this often
per bucket: validating and storing one per observation cost more than the observation.
The first score in a bucket always carries one, so rare (low) scores always do."""
_LABEL_CACHE = 10_000
"""Redacted label values remembered (raw -> redacted); past it each value is redacted anew."""


def injection_locations(result: EvalResult) -> set[str]:
    """``question`` and/or ``document`` for an injection result that fired."""
    if result.label != "injection":
        return set()
    findings = result.details.get("findings") or []
    where = {str(f.get("where", "")).split(":")[0] for f in findings if isinstance(f, dict)}
    return {w for w in where if w in ("question", "document")}


class PrometheusSink(Sink):
    name = "prometheus"
    default_enabled = True

    class Options(PrometheusSettings):
        """The ``prometheus`` settings section (``sinks.prometheus`` overrides it)."""

        redaction: RedactionSettings = Field(
            default_factory=RedactionSettings,
            description="the top-level redaction section (path prometheus: route/service)",
        )

    def __init__(
        self,
        registry: CollectorRegistry,
        settings: PrometheusSettings | None = None,
        redaction: RedactionSettings | None = None,
    ) -> None:
        settings = settings or PrometheusSettings()
        self._redactor = Redactor.for_path(redaction or RedactionSettings(), "prometheus")
        self._redacted: dict[str, str] = {}
        self._routes = LabelLimiter(settings.routes, settings.max_routes)
        self._services = LabelLimiter(settings.services, settings.max_services)
        self._pairs = PairLimiter(settings.max_route_pairs)
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
        # Labelled children by label values: ``labels()`` validates and locks on every
        # call, which costs more than the observation. Label values are bounded (the
        # limiters above), so these stay small; a dict read or write is atomic.
        # Per score series: the child, and when each bucket last took an exemplar.
        self._score_children: dict[tuple[str, str, str, str], tuple[Any, list[float]]] = {}
        self._result_children: dict[tuple[str, str, str], Any] = {}

    @classmethod
    def section(cls, settings: Settings) -> dict[str, Any]:
        return {**settings.prometheus.model_dump(), "redaction": settings.redaction.model_dump()}

    @classmethod
    def create(cls, options: PluginOptions, context: PluginContext) -> PrometheusSink:
        assert isinstance(options, cls.Options)
        return cls(context.metrics.registry, options, options.redaction)

    def _label(self, value: str | None) -> str | None:
        """``value`` redacted; a dict read for values seen before (labels repeat)."""
        if not value or not self._redactor.enabled:
            return value
        if (known := self._redacted.get(value)) is not None:
            return known
        redacted = self._redactor.redact(value)
        if len(self._redacted) < _LABEL_CACHE:
            self._redacted[value] = redacted
        return redacted

    def export(self, record: RagRecord, results: Sequence[EvalResult]) -> None:
        service = self._services(self._label(record.service))
        route = self._pairs(service, self._routes(self._label(record.route)))
        exemplar = {"trace_id": record.trace_id, "span_id": record.span_id}
        now = time.monotonic()
        scores, outcomes = self._score_children, self._result_children
        for result in results:
            if result.error:
                outcome = "error"
            elif result.label == "skipped":  # e.g. the judge budget was spent
                outcome = "skipped"
            elif result.score is None:
                outcome = "not_applicable"
            else:
                outcome = "scored"
                key = (result.metric, result.method, service, route)
                if (child := scores.get(key)) is None:
                    child = scores[key] = (self.score.labels(*key), [-EXEMPLAR_EVERY_S] * _BUCKETS)
                histogram, exemplar_at = child
                bucket = bisect_left(SCORE_BUCKETS, result.score)
                if now - exemplar_at[bucket] >= EXEMPLAR_EVERY_S:
                    exemplar_at[bucket] = now
                    histogram.observe(result.score, exemplar=exemplar)
                else:
                    histogram.observe(result.score)
            counted = (result.metric, result.method, outcome)
            if (counter := outcomes.get(counted)) is None:
                counter = outcomes[counted] = self.results.labels(*counted)
            counter.inc()
            if result.label == "injection":
                for where in injection_locations(result):
                    self.injections.labels(where).inc()
