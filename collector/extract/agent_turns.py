"""Agent turns: a model that calls tools, reads their results, and answers.

One record per turn, rooted at the top-most agent (``invoke_agent``, OpenInference
AGENT) or chain above the turn's model calls, else at the trace root:

- the question is the turn's last user message (the first model call's input), else
  the root's input;
- the answer is the final assistant text (the root's output when that is the answer
  text, else the final model call's output text, never a tool-call message); a
  structured output delivered through an output tool (Pydantic AI's ``final_result``)
  is the answer, not a tool call;
- the documents are every tool result the final model call could see, one document per
  passage (a JSON list of objects with a content/text/page_content field, or of
  strings), else one per result; each names its tool call (:class:`DocumentSource`).
  Results are read from, in order: GenAI ``execute_tool`` spans
  (``gen_ai.tool.call.result``), OpenInference TOOL spans (``output.value``, LangChain's
  ToolMessage unwrapped), a retriever span inside the turn (its documents, counted
  once), and, for a call whose result no span carries (``gen_ai.tool.call.result`` is
  opt-in), the ``tool`` message in the final model call's input;
- a tool is a retrieval tool (its documents count for context relevance and the
  retrieval metrics; the query is its query argument) when it is typed ``datastore``,
  its name matches ``agents.retrieval_tools``, or its result is a list of documents.

Bounds: at most ``agents.max_tool_calls`` calls per turn and ``agents.max_result_chars``
per result (cut, not parsed as JSON); what is cut or left out is noted in the record's
``ragpulse.coerced`` attribute. Each model call's messages are parsed once
(:class:`~ragpulse.collector.extract.messages.MessageCache`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragpulse import semconv as sc
from ragpulse.collector.extract.conventions import read
from ragpulse.collector.extract.history import place
from ragpulse.collector.extract.messages import (
    Message,
    MessageCache,
    ToolRequest,
    arguments_text,
    final_text,
)
from ragpulse.collector.extract.readers import loads
from ragpulse.collector.extract.spans import (
    TraceTree,
    answer_text,
    documents,
    first_str,
    opt_str,
    record_attributes,
    text,
)
from ragpulse.config import AgentSettings, ConversationSettings
from ragpulse.record import AttributeValue, RagRecord, Span, SpanStatus
from ragpulse.tool_results import PendingCall, as_text, is_retrieval_tool, tool_documents

_TOOL_CALL_MARK = '"tool_call"'


def is_agent_turn(
    trace: TraceTree, root: Span, subtree: Sequence[Span], messages: MessageCache
) -> bool:
    """Whether the spans under ``root`` are an agent turn: model calls under an agent,
    model calls that used tools, or (outside a retrieval chain) a model call that read
    tool results from the conversation's earlier turns: a follow-up answered from them
    without a new call (a LangGraph thread's second turn) is a turn too."""
    llms = trace.of_kind(subtree, sc.KIND_LLM)
    if not llms:
        return False
    if trace.kind(root) == sc.KIND_AGENT or trace.of_kind(subtree, sc.KIND_TOOL):
        return True
    if any(_asks_for_tools(llm) and _requests(llm, messages) for llm in llms):
        return True
    if trace.of_kind(subtree, sc.KIND_RETRIEVER):
        return False
    return any(m.role == "tool" for llm in llms for m in messages.input(llm))


def _asks_for_tools(span: Span) -> bool:
    """A cheap look before parsing: does the output name a tool call at all?"""
    output = span.attributes.get(sc.GEN_AI_OUTPUT_MESSAGES)
    if isinstance(output, str):
        return _TOOL_CALL_MARK in output
    head = sc.LLM_OUTPUT_MESSAGES + "."
    return output is not None or any(
        k.startswith(head) and sc.MESSAGE_TOOL_CALLS in k for k in span.attributes
    )


def _requests(span: Span, messages: MessageCache) -> list[ToolRequest]:
    return [call for m in messages.output(span) for call in m.tool_calls]


def agent_record(
    trace: TraceTree,
    root: Span,
    messages: MessageCache,
    settings: AgentSettings,
    annotations: dict[str, AttributeValue] | None = None,
    conversations: ConversationSettings | None = None,
) -> RagRecord | None:
    subtree = trace.subtree(root)
    llms = sorted(
        trace.of_kind(subtree, sc.KIND_LLM), key=lambda s: (s.end_time_ns, s.start_time_ns)
    )
    final = next((s for s in reversed(llms) if final_text(messages.output(s))), llms[-1])
    question = messages.turn(llms[0]).question or text(root, "question")
    question = question or text(llms[0], "user_message")
    if not question:
        return None
    notes: list[str] = []
    output_tools = _output_tools(llms)
    calls = _calls(trace, subtree, llms, final, messages, settings, output_tools, notes)
    found, tool_calls = tool_documents(calls, final.span_id, settings.max_result_chars, notes)

    structured = next(
        (arguments_text(r.arguments) for r in _requests(final, messages) if r.name in output_tools),
        "",
    )
    root_answer = first_str(root.attributes, sc.PYDANTIC_AI_FINAL_RESULT) or text(root, "answer")
    answer = answer_text(root_answer, final_text(messages.output(final)) or structured)

    route, attributes = record_attributes(trace, root, subtree, annotations)
    spans_with_docs = {d["source"]["span_id"] for d in found}
    if len(spans_with_docs) == 1:
        attributes[sc.RAGPULSE_DOCUMENTS_SPAN_ID] = next(iter(spans_with_docs)) or ""
    conversation, carried = place(
        question,
        [*subtree, *trace.ancestors(root)],
        messages.turn(llms[0]),
        llms[0],
        conversations or ConversationSettings(),
        notes,
    )
    found += carried
    if notes:
        attributes[sc.RAGPULSE_COERCED] = notes
    retrieval_spans = [c["span_id"] for c in tool_calls if c["retrieval"] and c["span_id"]]
    # The documents and tool calls are fields: validated here, once, with the record.
    return RagRecord.model_validate(
        {
            "trace_id": root.trace_id,
            "span_id": root.span_id,
            "service": root.service,
            "route": route,
            "question": question,
            "documents": found,
            "answer": answer,
            "model": opt_str(read(final, "model")),
            "retrieval_span_ids": list(dict.fromkeys(retrieval_spans)),
            "generation_span_id": final.span_id,
            "response_id": opt_str(read(final, "response_id")),
            "latency_ms": root.duration_ms,
            "input_tokens": _summed(llms, "input_tokens"),
            "output_tokens": _summed(llms, "output_tokens"),
            "error": any(s.status == SpanStatus.ERROR for s in subtree),
            "start_time_ns": root.start_time_ns,
            "end_time_ns": root.end_time_ns,
            "attributes": attributes,
            "kind": "agent",
            "tool_calls": tool_calls,
            "model_calls": len(llms),
            **conversation,
        }
    )


def _summed(llms: Sequence[Span], field: Any) -> int | None:
    values = [v for s in llms if isinstance(v := read(s, field), int)]
    return sum(values) if values else None


def _output_tools(llms: Sequence[Span]) -> frozenset[str]:
    """Tools through which the model delivers a structured answer (Pydantic AI's
    ``model_request_parameters.output_tools``): the answer, never a tool call."""
    names: set[str] = set()
    for span in llms:
        params = loads(span.attributes.get(sc.PYDANTIC_AI_REQUEST_PARAMETERS))
        tools = params.get("output_tools") if isinstance(params, dict) else None
        for tool in tools if isinstance(tools, list) else ():
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                names.add(tool["name"])
    return frozenset(names)


def _calls(
    trace: TraceTree,
    subtree: Sequence[Span],
    llms: Sequence[Span],
    final: Span,
    messages: MessageCache,
    settings: AgentSettings,
    output_tools: frozenset[str],
    notes: list[str],
) -> list[PendingCall]:
    """The turn's tool calls the final model call could see, in the order they ran."""
    tool_spans = trace.of_kind(subtree, sc.KIND_TOOL, sc.KIND_RETRIEVER)
    ids = {s.span_id for s in tool_spans}
    # The outer call only: a retriever inside a tool is that tool's result.
    outer = [s for s in tool_spans if not any(a.span_id in ids for a in trace.ancestors(s))]
    calls = [_from_span(trace, s, settings) for s in outer if _before(s, final)]
    calls = [c for c in calls if c.name not in output_tools]
    # What the model asked for: each call's output (a message or two each).
    requests = [r for s in llms if _before(s, final) for r in _requests(s, messages)]
    requests = [r for r in requests if r.name not in output_tools]
    _join_requests(calls, requests)
    answered = {
        c.call_id for c in calls if c.call_id and (c.result is not None or c.retriever_docs)
    }
    if not requests or any(r.call_id not in answered for r in requests) or not calls:
        # A result no span carried: the final call's input has it (the turn's tool
        # messages), and every call the turn made when the outputs said nothing. Parsed
        # only then: that input repeats the whole conversation.
        turn = messages.turn(final).messages
        if not requests:
            requests = [r for m in turn if m.role == "assistant" for r in m.tool_calls]
            requests = [r for r in requests if r.name not in output_tools]
            _join_requests(calls, requests)
        _join_messages(calls, [m for m in turn if m.role == "tool"], final)
    by_id = {r.call_id: r for r in requests if r.call_id}
    for call in calls:  # a result seen only as a message: its name and arguments
        request = by_id.get(call.call_id) if call.from_message and call.call_id else None
        if request is not None:
            call.name = call.name or request.name
            call.arguments = call.arguments or arguments_text(request.arguments)
            call.retrieval = is_retrieval_tool(call.name, None, settings.retrieval_tools)
    known = {c.call_id for c in calls if c.call_id}
    for request in requests:  # asked for, and no span or message carries its result
        if request.call_id and request.call_id not in known:
            calls.append(
                PendingCall(
                    request.name,
                    request.call_id,
                    arguments_text(request.arguments),
                    status="no_result",
                )
            )
            known.add(request.call_id)
    if len(calls) > settings.max_tool_calls:
        notes.append(f"tool_calls: {len(calls)} -> {settings.max_tool_calls} kept")
        calls = calls[: settings.max_tool_calls]
    return calls


def _before(span: Span, final: Span) -> bool:
    return span is not final and (
        not final.start_time_ns or span.end_time_ns <= final.start_time_ns
    )


def _from_span(trace: TraceTree, span: Span, settings: AgentSettings) -> PendingCall:
    attrs = span.attributes
    name = first_str(attrs, sc.GEN_AI_TOOL_NAME, sc.TOOL_NAME) or span.name.removeprefix(
        f"{sc.GEN_AI_OP_EXECUTE_TOOL} "
    )
    arguments = attrs.get(sc.GEN_AI_TOOL_CALL_ARGUMENTS, attrs.get(sc.INPUT_VALUE))
    result = attrs.get(sc.GEN_AI_TOOL_CALL_RESULT, attrs.get(sc.OUTPUT_VALUE))
    call_id = first_str(attrs, sc.GEN_AI_TOOL_CALL_ID)
    result, from_result = _unwrap_tool_message(result)
    call = PendingCall(
        name=name,
        call_id=call_id or from_result,
        arguments=as_text(arguments),
        result=result,
        span_id=span.span_id,
        status="error"
        if span.status == SpanStatus.ERROR
        else ("ok" if result is not None else "unset"),
        error=span.status_message if span.status == SpanStatus.ERROR else None,
        start_time_ns=span.start_time_ns,
    )
    if trace.kind(span) == sc.KIND_RETRIEVER:
        call.retriever = True
        call.name = first_str(attrs, sc.GEN_AI_DATA_SOURCE_ID, sc.TOOL_NAME) or span.name
        call.retriever_docs = documents(span, "documents", [])
        call.query = text(span, "query") or None
    elif trace.children.get(span.span_id):  # a tool that called a retriever
        inner = trace.of_kind(trace.subtree(span), sc.KIND_RETRIEVER)
        call.retriever_docs = [d for r in inner for d in documents(r, "documents", [])]
    call.retrieval = bool(call.retriever_docs) or is_retrieval_tool(
        name, attrs.get(sc.GEN_AI_TOOL_TYPE), settings.retrieval_tools
    )
    if call.retriever_docs and call.result is None:
        call.status = "ok"
    return call


def _unwrap_tool_message(value: Any) -> tuple[Any, str | None]:
    """(the result, its call id) of a LangChain ToolMessage dump (``{"type": "tool",
    "data": {"content", "tool_call_id"}}``); anything else as it is."""
    parsed = loads(value) if isinstance(value, str) and '"tool"' in value[:200] else value
    if isinstance(parsed, dict):
        inner = parsed.get("data")
        data: dict[str, Any] = inner if isinstance(inner, dict) else parsed
        if parsed.get("type") == "tool" or data.get("type") == "tool":
            content = data.get("content")
            return content, opt_str(data.get("tool_call_id"))
    return value, None


def _join_requests(calls: list[PendingCall], requests: Sequence[ToolRequest]) -> None:
    """Fill each span's call id and arguments from the model's request: by id, else the
    next request of the same name (some instrumentations write neither on the span)."""
    by_id = {r.call_id: r for r in requests if r.call_id}
    unused = [r for r in requests]
    for call in calls:
        request = by_id.get(call.call_id) if call.call_id else None
        if request is None:
            request = next(
                (r for r in unused if r.name == call.name and not _taken(r, calls)), None
            )
        if request is None:
            continue
        if request in unused:
            unused.remove(request)
        call.call_id = call.call_id or request.call_id
        call.arguments = call.arguments or arguments_text(request.arguments)


def _taken(request: ToolRequest, calls: list[PendingCall]) -> bool:
    return request.call_id is not None and any(c.call_id == request.call_id for c in calls)


def _join_messages(calls: list[PendingCall], tool_messages: Sequence[Message], final: Span) -> None:
    """A result no span carried, from the final model call's input: fills the span's
    call, or is a call of its own (its document names that model call's span)."""
    by_id = {c.call_id: c for c in calls if c.call_id}
    for message in tool_messages:
        call = by_id.get(message.call_id) if message.call_id else None
        result = message.result if message.result is not None else message.text
        if call is None:
            call = PendingCall(
                message.name or "", message.call_id, result=result, from_message=True
            )
            call.status = "ok"
            call.start_time_ns = final.start_time_ns
            calls.append(call)
            if message.call_id:
                by_id[message.call_id] = call
        elif call.result is None and not call.retriever_docs:
            call.result, call.status = result, "ok" if call.status != "error" else "error"
