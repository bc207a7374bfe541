"""Scores as Prometheus histograms with trace-id exemplars.

Exemplars appear only in the OpenMetrics exposition, which Prometheus
negotiates on scrape (``--enable-feature=exemplar-storage`` keeps them). Each
bucket shows one exemplar, refreshed at most every ``prometheus_series.EXEMPLAR_EVERY_S``.

Exemplars carry only the trace and span ids (hex), never content. The
``service`` and ``route`` label values come from the app and may hold user input
(``/users/jane@example.com``), so they are redacted (the ``redaction`` section,
path ``prometheus``) before they are bounded and exposed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from pydantic import Field

from ragpulse.config import PrometheusSettings, RedactionSettings, Settings
from ragpulse.exporters.base import Sink
from ragpulse.exporters.support.prometheus_series import ScoreSeries
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import EvalResult, RagRecord
from ragpulse.redaction import Redactor
from ragpulse.telemetry import LabelLimiter, PairLimiter

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
        redaction = redaction or RedactionSettings()
        super().__init__(self.Options(**{**settings.model_dump(), "redaction": redaction}))
        self._redactor = Redactor.for_path(redaction, "prometheus")
        self._redacted: dict[str, str] = {}
        self._routes = LabelLimiter(settings.routes, settings.max_routes)
        self._services = LabelLimiter(settings.services, settings.max_services)
        self._pairs = PairLimiter(settings.max_route_pairs)
        self.series = ScoreSeries(registry)
        self.injections = Counter(
            "ragpulse_injection_detected",
            "Records with a prompt injection detected, by where it was found.",
            ["where"],
            registry=registry,
        )

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
        self.series.add(
            results, service, route, {"trace_id": record.trace_id, "span_id": record.span_id}
        )
        for result in results:
            if result.label == "injection":
                for where in injection_locations(result):
                    self.injections.labels(where).inc()
