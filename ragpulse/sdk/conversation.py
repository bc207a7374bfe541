"""Conversations for apps traced by ragpulse: which chat session a turn belongs to.

``with ragpulse.conversation(session_id): answer(question)`` (also ``async with``, and
``@ragpulse.conversation(session_id)`` on a function) puts every span ragpulse writes
inside the block in that conversation: each carries ``gen_ai.conversation.id`` (the
OTel GenAI conventions) and ``session.id`` (OpenInference, Phoenix, Langfuse), and the
collector gathers the turns of one id into a conversation. ``@ragpulse.pipeline(
conversation_id="session_id")`` reads the id from the decorated function's own
argument instead, and ``ragpulse.pipeline_span(question, conversation_id=...)`` takes
it directly; a turn's own id wins over the block's.

The end of a conversation is said on its last turn: ``ragpulse.conversation(id,
end=True)`` around it, or :meth:`Conversation.end` during it (or before it, inside the
block), or :meth:`~ragpulse.sdk.recorders.PipelineSpan.end_conversation` on a
``pipeline_span``; the turn's pipeline span then carries ``ragpulse.conversation.end =
true`` and the collector closes the conversation at once instead of after
``conversations.idle_s``.

An empty id (``""``, ``None``, blanks) is no id: as if none were given. An id is text
(numbers and UUIDs are written as text; another type counts as no id), at most
:data:`MAX_ID_CHARS` characters. Nothing here raises into the app.

The conversation travels in the OpenTelemetry context, so that spans opened by the
app's own code on other threads see it where the app hands its context over, as they
see their parent span.
"""

from __future__ import annotations

import functools
import inspect
import logging
import uuid
from collections.abc import AsyncGenerator, Callable, Generator
from contextvars import Token
from types import TracebackType
from typing import Any, Protocol, TypeVar, cast

from opentelemetry import context as otel_context
from opentelemetry.context import Context

from ragpulse import semconv as sc
from ragpulse.sdk.coerce import _as_text, _Guard

logger = logging.getLogger("ragpulse.instrument")

__all__ = ["MAX_ID_CHARS", "Conversation", "conversation", "conversation_id_of"]

MAX_ID_CHARS = 256
"""Longest conversation id written; a longer one is cut there."""

_CONVERSATION = otel_context.create_key("ragpulse.conversation")
_TURN = otel_context.create_key("ragpulse.conversation.turn")

F = TypeVar("F", bound=Callable[..., Any])


class Turn(Protocol):
    """What :meth:`Conversation.end` needs of the pipeline span recording a turn."""

    @property
    def conversation_id(self) -> str | None: ...
    def end_conversation(self) -> None: ...


def conversation_id_of(value: Any) -> str | None:
    """``value`` as a conversation id: text (numbers and UUIDs as text), stripped, cut at
    :data:`MAX_ID_CHARS`; None when empty or of another type. Never raises."""
    try:
        text = str(value) if isinstance(value, uuid.UUID) else _as_text(value)
        text = text.strip() if text is not None else None
        return text[:MAX_ID_CHARS] if text else None
    except Exception:  # an odd str subclass: no id, never an exception
        logger.debug("ragpulse: reading a conversation id failed", exc_info=True)
        return None


def conversation_attributes(conversation_id: str | None) -> dict[str, str]:
    """The attributes that put a span in a conversation (none without an id)."""
    if not conversation_id:
        return {}
    return {sc.GEN_AI_CONVERSATION_ID: conversation_id, sc.SESSION_ID: conversation_id}


def current() -> Conversation | None:
    """The conversation block the caller is in, else None."""
    value = otel_context.get_value(_CONVERSATION)
    return value if isinstance(value, Conversation) else None


def current_turn() -> Turn | None:
    """The pipeline span (a turn) the caller is in, else None."""
    return cast("Turn | None", otel_context.get_value(_TURN))


def current_id() -> str | None:
    """The conversation id spans opened here carry: the current turn's, else the block's."""
    turn = current_turn()
    if turn is not None:
        return turn.conversation_id
    block = current()
    return block.id if block is not None else None


def in_turn(turn: Turn, context: Context | None = None) -> Context:
    """``context`` with ``turn`` as the current turn (its children see its id)."""
    return otel_context.set_value(_TURN, turn, context)


class Conversation:
    """One conversation: a ``with`` block (sync or async) or a decorator.

    ``end=True``: every turn inside is the conversation's last (use it around the last
    turn). Re-entrant; each ``with`` restores what was current before on exit.
    """

    def __init__(self, conversation_id: Any = None, *, end: bool = False) -> None:
        self.id = conversation_id_of(conversation_id)
        self.ending = bool(end) if isinstance(end, bool) else False
        self._tokens: list[Token[Context] | None] = []

    def end(self) -> None:
        """The conversation ends with the turn recording now: its pipeline span gets
        ``ragpulse.conversation.end = true``. Called inside the block outside any turn,
        the next turn opened in the block is the last. Never raises."""
        with _Guard("ending a conversation"):
            self.ending = True
            turn = current_turn()
            if turn is not None and self.id is not None and turn.conversation_id == self.id:
                turn.end_conversation()

    # -- with ------------------------------------------------------------------------------

    def __enter__(self) -> Conversation:
        token = None
        with _Guard("entering a conversation"):
            # A turn's own id would hide the block's: the block starts outside any turn.
            token = otel_context.attach(
                otel_context.set_value(_TURN, None, otel_context.set_value(_CONVERSATION, self))
            )
        self._tokens.append(token)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token = self._tokens.pop() if self._tokens else None
        if token is not None:
            with _Guard("leaving a conversation"):
                otel_context.detach(token)

    async def __aenter__(self) -> Conversation:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    # -- decorator -------------------------------------------------------------------------

    def __call__(self, fn: F) -> F:
        """Decorate ``fn`` (sync, async, generator or async generator): each call runs in
        this conversation (a stream's items are produced in it; an exception thrown into
        a generator is not forwarded, it ends the stream)."""
        if inspect.isasyncgenfunction(fn):

            @functools.wraps(fn)
            async def agen(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, Any]:
                with self._fresh():
                    inner = fn(*args, **kwargs)
                sent: Any = None
                while True:
                    with self._fresh():
                        try:
                            item = await inner.asend(sent)
                        except StopAsyncIteration:
                            return
                    try:
                        sent = yield item
                    except GeneratorExit:
                        await inner.aclose()
                        raise

            return cast(F, agen)
        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def gen(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
                with self._fresh():
                    inner = fn(*args, **kwargs)
                sent: Any = None
                while True:
                    with self._fresh():
                        try:
                            item = inner.send(sent)
                        except StopIteration as stop:
                            return stop.value
                    try:
                        sent = yield item
                    except GeneratorExit:
                        inner.close()
                        raise

            return cast(F, gen)
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                with self._fresh():
                    return await fn(*args, **kwargs)

            return cast(F, run_async)

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with self._fresh():
                return fn(*args, **kwargs)

        return cast(F, run)

    def _fresh(self) -> Conversation:
        """A block of its own for one call (or one step of a stream): calls running at
        once on several threads or tasks each restore their own context."""
        copy = Conversation.__new__(Conversation)
        copy.id, copy.ending, copy._tokens = self.id, self.ending, []
        return copy


def conversation(conversation_id: Any, *, end: bool = False) -> Conversation:
    """Put the turns traced inside in the conversation ``conversation_id``.

    ``with ragpulse.conversation(session_id): answer(question)``, ``async with`` the
    same, or ``@ragpulse.conversation(session_id)`` on a function. Every span ragpulse
    writes inside carries ``gen_ai.conversation.id`` and ``session.id``; ``end=True``
    marks the turns inside as the conversation's last (``ragpulse.conversation.end``),
    and ``.end()`` does so from inside the block. An empty id is no id. Never raises.
    """
    return Conversation(conversation_id, end=end)
