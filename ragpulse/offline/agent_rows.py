"""Agent rows of ``ragpulse eval``: one agent turn per row, in the shapes other tools write.

A row is an agent turn when it carries one of:

- ``messages``: a chat in the OpenAI shape (``{"role", "content", "tool_calls": [{"id",
  "function": {"name", "arguments"}}], "tool_call_id"}``), or LangChain's, or the GenAI
  parts shape (the parser is the collector's, :mod:`ragpulse.collector.messages`);
- a Ragas multi-turn sample: ``user_input`` as a list of messages (``{"type": "human" |
  "ai" | "tool", "content"}``, an ``ai`` message's ``tool_calls`` as ``{"name",
  "args"}``; a ``tool`` message carries no call id and answers the calls before it in
  order); :func:`ragpulse.offline.testset.canonical_row` reads it as ``messages``;
- DeepEval's ``tools_called``: ``{"name", "input_parameters" | "inputParameters",
  "output"}`` each, beside ``input`` and ``actual_output``.

The turn is the last user message that says something and what follows it: the question
is that message, the answer the last assistant text that asks for no tool (the row's own
``answer`` wins), the documents every tool result of the turn, split into passages with
the rules live traffic follows (:mod:`ragpulse.tool_results`). The messages before it
are the conversation's history: kept on the record as
``attributes["ragpulse.history"]`` (OpenAI-style messages), not evaluated here.
Documents a row also lists in ``contexts`` (DeepEval's ``retrieval_context``) follow the
tool results, each passage once.

Nothing here raises on a row's content: what is unreadable, unmatched or cut is said
through ``note`` (the row's ``coerced`` field) and the rest is read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ragpulse import semconv as sc
from ragpulse.collector.messages import MAX_MESSAGES, Message, arguments_text, parse_messages
from ragpulse.config import AgentSettings
from ragpulse.record import AttributeValue, ToolCall
from ragpulse.tool_results import PendingCall, as_text, is_retrieval_tool, tool_documents

AGENT_KEYS = ("messages", "tools_called")
"""Row fields that make it an agent turn (Ragas' list ``user_input`` is read as
``messages``)."""

Note = Callable[[str], None]


@dataclass
class AgentTurn:
    """What an agent row says about its turn (the record's fields)."""

    question: str | None = None
    """The last user message; None when the row's messages hold none (``question`` then)."""
    answer: str | None = None
    """The final assistant text; None when the messages hold none (``answer`` then)."""
    documents: list[dict[str, Any]] = field(default_factory=list)
    """The fields of each document (the record validates them)."""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """The fields of each :class:`~ragpulse.record.ToolCall`."""
    model_calls: int = 0
    """Assistant messages of the turn (0 when the row does not show them: DeepEval)."""
    attributes: dict[str, AttributeValue] = field(default_factory=dict)


def is_agent_row(row: dict[str, Any]) -> bool:
    return any(key in row for key in AGENT_KEYS)


def agent_turn(row: dict[str, Any], settings: AgentSettings, note: Note) -> AgentTurn:
    """The turn of a row in ragpulse's names (:func:`canonical_row`) that
    :func:`is_agent_row`."""
    notes: list[str] = []
    if "messages" in row:
        turn, calls = _from_messages(row["messages"], settings, note)
    else:
        turn, calls = AgentTurn(), _from_deepeval(row.get("tools_called"), settings, note)
    if len(calls) > settings.max_tool_calls:
        note(f"tool_calls: {len(calls)} -> {settings.max_tool_calls} kept")
        calls = calls[: settings.max_tool_calls]
    turn.documents, turn.tool_calls = tool_documents(calls, None, settings.max_result_chars, notes)
    for line in notes:
        note(line)
    return turn


# --- messages (OpenAI, LangChain, GenAI parts, Ragas) ------------------------------------


def _from_messages(
    raw: Any, settings: AgentSettings, note: Note
) -> tuple[AgentTurn, list[PendingCall]]:
    turn = AgentTurn()
    if not isinstance(raw, list):
        note(f"messages: {_type(raw)} -> []")
        return turn, []
    if len(raw) > MAX_MESSAGES:
        note(f"messages: {len(raw)} -> the last {MAX_MESSAGES} read")
        raw = raw[-MAX_MESSAGES:]
    flat: list[tuple[int, Message]] = []  # (index in raw, message)
    for index, item in enumerate(raw):
        parsed = parse_messages([item])
        if not parsed:
            note(f"messages[]: {_unreadable(item)} dropped")
        elif isinstance(item, dict) and item.get("tool_calls") is not None:
            _check_requests(item["tool_calls"], sum(len(m.tool_calls) for m in parsed), note)
        flat.extend((index, m) for m in parsed)
    user = max((i for i, (_, m) in enumerate(flat) if m.role == "user" and m.text), default=-1)
    if user < 0:
        note("messages: no user message says anything -> no question from them")
    else:
        turn.question = flat[user][1].text
        history = [m for index, m in flat if index < flat[user][0]]
        if history:
            turn.attributes[sc.RAGPULSE_HISTORY] = [_openai(m) for m in history]
    calls = _walk([m for _, m in flat[user + 1 :]], turn, settings, note)
    return turn, calls


def _check_requests(raw: Any, read: int, note: Note) -> None:
    """Say what the parser could not read of a message's ``tool_calls``."""
    if not isinstance(raw, list):
        note(f"messages[].tool_calls: {_type(raw)} dropped")
    elif read < len(raw):
        note(f"messages[].tool_calls: {len(raw) - read} of {len(raw)} not tool calls, dropped")


def _walk(
    messages: Sequence[Message], turn: AgentTurn, settings: AgentSettings, note: Note
) -> list[PendingCall]:
    """The turn's tool calls, each joined to its result; the answer and model calls."""
    calls: list[PendingCall] = []
    waiting: list[PendingCall] = []  # asked for, no result yet, in the order asked
    final, interim = None, None
    for message in messages:
        if message.role == "assistant":
            turn.model_calls += 1
            if message.text and message.tool_calls:
                interim = message.text  # "Let me look that up": the answer only if none follows
            elif message.text:
                final = message.text
            for request in message.tool_calls:
                call = PendingCall(
                    request.name,
                    request.call_id,
                    arguments_text(request.arguments),
                    status="no_result",
                    from_message=True,
                    retrieval=is_retrieval_tool(request.name, None, settings.retrieval_tools),
                )
                calls.append(call)
                waiting.append(call)
        elif message.role == "tool":
            answered = _answered(message, waiting)
            if answered is None:
                note("messages[]: a tool result that answers no tool call -> a call of its own")
                name = message.name or ""
                answered = PendingCall(
                    name,
                    message.call_id,
                    from_message=True,
                    retrieval=is_retrieval_tool(name, None, settings.retrieval_tools),
                )
                calls.append(answered)
            else:
                waiting.remove(answered)
            answered.result = message.result if message.result is not None else message.text
            answered.status = "ok"
    turn.answer = final if final is not None else interim
    return calls


def _answered(message: Message, waiting: list[PendingCall]) -> PendingCall | None:
    """The call a tool message answers: by call id; else (Ragas, whose tool messages carry
    no id) the first waiting call of its name, else the first waiting call."""
    if message.call_id:
        found = next((c for c in waiting if c.call_id == message.call_id), None)
        if found is not None or any(c.call_id for c in waiting):
            return found
    if message.name:
        named = next((c for c in waiting if c.name == message.name), None)
        if named is not None:
            return named
    return waiting[0] if waiting else None


def _openai(message: Message) -> dict[str, Any]:
    """A message in the OpenAI shape (which :func:`parse_messages` reads back)."""
    out: dict[str, Any] = {"role": message.role, "content": message.text}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": r.call_id, "type": "function",
             "function": {"name": r.name, "arguments": arguments_text(r.arguments)}}
            for r in message.tool_calls
        ]  # fmt: skip
    if message.call_id:
        out["tool_call_id"] = message.call_id
    if message.name:
        out["name"] = message.name
    return out


# --- DeepEval ---------------------------------------------------------------------------


def _from_deepeval(raw: Any, settings: AgentSettings, note: Note) -> list[PendingCall]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        note(f"tools_called: {_type(raw)} -> []")
        return []
    calls = []
    for item in raw:
        if not isinstance(item, dict):
            note(f"tools_called[]: {_type(item)} dropped")
            continue
        name = item.get("name")
        if not isinstance(name, str):
            note(f"tools_called[].name: {_type(name)} -> str")
            name = "" if name is None else as_text(name)
        params = item.get("input_parameters", item.get("inputParameters"))
        output = item.get("output")
        calls.append(
            PendingCall(
                name,
                arguments=as_text(params),
                result=output,
                status="no_result" if output is None else "ok",
                from_message=True,
                retrieval=is_retrieval_tool(name, None, settings.retrieval_tools),
            )
        )
    return calls


_JSON_TYPES = {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "dict"}


def _type(value: Any) -> str:
    return "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)


def _unreadable(item: Any) -> str:
    """How a message that is none of the shapes is named in a note."""
    if isinstance(item, dict):
        role = item.get("role", item.get("type"))
        return f"message with role {role!r}" if role is not None else "message with no role"
    return _type(item)


def with_contexts(turn: AgentTurn, contexts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turn's documents, then the row's own ``contexts`` (document fields) that are not
    one of them (DeepEval users copy tool outputs into ``retrieval_context``: each passage
    is counted once)."""
    seen = {str(d["content"]).strip() for d in turn.documents}
    return [*turn.documents, *(d for d in contexts if str(d["content"]).strip() not in seen)]


def recorded_tool_calls(raw: Any, documents: int, note: Note) -> list[ToolCall]:
    """``tool_calls`` as ragpulse writes them (a record line of the JSONL sink): each
    checked, one that is not a tool call left out and said, and document indices past
    the row's ``documents`` (``documents`` of them) dropped."""
    if not isinstance(raw, list):
        note(f"tool_calls: {_type(raw)} -> []")
        return []
    out = []
    for item in raw:
        try:
            call = ToolCall.model_validate(item)
        except ValidationError as exc:
            note(f"tool_calls[]: not a tool call ({exc.errors()[0]['msg']}) dropped")
            continue
        kept = [i for i in call.documents if 0 <= i < documents]
        if len(kept) < len(call.documents):
            note("tool_calls[].documents: an index past the row's documents dropped")
            call = call.model_copy(update={"documents": kept})
        out.append(call)
    return out
