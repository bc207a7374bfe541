"""Core shapes that cross every boundary: spans after decode, RAG records, results.

Protobuf never travels past the decoder: everything downstream sees these
pydantic models only.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

AttributeValue = str | bool | int | float | list[Any] | dict[str, Any] | None


class Document(BaseModel):
    """One retrieved document, as the app saw it."""

    model_config = ConfigDict(frozen=True)

    id: str | None = None
    content: str = ""
    score: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class SpanStatus(StrEnum):
    UNSET = "unset"
    OK = "ok"
    ERROR = "error"


class SpanEvent(BaseModel):
    """A span event, or an OTLP log record joined to its span.

    GenAI instrumentations put message content either in span events or in log
    records (``opentelemetry-instrumentation-openai-v2``); the collector keeps
    both on the span as events, so extraction reads one shape. ``body`` is the
    log record's decoded body (None for span events); ``source`` says which.
    """

    model_config = ConfigDict(frozen=True)

    name: str = ""
    time_ns: int = 0
    attributes: dict[str, AttributeValue] = Field(default_factory=dict)
    body: AttributeValue = None
    source: Literal["span", "log"] = "span"


class LogEvent(BaseModel):
    """One OTLP log record as received, before the assembler joins it to its span."""

    model_config = ConfigDict(frozen=True)

    trace_id: str
    span_id: str | None = None
    event: SpanEvent
    resource: dict[str, AttributeValue] = Field(default_factory=dict)


class Span(BaseModel):
    """A finished span, decoded from OTLP (ids are lower-case hex)."""

    model_config = ConfigDict(frozen=True)

    trace_id: str
    span_id: str
    parent_span_id: str | None = None
    name: str = ""
    kind: str = "internal"
    start_time_ns: int = 0
    end_time_ns: int = 0
    status: SpanStatus = SpanStatus.UNSET
    status_message: str | None = None
    attributes: dict[str, AttributeValue] = Field(default_factory=dict)
    resource: dict[str, AttributeValue] = Field(default_factory=dict)
    scope: str | None = None
    events: list[SpanEvent] = Field(default_factory=list)
    """Span events, plus log records joined by trace and span id (``source="log"``)."""

    @property
    def is_root(self) -> bool:
        return not self.parent_span_id

    @property
    def duration_ms(self) -> float:
        return max(0, self.end_time_ns - self.start_time_ns) / 1e6

    @property
    def service(self) -> str:
        name = self.resource.get("service.name")
        return str(name) if name else "unknown_service"


class Reference(BaseModel):
    """What a labelled test-set row expects (offline evaluation only; a live record has none).

    The fields of a RAG task as Unitxt defines them, plus the expected behaviour.
    Empty lists mean "not given": reference-based evaluators then do not apply.
    ``condition`` and ``planted`` are set by adversarial case generation (which
    condition produced the record's documents, and what was planted: a canary, a
    counterfactual value).
    """

    model_config = ConfigDict(frozen=True)

    question_id: str | None = None
    answers: list[str] = Field(default_factory=list)
    contexts: list[str] = Field(default_factory=list)
    context_ids: list[str] = Field(default_factory=list)
    answerable: bool | None = None
    expected_behavior: Literal["answer", "refuse"] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    condition: str | None = None
    planted: dict[str, Any] = Field(default_factory=dict)


class RagRecord(BaseModel):
    """One question -> retrieval -> answer exchange, extracted from a trace.

    ``span_id`` is the pipeline span of the exchange. Each evaluation is exported about
    the span it judges (the generation span for an answer metric, the retrieval span for
    context relevance, this one otherwise): as a log event in its context, and as an
    EVALUATOR span in a trace of its own, linked to it, never parented.
    """

    model_config = ConfigDict(frozen=True)

    trace_id: str = ""
    span_id: str = ""
    service: str = "unknown_service"
    route: str | None = None
    question: str = ""
    documents: list[Document] = Field(default_factory=list)
    answer: str = ""
    model: str | None = None
    retrieval_span_ids: list[str] = Field(default_factory=list)
    generation_span_id: str | None = None
    response_id: str | None = None
    """``gen_ai.response.id`` of the generation, when the instrumentation recorded it."""
    latency_ms: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    error: bool = False
    start_time_ns: int = 0
    end_time_ns: int = 0
    attributes: dict[str, AttributeValue] = Field(default_factory=dict)
    reference: Reference | None = None  # a labelled test-set row's expectations (offline)

    @property
    def contexts(self) -> list[str]:
        return [d.content for d in self.documents]


class Direction(StrEnum):
    """Which way a metric's score is good; declared by each evaluator, carried on its results."""

    HIGHER_IS_BETTER = "higher_is_better"  # faithfulness, relevance: 1 is best
    LOWER_IS_BETTER = "lower_is_better"  # risks (injection, refusal): 0 is best


class EvalResult(BaseModel):
    """What one evaluator says about one record.

    ``score`` is in [0, 1]; ``direction`` says whether higher is better (quality
    metrics) or lower is (risks such as ``injection``). ``score`` is None when
    the metric does not apply (e.g. no documents) or the evaluator failed
    (``error`` says why).
    """

    model_config = ConfigDict(frozen=True)

    metric: str
    method: str
    score: float | None = None
    label: str | None = None
    explanation: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    duration_ms: float | None = None
    direction: Direction = Direction.HIGHER_IS_BETTER

    @property
    def name(self) -> str:
        return f"{self.metric}/{self.method}"

    @property
    def quality(self) -> float | None:
        """The score turned so that higher is better (1 - risk for risks); None when unscored."""
        if self.score is None:
            return None
        return self.score if self.direction is Direction.HIGHER_IS_BETTER else 1.0 - self.score


class EvaluatedRecord(BaseModel):
    """A record with its results: the unit sinks receive and files store."""

    record: RagRecord
    results: list[EvalResult]
