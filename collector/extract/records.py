"""Trace -> RagRecords, for spans written by ragpulse or by any OpenInference, OTel
GenAI, OpenLLMetry or OpenLIT instrumentation (LlamaIndex, LangChain, LangGraph,
Haystack, openai-v2, Pydantic AI, the OpenAI Agents SDK, ...).

What each attribute or event means is in one table (collector/extract/conventions.py); this
module only walks the trace: which spans make a record, and of which shape.

A record is rooted at a ragpulse pipeline span, else at the top-most CHAIN or AGENT
span above a retriever, a model call or a tool call, else (no chain) at the trace root.
A root is an *agent turn* (collector/extract/agent_turns.py) when it is an agent
(``invoke_agent``, OpenInference AGENT) with model calls, or when its model calls used
tools; otherwise it is a RAG record when it holds a retriever: a retrieval, then a
generation (or a retrieval alone, with no answer). A trace with neither shape is
skipped and the caller counts it.

A trace closed before its root span arrived (``partial``) is read as one turn: the spans
whose parent is missing are put under a stand-in root, so the last model call's output
is the answer and the tool results and retrievals are its documents; each record is
marked partial, and is rooted (``span_id``) at the earliest of those spans, a span the
trace has.
"""

from __future__ import annotations

from typing import Any, Literal

from ragpulse import semconv as sc
from ragpulse.collector.extract import agent_turns
from ragpulse.collector.extract.conventions import read
from ragpulse.collector.extract.history import place
from ragpulse.collector.extract.messages import MessageCache
from ragpulse.collector.extract.spans import (
    TraceTree,
    answer_text,
    documents,
    opt_str,
    outer_retrievers,
    record_attributes,
    text,
)
from ragpulse.config import AgentSettings, ConversationSettings
from ragpulse.record import AttributeValue, Document, PartialReason, RagRecord, Span, SpanStatus

NO_RAG_SHAPE = "no_rag_shape"
NO_QUESTION = "no_question"

Shape = Literal["rag", "agent"]
_ABOVE = (sc.KIND_CHAIN, sc.KIND_AGENT)
_ANCHORS = (sc.KIND_RETRIEVER, sc.KIND_LLM, sc.KIND_TOOL)


def extract_records(
    spans: Any,
    annotations: dict[str, AttributeValue] | None = None,
    agents: AgentSettings | None = None,
    conversations: ConversationSettings | None = None,
    partial: PartialReason | None = None,
) -> tuple[list[RagRecord], str | None]:
    """Records found in one trace, and the skip reason when there are none.

    ``annotations`` (e.g. user feedback joined to the trace) go into every record's
    attributes; ``agents`` decides which tools retrieve (and bounds agent turns);
    ``partial``: the trace closed before its root arrived, and why (see the module doc).
    """
    stand_in: tuple[str, str] | None = None
    if partial is not None:
        spans, stand_in = _under_stand_in(list(spans))
    trace = TraceTree(spans)
    messages = MessageCache()
    roots = record_roots(trace, messages)
    if not roots:
        return [], NO_RAG_SHAPE
    settings = agents or AgentSettings()
    chats = conversations or ConversationSettings()
    records = []
    for root, shape in roots:
        if shape == "agent":
            record = agent_turns.agent_record(trace, root, messages, settings, annotations, chats)
        else:
            record = _rag_record(trace, root, messages, chats, annotations)
        if record is not None:
            records.append(_marked(record, partial, stand_in) if partial else record)
    return records, (None if records else NO_QUESTION)


_STAND_IN = "ragpulse.partial_root"
"""The stand-in root's name (it never leaves extraction)."""


def _under_stand_in(spans: list[Span]) -> tuple[list[Span], tuple[str, str] | None]:
    """``spans`` with those whose parent is missing put under one stand-in root (a chain
    span, id: a missing parent's, so no span of the trace has it), and (the stand-in's
    id, the earliest such span's id); the spans as they are when none is missing one."""
    ids = {s.span_id for s in spans}
    orphans = sorted(
        (s for s in spans if not s.parent_span_id or s.parent_span_id not in ids),
        key=lambda s: (s.start_time_ns, s.end_time_ns),
    )
    missing = next((s.parent_span_id for s in orphans if s.parent_span_id), None)
    if not orphans or missing is None:
        return spans, None
    first = orphans[0]
    root = Span(
        trace_id=first.trace_id,
        span_id=missing,
        name=_STAND_IN,
        start_time_ns=min(s.start_time_ns for s in orphans),
        end_time_ns=max(s.end_time_ns for s in orphans),
        attributes={sc.OPENINFERENCE_SPAN_KIND: sc.KIND_CHAIN},
        resource=first.resource,
    )
    moved = {s.span_id for s in orphans}
    under = [s.model_copy(update={"parent_span_id": missing}) if s.span_id in moved else s
             for s in spans]  # fmt: skip
    return [root, *under], (missing, first.span_id)


def _marked(
    record: RagRecord, partial: PartialReason, stand_in: tuple[str, str] | None
) -> RagRecord:
    """A record of a partial trace: marked, and rooted at a span the trace has."""
    update: dict[str, Any] = {"partial": partial}
    if stand_in is not None and record.span_id == stand_in[0]:
        update["span_id"] = stand_in[1]
        update["record_id"] = f"{record.trace_id}/{stand_in[1]}"
        if record.route == _STAND_IN:
            update["route"] = None
    return record.model_copy(update=update)


def record_roots(trace: TraceTree, messages: MessageCache) -> list[tuple[Span, Shape]]:
    """Each record's root span and shape, in the trace's order."""
    pipelines = [s for s in trace.spans if s.attributes.get(sc.RAGPULSE_ROLE) == sc.ROLE_PIPELINE]
    if pipelines:
        candidates = pipelines
    else:
        candidates = []
        for anchor in trace.of_kind(trace.spans, *_ANCHORS):
            root = trace.top(anchor, *_ABOVE) or trace.root_of(anchor)
            if root not in candidates:
                candidates.append(root)
    roots: list[tuple[Span, Shape]] = []
    for root in candidates:
        subtree = trace.subtree(root)
        kinds = {trace.kind(s) for s in subtree}
        if agent_turns.is_agent_turn(trace, root, subtree, messages):
            roots.append((root, "agent"))
        elif sc.KIND_RETRIEVER in kinds or root in pipelines:
            roots.append((root, "rag"))
    return roots


def _rag_record(
    trace: TraceTree,
    root: Span,
    messages: MessageCache,
    conversations: ConversationSettings,
    annotations: dict[str, AttributeValue] | None = None,
) -> RagRecord | None:
    subtree = trace.subtree(root)
    retrievers = trace.of_kind(subtree, sc.KIND_RETRIEVER)
    rerankers = trace.of_kind(subtree, sc.KIND_RERANKER)
    llms = trace.of_kind(subtree, sc.KIND_LLM)
    generation = max(llms, key=lambda s: s.end_time_ns) if llms else None

    # A reranker's output is what the generator actually saw.
    notes: list[str] = []  # values that had to be converted: reported, never silent
    by_span = [(s, documents(s, "reranked", notes)) for s in rerankers]
    if not any(docs for _, docs in by_span):
        notes.clear()  # the rerankers' documents were not used: neither are their notes
        by_span = [
            (s, documents(s, "documents", notes)) for s in outer_retrievers(trace, retrievers)
        ]
    found = [d for _, docs in by_span for d in docs]
    # Document positions mean something in the trace only when one span returned them all.
    sources = [s.span_id for s, docs in by_span if docs]

    question = text(root, "question")
    for fallback in retrievers:
        question = question or text(fallback, "query")
    if generation is not None:
        question = question or text(generation, "user_message")
    if not question:
        return None

    root_answer = text(root, "answer")
    retrieval_only = generation is None and _retrieval_only(trace, root, retrievers, root_answer)
    if retrieval_only:
        # A retriever on its own (a search endpoint): its output is documents, not an
        # answer, and the answer metrics do not apply.
        answer = ""
    else:
        final = text(generation, "completion") if generation is not None else ""
        answer = answer_text(root_answer, final)

    def gen(field: Any) -> Any:
        return read(generation, field) if generation is not None else None

    route, attributes = record_attributes(trace, root, subtree, annotations)
    if len(sources) == 1:
        attributes[sc.RAGPULSE_DOCUMENTS_SPAN_ID] = sources[0]
    turn = messages.turn(generation) if generation is not None else None
    spans = [*subtree, *trace.ancestors(root)]
    conversation, carried = place(question, spans, turn, generation, conversations, notes)
    found += [Document.model_validate(d) for d in carried]
    if notes:
        attributes[sc.RAGPULSE_COERCED] = notes
    return RagRecord(
        trace_id=root.trace_id,
        span_id=root.span_id,
        service=root.service,
        route=route,
        question=question,
        documents=found,
        answer=answer,
        model=gen("model"),
        retrieval_span_ids=[s.span_id for s in retrievers],
        generation_span_id=generation.span_id if generation is not None else None,
        response_id=opt_str(gen("response_id")),
        latency_ms=root.duration_ms,
        input_tokens=gen("input_tokens"),
        output_tokens=gen("output_tokens"),
        error=any(s.status == SpanStatus.ERROR for s in subtree),
        start_time_ns=root.start_time_ns,
        end_time_ns=root.end_time_ns,
        attributes=attributes,
        kind="retrieval" if retrieval_only else "rag",
        model_calls=len(llms),
        **conversation,
    )


def _retrieval_only(trace: TraceTree, root: Span, retrievers: list[Span], answer: str) -> bool:
    """Whether a record without a model call is a retrieval on its own: rooted at the
    retriever, or its root's output is the retriever's (documents, not an answer)."""
    if trace.kind(root) == sc.KIND_RETRIEVER or root.attributes.get(sc.RAGPULSE_ROLE) == (
        sc.ROLE_RETRIEVAL
    ):
        return True
    output = root.attributes.get(sc.OUTPUT_VALUE)
    if output is not None and any(r.attributes.get(sc.OUTPUT_VALUE) == output for r in retrievers):
        return True
    return _DOCUMENT_REPR in answer


_DOCUMENT_REPR = "Document(id="
"""How Haystack and LlamaIndex print a document: an output of those is documents."""
