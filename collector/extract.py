"""Trace -> RagRecords, for spans written by ragpulse or by any OpenInference, OTel
GenAI, OpenLLMetry or OpenLIT instrumentation (LlamaIndex, LangChain, openai-v2, ...).

What each attribute or event means is in one table (collector/conventions.py); this
module only walks the trace: which spans make a record, and which span gives what.

A record is rooted at a ragpulse pipeline span, else at the top-most CHAIN or
AGENT span whose subtree holds a retriever, else (retriever and LLM spans with
no chain) at the trace root. A trace without a retriever or pipeline span has
no RAG shape: it is skipped and the caller counts it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from ragpulse import semconv as sc
from ragpulse.collector.conventions import read, role_of
from ragpulse.collector.readers import RawDocument, loads
from ragpulse.record import AttributeValue, Document, RagRecord, Span, SpanStatus

_PASS_THROUGH = (sc.SESSION_ID, sc.USER_ID, sc.RAGPULSE_TRUNCATED)
# Where a retriever's full output may name document ids its flat attributes left out
# (OpenInference LangChain writes Document.id only into output.value).
_DOCUMENT_OUTPUTS = (sc.OUTPUT_VALUE, sc.TRACELOOP_ENTITY_OUTPUT)

NO_RAG_SHAPE = "no_rag_shape"
NO_QUESTION = "no_question"


def span_kind(span: Span) -> str | None:
    """The span's role as an OpenInference kind (see collector/conventions.py)."""
    return role_of(span)


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
    by_span = [(s, _documents(s, "reranked", notes)) for s in rerankers]
    if not any(docs for _, docs in by_span):
        notes.clear()  # the rerankers' documents were not used: neither are their notes
        by_span = [(s, _documents(s, "documents", notes)) for s in _outer(trace, retrievers)]
    documents = [d for _, docs in by_span for d in docs]
    # Document positions mean something in the trace only when one span returned them all.
    sources = [s.span_id for s, docs in by_span if docs]

    question = _text(root, "question")
    for fallback in retrievers:
        question = question or _text(fallback, "query")
    if generation is not None:
        question = question or _text(generation, "user_message")
    if not question:
        return None

    answer = _text(root, "answer")
    if generation is not None and not answer:
        answer = _text(generation, "completion")

    def gen(field: Any) -> Any:
        return read(generation, field) if generation is not None else None

    route = _first_str(root.attributes, sc.RAGPULSE_ROUTE, sc.HTTP_ROUTE)
    for ancestor in trace.ancestors(root):
        route = route or _first_str(ancestor.attributes, sc.HTTP_ROUTE)
    attributes: dict[str, AttributeValue] = {
        k: s.attributes[k] for s in subtree for k in _PASS_THROUGH if k in s.attributes
    }
    if annotations:
        attributes.update(annotations)
    if len(sources) == 1:
        attributes[sc.RAGPULSE_DOCUMENTS_SPAN_ID] = sources[0]
    project = root.resource.get(sc.OPENINFERENCE_PROJECT_NAME)
    if isinstance(project, str) and project:
        attributes[sc.OPENINFERENCE_PROJECT_NAME] = project  # evaluations go to the same one
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
        model=gen("model"),
        retrieval_span_ids=[s.span_id for s in retrievers],
        generation_span_id=generation.span_id if generation is not None else None,
        response_id=_opt_str(gen("response_id")),
        latency_ms=root.duration_ms,
        input_tokens=gen("input_tokens"),
        output_tokens=gen("output_tokens"),
        error=any(s.status == SpanStatus.ERROR for s in subtree),
        start_time_ns=root.start_time_ns,
        end_time_ns=root.end_time_ns,
        attributes=attributes,
    )


def _text(span: Span, field: Any) -> str:
    value = read(span, field)
    return value.strip() if isinstance(value, str) else ""


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _outer(trace: _Trace, retrievers: list[Span]) -> list[Span]:
    """Retrievers not inside another retriever that recorded documents: LlamaIndex
    writes ``retrieve`` around ``_retrieve``; the same documents must count once."""
    ids = {s.span_id for s in retrievers}
    out = []
    for span in retrievers:
        inside = [a for a in trace.ancestors(span) if a.span_id in ids]
        if not any(read(a, "documents") for a in inside):
            out.append(span)
    return out


def _documents(span: Span, field: Any, notes: list[str]) -> list[Document]:
    raw = read(span, field)
    if not isinstance(raw, list):
        return []
    docs = [_document(fields, notes) for fields in raw if isinstance(fields, dict)]
    if any(d.id is None for d in docs):
        docs = _ids_from_output(span, docs)
    return docs


def _ids_from_output(span: Span, docs: list[Document]) -> list[Document]:
    """Ids the flat attributes left out, matched by content in the retriever's output."""
    ids: dict[str, str] = {}
    for key in _DOCUMENT_OUTPUTS:
        out = loads(span.attributes.get(key))
        items = out.get("documents") if isinstance(out, dict) else out
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                continue
            content = item.get("page_content", item.get("content"))
            meta = item.get("metadata")
            doc_id = item.get("id") or (meta.get("id") if isinstance(meta, dict) else None)
            if isinstance(content, str) and doc_id is not None:
                ids.setdefault(content, str(doc_id))
    if not ids:
        return docs
    return [
        d if d.id is not None else d.model_copy(update={"id": ids.get(d.content)}) for d in docs
    ]


def _document(fields: RawDocument, notes: list[str]) -> Document:
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
    if doc_id is None and isinstance(metadata.get("id"), str | int):
        doc_id = metadata["id"]  # LangChain documents often keep their id in metadata
    return Document(
        id=None if doc_id is None else str(doc_id), content=content, score=score, metadata=metadata
    )


def _first_str(attrs: dict[str, AttributeValue], *keys: str) -> str | None:
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, str) and value:
            return value
    return None
