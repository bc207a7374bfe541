"""Agent and conversation rows of ``ragpulse eval``: the turns a row shows, in the shapes
other tools write.

A row is read this way when it carries one of:

- ``messages``: a chat in the OpenAI shape (``{"role", "content", "tool_calls": [{"id",
  "function": {"name", "arguments"}}], "tool_call_id"}``), or LangChain's, or the GenAI
  parts shape (the parser is the collector's, :mod:`ragpulse.collector.extract.messages`);
- a Ragas multi-turn sample: ``user_input`` as a list of messages (``{"type": "human" |
  "ai" | "tool", "content"}``, an ``ai`` message's ``tool_calls`` as ``{"name",
  "args"}``; a ``tool`` message carries no call id and answers the calls before it in
  order); :func:`ragpulse.offline.testset.canonical_row` reads it as ``messages``;
- DeepEval's ``tools_called``: ``{"name", "input_parameters" | "inputParameters",
  "output"}`` each, beside ``input`` and ``actual_output`` (an ``LLMTestCase``);
- DeepEval's ``turns`` (a ``ConversationalTestCase``): ``{"role": "user" | "assistant",
  "content"}`` each, an assistant turn with its ``retrieval_context`` (strings or
  ``{"context", "source"}``) and ``tools_called``; older DeepEval turns that are
  ``LLMTestCase`` s (``input``, ``actual_output``, ...) are read too.

Each user message that says something starts a turn: the turn is that message and what
follows it up to the next one. Its question is that message, its answer the last
assistant text that asks for no tool, its documents every tool result of the turn (split
into passages with the rules live traffic follows, :mod:`ragpulse.tool_results`) and
the turn's ``retrieval_context``. A turn after the first carries the conversation before
it, as a live turn whose model input holds the history does
(:mod:`ragpulse.collector.extract.history`): ``history`` (the earlier messages, the last
``conversations.max_history_messages``, each cut at ``max_message_chars``), the earlier
turns' documents as evidence (the last ``conversations.join_turns`` turns'; kind
``history``) with the system prompt (kind ``system``), and the standalone question. The
last turn is the row's own: the row's ``question``, ``answer`` and ``contexts`` fields win
over what its messages say. A row shows at most ``conversations.max_turns`` turns (the
last ones; the rest is cut and said).

Nothing here raises on a row's content: what is unreadable, unmatched or cut is said
through ``note`` (the row's ``coerced`` field) and the rest is read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ragpulse.collector.extract.history import history_of, standalone, system_prompt
from ragpulse.collector.extract.messages import (
    MAX_MESSAGES,
    Message,
    arguments_text,
    parse_messages,
)
from ragpulse.config import AgentSettings, ConversationSettings
from ragpulse.record import AttributeValue, HistoryMessage, ToolCall
from ragpulse.tool_results import PendingCall, as_text, is_retrieval_tool, tool_documents

AGENT_KEYS = ("messages", "tools_called", "turns")
"""Row fields that make it an agent row, or a conversation (Ragas' list ``user_input`` is
read as ``messages``)."""

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
    number: int | None = None
    """The turn's place in the conversation the row shows (1-based); None for a row of
    one turn whose messages hold no question."""
    history: list[HistoryMessage] = field(default_factory=list)
    """The conversation before the turn (bounded), as the record keeps it."""
    carried: list[dict[str, Any]] = field(default_factory=list)
    """The fields of the documents the turn carries from earlier turns and the system
    prompt (evidence for faithfulness only)."""
    standalone_question: str | None = None


def is_agent_row(row: dict[str, Any]) -> bool:
    return any(key in row for key in AGENT_KEYS)


@dataclass
class _Segment:
    """One turn of a row before it is read: where its user message is, its messages
    after it, and what DeepEval attaches to it."""

    user: int  # index of its user message in the row's messages (-1: none)
    after: list[Message]
    question: str | None = None
    calls: list[PendingCall] = field(default_factory=list)
    contexts: list[dict[str, Any]] = field(default_factory=list)


def agent_turns(
    row: dict[str, Any],
    settings: AgentSettings,
    note: Note,
    conversations: ConversationSettings | None = None,
) -> list[AgentTurn]:
    """The turns of a row in ragpulse's names (:func:`canonical_row`) that
    :func:`is_agent_row`, in order; the last is the row's own."""
    conversations = conversations or ConversationSettings()
    if "messages" in row:
        flat, segments = _from_messages(row["messages"], note)
    elif "turns" in row:
        flat, segments = _from_deepeval_turns(row["turns"], settings, note)
    else:
        flat = []
        segments = [_Segment(-1, [], calls=_from_deepeval(row.get("tools_called"), settings, note))]
    if len(segments) > conversations.max_turns:
        note(f"turns: {len(segments)} -> the last {conversations.max_turns} read")
        segments = segments[-conversations.max_turns :]
    turns: list[AgentTurn] = []
    cuts: list[str] = []  # one line each: a long conversation's turns would repeat them
    for segment in segments:
        turn = _read_turn(segment, settings, note)
        if segment.user >= 0:
            turn.number = len(turns) + 1 + _before_cut(flat, segments)
            if turn.number > 1:
                _place(turn, flat[: segment.user], turns, conversations, cuts)
        turns.append(turn)
    histories = sum(line.endswith("kept") for line in cuts)
    if histories:
        note(f"history: {histories} turns keep their last "
             f"{conversations.max_history_messages} messages")  # fmt: skip
    messages = len(cuts) - histories
    if messages:
        note(f"history: {messages} messages cut at {conversations.max_message_chars} chars")
    return turns


def _before_cut(flat: Sequence[Message], segments: Sequence[_Segment]) -> int:
    """User turns of the row before its first segment read (those past max_turns)."""
    first = segments[0].user if segments else -1
    return sum(1 for m in flat[: max(first, 0)] if m.role == "user" and m.text)


def _read_turn(segment: _Segment, settings: AgentSettings, note: Note) -> AgentTurn:
    """A turn's question, answer, documents and tool calls."""
    turn = AgentTurn()
    calls = _walk(segment.after, turn, settings, note) + segment.calls
    turn.question = segment.question
    if len(calls) > settings.max_tool_calls:
        note(f"tool_calls: {len(calls)} -> {settings.max_tool_calls} kept")
        calls = calls[: settings.max_tool_calls]
    notes: list[str] = []
    turn.documents, turn.tool_calls = tool_documents(calls, None, settings.max_result_chars, notes)
    turn.documents = with_contexts(turn, segment.contexts)
    for line in notes:
        note(line)
    return turn


def _place(
    turn: AgentTurn,
    before: Sequence[Message],
    earlier: Sequence[AgentTurn],
    settings: ConversationSettings,
    cuts: list[str],
) -> None:
    """A follow-up's history, the evidence it carries and its standalone question; what
    its history lost goes to ``cuts``."""
    turn.history = history_of(before, settings, cuts)
    if turn.question is not None:
        turn.standalone_question = standalone(turn.question, turn.history)
    joined = earlier[-settings.join_turns :] if settings.join_turns else []
    for past in joined:
        for index, fields in enumerate(past.documents):
            source = fields.get("source") or {}
            turn.carried.append(
                {**fields, "source": {"kind": "history", "turn": past.number, "index": index,
                                      "tool": source.get("tool") or "",
                                      "call_id": source.get("call_id")}}
            )  # fmt: skip
    system = system_prompt(before, None)
    if system:
        turn.carried.append(
            {"content": system[: settings.max_message_chars], "source": {"kind": "system"}}
        )


# --- messages (OpenAI, LangChain, GenAI parts, Ragas) ------------------------------------


def _from_messages(raw: Any, note: Note) -> tuple[list[Message], list[_Segment]]:
    if not isinstance(raw, list):
        note(f"messages: {_type(raw)} -> []")
        return [], [_Segment(-1, [])]
    if len(raw) > MAX_MESSAGES:
        note(f"messages: {len(raw)} -> the last {MAX_MESSAGES} read")
        raw = raw[-MAX_MESSAGES:]
    flat: list[Message] = []
    for item in raw:
        parsed = parse_messages([item])
        if not parsed:
            note(f"messages[]: {_unreadable(item)} dropped")
        elif isinstance(item, dict) and item.get("tool_calls") is not None:
            _check_requests(item["tool_calls"], sum(len(m.tool_calls) for m in parsed), note)
        flat.extend(parsed)
    return flat, _segments(flat, note)


def _segments(flat: list[Message], note: Note) -> list[_Segment]:
    """Each user message that says something and the messages up to the next one."""
    users = [i for i, m in enumerate(flat) if m.role == "user" and m.text]
    if not users:
        note("messages: no user message says anything -> no question from them")
        return [_Segment(-1, flat)]
    ends = [*users[1:], len(flat)]
    return [
        _Segment(u, flat[u + 1 : end], flat[u].text) for u, end in zip(users, ends, strict=True)
    ]


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


def _from_deepeval_turns(
    raw: Any, settings: AgentSettings, note: Note
) -> tuple[list[Message], list[_Segment]]:
    """DeepEval's ``ConversationalTestCase.turns`` as messages and turns; an assistant
    turn's ``retrieval_context`` and ``tools_called`` belong to the turn it answers."""
    if not isinstance(raw, list):
        note(f"turns: {_type(raw)} -> []")
        return [], [_Segment(-1, [])]
    if len(raw) > MAX_MESSAGES:
        note(f"turns: {len(raw)} -> the last {MAX_MESSAGES} read")
        raw = raw[-MAX_MESSAGES:]
    flat: list[Message] = []
    segments: list[_Segment] = []
    orphan = _Segment(-1, [])  # what comes before any user turn
    for item in raw:
        if not isinstance(item, dict):
            note(f"turns[]: {_type(item)} dropped")
            continue
        if "role" in item:
            said = [(item.get("role"), item.get("content"))]
        else:  # an older DeepEval turn: an LLMTestCase
            said = [("user", item.get("input")),
                    ("assistant", item.get("actual_output", item.get("actualOutput")))]  # fmt: skip
        for role, content in said:
            if role not in ("user", "assistant"):
                note(f"turns[].role: {_type(role) if role is None else repr(role)} dropped")
                continue
            if content is not None and not isinstance(content, str):
                note(f"turns[].content: {_type(content)} -> str")
            message = Message(role="user" if role == "user" else "assistant",
                              text=as_text(content))  # fmt: skip
            flat.append(message)
            if message.role == "user" and message.text:
                segments.append(_Segment(len(flat) - 1, [], message.text))
            elif message.role == "assistant" and (message.text or content is not None):
                (segments[-1] if segments else orphan).after.append(message)
        target = segments[-1] if segments else orphan
        target.calls += _from_deepeval(item.get("tools_called", item.get("toolsCalled")),
                                       settings, note)  # fmt: skip
        target.contexts += _contexts(
            item.get("retrieval_context", item.get("retrievalContext")), note
        )
    if not segments:
        note("turns: no user turn says anything -> no question from them")
        return flat, [orphan]
    if orphan.after or orphan.calls or orphan.contexts:
        note("turns: an assistant turn before any user turn -> not read")
    return flat, segments


def _contexts(raw: Any, note: Note) -> list[dict[str, Any]]:
    """A DeepEval turn's ``retrieval_context`` (strings or ``{"context", "source"}``) as
    document fields."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        note(f"turns[].retrieval_context: {_type(raw)} -> []")
        return []
    out = []
    for index, item in enumerate(raw):
        if isinstance(item, dict) and isinstance(item.get("context"), str):
            source = item.get("source")
            meta = {"source": source} if isinstance(source, str) else {}
            out.append({"id": str(index), "content": item["context"], "metadata": meta})
        elif isinstance(item, str):
            out.append({"id": str(index), "content": item})
        else:
            note(f"turns[].retrieval_context[]: {_type(item)} dropped")
    return out


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
