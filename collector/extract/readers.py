"""Small readers that the conventions table (:mod:`.conventions`) is built from.

Each factory returns a ``Read``: a function of one span giving a value or None. They
decode the shapes instrumentations write: plain text, JSON text (``{"query": ...}``),
GenAI messages (``[{"role", "parts": [{"type": "text", "content"}]}]``, or the older
``{"role", "content"}``), indexed flat messages (``llm.input_messages.0.message.role``,
``gen_ai.prompt.0.role``), documents (flat, arrays, JSON), and the same on span events
or OTLP log records joined to the span (``Span.events``).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from ragpulse.record import AttributeValue, Span

Read = Callable[[Span], Any]
"""What one mapping reads off a span: str, int, list of raw document dicts, or None."""

RawDocument = dict[str, Any]


def loads(value: Any) -> Any:
    """``value`` JSON-decoded when it is JSON text (an object, an array, a quoted string)."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "[", '"'):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def dig(value: Any, keys: tuple[str, ...], depth: int = 0) -> str:
    """The first text under ``keys`` (in order) in nested JSON; the newest of a list."""
    if isinstance(value, str):
        return value.strip()
    if depth > 4:
        return ""
    if isinstance(value, dict):
        for k in keys:
            found = dig(value.get(k), keys, depth + 1) if k in value else ""
            if found:
                return found
        if len(value) == 1:
            return dig(next(iter(value.values())), keys, depth + 1)
    if isinstance(value, list) and value:
        # Chat messages: the last one is the newest.
        return dig(value[-1], keys, depth + 1)
    return ""


def path(value: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def messages_text(value: Any, role: str | None) -> str:
    """Text of the last message (of ``role``) in GenAI messages (JSON text or structured)."""
    value = loads(value)
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):  # one message
        value = [value]
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


# --- attribute readers -------------------------------------------------------------


def attr_text(
    key: str, keys: tuple[str, ...] = (), under: tuple[str, ...] = (), mime: str | None = None
) -> Read:
    """Text of ``key``; JSON is decoded (unless ``mime`` says text/plain), followed along
    ``under`` and searched for ``keys`` (LangChain writes ``{"question": ...}``)."""

    def read(span: Span) -> str | None:
        value = span.attributes.get(key)
        if not (mime and span.attributes.get(mime) == "text/plain"):
            value = loads(value)
        inner = path(value, under) if under else value
        # ``under`` is where one version nests the value; others write it at the top.
        return dig(value if inner is None else inner, keys) or None

    return read


def attr_str(key: str, ignore: frozenset[str] = frozenset()) -> Read:
    def read(span: Span) -> str | None:
        value = span.attributes.get(key)
        return value if isinstance(value, str) and value and value not in ignore else None

    return read


def attr_int(key: str) -> Read:
    def read(span: Span) -> int | None:
        value = span.attributes.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
        return None

    return read


def attr_messages(key: str, role: str | None) -> Read:
    return lambda span: messages_text(span.attributes.get(key), role) or None


def indexed_messages(prefix: str, role: str | None, role_field: str, content_field: str) -> Read:
    """``<prefix>.<i>.<role_field>`` / ``<prefix>.<i>.<content_field>``: the last message of
    ``role`` (any role when None)."""

    def read(span: Span) -> str | None:
        attrs, i, last = span.attributes, 0, None
        while True:
            r, content = (
                attrs.get(f"{prefix}.{i}.{role_field}"),
                attrs.get(f"{prefix}.{i}.{content_field}"),
            )
            if r is None and content is None:
                return last
            if (role is None or r == role) and isinstance(content, str) and content:
                last = content.strip()
            i += 1

    return read


_FLAT_DOC = re.compile(r"(\d+)\.document\.(\w+)$")  # after "<prefix>."


@functools.lru_cache(maxsize=4096)
def _flat_key(key: str, at: int) -> tuple[int, str] | None:
    """(index, field) of a flat document key ``<prefix>.<i>.document.<field>`` read from
    ``at``, else None. Remembered: the same few keys come in every retriever span."""
    m = _FLAT_DOC.match(key, at)
    return None if m is None else (int(m.group(1)), m.group(2))


def flat_documents(prefix: str) -> Read:
    """OpenInference ``<prefix>.<i>.document.<field>``, or one array value under ``prefix``."""
    head = prefix + "."
    at = len(head)

    def read(span: Span) -> list[RawDocument] | None:
        nested = span.attributes.get(prefix)
        if isinstance(nested, list):
            return [_unwrap(x) for x in nested] or None
        fields: dict[int, RawDocument] = {}
        for key, value in span.attributes.items():
            # A prefix test first: most attributes of most spans are not documents.
            if key.startswith(head) and (parsed := _flat_key(key, at)) is not None:
                index, field = parsed
                if (document := fields.get(index)) is None:
                    document = fields[index] = {}
                document[field] = value
        return [fields[i] for i in sorted(fields)] or None

    return read


def json_documents(
    key: str, under: tuple[str, ...] = (), rename: dict[str, str] | None = None
) -> Read:
    """Documents as a JSON array (text or structured) at ``key`` (then ``under``), fields
    renamed to ragpulse's (``page_content`` -> ``content``)."""
    names = rename or {}

    def read(span: Span) -> list[RawDocument] | None:
        docs = path(loads(span.attributes.get(key)), under)
        if not isinstance(docs, list):
            return None
        return [{names.get(k, k): v for k, v in _unwrap(d).items()} for d in docs] or None

    return read


def _unwrap(value: Any) -> RawDocument:
    if isinstance(value, dict):
        inner = value.get("document", value)
        return dict(inner) if isinstance(inner, dict) else {}
    # Anything else is the document's content; extraction converts it and says so.
    return {"content": value}


# --- event readers (span events and OTLP log records joined to the span) ------------


def _events(span: Span, name: str) -> Iterator[Any]:
    return (e for e in span.events if e.name == name)


def event_messages(name: str, key: str, role: str | None) -> Read:
    """GenAI messages in attribute ``key`` of the last event ``name``."""

    def read(span: Span) -> str | None:
        texts = [messages_text(e.attributes.get(key), role) for e in _events(span, name)]
        return next((t for t in reversed(texts) if t), None)

    return read


def event_body(name: str, under: tuple[str, ...], keys: tuple[str, ...] = ("content",)) -> Read:
    """Text in the body of the last event ``name`` (``gen_ai.choice`` ->
    ``message.content``), or in an attribute of that name on a span event."""

    def read(span: Span) -> str | None:
        texts = [dig(path(loads(_body(e)), under), keys) for e in _events(span, name)]
        return next((t for t in reversed(texts) if t), None)

    return read


def _body(event: Any) -> AttributeValue:
    # Span events cannot carry a body: the same content is in their attributes.
    return event.body if event.body is not None else dict(event.attributes)


def event_attr(name: str, key: str) -> Read:
    """A plain attribute (``gen_ai.response.id``) of the last event ``name``."""

    def read(span: Span) -> Any:
        values = [e.attributes.get(key) for e in _events(span, name)]
        return next((v for v in reversed(values) if v not in (None, "")), None)

    return read
