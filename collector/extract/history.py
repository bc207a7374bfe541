"""A turn's place in its conversation: the conversation id, the turn number, the history.

- The id is the first non-empty value of ``gen_ai.conversation.id`` (Pydantic AI, the
  GenAI conventions), ``session.id`` (OpenInference, Langfuse's SDK, LangGraph's
  ``session_id`` metadata), the attributes of ``conversations.id_attributes``, and a
  LangChain run's ``thread_id`` / ``session_id`` metadata, on the record's spans or above
  them. An empty id is no id.
- The turn number is the count of user messages in the model's input when it has the
  history; else the collector numbers turns in their order of arrival.
- The history is what the model saw before this turn: the user and assistant messages
  (and tool results) of its input before the turn's question, the last
  ``conversations.max_history_messages`` of them, each cut at
  ``conversations.max_message_chars``; what was cut is noted on the record.
- With a history, everything the model saw is evidence for faithfulness: the earlier
  turns' tool results and the system prompt become documents of kind ``history`` and
  ``system`` (never scanned again, never scored for relevance).
- The standalone question of a follow-up is the question with the earlier user turn's
  topic words added, for the relevance metrics.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from ragpulse import semconv as sc
from ragpulse.collector.extract.messages import Message, Turn, parse_items
from ragpulse.collector.extract.readers import loads
from ragpulse.config import ConversationSettings
from ragpulse.record import AttributeValue, HistoryMessage, Span
from ragpulse.tool_results import passages

_METADATA = "metadata"  # OpenInference LangChain: the run's metadata as JSON
_METADATA_IDS = ("thread_id", "session_id", "conversation_id")
_STOP = frozenset(
    "a an and are as at be but by can could did do does for from had has have how i if in "
    "into is it its me my no not of on or our so than that the their them then there these "
    "they this to was we were what when where which who why will with would you your "
    "about tell me know please give show need want like also just any some more much many "
    "thanks thank hello hi ok okay yes sure well".split()
)
CARRIED_RESULT_CHARS = 200_000
"""Longest earlier tool result split into passages (a longer one is cut there, noted)."""
TOPIC_WORDS = 6
"""Topic words of the earlier user turn added to a follow-up's standalone question."""


def conversation_id(spans: Iterable[Span], settings: ConversationSettings) -> str | None:
    """The first non-empty conversation id on ``spans`` (the record's, then above it)."""
    keys = (sc.GEN_AI_CONVERSATION_ID, sc.SESSION_ID, *settings.id_attributes)
    found: str | None = None
    for span in spans:
        for key in keys:
            value = span.attributes.get(key)
            if isinstance(value, str | int) and str(value).strip():
                return str(value).strip()
        if found is None:
            found = _from_metadata(span.attributes.get(_METADATA))
    return found


def _from_metadata(value: AttributeValue) -> str | None:
    data = loads(value) if isinstance(value, str) else value
    if isinstance(data, dict):
        for key in _METADATA_IDS:
            item = data.get(key)
            if isinstance(item, str | int) and str(item).strip():
                return str(item).strip()
    return None


def user_turns(messages: Sequence[Any]) -> int:
    """User messages that say something, in a raw JSON message list or parsed messages."""
    count = 0
    for item in messages:
        if isinstance(item, Message):
            count += item.role == "user" and bool(item.text)
        elif isinstance(item, dict) and str(item.get("role") or item.get("type")) in (
            "user",
            "human",
        ):
            parts = item.get("parts")
            if isinstance(parts, list):
                count += any(isinstance(p, dict) and p.get("type") == "text" for p in parts)
            else:
                count += bool(item.get("content"))
    return count


def history_of(
    before: Sequence[Message], settings: ConversationSettings, notes: list[str]
) -> list[HistoryMessage]:
    """The history a model saw: ``before`` (the messages before the turn's question), the
    last ``max_history_messages``, each cut at ``max_message_chars``, numbered by turn."""
    kept = [m for m in before if m.role != "system" and (m.text or m.role == "tool")]
    if len(kept) > settings.max_history_messages:
        notes.append(f"history: {len(kept)} messages -> {settings.max_history_messages} kept")
    turn = sum(1 for m in kept if m.role == "user" and m.text)
    start = (
        len(kept) - settings.max_history_messages
        if len(kept) > settings.max_history_messages
        else 0
    )
    # Turn numbers count back from the last user message before this turn.
    numbers: list[int] = []
    for message in reversed(kept):
        numbers.append(turn)
        if message.role == "user" and message.text:
            turn -= 1
    numbers.reverse()
    out = []
    for number, message in list(zip(numbers, kept, strict=True))[start:]:
        content = message.text or _result_text(message.result)
        if len(content) > settings.max_message_chars:
            notes.append(f"history: a message of {len(content)} chars cut")
            content = content[: settings.max_message_chars]
        out.append(
            HistoryMessage(
                role=message.role,
                content=content,
                turn=max(number, 1),
                tool=message.name if message.role == "tool" else None,
            )
        )
    return out


def _result_text(result: Any) -> str:
    if result is None:
        return ""
    return (
        result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
    )


def system_prompt(messages: Sequence[Message], span: Span | None) -> str:
    """The system prompt a model saw: its system messages, else GenAI's
    ``gen_ai.system_instructions`` on the model call."""
    texts = [m.text for m in messages if m.role == "system" and m.text]
    if not texts and span is not None:
        value = loads(span.attributes.get(sc.GEN_AI_SYSTEM_INSTRUCTIONS))
        parts = value if isinstance(value, list) else [value]
        texts = [str(p.get("content", "")) if isinstance(p, dict) else str(p) for p in parts if p]
    return "\n".join(t for t in texts if t.strip())


def carried_documents(
    before: Sequence[Message], system: str, settings: ConversationSettings, notes: list[str]
) -> list[dict[str, Any]]:
    """Evidence the model still saw from earlier turns (their tool results, one document
    per passage as this turn's) and from the system prompt, as document fields of kind
    ``history`` and ``system``."""
    out: list[dict[str, Any]] = []
    turn = 0
    for message in (
        before[-settings.max_history_messages :] if settings.max_history_messages else ()
    ):
        if message.role == "user" and message.text:
            turn += 1
        if message.role != "tool":
            continue
        result = message.result if message.result is not None else message.text
        found, _ = passages(result, CARRIED_RESULT_CHARS, message.name or "", notes)
        for index, fields in enumerate(found):
            source = {"kind": "history", "tool": message.name or "", "turn": turn or None,
                      "index": index, "call_id": message.call_id}  # fmt: skip
            out.append({**fields, "source": source})
    if system:
        out.append({"content": system[: settings.max_message_chars], "source": {"kind": "system"}})
    return out


def joined_history(turns: Iterable[tuple[int | None, str, str]]) -> list[HistoryMessage]:
    """Earlier turns' ``(turn, question, answer)`` as the history a turn whose spans carry
    none is given (the collector's join, the offline run's alike); empty words left out."""
    return [
        m
        for turn, question, answer in turns
        for m in (
            HistoryMessage(role="user", content=question, turn=turn),
            HistoryMessage(role="assistant", content=answer, turn=turn),
        )
        if m.content
    ]


def standalone(question: str, history: Sequence[HistoryMessage]) -> str | None:
    """A follow-up's question with the earlier user turn's topic words added; None when
    there is no earlier user turn."""
    earlier = next((m.content for m in reversed(history) if m.role == "user" and m.content), "")
    if not earlier:
        return None
    asked = {w.lower().strip("?.,!") for w in question.split()}
    topic = []
    for word in earlier.split():
        w = word.strip("?.,!:;()\"'").lower()
        if len(w) > 2 and w not in _STOP and w not in asked and w not in topic:
            topic.append(w)
    if not topic:
        return None
    return f"{question} ({' '.join(topic[:TOPIC_WORDS])})"


def place(
    question: str,
    spans: Iterable[Span],
    turn: Turn | None,
    model_call: Span | None,
    settings: ConversationSettings,
    notes: list[str],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the record fields of a turn's place in its conversation, the evidence documents it
    carries from earlier turns and the system prompt). ``turn`` is the model call's input
    read as a turn (None: the trace shows no model input)."""
    fields: dict[str, Any] = {"conversation_id": conversation_id(spans, settings)}
    if turn is None or not turn.question:
        return fields, []  # no model input: the collector numbers the turn on arrival
    before = parse_items(turn.before)
    earlier = user_turns(before)
    fields["turn"] = earlier + 1
    if not earlier:
        return fields, []
    history = history_of(before, settings, notes)
    fields.update(history=history, standalone_question=standalone(question, history))
    system = system_prompt(before, model_call)
    return fields, carried_documents(before, system, settings, notes)
