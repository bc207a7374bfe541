"""The chat messages of a model call, in one shape whatever convention wrote them.

Agent turns are read from their model calls' messages: the user's question, the tool
calls the model asked for, the tool results it was shown, its final text. Each
convention writes them its own way:

- GenAI (``gen_ai.input.messages`` / ``gen_ai.output.messages``, on the span or on the
  ``gen_ai.client.inference.operation.details`` event): ``{"role", "parts": [...]}`` with
  ``text``, ``tool_call`` (``id``, ``name``, ``arguments``) and ``tool_call_response``
  (``id``, ``response`` or ``result``) parts; a ``tool_call_response`` inside a ``user``
  message (Pydantic AI) is a tool message here.
- OpenInference (``llm.input_messages.<i>.message.*``): ``role``, ``content`` or
  ``contents.<k>.message_content.text``, ``tool_calls.<j>.tool_call.{id,function.name,
  function.arguments}``, ``tool_call_id`` and ``name`` on ``tool`` messages.
- The OpenAI chat shape as JSON (``{"role", "content", "tool_calls": [{"id", "function":
  {"name", "arguments"}}], "tool_call_id"}``) and LangChain's (``{"type": "human" | "ai" |
  "tool", "data": {...}}``), where an instrumentation writes a whole list as JSON text.

A model call's messages are parsed once per trace (:class:`MessageCache`): every model
call of an agent repeats the conversation so far, and a turn reads the same call's
messages for its question, its tool results and its history.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from ragpulse import semconv as sc
from ragpulse.collector.extract.readers import loads
from ragpulse.record import Span

Role = Literal["system", "user", "assistant", "tool"]
_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "model": "assistant",
    "tool": "tool",
    "function": "tool",
    "ipython": "tool",
}
MAX_MESSAGES = 2_000
"""Messages read per model call; a longer list keeps its last ones (the newest)."""


class ToolRequest(NamedTuple):
    """A tool call the model asked for (a tuple: an agent's history makes many)."""

    name: str
    call_id: str | None = None
    arguments: Any = ""
    """As the convention gave them: JSON text, or the arguments themselves (made text by
    :func:`arguments_text` only where a record keeps them)."""


class Message(NamedTuple):
    """One chat message (a tuple: an agent's history makes many)."""

    role: Role
    text: str = ""
    tool_calls: tuple[ToolRequest, ...] = ()
    call_id: str | None = None
    """On a tool message: the call it answers."""
    name: str | None = None
    """On a tool message: the tool's name, when the convention gives it."""
    result: Any = None
    """On a tool message: the result when it came as structured data (JSON text stays in
    ``text``, parsed only if a document needs it)."""


class Turn(NamedTuple):
    """A model call's input read as a turn: the last user message that says something,
    what came after it (the turn's tool calls and results so far), and what came before
    it (the conversation so far, left as it came: :func:`parse_items` reads it)."""

    question: str
    messages: tuple[Message, ...]
    before: tuple[Any, ...] = ()


@dataclass
class MessageCache:
    """Each span's input and output messages, parsed on first use (one trace's worth)."""

    _parsed: dict[tuple[str, str], tuple[Message, ...]] = field(default_factory=dict)
    _texts: dict[str, Any] = field(default_factory=dict)
    _turns: dict[str, Turn] = field(default_factory=dict)

    def input(self, span: Span) -> tuple[Message, ...]:
        return self._get(span, "input")

    def output(self, span: Span) -> tuple[Message, ...]:
        return self._get(span, "output")

    def turn(self, span: Span) -> Turn:
        """The span's input as a :class:`Turn`, converting only the messages from the last
        user message on (an agent's history, repeated in every call, is left as it came)."""
        found = self._turns.get(span.span_id)
        if found is None:
            raw = self._raw(span, "input")
            items = raw if isinstance(raw, list) else list(self._get(span, "input"))
            found = self._turns[span.span_id] = split_turn(items)
        return found

    def _get(self, span: Span, side: Literal["input", "output"]) -> tuple[Message, ...]:
        key = (span.span_id, side)
        found = self._parsed.get(key)
        if found is None:
            raw = self._raw(span, side)
            if isinstance(raw, list | dict):
                found = parse_messages(raw)
            else:
                prefix = sc.LLM_INPUT_MESSAGES if side == "input" else sc.LLM_OUTPUT_MESSAGES
                found = flat_messages(span.attributes, prefix)
            self._parsed[key] = found
        return found

    def _raw(self, span: Span, side: Literal["input", "output"]) -> Any:
        """The GenAI messages of one side as decoded JSON (the same text on two spans is
        decoded once), else None (the convention writes them flat)."""
        genai = sc.GEN_AI_INPUT_MESSAGES if side == "input" else sc.GEN_AI_OUTPUT_MESSAGES
        raw = span.attributes.get(genai)
        if raw is None:
            for event in reversed(span.events):
                if event.name == sc.GEN_AI_OPERATION_DETAILS_EVENT and genai in event.attributes:
                    raw = event.attributes[genai]
                    break
        if isinstance(raw, str):
            decoded = self._texts.get(raw)
            if decoded is None:
                decoded = self._texts[raw] = loads(raw)
            raw = decoded
        if isinstance(raw, dict):
            raw = raw.get("messages", [raw])
        return raw if isinstance(raw, list) else None


def split_turn(items: list[Any]) -> Turn:
    """:class:`Turn` of a message list (raw JSON messages or :class:`Message`), read from
    the end back to the last user message that says something."""
    after: list[Message] = []
    after_items: list[Any] = []
    for item in reversed(items):
        found = [item] if isinstance(item, Message) else _message(item)
        question = next((m.text for m in found if m.role == "user" and m.text), None)
        if question is not None:
            tail = found[[m.text for m in found].index(question) + 1 :]
            at = len(items) - len(after_items) - 1
            before = tuple(items[max(0, at - MAX_MESSAGES) : at])
            return Turn(question, tuple([*tail, *after]), before)
        after[:0] = found
        after_items.append(item)
        if len(after_items) >= MAX_MESSAGES:
            break
    return Turn("", tuple(after))


def parse_items(items: Sequence[Any]) -> tuple[Message, ...]:
    """Messages of a list that holds raw JSON messages, :class:`Message`, or both."""
    out: list[Message] = []
    for item in items:
        out.extend([item] if isinstance(item, Message) else _message(item))
    return tuple(out)


def parse_messages(value: Any) -> tuple[Message, ...]:
    """Messages in any of the JSON shapes of the module doc (a list, or one message)."""
    if isinstance(value, dict):
        value = value.get("messages", [value])
    if not isinstance(value, list):
        return ()
    out: list[Message] = []
    for item in value[-MAX_MESSAGES:]:
        out.extend(_message(item))
    return tuple(out)


def _message(item: Any) -> list[Message]:
    if isinstance(item, list):  # LangChain batches: [[message, ...]]
        return [m for inner in item for m in _message(inner)]
    if not isinstance(item, dict):
        return []
    if "kwargs" in item and isinstance(item["kwargs"], dict):  # LangChain serialised
        kwargs, ident = item["kwargs"], item.get("id") or []
        kind = str(ident[-1]).lower().removesuffix("message") if ident else ""
        return _message({"type": kwargs.get("type") or kind, **kwargs})
    if "data" in item and isinstance(item["data"], dict) and "role" not in item:
        return _message({"type": item.get("type"), **item["data"]})  # LangChain dump
    role = _ROLES.get(str(item.get("role") or item.get("type") or "").lower())
    if role is None:
        return []
    parts = item.get("parts")
    if isinstance(parts, list):
        return _genai(role, parts)
    text = _content_text(item.get("content"))
    calls = tuple(_requests(item.get("tool_calls")))
    call_id = _str(item.get("tool_call_id"))
    if role == "tool":
        return [
            Message(
                "tool",
                text,
                call_id=call_id,
                name=_str(item.get("name")),
                result=None if isinstance(item.get("content"), str) else item.get("content"),
            )
        ]
    return [Message(role, text, tool_calls=calls)]


def _genai(role: Role, parts: list[Any]) -> list[Message]:
    """One GenAI message; its ``tool_call_response`` parts become tool messages."""
    texts: list[str] = []
    calls: list[ToolRequest] = []
    tools: list[Message] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text" or (kind is None and "content" in part):
            text = part.get("content")
            if isinstance(text, str):
                texts.append(text)
        elif kind == "tool_call":
            calls.append(
                ToolRequest(
                    str(part.get("name") or ""),
                    _str(part.get("id")),
                    part.get("arguments") or "",
                )
            )
        elif kind == "tool_call_response":
            result = part.get("response", part.get("result"))
            tools.append(
                Message(
                    "tool",
                    result if isinstance(result, str) else "",
                    call_id=_str(part.get("id")),
                    name=_str(part.get("name")),
                    result=None if isinstance(result, str) else result,
                )
            )
    out: list[Message] = []
    if texts or calls or not tools:
        out.append(Message(role, " ".join(texts).strip(), tuple(calls)))
    return out + tools


def flat_messages(attributes: Mapping[str, Any], prefix: str) -> tuple[Message, ...]:
    """OpenInference ``<prefix>.<i>.message.*`` attributes as messages."""
    head = prefix + "."
    fields: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if not key.startswith(head):
            continue
        index, _, rest = key[len(head) :].partition(".")
        if index.isdigit():
            fields.setdefault(int(index), {})[rest] = value
    out = []
    for i in sorted(fields)[-MAX_MESSAGES:]:
        f = fields[i]
        role = _ROLES.get(str(f.get(sc.MESSAGE_ROLE) or "").lower())
        if role is None:
            continue
        text = f.get(sc.MESSAGE_CONTENT)
        if not isinstance(text, str):
            text = " ".join(_indexed(f, sc.MESSAGE_CONTENTS, sc.MESSAGE_CONTENT_TEXT))
        calls = tuple(
            ToolRequest(str(c.get(sc.TOOL_CALL_FUNCTION_NAME) or ""), _str(c.get(sc.TOOL_CALL_ID)),
                        _json_text(c.get(sc.TOOL_CALL_FUNCTION_ARGUMENTS)))
            for c in _indexed_fields(f, sc.MESSAGE_TOOL_CALLS)
        )  # fmt: skip
        out.append(
            Message(
                role,
                text.strip(),
                calls,
                call_id=_str(f.get(sc.MESSAGE_TOOL_CALL_ID)),
                name=_str(f.get(sc.MESSAGE_NAME)),
                result=None,
            )
        )
    return tuple(out)


def _indexed_fields(fields: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """``<prefix>.<j>.<name>`` keys of one message, grouped by ``j`` (``name`` without its
    first segment: ``tool_call.function.name`` -> ``tool_call.function.name``)."""
    head = prefix + "."
    found: dict[int, dict[str, Any]] = {}
    for key, value in fields.items():
        if key.startswith(head):
            index, _, rest = key[len(head) :].partition(".")
            if index.isdigit():
                found.setdefault(int(index), {})[rest] = value
    return [found[j] for j in sorted(found)]


def _indexed(fields: Mapping[str, Any], prefix: str, name: str) -> list[str]:
    return [v for f in _indexed_fields(fields, prefix) if isinstance(v := f.get(name), str)]


def _requests(value: Any) -> Iterable[ToolRequest]:
    """``tool_calls`` in the OpenAI shape (``function``) or LangChain's (``name``, ``args``)."""
    for call in value if isinstance(value, list) else ():
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        if isinstance(function, dict):
            name, arguments = function.get("name"), function.get("arguments")
        else:
            name, arguments = call.get("name"), call.get("args", call.get("arguments"))
        yield ToolRequest(str(name or ""), _str(call.get("id")), arguments or "")


def _content_text(content: Any) -> str:
    """A message's content: text, or the text parts of a list (OpenAI, Anthropic)."""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return " ".join(texts).strip()
    return ""


def arguments_text(value: Any) -> str:
    """A tool call's arguments as JSON text (as the model wrote them when they are text)."""
    return _json_text(value)


def _json_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _str(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def final_text(messages: Iterable[Message]) -> str:
    """The assistant's text in a model call's output (never a tool-call message)."""
    texts = [m.text for m in messages if m.role == "assistant" and m.text]
    return texts[-1] if texts else ""
