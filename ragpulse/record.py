"""Core shapes that cross every boundary: spans after decode, RAG records, results.

Protobuf never travels past the decoder: everything downstream sees these
pydantic models only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "AttributeValue",
    "ClosedBy",
    "ConversationRecord",
    "Direction",
    "Document",
    "DocumentSource",
    "EvalResult",
    "ExportItem",
    "ExportKind",
    "HistoryMessage",
    "LogEvent",
    "PartialReason",
    "RagRecord",
    "Reference",
    "Span",
    "SpanEvent",
    "SpanStatus",
    "ToolCall",
    "TurnSummary",
]

AttributeValue = str | bool | int | float | list[Any] | dict[str, Any] | None


class DocumentSource(BaseModel):
    """Where a document came from, when not the record's own retriever: the tool call that
    returned it (or the tool message in a model call's input, when the tool's own span did
    not say), an earlier turn of the conversation, or the system prompt."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["tool", "retriever", "message", "history", "system"] = "tool"
    """``tool``: a tool's span returned it; ``retriever``: a retrieval span inside the turn;
    ``message``: only a message showed it (the final model call's input, or an offline
    row's tool message); ``history``: an earlier
    turn's result or document the model still saw; ``system``: the system prompt. The
    last two are evidence for faithfulness only: relevance and injection scans skip them
    (an earlier turn's documents were scanned in that turn)."""
    turn: int | None = None
    """The conversation turn it came from, when it is an earlier one."""
    tool: str = ""
    """The tool's (or retriever's) name (``search_docs``)."""
    call_id: str | None = None
    span_id: str | None = None
    """The span that returned it: the tool's span, or the model call whose input held it."""
    arguments: str | None = None
    """The call's arguments as the model wrote them (JSON text, bounded)."""
    query: str | None = None
    """What the agent searched for: the call's query argument, when it has one."""
    index: int = 0
    """Its position among the passages that call returned (0-based)."""
    retrieval: bool = False
    """Whether the tool is a retrieval tool: its documents count for context relevance and
    the retrieval metrics (``agents.retrieval_tools``); every document is evidence for
    faithfulness."""

    @property
    def label(self) -> str:
        """How results name it: ``tool search_docs #2``."""
        if self.kind == "system":
            return "the system prompt"
        if self.kind == "history":
            where = f"turn {self.turn}" if self.turn is not None else "an earlier turn"
            return f"{where}: {self.tool or 'document'} #{self.index + 1}"
        what = "retriever" if self.kind == "retriever" else "tool"
        return f"{what} {self.tool or '?'} #{self.index + 1}"


class Document(BaseModel):
    """One retrieved document (or tool result), as the app saw it."""

    model_config = ConfigDict(frozen=True)

    id: str | None = None
    content: str = ""
    score: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    source: DocumentSource | None = None
    """The tool call it came from, in an agent turn; None for a retriever's document."""

    @property
    def retrieved(self) -> bool:
        """Whether it counts for context relevance: a retriever's, or a retrieval tool's
        (this turn's: an earlier turn's and the system prompt's never do)."""
        return self.source is None or (self.source.retrieval and not self.carried)

    @property
    def carried(self) -> bool:
        """Whether it came from the conversation so far (an earlier turn, the system prompt)
        rather than this turn: evidence for faithfulness, not scanned again."""
        return self.source is not None and self.source.kind in ("history", "system")

    @property
    def query(self) -> str | None:
        """What was searched for to find it, when that was not the record's question."""
        return self.source.query if self.source is not None else None


class HistoryMessage(BaseModel):
    """One message of the conversation before this turn, as the model saw it (bounded)."""

    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    turn: int | None = None
    """The turn it belongs to (1-based), when known."""
    tool: str | None = None
    """A tool message's tool name."""


class ToolCall(BaseModel):
    """One tool call of an agent turn: what the model asked for and what came back."""

    model_config = ConfigDict(frozen=True)

    name: str
    call_id: str | None = None
    arguments: str = ""
    """As the model wrote them (JSON text, bounded)."""
    result: str | None = None
    """As the tool returned it (bounded; its passages are the record's documents)."""
    span_id: str | None = None
    """The tool's span; None when only the model calls' messages showed the call."""
    status: Literal["ok", "error", "unset", "no_result"] = "unset"
    """``no_result``: the call was made and no result was seen (its span or message)."""
    error: str | None = None
    retrieval: bool = False
    documents: list[int] = Field(default_factory=list)
    """Indices into the record's ``documents`` of the passages it returned."""
    start_time_ns: int = 0


class SpanStatus(StrEnum):
    """A span's status code, as OTLP gives it."""

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


PartialReason = Literal["idle", "max_trace", "open_traces", "held_bytes", "shutdown"]
"""Why a trace was closed before its root span arrived: quiet for ``assembly.idle_s``,
open for ``assembly.max_trace_s``, closed early to make room (``assembly.max_open_traces``,
``assembly.max_held_bytes``), or the collector's shutdown."""


class RagRecord(BaseModel):
    """One question -> retrieval -> answer exchange, extracted from a trace.

    ``span_id`` is the pipeline span of the exchange. Each evaluation is exported about
    the span it judges (the generation span for an answer metric, the retrieval span for
    context relevance, this one otherwise): as a log event in its context, and as an
    EVALUATOR span in a trace of its own, linked to it, never parented.

    A record rebuilt from more spans (spans that arrived after its trace was closed) is a
    new ``revision`` of the same ``record_id``: it replaces the earlier one everywhere.
    """

    model_config = ConfigDict(frozen=True)

    trace_id: str = ""
    span_id: str = ""
    record_id: str = ""
    """Stable across revisions: ``<trace id>/<span id>`` of the span the record's first
    version was rooted at (filled in from ``trace_id`` and ``span_id`` when not given)."""
    revision: int = Field(1, ge=1)
    """1 for the record as first built; each rebuild from more spans adds one."""
    partial: PartialReason | None = None
    """Set when the record was built from a trace whose root span had not arrived: why the
    trace was closed then. Such a record takes the spans whose parent is missing as one
    turn (the last model call's output is the answer)."""
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
    kind: Literal["rag", "agent", "retrieval"] = "rag"
    """``rag``: a retrieval then a generation; ``agent``: an agent turn (model calls and
    tool calls, the tool results as documents); ``retrieval``: a retriever called on its
    own, no answer (answer metrics do not apply)."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    model_calls: int = 0
    """Model calls in the turn (agents; a RAG record's generation counts one)."""
    conversation_id: str | None = None
    """The conversation (chat session) the turn belongs to: ``gen_ai.conversation.id``,
    ``session.id``, or an attribute of ``conversations.id_attributes``; None outside one."""
    turn: int | None = None
    """The turn's number in its conversation (1-based)."""
    history: list[HistoryMessage] = Field(default_factory=list)
    """The conversation before this turn, as the model saw it (bounded; the record's
    ``ragpulse.coerced`` says what was cut)."""
    standalone_question: str | None = None
    """The question made standalone from the history (a follow-up's "and how many keepers
    live there?" with the earlier turn's topic): what relevance metrics score."""

    @model_validator(mode="before")
    @classmethod
    def _record_id(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("record_id"):
            return {**data, "record_id": f"{data.get('trace_id', '')}/{data.get('span_id', '')}"}
        return data

    @property
    def contexts(self) -> list[str]:
        return [d.content for d in self.documents]

    def retrieved(self) -> list[tuple[int, Document]]:
        """(index in ``documents``, document) of the documents that count for context
        relevance and the retrieval metrics: a retriever's, or a retrieval tool's."""
        return [(i, d) for i, d in enumerate(self.documents) if d.retrieved]

    @property
    def relevance_question(self) -> str:
        """The question relevance metrics score: standalone when it is a follow-up."""
        return self.standalone_question or self.question

    def query_for(self, document: Document) -> str:
        """The query a document answers: what the agent or retriever searched for, else the
        (standalone) question."""
        return document.query or self.relevance_question

    def for_relevance(self, top_k: int | None = None) -> list[tuple[int, str, Document]]:
        """(index in ``documents``, query, document) of what context relevance scores: the
        retrieved documents (:meth:`retrieved`), the first ``top_k`` of them, each with
        the query that found it (:meth:`query_for`)."""
        chosen = self.retrieved()[:top_k] if top_k is not None else self.retrieved()
        return [(i, self.query_for(d), d) for i, d in chosen]

    def no_relevance_reason(self) -> str:
        """Why context relevance does not apply to a record with nothing to score."""
        if not self.documents:
            return "no documents retrieved"
        return "no retrieval documents: the tools' results count for faithfulness only"


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


class TurnSummary(BaseModel):
    """A turn as its conversation record keeps it: ids, texts (bounded), its results."""

    model_config = ConfigDict(frozen=True)

    turn: int
    trace_id: str
    span_id: str
    question: str = ""
    answer: str = ""
    start_time_ns: int = 0
    end_time_ns: int = 0
    results: list[EvalResult] = Field(default_factory=list)
    feedback: float | None = None
    """The user's feedback on the turn (1 good, 0 bad), when it was given."""
    tool_calls: int = 0


ClosedBy = Literal["idle", "end", "end_of_run", "evicted", "shutdown"]
"""Why a conversation closed: idle past ``conversations.idle_s``, an explicit end marker,
the end of an offline run, evicted past ``conversations.max_open``, or the collector's
shutdown."""


class ConversationRecord(BaseModel):
    """A conversation (chat session) with its turns: what conversation evaluators score.

    Built when the conversation closes (idle for ``conversations.idle_s``, an explicit end,
    the end of an offline run); revised (``revision`` + 1, the same ``conversation_id``)
    when it resumes within ``conversations.keep_closed_s``.
    """

    model_config = ConfigDict(frozen=True)

    conversation_id: str
    service: str = "unknown_service"
    route: str | None = None
    turns: list[TurnSummary] = Field(default_factory=list)
    revision: int = 1
    closed_by: ClosedBy = "idle"
    start_time_ns: int = 0
    end_time_ns: int = 0
    attributes: dict[str, AttributeValue] = Field(default_factory=dict)

    @property
    def first(self) -> TurnSummary:
        """The conversation's first turn (its trace carries the conversation's evaluations
        in tools that file them on a trace, as MLflow's session scorers do)."""
        return self.turns[0]

    @property
    def identifier(self) -> str:
        """Stable across revisions and repeats: backends upsert the record's results by it."""
        return f"ragpulse.conversation.{self.conversation_id}"


class ExportKind(StrEnum):
    """Why a record goes to the sinks now."""

    FIRST = "first"
    """The record's first export, with every result it has then (its cheap ones at least)."""
    UPDATE = "update"
    """A costly tier reported on a record exported before: that tier's results only (none
    when the tier skipped the record, its ``sampled`` reason says why)."""
    REVISION = "revision"
    """The record rebuilt from more spans (spans that came late, a conversation that
    resumed): it replaces the record exported before, and its results (all of them) that
    record's evaluations."""


RecordT = TypeVar("RecordT", RagRecord, ConversationRecord)


@dataclass(frozen=True)
class ExportItem(Generic[RecordT]):
    """What a sink receives: a record (a turn's :class:`RagRecord` or a
    :class:`ConversationRecord`), the results it carries, and where the record stands in
    the tiers. Tiers are named by their value (``"cheap"``, ``"model"``, ``"judge"``).

    A record is exported more than once when a costly tier outlasts the export delay: a
    ``first`` item with ``pending`` naming the tiers still to come, then one ``update``
    item per such tier with only that tier's new results. Each result is handed over
    exactly once.
    """

    record: RecordT
    results: Sequence[EvalResult]
    kind: ExportKind = ExportKind.FIRST
    tier: str | None = None
    """The costly tier an ``update`` carries the results of (None for the other kinds)."""
    sampled: Mapping[str, str] = field(default_factory=dict)
    """Tier -> why it evaluated the record (``base_rate``, ``priority:low_score``...) or
    why it did not (``skipped:<reason>``), for the tiers the record was sampled for."""
    pending: tuple[str, ...] = ()
    """The costly tiers still to report on this record, in order."""
    previous: RecordT | None = None
    """A ``revision``'s earlier version, as it was last exported (its ``record_id`` is the
    same): a sink that files results where the record's spans are can take back those
    the revision files elsewhere. None for the other kinds."""
    previous_results: Sequence[EvalResult] = ()
    """Every result exported for ``previous`` (its first export and its updates)."""

    def __post_init__(self) -> None:
        if (self.kind is ExportKind.UPDATE) != (self.tier is not None):
            raise ValueError("an update names its tier, and only an update does")
        if self.previous is not None and self.kind is not ExportKind.REVISION:
            raise ValueError("only a revision names the version it replaces")
