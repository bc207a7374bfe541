"""Reading one trace: its span tree, and the fields its spans carry.

What extraction of a RAG record (collector/extract/records.py) and of an agent turn
(collector/extract/agent_turns.py) both read: the tree (children, ancestors, roles), texts and
documents through the conventions table (collector/extract/conventions.py), and the attributes
every record carries (route, session ids, project).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from ragpulse import semconv as sc
from ragpulse.collector.extract.conventions import Field, read, role_of
from ragpulse.collector.extract.readers import RawDocument, loads
from ragpulse.record import AttributeValue, Document, Span

PASS_THROUGH = (sc.SESSION_ID, sc.USER_ID, sc.GEN_AI_CONVERSATION_ID, sc.RAGPULSE_TRUNCATED,
                sc.RAGPULSE_CONVERSATION_END)  # fmt: skip
"""Attributes of any span of a record that the record keeps."""
# Where a retriever's full output may name document ids its flat attributes left out
# (OpenInference LangChain writes Document.id only into output.value).
_DOCUMENT_OUTPUTS = (sc.OUTPUT_VALUE, sc.TRACELOOP_ENTITY_OUTPUT)
# An object's repr or a JSON structure: a root output that wraps the answer, not the answer
# (Haystack's ``{"llm": {"replies": ["ChatMessage(... text='...')"]}}``).
_WRAPPED = re.compile(r"^\s*[\[{]|\b[A-Z]\w*\(")


class TraceTree:
    """One trace's spans as a tree (parent ids in a cycle are tolerated: no span is its
    own ancestor or descendant), each span's role read once."""

    def __init__(self, spans: Iterable[Span]) -> None:
        self.spans = sorted(spans, key=lambda s: (s.start_time_ns, s.end_time_ns))
        self.by_id = {s.span_id: s for s in self.spans}
        self.children: dict[str, list[Span]] = defaultdict(list)
        for s in self.spans:
            if s.parent_span_id and s.parent_span_id in self.by_id:
                self.children[s.parent_span_id].append(s)
        self.kinds = {s.span_id: role_of(s) for s in self.spans}
        self._subtrees: dict[str, list[Span]] = {}

    def subtree(self, root: Span) -> list[Span]:
        """``root`` and every span under it, in start order (kept: asked again per record)."""
        found = self._subtrees.get(root.span_id)
        if found is None:
            found = self._subtrees[root.span_id] = self._walk(root)
        return found

    def _walk(self, root: Span) -> list[Span]:
        out, stack, seen = [], [root], {root.span_id}
        while stack:
            span = stack.pop()
            out.append(span)
            for child in self.children.get(span.span_id, ()):
                if child.span_id not in seen:  # parent ids in a cycle: each span once
                    seen.add(child.span_id)
                    stack.append(child)
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

    def kind(self, span: Span) -> str | None:
        return self.kinds.get(span.span_id)

    def top(self, span: Span, *kinds: str) -> Span | None:
        """The top-most ancestor of ``span`` of one of ``kinds`` (None: there is none)."""
        matching = self.of_kind(self.ancestors(span), *kinds)
        return matching[-1] if matching else None

    def root_of(self, span: Span) -> Span:
        """The top-most ancestor of ``span`` in the trace (itself when it has none)."""
        return (self.ancestors(span) or [span])[-1]


def record_attributes(
    trace: TraceTree, root: Span, subtree: list[Span], annotations: dict[str, AttributeValue] | None
) -> tuple[str | None, dict[str, AttributeValue]]:
    """(route, attributes) every record takes from its spans: the route (its own, else an
    HTTP route above it), session and user ids, the Phoenix project, and annotations."""
    route = first_str(root.attributes, sc.RAGPULSE_ROUTE, sc.HTTP_ROUTE)
    for ancestor in trace.ancestors(root):
        route = route or first_str(ancestor.attributes, sc.HTTP_ROUTE)
    attributes: dict[str, AttributeValue] = {
        k: s.attributes[k] for s in subtree for k in PASS_THROUGH if k in s.attributes
    }
    if annotations:
        attributes.update(annotations)
    project = root.resource.get(sc.OPENINFERENCE_PROJECT_NAME)
    if isinstance(project, str) and project:
        attributes[sc.OPENINFERENCE_PROJECT_NAME] = project  # evaluations go to the same one
    return route or root.name or None, attributes


def text(span: Span, field: Field) -> str:
    value = read(span, field)
    return value.strip() if isinstance(value, str) else ""


def opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def outer_retrievers(trace: TraceTree, retrievers: list[Span]) -> list[Span]:
    """Retrievers not inside another retriever that recorded documents: LlamaIndex
    writes ``retrieve`` around ``_retrieve``; the same documents must count once."""
    ids = {s.span_id for s in retrievers}
    out = []
    for span in retrievers:
        inside = [a for a in trace.ancestors(span) if a.span_id in ids]
        if not any(read(a, "documents") for a in inside):
            out.append(span)
    return out


def documents(span: Span, field: Any, notes: list[str]) -> list[Document]:
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


def first_str(attrs: dict[str, AttributeValue], *keys: str) -> str | None:
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def answer_text(root: str, final: str) -> str:
    """The record's answer: the root's output when that is the answer text, else the final
    model call's output (a root that wraps it, as an object repr or a JSON structure, is
    not the answer)."""
    if not final:
        return root
    if not root or root == final:
        return final
    if final in root and _WRAPPED.search(root):
        return final
    return root
