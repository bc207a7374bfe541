"""One table: which attributes and events say what, per instrumentation.

Extraction (collector/extract/records.py) asks two things of a span: its role (pipeline,
retriever, reranker, llm, agent) and a field (the question, the documents, the
answer, the model...). Both are answered from this table, in order: the first rule
that matches gives the role, the first reader that finds a value gives the field.
A new instrumentation is a few rows here, not a special case in extraction.

Conventions read (names in ragpulse/semconv.py):

- ragpulse: its own decorators (``ragpulse.role``), which also write OpenInference.
- openinference: Arize OpenInference (LlamaIndex, LangChain, Haystack, ...).
- genai: the OpenTelemetry GenAI semantic conventions: retrieval spans
  (``gen_ai.retrieval.query.text`` / ``gen_ai.retrieval.documents``), structured
  messages (``gen_ai.input.messages`` with ``parts``), content on events or log records
  (``gen_ai.client.inference.operation.details``; the older ``gen_ai.user.message`` /
  ``gen_ai.choice`` of ``opentelemetry-instrumentation-openai-v2``), and the deprecated
  ``gen_ai.prompt`` / ``gen_ai.completion``.
- openllmetry: traceloop's ``traceloop.span.kind`` / ``traceloop.entity.input|output``,
  ``vector_db_retrieve`` retrievers, and the older indexed ``gen_ai.prompt.N.*``.
- openlit: OpenLIT's ``invoke_workflow`` roots (``gen_ai.workflow.input|output``), its
  legacy ``gen_ai.retrieval.query`` and ``gen_ai.content.prompt|completion`` events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ragpulse import semconv as sc
from ragpulse.collector.extract.readers import (
    Read,
    attr_int,
    attr_messages,
    attr_str,
    attr_text,
    event_attr,
    event_body,
    event_messages,
    flat_documents,
    indexed_messages,
    json_documents,
)
from ragpulse.record import Span

Role = Literal["CHAIN", "RETRIEVER", "RERANKER", "LLM", "AGENT", "TOOL"]
"""OpenInference's kind names; CHAIN is a pipeline (the whole question -> answer)."""

Field = Literal[
    "question",  # on the record's root span
    "answer",  # on the record's root span
    "query",  # on a retriever: the question, when the root has none
    "documents",  # on a retriever
    "reranked",  # on a reranker: what the generator actually saw
    "user_message",  # on the generation: the last user message
    "completion",  # on the generation: the answer, when the root has none
    "model",
    "input_tokens",
    "output_tokens",
    "response_id",
]


@dataclass(frozen=True)
class RoleRule:
    convention: str
    attribute: str
    values: frozenset[str] | None  # None: any non-empty string, upper-cased, is the role
    role: Role | None = None


@dataclass(frozen=True)
class Reader:
    convention: str
    field: Field
    read: Read


def _rule(convention: str, attribute: str, role: Role, *values: str) -> RoleRule:
    return RoleRule(convention, attribute, frozenset(values), role)


ROLE_RULES: tuple[RoleRule, ...] = (
    RoleRule("openinference", sc.OPENINFERENCE_SPAN_KIND, None),
    _rule("ragpulse", sc.RAGPULSE_ROLE, "CHAIN", sc.ROLE_PIPELINE),
    _rule("ragpulse", sc.RAGPULSE_ROLE, "RETRIEVER", sc.ROLE_RETRIEVAL),
    _rule("ragpulse", sc.RAGPULSE_ROLE, "LLM", sc.ROLE_GENERATION),
    _rule("openllmetry", sc.TRACELOOP_SPAN_KIND, "CHAIN", sc.TRACELOOP_KIND_WORKFLOW),
    _rule("openllmetry", sc.GEN_AI_OPERATION_NAME, "RETRIEVER", sc.TRACELOOP_OP_RETRIEVE),
    # gen_ai.data_source.id alone is no retriever: the spec puts it on agent spans too.
    _rule("genai", sc.GEN_AI_OPERATION_NAME, "RETRIEVER", sc.GEN_AI_OP_RETRIEVAL),
    _rule("genai", sc.GEN_AI_OPERATION_NAME, "LLM", *sc.GEN_AI_GENERATION_OPS),
    _rule("genai", sc.GEN_AI_OPERATION_NAME, "AGENT", sc.GEN_AI_OP_INVOKE_AGENT),
    _rule("genai", sc.GEN_AI_OPERATION_NAME, "TOOL", sc.GEN_AI_OP_EXECUTE_TOOL),
    _rule("genai", sc.GEN_AI_OPERATION_NAME, "CHAIN", sc.GEN_AI_OP_INVOKE_WORKFLOW),
)

_Q = ("question", "query", "input", "user_input", "q", "prompt", "text", "message")
_A = ("answer", "output", "result", "response", "text", "content", "output_text")
_LC_DOC = {"page_content": "content"}
_NO_MODEL = frozenset({"unknown"})  # OpenLLMetry's value for a model it could not name
_DETAILS = sc.GEN_AI_OPERATION_DETAILS_EVENT


_TL_OUT = sc.TRACELOOP_ENTITY_OUTPUT
_OL_PROMPT, _OL_COMPLETION = sc.OPENLIT_CONTENT_PROMPT_EVENT, sc.OPENLIT_CONTENT_COMPLETION_EVENT


def _r(convention: str, field: Field, read: Read) -> Reader:
    return Reader(convention, field, read)


def _oi_messages(prefix: str, role: str | None) -> Read:
    """``llm.input_messages.<i>.message.role|content``."""
    return indexed_messages(prefix, role, sc.MESSAGE_ROLE, sc.MESSAGE_CONTENT)


def _tl_messages(prefix: str, role: str | None) -> Read:
    """``gen_ai.prompt.<i>.role|content`` (OpenLLMetry before structured messages)."""
    return indexed_messages(prefix, role, "role", "content")


READERS: tuple[Reader, ...] = (
    # -- question, on the record's root
    _r("openinference", "question", attr_text(sc.INPUT_VALUE, _Q, mime=sc.INPUT_MIME_TYPE)),
    _r("openllmetry", "question", attr_text(sc.TRACELOOP_ENTITY_INPUT, _Q, under=("inputs",))),
    _r("openlit", "question", attr_text(sc.OPENLIT_WORKFLOW_INPUT, _Q)),
    # -- answer, on the record's root
    _r("openinference", "answer", attr_text(sc.OUTPUT_VALUE, _A, mime=sc.OUTPUT_MIME_TYPE)),
    _r("openllmetry", "answer", attr_text(sc.TRACELOOP_ENTITY_OUTPUT, _A, under=("outputs",))),
    _r("openlit", "answer", attr_text(sc.OPENLIT_WORKFLOW_OUTPUT, _A)),
    # -- query, on a retriever
    _r("openinference", "query", attr_text(sc.INPUT_VALUE, _Q, mime=sc.INPUT_MIME_TYPE)),
    _r("genai", "query", attr_text(sc.GEN_AI_RETRIEVAL_QUERY_TEXT)),
    _r("openllmetry", "query", attr_text(sc.TRACELOOP_ENTITY_INPUT, _Q)),
    _r("openlit", "query", attr_text(sc.OPENLIT_RETRIEVAL_QUERY)),
    # -- documents, on a retriever / reranker
    _r("openinference", "documents", flat_documents(sc.RETRIEVAL_DOCUMENTS)),
    _r("genai", "documents", json_documents(sc.GEN_AI_RETRIEVAL_DOCUMENTS)),
    _r("openllmetry", "documents", json_documents(_TL_OUT, ("documents",), _LC_DOC)),
    _r("openinference", "reranked", flat_documents(sc.RERANKER_OUTPUT_DOCUMENTS)),
    # -- the last user message, on the generation
    _r("openinference", "user_message", _oi_messages(sc.LLM_INPUT_MESSAGES, "user")),
    _r("genai", "user_message", attr_messages(sc.GEN_AI_INPUT_MESSAGES, "user")),
    _r("genai", "user_message", event_messages(_DETAILS, sc.GEN_AI_INPUT_MESSAGES, "user")),
    _r("genai", "user_message", event_body(sc.GEN_AI_USER_MESSAGE_EVENT, ())),
    _r("genai", "user_message", attr_messages(sc.GEN_AI_PROMPT, "user")),
    _r("openllmetry", "user_message", _tl_messages(sc.GEN_AI_PROMPT, "user")),
    _r("openlit", "user_message", event_body(_OL_PROMPT, (sc.GEN_AI_PROMPT,))),
    # -- the answer, on the generation
    # The output messages first: output.value may be the framework's object printed
    # (Haystack's ``{"replies": ["ChatMessage(...)"]}``), the messages are the text.
    _r("openinference", "completion", _oi_messages(sc.LLM_OUTPUT_MESSAGES, None)),
    _r("openinference", "completion", attr_text(sc.OUTPUT_VALUE, _A, mime=sc.OUTPUT_MIME_TYPE)),
    _r("genai", "completion", attr_messages(sc.GEN_AI_OUTPUT_MESSAGES, None)),
    _r("genai", "completion", event_messages(_DETAILS, sc.GEN_AI_OUTPUT_MESSAGES, None)),
    _r("genai", "completion", event_body(sc.GEN_AI_CHOICE_EVENT, ("message",))),
    _r("genai", "completion", attr_messages(sc.GEN_AI_COMPLETION, None)),
    _r("openllmetry", "completion", _tl_messages(sc.GEN_AI_COMPLETION, None)),
    _r("openlit", "completion", event_body(_OL_COMPLETION, (sc.GEN_AI_COMPLETION,))),
    # -- model, tokens, response id, on the generation
    _r("openinference", "model", attr_str(sc.LLM_MODEL_NAME)),
    _r("genai", "model", attr_str(sc.GEN_AI_RESPONSE_MODEL, _NO_MODEL)),
    _r("genai", "model", attr_str(sc.GEN_AI_REQUEST_MODEL, _NO_MODEL)),
    _r("genai", "model", event_attr(_DETAILS, sc.GEN_AI_RESPONSE_MODEL)),
    _r("openinference", "input_tokens", attr_int(sc.LLM_TOKEN_COUNT_PROMPT)),
    _r("genai", "input_tokens", attr_int(sc.GEN_AI_USAGE_INPUT_TOKENS)),
    _r("openllmetry", "input_tokens", attr_int(sc.GEN_AI_USAGE_PROMPT_TOKENS)),
    _r("openinference", "output_tokens", attr_int(sc.LLM_TOKEN_COUNT_COMPLETION)),
    _r("genai", "output_tokens", attr_int(sc.GEN_AI_USAGE_OUTPUT_TOKENS)),
    _r("openllmetry", "output_tokens", attr_int(sc.GEN_AI_USAGE_COMPLETION_TOKENS)),
    _r("genai", "response_id", attr_str(sc.GEN_AI_RESPONSE_ID)),
    _r("genai", "response_id", event_attr(_DETAILS, sc.GEN_AI_RESPONSE_ID)),
)  # fmt: skip

_BY_FIELD: dict[str, tuple[Reader, ...]] = {
    f: tuple(r for r in READERS if r.field == f) for f in {r.field for r in READERS}
}


_ROLE_ATTRIBUTES = tuple(dict.fromkeys(rule.attribute for rule in ROLE_RULES))


def role_of(span: Span) -> str | None:
    """The span's role by the first matching rule, or None (not part of a RAG shape)."""
    attrs = span.attributes
    # Each attribute the rules read, looked up once: most spans have one or none of them.
    present = {a: v for a in _ROLE_ATTRIBUTES if isinstance(v := attrs.get(a), str) and v}
    if not present:
        return None
    for rule in ROLE_RULES:
        value = present.get(rule.attribute)
        if value is None:
            continue
        if rule.values is None:
            return value.upper()  # any OpenInference kind (TOOL, EMBEDDING, ...) too
        if value in rule.values:
            return rule.role
    return None


def read(span: Span, field: Field) -> object:
    """The first value a reader of ``field`` finds on ``span`` (None: none did)."""
    for reader in _BY_FIELD.get(field, ()):
        value = reader.read(span)
        if value not in (None, "", []):
            return value
    return None
