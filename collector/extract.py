"""Trace -> RagRecords, for spans written by ragpulse or by any OpenInference /
OTel GenAI instrumentation (LlamaIndex, LangChain, Haystack, hand-written).

A record is rooted at a ragpulse pipeline span, else at the top-most CHAIN or
AGENT span whose subtree holds a retriever, else (retriever and LLM spans with
no chain) at the trace root. A trace without a retriever or pipeline span has
no RAG shape: it is skipped and the caller counts it.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from ragpulse import semconv as sc
from ragpulse.record import AttributeValue, Document, RagRecord, Span, SpanStatus

_DOC_ATTR = re.compile(
    r"^(?:retrieval\.documents|reranker\.output_documents)\.(\d+)\.document\.(\w+)$"
)
_QUESTION_KEYS = ("question", "query", "input", "user_input", "q", "prompt", "text", "message")
_ANSWER_KEYS = ("answer", "output", "result", "response", "text", "content", "output_text")
_MIME_OF = {sc.INPUT_VALUE: sc.INPUT_MIME_TYPE, sc.OUTPUT_VALUE: sc.OUTPUT_MIME_TYPE}
_PASS_THROUGH = (sc.SESSION_ID, sc.USER_ID, sc.RAGPULSE_TRUNCATED)

NO_RAG_SHAPE = "no_rag_shape"
NO_QUESTION = "no_question"


def span_kind(span: Span) -> str | None:
    """OpenInference kind, derived from ragpulse or GenAI attributes when absent."""
    attrs = span.attributes
    kind = attrs.get(sc.OPENINFERENCE_SPAN_KIND)
    if isinstance(kind, str) and kind:
        return kind.upper()
    role = attrs.get(sc.RAGPULSE_ROLE)
    if role == sc.ROLE_PIPELINE:
        return sc.KIND_CHAIN
    op = attrs.get(sc.GEN_AI_OPERATION_NAME)
    if op == sc.GEN_AI_OP_RETRIEVAL or sc.GEN_AI_DATA_SOURCE_ID in attrs:
        return sc.KIND_RETRIEVER
    if op in sc.GEN_AI_GENERATION_OPS:
        return sc.KIND_LLM
    if op == sc.GEN_AI_OP_INVOKE_AGENT:
        return sc.KIND_AGENT
    return None


class _Trace:
    def __init__(self, spans: Iterable[Span]) -> None:
        self.spans = sorted(spans, key=lambda s: (s.start_time_ns, s.end_time_ns))
        self.by_id = {s.span_id: s for s in self.spans}
        self.children: dict[str, list[Span]] = defaultdict(list)
        for s in self.spans:
            if s.parent_span_id and s.parent_span_id in self.by_id:
                self.children[s.parent_span_id].append(s)
        self.kinds = {s.span_id: span_kind(s) for s in self.spans}

    def subtree(self, root: Span) -> list[Span]:
        out, stack = [], [root]
        while stack:
            span = stack.pop()
            out.append(span)
            stack.extend(self.children.get(span.span_id, ()))
        return sorted(out, key=lambda s: (s.start_time_ns, s.end_time_ns))

    def ancestors(self, span: Span) -> list[Span]:
        out: list[Span] = []
        seen = {span.span_id}
        while span.parent_span_id and span.parent_span_id in self.by_id:
            span = self.by_id[span.parent_span_id]
            if span.span_id in seen:  # malformed cycle
                break
            seen.add(span.span_id)
            out.append(span)
        return out

    def of_kind(self, spans: Iterable[Span], *kinds: str) -> list[Span]:
        return [s for s in spans if self.kinds[s.span_id] in kinds]

    def record_roots(self) -> list[Span]:
        pipelines = [
            s for s in self.spans if s.attributes.get(sc.RAGPULSE_ROLE) == sc.ROLE_PIPELINE
        ]
        if pipelines:
            return pipelines
        retrievers = self.of_kind(self.spans, sc.KIND_RETRIEVER)
        if not retrievers:
            return []
        roots: list[Span] = []
        for retriever in retrievers:
            chains = self.of_kind(self.ancestors(retriever), sc.KIND_CHAIN, sc.KIND_AGENT)
            # The top-most chain is the whole question -> answer exchange.
            root = chains[-1] if chains else (self.ancestors(retriever) or [retriever])[-1]
            if root not in roots:
                roots.append(root)
        return roots


def extract_records(
    spans: Iterable[Span], annotations: dict[str, AttributeValue] | None = None
) -> tuple[list[RagRecord], str | None]:
    """Records found in one trace, and the skip reason when there are none.

    ``annotations`` (e.g. user feedback joined to the trace) go into every
    record's attributes.
    """
    trace = _Trace(spans)
    roots = trace.record_roots()
    if not roots:
        return [], NO_RAG_SHAPE
    records = [r for r in (_record(trace, root, annotations) for root in roots) if r is not None]
    return records, (None if records else NO_QUESTION)


def _record(
    trace: _Trace, root: Span, annotations: dict[str, AttributeValue] | None = None
) -> RagRecord | None:
    subtree = trace.subtree(root)
    retrievers = trace.of_kind(subtree, sc.KIND_RETRIEVER)
    rerankers = trace.of_kind(subtree, sc.KIND_RERANKER)
    llms = trace.of_kind(subtree, sc.KIND_LLM)
    generation = max(llms, key=lambda s: s.end_time_ns) if llms else None

    # A reranker's output is what the generator actually saw.
    notes: list[str] = []  # values that had to be converted: reported, never silent
    reranked = [
        d for s in rerankers for d in documents_of(s, sc.RERANKER_OUTPUT_DOCUMENTS, notes)
    ]
    if not reranked:
        notes.clear()  # the rerankers' documents were not used: neither are their notes
    documents = reranked or [d for s in retrievers for d in documents_of(s, notes=notes)]

    question = _text_in(root.attributes, sc.INPUT_VALUE, _QUESTION_KEYS)
    for fallback in retrievers:
        question = question or _text_in(fallback.attributes, sc.INPUT_VALUE, _QUESTION_KEYS)
    if generation is not None:
        question = question or _last_user_message(generation.attributes)
    if not question:
        return None

    answer = _text_in(root.attributes, sc.OUTPUT_VALUE, _ANSWER_KEYS)
    if generation is not None and not answer:
        answer = _generation_output(generation.attributes)

    gen = generation.attributes if generation is not None else {}
    model = _first_str(gen, sc.LLM_MODEL_NAME, sc.GEN_AI_RESPONSE_MODEL, sc.GEN_AI_REQUEST_MODEL)
    route = _first_str(root.attributes, sc.RAGPULSE_ROUTE, sc.HTTP_ROUTE)
    for ancestor in trace.ancestors(root):
        route = route or _first_str(ancestor.attributes, sc.HTTP_ROUTE)
    attributes: dict[str, AttributeValue] = {
        k: s.attributes[k] for s in subtree for k in _PASS_THROUGH if k in s.attributes
    }
    if annotations:
        attributes.update(annotations)
    if notes:
        attributes[sc.RAGPULSE_COERCED] = notes
    return RagRecord(
        trace_id=root.trace_id,
        span_id=root.span_id,
        service=root.service,
        route=route or root.name or None,
        question=question,
        documents=documents,
        answer=answer,
        model=model,
        retrieval_span_ids=[s.span_id for s in retrievers],
        generation_span_id=generation.span_id if generation is not None else None,
        latency_ms=root.duration_ms,
        input_tokens=_first_int(gen, sc.LLM_TOKEN_COUNT_PROMPT, sc.GEN_AI_USAGE_INPUT_TOKENS),
        output_tokens=_first_int(gen, sc.LLM_TOKEN_COUNT_COMPLETION, sc.GEN_AI_USAGE_OUTPUT_TOKENS),
        error=any(s.status == SpanStatus.ERROR for s in subtree),
        start_time_ns=root.start_time_ns,
        end_time_ns=root.end_time_ns,
        attributes=attributes,
    )


def documents_of(
    span: Span, prefix: str = sc.RETRIEVAL_DOCUMENTS, notes: list[str] | None = None
) -> list[Document]:
    """Documents flattened as ``<prefix>.<i>.document.<field>``, or as one array value.

    ``notes`` collects what had to be converted (``document.score: str dropped``)."""
    notes = [] if notes is None else notes
    nested = span.attributes.get(prefix)
    if isinstance(nested, list):
        return [d for d in (_document(_unwrap(x), notes) for x in nested) if d is not None]
    fields: dict[int, dict[str, Any]] = defaultdict(dict)
    for key, value in span.attributes.items():
        m = _DOC_ATTR.match(key)
        if m and key.startswith(prefix):
            fields[int(m.group(1))][m.group(2)] = value
    return [d for d in (_document(fields[i], notes) for i in sorted(fields)) if d is not None]


def _unwrap(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        inner = value.get("document", value)
        return inner if isinstance(inner, dict) else {}
    if isinstance(value, str):
        return {"content": value}
    return {}


def _document(fields: dict[str, Any], notes: list[str]) -> Document | None:
    content = fields.get("content", fields.get("text", ""))
    if not isinstance(content, str):
        if content is not None:
            notes.append(f"document.content: {type(content).__name__} -> json text")
        content = "" if content is None else json.dumps(content, default=str)
    metadata = fields.get("metadata") or {}
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except ValueError:
            notes.append("document.metadata: not JSON -> {raw}")
            metadata = {"raw": metadata}
    if not isinstance(metadata, dict):
        notes.append(f"document.metadata: {type(metadata).__name__} -> {{value}}")
        metadata = {"value": metadata}
    score = fields.get("score")
    try:
        score = float(score) if score is not None else None
    except (TypeError, ValueError):
        notes.append(f"document.score: {type(score).__name__} dropped")
        score = None
    doc_id = fields.get("id")
    return Document(
        id=None if doc_id is None else str(doc_id), content=content, score=score, metadata=metadata
    )


def _text_in(attrs: dict[str, AttributeValue], key: str, json_keys: tuple[str, ...]) -> str:
    """A text attribute, digging into JSON objects (LangChain writes ``{"question": ...}``)."""
    value = attrs.get(key)
    declared_text = attrs.get(_MIME_OF.get(key, "")) == sc.MIME_TEXT
    if isinstance(value, str) and not declared_text and value.lstrip()[:1] in ("{", "[", '"'):
        try:
            value = json.loads(value)
        except ValueError:
            return value.strip()
    return _dig(value, json_keys)


def _dig(value: Any, keys: tuple[str, ...], depth: int = 0) -> str:
    if isinstance(value, str):
        return value.strip()
    if depth > 4:
        return ""
    if isinstance(value, dict):
        for k in keys:
            found = _dig(value.get(k), keys, depth + 1) if k in value else ""
            if found:
                return found
        if len(value) == 1:
            return _dig(next(iter(value.values())), keys, depth + 1)
    if isinstance(value, list) and value:
        # Chat messages: the last one is the newest.
        return _dig(value[-1], keys, depth + 1)
    return ""


def _generation_output(attrs: dict[str, AttributeValue]) -> str:
    text = _text_in(attrs, sc.OUTPUT_VALUE, _ANSWER_KEYS)
    first_message = sc.message_attr(sc.LLM_OUTPUT_MESSAGES, 0, sc.MESSAGE_CONTENT)
    text = text or _first_str(attrs, first_message) or ""
    text = text or _messages_text(attrs.get(sc.GEN_AI_OUTPUT_MESSAGES), role=None)
    return text or _messages_text(attrs.get(sc.GEN_AI_COMPLETION), role=None)


def _last_user_message(attrs: dict[str, AttributeValue]) -> str:
    i, last = 0, ""
    while (
        role := attrs.get(sc.message_attr(sc.LLM_INPUT_MESSAGES, i, sc.MESSAGE_ROLE))
    ) is not None:
        if role == "user":
            content = attrs.get(sc.message_attr(sc.LLM_INPUT_MESSAGES, i, sc.MESSAGE_CONTENT))
            last = content if isinstance(content, str) else last
        i += 1
    last = last or _messages_text(attrs.get(sc.GEN_AI_INPUT_MESSAGES), role="user")
    return last or _messages_text(attrs.get(sc.GEN_AI_PROMPT), role="user")


def _messages_text(value: Any, role: str | None) -> str:
    """Text of the last message (of ``role``) in GenAI JSON messages, or a plain string."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return str(value).strip()
    if isinstance(value, str):
        return str(value).strip()
    if not isinstance(value, list):
        return ""
    for message in reversed(value):
        if not isinstance(message, dict) or (role and message.get("role") != role):
            continue
        if isinstance(message.get("content"), str):
            return str(message["content"]).strip()
        parts = message.get("parts") or []
        texts = [p.get("content", "") for p in parts if isinstance(p, dict)]
        text = " ".join(t for t in texts if isinstance(t, str)).strip()
        if text:
            return text
    return ""


def _first_str(attrs: dict[str, AttributeValue], *keys: str) -> str | None:
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _first_int(attrs: dict[str, AttributeValue], *keys: str) -> int | None:
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    return None
