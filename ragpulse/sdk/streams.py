"""Stream and awaitable wrappers that keep a recorder's span open.

A returned (or yielded) stream comes back wrapped so the span ends when the
stream does, with every item passed through unchanged; a coroutine returned by
a sync function is wrapped so the span covers awaiting it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextvars import Token
from typing import Any, Protocol, TypeVar

from opentelemetry.context import Context

from ragpulse.sdk.coerce import _Guard

T = TypeVar("T")


class SpanRecorder(Protocol):
    """What a wrapper needs of the recorder whose span it keeps open (the recorders'
    base class in :mod:`ragpulse.sdk.recorders` has all of it; this module does not
    import it, since the recorders wrap their streams with the classes here)."""

    def _activate(self) -> Token[Context] | None: ...
    def _deactivate(self, token: Token[Context] | None) -> None: ...
    def _observe(self, item: Any) -> None: ...
    def _finish_stream(self, closed_early: bool) -> None: ...
    def _fail(self, exc: BaseException) -> None: ...
    def _end(self) -> None: ...
    def _complete(self, result: Any, allow_awaitable: bool = False) -> Any: ...


class _Stream:
    """What both stream wrappers share: the recorder and ending the span once."""

    def __init__(self, inner: Any, recorder: SpanRecorder) -> None:
        self._inner = inner
        self._recorder = recorder
        self._done = False

    def _finish(self, closed_early: bool, exc: BaseException | None = None) -> None:
        if self._done:
            return
        self._done = True
        recorder = self._recorder
        with _Guard("finishing a stream"):
            recorder._finish_stream(closed_early)
        if exc is not None:
            recorder._fail(exc)
        else:
            recorder._end()

    def __getattr__(self, name: str) -> Any:
        # Everything else is the inner stream's (e.g. an OpenAI Stream's .response).
        return getattr(object.__getattribute__(self, "_inner"), name)

    def __del__(self) -> None:
        # Abandoned before its end: record what was seen, as closed early.
        if not self.__dict__.get("_done", True):
            with _Guard("finishing an abandoned stream"):
                self._finish(True)


class _TracedIterator(_Stream, Iterator[T]):
    """Yields a stream's items unchanged and ends the span when the stream ends.

    The span is current only while the stream computes its next item, so spans
    opened by the stream nest under it but the caller's code between items does
    not. ``send``/``throw``/``close`` reach the inner generator.
    """

    _inner: Iterator[T]

    def __iter__(self) -> _TracedIterator[T]:
        return self

    def __next__(self) -> T:
        return self._step(next, self._inner)

    def send(self, value: Any) -> T:
        return self._step(self._inner.send, value)  # type: ignore[attr-defined]

    def throw(self, *args: Any) -> T:
        return self._step(self._inner.throw, *args)  # type: ignore[attr-defined]

    def _step(self, fn: Callable[..., T], *args: Any) -> T:
        recorder = self._recorder
        token = recorder._activate()
        try:
            item = fn(*args)
        except StopIteration:
            recorder._deactivate(token)
            self._finish(False)
            raise
        except BaseException as exc:
            recorder._deactivate(token)
            self._finish(False, exc)
            raise
        recorder._deactivate(token)
        with _Guard("observing a stream item"):
            recorder._observe(item)
        return item

    def close(self) -> None:
        try:
            close = getattr(self._inner, "close", None)
            if close is not None:
                close()
        finally:
            self._finish(True)

    def __enter__(self) -> _TracedIterator[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _TracedAsyncIterator(_Stream, AsyncIterator[T]):
    """The async twin of :class:`_TracedIterator`."""

    _inner: AsyncIterator[T]

    def __aiter__(self) -> _TracedAsyncIterator[T]:
        return self

    async def __anext__(self) -> T:
        return await self._step(self._inner.__anext__)

    async def asend(self, value: Any) -> T:
        return await self._step(self._inner.asend, value)  # type: ignore[attr-defined]

    async def athrow(self, *args: Any) -> T:
        return await self._step(self._inner.athrow, *args)  # type: ignore[attr-defined]

    async def _step(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        recorder = self._recorder
        token = recorder._activate()
        try:
            item = await fn(*args)
        except StopAsyncIteration:
            recorder._deactivate(token)
            self._finish(False)
            raise
        except BaseException as exc:
            recorder._deactivate(token)
            self._finish(False, exc)
            raise
        recorder._deactivate(token)
        with _Guard("observing a stream item"):
            recorder._observe(item)
        return item

    async def aclose(self) -> None:
        try:
            aclose = getattr(self._inner, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            self._finish(True)

    async def __aenter__(self) -> _TracedAsyncIterator[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


async def _traced_awaitable(awaitable: Awaitable[Any], recorder: SpanRecorder) -> Any:
    """A sync function returned a coroutine: the span covers awaiting it.

    Only coroutines are wrapped: a Future or Task may be used for more than
    awaiting, so it is returned unchanged (and the span ends at once).
    """
    token = recorder._activate()
    try:
        result = await awaitable
    except BaseException as exc:
        recorder._deactivate(token)
        recorder._fail(exc)
        raise
    recorder._deactivate(token)
    return recorder._complete(result)
