"""Tool results as documents: the rules live agent turns and offline agent rows share.

An agent's tool calls reach ragpulse two ways: as spans of a live trace
(``ragpulse.collector.extract.agent_turns``) and as messages of an offline row (``ragpulse
eval``, ``ragpulse.offline.agent_rows``). Both assemble :class:`PendingCall` items and
turn them into the record's documents and tool calls here (as fields: the record
validates them all in one call), so that a result becomes the same documents whichever
way it came:

- one document per passage: a JSON list of objects with a content/text/page_content
  field (or of strings), bare or under ``documents``/``results``/... of an object; any
  other result is one document; a result longer than the bound is cut there and not
  parsed;
- a tool is a retrieval tool (its documents count for context relevance and the
  retrieval metrics) when it is typed ``datastore``, its name matches one of
  ``agents.retrieval_tools``, or its result is a list of documents;
- the query a retrieval tool's documents answer is its call's query argument.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ragpulse import safe_json
from ragpulse import semconv as sc
from ragpulse.record import Document

MAX_ARGUMENTS_CHARS = 4_000
"""Arguments kept per tool call (the record's copy; the model wrote them whole)."""
MAX_RESULT_KEPT_CHARS = 20_000
"""A tool call's result as the record keeps it beside its documents."""
_CONTENT = ("content", "text", "page_content", "snippet", "body", "passage")
_LISTS = ("documents", "results", "passages", "items", "hits", "chunks")
_QUERY = ("query", "q", "question", "search", "search_query", "query_text", "text", "input")
_STATUS: dict[str, Literal["ok", "error", "no_result"]] = {
    "ok": "ok",
    "error": "error",
    "no_result": "no_result",
}
"""A call's status as a ToolCall keeps it; any other is ``unset``."""


@dataclass
class PendingCall:
    """A tool call being assembled (from its span, the model's request and the tool
    message, or from a row's messages) before it becomes documents and a ToolCall."""

    name: str
    call_id: str | None = None
    arguments: str = ""
    result: Any = None
    span_id: str | None = None
    """The tool's span; None when only messages showed the call."""
    status: str = "unset"
    error: str | None = None
    retrieval: bool = False
    retriever_docs: list[Document] = field(default_factory=list)
    """Documents a retriever returned for it (already one per passage)."""
    from_message: bool = False
    retriever: bool = False
    query: str | None = None
    start_time_ns: int = 0


def loads_json(value: Any) -> Any:
    """``value`` JSON-decoded when it is JSON text (an object, an array, a quoted string)
    nested no deeper than :data:`ragpulse.safe_json.MAX_DEPTH`; anything else as it is."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "[", '"'):
        try:
            return safe_json.loads(value)
        except ValueError:
            return value
    return value


def is_retrieval_tool(name: str, tool_type: Any, patterns: Iterable[str]) -> bool:
    """Typed ``datastore`` (``gen_ai.tool.type``), or named like one of ``patterns``
    (globs, case-insensitive: ``agents.retrieval_tools``)."""
    if tool_type == sc.GEN_AI_TOOL_TYPE_DATASTORE:
        return True
    lowered = name.lower()
    return any(fnmatch.fnmatchcase(lowered, p.lower()) for p in patterns)


def query_of(arguments: str) -> str | None:
    """What a call searched for: its query argument, or its whole argument when that is
    plain text."""
    data = loads_json(arguments)
    if isinstance(data, dict):
        value = next((data[k] for k in _QUERY if isinstance(data.get(k), str)), None)
        return value.strip() if value else None
    if isinstance(data, str) and data.strip():
        return data.strip()[:1000]
    return None


def passages(
    result: Any, max_chars: int, tool: str, notes: list[str]
) -> tuple[list[dict[str, Any]], bool]:
    """(the fields of one document per passage, whether the result was a list of
    documents). What had to be converted or cut is appended to ``notes``."""
    if result is None:
        return [], False
    if isinstance(result, bytes):
        notes.append(f"tool {tool}: binary result -> text")
        result = result.decode("utf-8", "replace")
    if isinstance(result, str) and len(result) > max_chars:
        notes.append(f"tool {tool}: result of {len(result)} chars cut to {max_chars}, not parsed")
        return [_fields(result[:max_chars])], False
    data = loads_json(result) if isinstance(result, str) else result
    if isinstance(data, dict):
        inner = next((data[k] for k in _LISTS if isinstance(data.get(k), list)), None)
        data = inner if inner is not None else data
    if isinstance(data, list) and data:
        if all(isinstance(item, str) for item in data):
            return [_fields(item) for item in data], True
        contents = [_content_of(item) if isinstance(item, dict) else None for item in data]
        if all(c is not None for c in contents):
            return [_passage(item, c) for item, c in zip(data, contents, strict=True)], True  # type: ignore[arg-type]
    text_value = result if isinstance(result, str) else as_text(result)
    return ([_fields(text_value)] if text_value.strip() else []), False


def _fields(content: str) -> dict[str, Any]:
    return {"id": None, "content": content, "score": None, "metadata": {}}


def _content_of(item: dict[str, Any]) -> str | None:
    return next((v for k in _CONTENT if isinstance(v := item.get(k), str)), None)


def _passage(item: dict[str, Any], content: str) -> dict[str, Any]:
    raw_meta = item.get("metadata")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    doc_id = item.get("id", meta.get("id"))
    score = item.get("score")
    return {
        "id": None if doc_id is None else str(doc_id),
        "content": content,
        "score": float(score)
        if isinstance(score, int | float) and not isinstance(score, bool)
        else None,
        "metadata": meta,
    }


def as_text(value: Any) -> str:
    """A value as text: a str as it is, anything else as JSON (None as '')."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def tool_documents(
    calls: Sequence[PendingCall],
    fallback_span_id: str | None,
    max_result_chars: int,
    notes: list[str],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The record's documents (each call's passages, in call order, naming their call)
    and its tool calls (each listing the indices of its documents), as fields: the
    record validates them all in one call.

    ``fallback_span_id``: the span a document names when its call has none (the model
    call whose input showed the result)."""
    found: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    for call in calls:
        if call.retriever_docs:
            docs: list[dict[str, Any]] = [
                d.model_dump(exclude={"source"}) for d in call.retriever_docs
            ]
            listed = True
        else:
            docs, listed = passages(call.result, max_result_chars, call.name, notes)
        retrieval = call.retrieval or listed
        arguments = call.arguments[:MAX_ARGUMENTS_CHARS]
        span_id = call.span_id if call.span_id is not None else fallback_span_id
        query = call.query if call.query is not None else query_of(call.arguments)
        kind = "message" if call.from_message else "retriever" if call.retriever else "tool"
        start = len(found)
        for index, fields in enumerate(docs):
            source = {
                "kind": kind,
                "tool": call.name,
                "call_id": call.call_id,
                "span_id": span_id,
                "arguments": arguments,
                "query": query,
                "index": index,
                "retrieval": retrieval,
            }
            found.append({**fields, "source": source})
        out.append(
            {
                "name": call.name,
                "call_id": call.call_id,
                "arguments": arguments,
                "result": None
                if call.result is None
                else as_text(call.result)[:MAX_RESULT_KEPT_CHARS],
                "span_id": call.span_id,
                "status": _STATUS.get(call.status, "unset"),
                "error": call.error,
                "retrieval": retrieval,
                "documents": list(range(start, len(found))),
                "start_time_ns": call.start_time_ns,
            }
        )
    return found, out
