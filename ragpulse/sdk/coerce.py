"""Duck-typed, never-raising extraction from the app's values.

Turns whatever the app passes or returns (str, bytes, mappings, pydantic
models, OpenAI/Anthropic/LangChain/LlamaIndex objects) into texts, documents,
scores and token counts, and holds :class:`_Guard`, the block guard that keeps
recording failures out of the app.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import json
import logging
import numbers
from types import TracebackType
from typing import Any, NamedTuple

# Named as before instrument.py was split up, so an app's logging setup for
# "ragpulse.instrument" keeps covering every instrumentation module.
logger = logging.getLogger("ragpulse.instrument")


class _Guard:
    """``with _Guard("what"):`` swallows and DEBUG-logs any Exception in the block."""

    __slots__ = ("_what",)

    def __init__(self, what: str) -> None:
        self._what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc is not None and isinstance(exc, Exception):
            logger.debug("ragpulse: %s failed", self._what, exc_info=exc)
            return True
        return False


def _get(obj: Any, key: str) -> Any:
    """``obj[key]`` for mappings, ``obj.key`` otherwise; None when absent or failing."""
    try:
        if isinstance(obj, collections.abc.Mapping):
            return obj.get(key)
        return getattr(obj, key, None)
    except Exception:
        return None


def _as_text(value: Any) -> str | None:
    """A text for str, bytes and numbers; None for anything else (no ``str(obj)``)."""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        return str(value)
    return None


def _question_text(value: Any) -> str | None:
    text = _as_text(value)
    if text is not None:
        return text
    for key in ("question", "query", "input"):
        text = _as_text(_get(value, key)) if value is not None else None
        if text is not None:
            return text
    return None


def _first(value: Any, index: int = 0) -> Any:
    try:
        if isinstance(value, collections.abc.Sequence) and not isinstance(value, str | bytes):
            return value[index] if len(value) > index else None
    except Exception:
        return None
    return None


def answer_text(result: Any, generation: bool = False) -> str | None:
    """The answer in a return value: str, ``["answer"]``/``.answer``, and for
    generations an OpenAI-, Anthropic- or LangChain-like response."""
    if result is None:
        return None
    text = _as_text(result)
    if text is not None:
        return text
    text = _as_text(_get(result, "answer"))
    if text is not None or not generation:
        return text
    choice = _first(_get(result, "choices"))
    if choice is not None:
        text = _as_text(_get(_get(choice, "message"), "content"))
        if text is None:
            text = _as_text(_get(choice, "text"))
        return text
    content = _get(result, "content")
    text = _as_text(content)
    if text is None and isinstance(content, list):
        parts = [_as_text(_get(block, "text")) for block in content]
        joined = "".join(part for part in parts if part is not None)
        text = joined if any(part is not None for part in parts) else None
    return text


def chunk_text(chunk: Any) -> str | None:
    """The text of one streamed chunk: str/bytes, an OpenAI delta, ``content``
    (LangChain message chunks) or ``answer`` (dict chunks of a chain)."""
    text = _as_text(chunk)
    if text is not None:
        return text
    choice = _first(_get(chunk, "choices"))
    if choice is not None:
        return _as_text(_get(_get(choice, "delta"), "content"))
    text = _as_text(_get(chunk, "content"))
    return text if text is not None else _as_text(_get(chunk, "answer"))


def _token_count(value: Any) -> int | None:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        count = int(value)
        return count if count >= 0 else None
    return None


def _usage(response: Any) -> tuple[int | None, int | None]:
    """(input, output) tokens from ``.usage`` (OpenAI/Anthropic) or ``.usage_metadata``."""
    usage = _get(response, "usage")
    if usage is None:
        usage = _get(response, "usage_metadata")
    if usage is None:
        return None, None
    prompt = _token_count(_get(usage, "prompt_tokens"))
    if prompt is None:
        prompt = _token_count(_get(usage, "input_tokens"))
    completion = _token_count(_get(usage, "completion_tokens"))
    if completion is None:
        completion = _token_count(_get(usage, "output_tokens"))
    return prompt, completion


def _json_default(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, collections.abc.Mapping):
        return dict(obj)
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    return repr(obj)


def _to_json(value: Any) -> str | None:
    """JSON text; unserialisable parts become their repr; None if even repr fails."""
    try:
        return json.dumps(value, default=_json_default, ensure_ascii=False)
    except Exception:
        pass
    try:
        return repr(value)
    except Exception:
        return None


class _Doc(NamedTuple):
    id: str | None
    content: str | None
    score: float | None
    metadata: Any


def _doc_id(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    text = _as_text(value)
    if text is not None:
        return text
    try:
        return str(value)
    except Exception:
        return None


def _score(value: Any) -> float | None:
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            return float(value)
        except Exception:
            return None
    return None


def _to_doc(item: Any) -> _Doc | None:
    """One retrieved item -> _Doc; None for shapes we do not recognise.

    Accepts str, mappings and objects with ``id``/``content`` (or
    ``text``/``page_content``)/``score``/``metadata`` (:class:`ragpulse.Document`,
    LangChain's ``Document``), ``(document, score)`` pairs (LangChain
    ``similarity_search_with_score``) and ``.node``/``.score`` wrappers
    (LlamaIndex ``NodeWithScore``).
    """
    if isinstance(item, str | bytes | bytearray):
        return _Doc(None, _as_text(item), None, None)
    if isinstance(item, tuple) and len(item) == 2 and _score(item[1]) is not None:
        inner = _to_doc(item[0])
        return inner._replace(score=_score(item[1])) if inner is not None else None
    node = _get(item, "node")
    if node is not None and not isinstance(node, str | numbers.Number):
        inner = _to_doc(node)
        if inner is not None:
            score = _score(_get(item, "score"))
            return inner._replace(score=score) if score is not None else inner
    doc_id = None
    for key in ("id", "node_id", "doc_id", "document_id"):
        doc_id = _doc_id(_get(item, key))
        if doc_id is not None:
            break
    content = None
    for key in ("content", "text", "page_content"):
        content = _as_text(_get(item, key))
        if content is not None:
            break
    score = _score(_get(item, "score"))
    metadata = _get(item, "metadata")
    if doc_id is None and content is None and score is None:
        return None
    return _Doc(doc_id, content, score, metadata or None)


def _type_name(exc: BaseException) -> str:
    """Fully qualified class name, as OTel writes ``exception.type``."""
    module, qualname = type(exc).__module__, type(exc).__qualname__
    return f"{module}.{qualname}" if module and module != "builtins" else qualname
