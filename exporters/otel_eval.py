"""Evaluation results as OpenTelemetry signals in the evaluated trace.

Ended spans cannot be changed, so each result becomes new signals parented to
the evaluated span (same trace id, parent span id = the evaluated span):

- a ``gen_ai.evaluation.result`` event, emitted through the OTel Logs API with
  the evaluated span's context (GenAI semantic conventions);
- an OpenInference ``EVALUATOR`` span carrying the same attributes, for
  backends that only read spans.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.util.types import AttributeValue
from pydantic import Field

from ragpulse import semconv as sc
from ragpulse.config import OtelExportSettings, Settings
from ragpulse.exporters.base import Sink
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import EvalResult, RagRecord

_SCOPE = "ragpulse.evaluation"
_MAX_DETAILS_CHARS = 4096


def evaluation_attributes(result: EvalResult) -> dict[str, AttributeValue]:
    """The GenAI evaluation attributes (plus ragpulse's method/details) of one result."""
    attrs: dict[str, AttributeValue] = {
        sc.GEN_AI_EVALUATION_NAME: result.metric,
        sc.RAGPULSE_EVAL_METHOD: result.method,
    }
    if result.score is not None:
        attrs[sc.GEN_AI_EVALUATION_SCORE_VALUE] = result.score
    if result.label:
        attrs[sc.GEN_AI_EVALUATION_SCORE_LABEL] = result.label
    if result.explanation:
        attrs[sc.GEN_AI_EVALUATION_EXPLANATION] = result.explanation
    if result.error:
        attrs[sc.ERROR_TYPE] = result.error.split(":", 1)[0]
        attrs[sc.RAGPULSE_EVAL_ERROR] = result.error
    if result.details:
        attrs[sc.RAGPULSE_EVAL_DETAILS] = json.dumps(result.details, default=str)[
            :_MAX_DETAILS_CHARS
        ]
    return attrs


def evaluated_span_context(record: RagRecord) -> Context:
    parent = SpanContext(
        trace_id=int(record.trace_id, 16),
        span_id=int(record.span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


class OtelEvaluationSink(Sink):
    """Exports through its own providers, so it never mixes with an app's telemetry."""

    name = "otel"
    default_enabled = True

    class Options(OtelExportSettings):
        """``otel_export`` plus ``otlp_export_endpoint`` and ``service_name``."""

        endpoint: str | None = Field(None, description="OTLP/HTTP base URL; unset = off")
        service_name: str = "ragpulse"

    def __init__(
        self,
        span_exporter: SpanExporter | None,
        log_exporter: LogRecordExporter | None,
        service_name: str = "ragpulse",
    ) -> None:
        resource = Resource.create({sc.SERVICE_NAME: service_name})
        self._tracer_provider: TracerProvider | None = None
        self._logger_provider: LoggerProvider | None = None
        if span_exporter is not None:
            self._tracer_provider = TracerProvider(resource=resource)
            self._tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
            self._tracer = self._tracer_provider.get_tracer(_SCOPE)
        if log_exporter is not None:
            self._logger_provider = LoggerProvider(resource=resource)
            self._logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter))
            self._logger = self._logger_provider.get_logger(_SCOPE)

    @classmethod
    def section(cls, settings: Settings) -> dict[str, Any]:
        return {
            **settings.otel_export.model_dump(),
            "endpoint": settings.otlp_export_endpoint,
            "service_name": settings.service_name,
        }

    @classmethod
    def create(cls, options: PluginOptions, context: PluginContext) -> OtelEvaluationSink | None:
        assert isinstance(options, cls.Options)
        if not options.endpoint:
            return None
        base = options.endpoint.rstrip("/")
        opts = options
        return cls(
            OTLPSpanExporter(f"{base}/v1/traces", headers=opts.headers, timeout=opts.timeout_s)
            if opts.spans
            else None,
            OTLPLogExporter(f"{base}/v1/logs", headers=opts.headers, timeout=opts.timeout_s)
            if opts.events
            else None,
            service_name=options.service_name,
        )

    def export(self, record: RagRecord, results: Sequence[EvalResult]) -> None:
        if not record.trace_id or not record.span_id:
            return
        context = evaluated_span_context(record)
        now = time.time_ns()
        for result in results:
            attrs = evaluation_attributes(result)
            if self._logger_provider is not None:
                self._logger.emit(
                    event_name=sc.GEN_AI_EVALUATION_EVENT,
                    context=context,
                    timestamp=now,
                    attributes=attrs,
                )
            if self._tracer_provider is not None:
                duration_ns = int((result.duration_ms or 0.0) * 1e6)
                span = self._tracer.start_span(
                    f"evaluate {result.metric}",
                    context=context,
                    start_time=now - duration_ns,
                    attributes={
                        sc.OPENINFERENCE_SPAN_KIND: sc.KIND_EVALUATOR,
                        sc.RAGPULSE_EVAL_SPAN_ID: record.span_id,
                        **attrs,
                    },
                )
                if result.error:
                    span.set_status(trace.Status(trace.StatusCode.ERROR, result.error))
                span.end(end_time=now)

    def shutdown(self) -> None:
        for provider in (self._tracer_provider, self._logger_provider):
            if provider is not None:
                provider.shutdown()
