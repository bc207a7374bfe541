"""Calling the user's functions (the app's pipeline, retriever, generator) offline.

What ``eval --replay`` and the harness share: a function may be sync or async, return a
value, an awaitable or a stream (sync or async; streams are joined as the instrumentation
joins them), and its return value is read as an answer and, where it carries them, as
documents. A call that raises is described in one line (:func:`error_text`), never
raised further; a sync call runs on a daemon thread (:func:`in_thread`) so that one
abandoned past its time cannot hold the exit.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ragpulse.app_env import ENV_EXPORTER
from ragpulse.offline.score import row_to_record
from ragpulse.record import Document
from ragpulse.sdk.coerce import answer_text, chunk_text

_ANSWER_KEYS = ("output", "response", "result", "text")  # beyond what answer_text reads
_DOCUMENT_KEYS = ("documents", "contexts", "sources", "source_documents")


@contextmanager
def app_export(export: bool) -> Iterator[None]:
    """While the app is imported and called offline, its ragpulse spans go nowhere
    (``RAGPULSE_EXPORTER=none``), unless ``export`` (``eval --export``) or a
    ``RAGPULSE_EXPORTER`` already set says where they go: an offline run neither waits on a
    collector that is not there nor adds its test traffic to a live one's scores. An
    exporter the app's code names itself (``ragpulse.configure(exporter=...)``) is kept."""
    if export or os.environ.get(ENV_EXPORTER, "").strip():
        yield
        return
    os.environ[ENV_EXPORTER] = "none"
    try:
        yield
    finally:
        os.environ.pop(ENV_EXPORTER, None)


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` gives a coroutine or an async generator (callable objects too)."""
    for target in (fn, getattr(fn, "__call__", None)):  # noqa: B004 - callable objects too
        if target is not None and (
            inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target)
        ):
            return True
    return False


def answer_of(value: Any) -> str:
    """The answer in a return value, read as the instrumentation reads one (str, ``answer``,
    OpenAI/Anthropic/LangChain responses), then by other common keys, else as JSON/str."""
    if value is None:
        return ""
    text = answer_text(value, generation=True)
    if text is not None:
        return text
    if isinstance(value, Mapping):
        for key in _ANSWER_KEYS:
            if isinstance(value.get(key), str):
                return str(value[key])
        return json.dumps(value, default=str, ensure_ascii=False)
    return str(value)


def documents_of(value: Any) -> list[Document] | None:
    """Documents a returned mapping (or object) carries, else None."""
    for key in _DOCUMENT_KEYS:
        docs = value.get(key) if isinstance(value, Mapping) else getattr(value, key, None)
        if isinstance(docs, list | tuple):
            return row_to_record({"contexts": list(docs)}, 0).documents
    return None


def _chunk(chunk: Any) -> str:
    """A streamed chunk's text as the instrumentation reads it (str, OpenAI delta, ...)."""
    text = chunk_text(chunk)
    return str(chunk) if text is None else text


def _is_stream(value: Any) -> bool:
    return isinstance(value, Iterator) and not isinstance(value, str | bytes | Mapping)


async def materialize_async(value: Any) -> Any:
    """A returned value awaited and, when it is a stream, joined into its text."""
    if inspect.isawaitable(value):
        value = await value
    if hasattr(value, "__aiter__"):
        return "".join([_chunk(chunk) async for chunk in value])
    if _is_stream(value):
        return "".join(_chunk(chunk) for chunk in value)
    return value


def materialize_sync(value: Any) -> Any:
    """:func:`materialize_async` for a sync caller (an awaitable runs on its own loop)."""
    if inspect.isawaitable(value) or hasattr(value, "__aiter__"):
        return asyncio.run(materialize_async(value))
    if _is_stream(value):
        return "".join(_chunk(chunk) for chunk in value)
    return value


def error_text(exc: BaseException) -> str:
    """A failed call as one short line: the exception's type and its message's first line."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {message}"[:500] if message else type(exc).__name__


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on a daemon thread, awaited: a call abandoned (a timeout, an
    interrupt) cannot block the exit."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            (future.set_result if ok else future.set_exception)(value)

    def work() -> None:
        try:
            ok, value = True, fn(*args)
        except BaseException as exc:
            ok, value = False, exc
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # the run ended (it timed out long ago): nobody waits
            pass

    threading.Thread(target=work, name="ragpulse-call", daemon=True).start()
    return await future
