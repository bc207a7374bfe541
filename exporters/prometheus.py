"""Scores as Prometheus histograms with trace-id exemplars.

Exemplars appear only in the OpenMetrics exposition, which Prometheus
negotiates on scrape (``--enable-feature=exemplar-storage`` keeps them). Each
bucket shows one exemplar, refreshed at most every ``prometheus_series.EXEMPLAR_EVERY_S``.

Exemplars carry only the trace and span ids (hex), never content. The
``service`` and ``route`` label values come from the app and may hold user input
(``/users/jane@example.com``), so they are redacted (the ``redaction`` section,
path ``prometheus``) before they are bounded and exposed.

Settings: ``sinks.prometheus`` (:class:`PrometheusSink.Options`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from pydantic import Field

from ragpulse.config import RedactionSettings, Settings
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

    class Options(PluginOptions):
        """Label bounds of the score histograms.

        ``ragpulse_eval_score`` has at most ``methods x (max_route_pairs + max_services + 1)
        x 14`` series per replica (11 buckets, sum, count, created): with the defaults, about
        6,400 for the 9 methods on by default, about 10,700 with the model tier's 6 more.
        """

        routes: list[str] = Field(
            default_factory=list, description="Route allow-list (else first N)."
        )
        max_routes: int = Field(30, ge=1)
        services: list[str] = Field(default_factory=list)
        max_services: int = Field(10, ge=1)
        max_route_pairs: int = Field(
            40,
            ge=1,
            description="Distinct (service, route) pairs; past it a new pair's route is 'other'.",
        )
        redaction: RedactionSettings = Field(
            default_factory=RedactionSettings,
            description="the top-level redaction section (path prometheus: route/service)",
        )

    def __init__(
        self,
        registry: CollectorRegistry,
        settings: Options | None = None,
        redaction: RedactionSettings | None = None,
    ) -> None:
        settings = settings or self.Options()
        if redaction is not None:
            settings = settings.model_copy(update={"redaction": redaction})
        super().__init__(settings)
        self._redactor = Redactor.for_path(settings.redaction, "prometheus")
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
        return {"redaction": settings.redaction.model_dump()}

    @classmethod
    def create(cls, options: PluginOptions, context: PluginContext) -> PrometheusSink:
        assert isinstance(options, cls.Options)
        return cls(context.metrics.registry, options)

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
