"""Evaluation results as OpenTelemetry signals in the evaluated trace.

Ended spans cannot be changed, so each result becomes new signals about the
*evaluated operation span* (:mod:`ragpulse.exporters.support.targets`: the
generation span for the answer's metrics, the retrieval span for the
documents', the pipeline span for the rest), falling back to the record's
pipeline span when the trace did not show that operation:

- a ``gen_ai.evaluation.result`` event, emitted through the OTel Logs API with
  the evaluated span's context (GenAI semantic conventions: "parented to the
  GenAI operation span being evaluated"), with ``gen_ai.response.id`` on the
  results about a completion when the trace recorded it;
- an OpenInference ``EVALUATOR`` carrier span (OpenInference
  ``spec/annotations.md``, post-hoc feedback): the root of a trace of its own with
  exactly one Span Link to the evaluated span (the spec: parentage must not be used
  to identify the target), the result as ``evaluations.0.evaluation.*`` with
  ``annotator_kind`` (LLM for judges, CODE otherwise) and ``identifier``, and the
  ``gen_ai.evaluation.*`` attributes for span-only GenAI backends. Never parented:
  a span that joins the evaluated trace seconds after it ended would stretch its
  duration, and a backend that merges resources per trace would take ragpulse's
  service name for the app's. Its resource carries the evaluated trace's
  ``openinference.project.name`` (when it had one), so Phoenix files it in the
  app's project.

Events go only where the endpoint takes logs: the first export probes ``/v1/logs``
with an empty request; a 404 or 405 (Phoenix, MLflow) turns the events off with one
warning. Every export that fails counts in ``ragpulse_sink_errors_total{sink="otel"}``.

The attributes that can quote the record (explanation, error, details: a
judge's reason, the answer's unsupported tokens, an injection's matched text)
are redacted first (the ``redaction`` section, path ``otel``; on by default).

Settings: ``sinks.otel`` (:class:`OtelEvaluationSink.Options`); the endpoint is also
``serve --otlp-export-endpoint``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.util.types import AttributeValue
from pydantic import Field

from ragpulse import semconv as sc
from ragpulse.config import RedactionSettings, Settings
from ragpulse.exporters.base import Sink
from ragpulse.exporters.support.results import MAX_DETAILS_CHARS, annotator_kind, redact_results
from ragpulse.exporters.support.targets import evaluated_span
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import EvalResult, ExportItem, RagRecord
from ragpulse.redaction import Redactor
from ragpulse.telemetry import CollectorMetrics

log = logging.getLogger(__name__)

_SCOPE = "ragpulse.evaluation"
MAX_PROJECTS = 100
"""Projects with a carrier resource of their own; past it, carriers name no project."""


def _verdict(
    result: EvalResult, score: str, label: str, explanation: str
) -> dict[str, AttributeValue]:
    """The result's score, label and explanation under one vocabulary's names, each when set."""
    values: dict[str, AttributeValue | None] = {
        score: result.score,
        label: result.label or None,
        explanation: result.explanation or None,
    }
    return {name: value for name, value in values.items() if value is not None}


def evaluation_attributes(result: EvalResult) -> dict[str, AttributeValue]:
    """The GenAI evaluation attributes (plus ragpulse's method/details) of one result."""
    attrs: dict[str, AttributeValue] = {
        sc.GEN_AI_EVALUATION_NAME: result.metric,
        sc.RAGPULSE_EVAL_METHOD: result.method,
    }
    attrs.update(
        _verdict(
            result,
            sc.GEN_AI_EVALUATION_SCORE_VALUE,
            sc.GEN_AI_EVALUATION_SCORE_LABEL,
            sc.GEN_AI_EVALUATION_EXPLANATION,
        )
    )
    if result.error:
        attrs[sc.ERROR_TYPE] = result.error.split(":", 1)[0]
        attrs[sc.RAGPULSE_EVAL_ERROR] = result.error
    if result.details:
        attrs[sc.RAGPULSE_EVAL_DETAILS] = json.dumps(result.details, default=str)[
            :MAX_DETAILS_CHARS
        ]
    return attrs


def span_context(trace_id: str, span_id: str) -> SpanContext:
    return SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


def openinference_evaluation(result: EvalResult) -> dict[str, AttributeValue]:
    """``evaluations.0.evaluation.*`` (OpenInference): nothing when the result has no
    score, label or explanation (the spec asks to omit such an object)."""
    if result.score is None and not result.label and not result.explanation:
        return {}
    fields: dict[str, AttributeValue] = {
        sc.EVALUATION_NAME: result.metric,
        sc.EVALUATION_ANNOTATOR_KIND: annotator_kind(result.method),
        # Stable per name and target: two methods may score the same metric.
        sc.EVALUATION_IDENTIFIER: f"ragpulse.{result.method}",
    }
    fields.update(
        _verdict(result, sc.EVALUATION_SCORE, sc.EVALUATION_LABEL, sc.EVALUATION_EXPLANATION)
    )
    metadata: dict[str, Any] = {"method": result.method}
    if result.error:
        metadata["error"] = result.error
    fields[sc.EVALUATION_METADATA] = json.dumps(metadata)
    return {sc.evaluation_attr(0, key): value for key, value in fields.items()}


class _CountedSpans(SpanExporter):
    """The one span exporter behind every project's processor: counts failed exports,
    and leaves shutting the real exporter down to the sink (once, after all processors)."""

    def __init__(self, inner: SpanExporter, failed: Callable[[], None]) -> None:
        self.inner, self._failed = inner, failed

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        if result is not SpanExportResult.SUCCESS:
            self._failed()
        return result

    def shutdown(self) -> None:
        pass  # OtelEvaluationSink.shutdown closes the inner exporter


class LogsWhereAccepted(LogRecordExporter):
    """Forwards events to the OTLP log exporter where the endpoint takes logs.

    The first export (and every one until an answer is had) probes ``url`` with an
    empty OTLP logs request: 2xx, the endpoint takes logs; 404 or 405, it has no logs
    intake (Phoenix, MLflow): one warning, and :attr:`refused` turns the events off.
    Failed exports are counted through ``failed``.
    """

    def __init__(
        self,
        inner: LogRecordExporter,
        url: str,
        *,
        headers: dict[str, str],
        timeout_s: float,
        failed: Callable[[], None],
    ) -> None:
        self.inner, self.url = inner, url
        self._headers = {**headers, "Content-Type": "application/x-protobuf"}
        self._timeout, self._failed = timeout_s, failed
        self.accepted = False
        self.refused = False

    def _probe(self) -> None:
        empty = logs_service_pb2.ExportLogsServiceRequest().SerializeToString()
        try:
            status = httpx.post(
                self.url, content=empty, headers=self._headers, timeout=self._timeout
            ).status_code
        except httpx.HTTPError:
            return  # unknown yet: the export below says how it goes
        if status in (404, 405):
            self.refused = True
            log.warning(
                "the OTLP endpoint has no logs intake (HTTP %d on /v1/logs): "
                "gen_ai.evaluation.result events are off, EVALUATOR spans still go",
                status,
            )
        elif 200 <= status < 300:
            self.accepted = True

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        if not self.accepted and not self.refused:
            self._probe()
        if self.refused:
            return LogRecordExportResult.SUCCESS  # turned off on purpose, said once
        result = self.inner.export(batch)
        if result is not LogRecordExportResult.SUCCESS:
            self._failed()
        return result

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.inner.shutdown()  # type: ignore[no-untyped-call]  # the SDK's base is unannotated


class OtelEvaluationSink(Sink["OtelEvaluationSink.Options"]):
    """Exports through its own providers, so it never mixes with an app's telemetry."""

    name = "otel"
    default_enabled = True

    class Options(PluginOptions):
        """Where evaluation events and EVALUATOR spans go, and which of them."""

        events: bool = Field(True, description="Emit gen_ai.evaluation.result log events.")
        spans: bool = Field(True, description="Emit an EVALUATOR span per evaluated record.")
        headers: dict[str, str] = Field(default_factory=dict)
        timeout_s: float = Field(10.0, gt=0)
        endpoint: str | None = Field(
            None,
            description="Base URL of an OTLP/HTTP receiver for evaluation signals; unset = off.",
        )
        service_name: str = Field("ragpulse", description="service.name of the evaluation signals.")
        redaction: RedactionSettings = Field(
            default_factory=RedactionSettings,
            description="the top-level redaction section (path otel)",
        )

    def __init__(
        self,
        span_exporter: SpanExporter | None,
        log_exporter: LogRecordExporter | None,
        service_name: str = "ragpulse",
        redaction: RedactionSettings | None = None,
        metrics: CollectorMetrics | None = None,
    ) -> None:
        redaction = redaction or RedactionSettings()
        super().__init__(self.Options(service_name=service_name, redaction=redaction))
        self.redactor = Redactor.for_path(redaction, "otel")
        self.metrics = metrics if metrics is not None else CollectorMetrics()
        self._service_name = service_name
        self._span_exporter = span_exporter
        self._spans = _CountedSpans(span_exporter, self._failed) if span_exporter else None
        self._tracers: dict[str | None, tuple[TracerProvider, trace.Tracer]] = {}
        self._tracers_lock = threading.Lock()
        self._logger_provider: LoggerProvider | None = None
        self._logs = log_exporter if isinstance(log_exporter, LogsWhereAccepted) else None
        if log_exporter is not None:
            resource = Resource.create({sc.SERVICE_NAME: service_name})
            self._logger_provider = LoggerProvider(resource=resource)
            self._logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter))
            self._logger = self._logger_provider.get_logger(_SCOPE)

    def _failed(self) -> None:
        self.metrics.sink_errors.labels(self.name).inc()

    @classmethod
    def section(cls, settings: Settings) -> dict[str, Any]:
        return {"redaction": settings.redaction.model_dump()}

    @classmethod
    def create(
        cls, options: OtelEvaluationSink.Options, context: PluginContext
    ) -> OtelEvaluationSink | None:
        if not options.endpoint:
            return None
        base = options.endpoint.rstrip("/")
        opts = options
        spans = (
            OTLPSpanExporter(f"{base}/v1/traces", headers=opts.headers, timeout=opts.timeout_s)
            if opts.spans
            else None
        )
        logs: LogRecordExporter | None = None
        if opts.events:
            otlp = OTLPLogExporter(f"{base}/v1/logs", headers=opts.headers, timeout=opts.timeout_s)
            logs = LogsWhereAccepted(
                otlp,
                f"{base}/v1/logs",
                headers=opts.headers,
                timeout_s=opts.timeout_s,
                failed=lambda: context.metrics.sink_errors.labels(cls.name).inc(),
            )
        return cls(
            spans,
            logs,
            service_name=options.service_name,
            redaction=options.redaction,
            metrics=context.metrics,
        )

    def _tracer(self, project: str | None) -> trace.Tracer | None:
        """The tracer whose resource names ``project`` (built on first use)."""
        if self._spans is None:
            return None
        with self._tracers_lock:
            if project not in self._tracers and len(self._tracers) >= MAX_PROJECTS:
                project = None  # bounded: one provider (and thread) per project
            if project not in self._tracers:
                attrs: dict[str, AttributeValue] = {sc.SERVICE_NAME: self._service_name}
                if project:
                    attrs[sc.OPENINFERENCE_PROJECT_NAME] = project
                provider = TracerProvider(resource=Resource.create(attrs))
                provider.add_span_processor(BatchSpanProcessor(self._spans))
                self._tracers[project] = (provider, provider.get_tracer(_SCOPE))
            return self._tracers[project][1]

    def export(self, item: ExportItem[RagRecord]) -> None:
        """Every item alike: an update's results are new signals, and a revision's results
        are new signals too, which a tool that keys them by ``identifier`` takes in place
        of the earlier ones (events and spans cannot be taken back)."""
        record, results = item.record, item.results
        if not record.trace_id or not record.span_id:
            return
        # Targets first: where an injection was found is read from unredacted details.
        targets = [evaluated_span(record, r) for r in results]
        now = time.time_ns()
        if self.redactor.enabled:
            results = redact_results(record, results, self.redactor)
        project = record.attributes.get(sc.OPENINFERENCE_PROJECT_NAME)
        tracer = self._tracer(project if isinstance(project, str) else None)
        events = self._logger_provider is not None and not (self._logs and self._logs.refused)
        for result, target in zip(results, targets, strict=True):
            evaluated = span_context(record.trace_id, target.span_id)
            attrs = evaluation_attributes(result)
            if target.response_id:
                attrs[sc.GEN_AI_RESPONSE_ID] = target.response_id
            if events:
                self._logger.emit(
                    event_name=sc.GEN_AI_EVALUATION_EVENT,
                    context=trace.set_span_in_context(NonRecordingSpan(evaluated)),
                    timestamp=now,
                    attributes=attrs,
                )
            if tracer is not None:
                duration_ns = int((result.duration_ms or 0.0) * 1e6)
                span = tracer.start_span(
                    f"evaluate {result.metric}",
                    context=Context(),  # a trace of its own: linked, never parented
                    links=[Link(evaluated)],
                    start_time=now - duration_ns,
                    attributes={
                        sc.OPENINFERENCE_SPAN_KIND: sc.KIND_EVALUATOR,
                        sc.RAGPULSE_EVAL_TRACE_ID: record.trace_id,
                        sc.RAGPULSE_EVAL_SPAN_ID: target.span_id,
                        sc.RAGPULSE_EVAL_RECORD_ID: record.record_id,
                        sc.RAGPULSE_EVAL_REVISION: record.revision,
                        **attrs,
                        **openinference_evaluation(result),
                    },
                )
                if result.error:
                    span.set_status(trace.Status(trace.StatusCode.ERROR, result.error))
                span.end(end_time=now)

    def shutdown(self) -> None:
        with self._tracers_lock:
            providers = [provider for provider, _ in self._tracers.values()]
        for provider in providers:
            provider.shutdown()  # flushes its processor into the shared exporter
        if self._span_exporter is not None:
            self._span_exporter.shutdown()
        if self._logger_provider is not None:
            self._logger_provider.shutdown()
