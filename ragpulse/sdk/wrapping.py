"""The machinery behind the ``pipeline``/``retrieval``/``generation``/``tool`` decorators.

Picks the function's first real argument (or, for a tool, all of them by name),
builds a recorder without ever raising, and wraps sync, async, generator and
async-generator functions so the recorder's span covers each call (or the stream it
returns).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Generator
from typing import Any, TypeVar, cast

from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN

from ragpulse.sdk.config import InstrumentConfig
from ragpulse.sdk.recorders import SpanRecorder
from ragpulse.sdk.streams import _TracedAsyncIterator, _TracedIterator

# Named as before instrument.py was split up, so an app's logging setup for
# "ragpulse.instrument" keeps covering every instrumentation module.
logger = logging.getLogger("ragpulse.instrument")

F = TypeVar("F", bound=Callable[..., Any])


def _first_argument(fn: Callable[..., Any], keywords: tuple[str, ...]) -> Callable[..., Any]:
    """A picker for the function's first real argument (``self``/``cls`` skipped)."""
    index, name = 0, None
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    if params and params[0].name in ("self", "cls"):
        index = 1
    if len(params) > index:
        param = params[index]
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            name = param.name
        elif param.kind is not param.VAR_POSITIONAL:
            index = -1  # keyword-only: no positional candidate

    def pick(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if 0 <= index < len(args):
            return args[index]
        if name is not None and name in kwargs:
            return kwargs[name]
        for key in keywords:
            if key in kwargs:
                return kwargs[key]
        return None

    return pick


def _named_argument(fn: Callable[..., Any], name: str, what: str) -> Callable[..., Any]:
    """A picker for the call's argument ``name`` (by position or keyword); TypeError now,
    at decoration, when ``fn`` has no such parameter (nor ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = None  # a builtin: read it from the keywords only
    index = None
    if params is not None:
        param = params.get(name)
        if param is None and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            raise TypeError(
                f"{what}: {_fn_name(fn, 'the function')}() has no parameter {name!r}; name "
                "the parameter that holds the conversation id, or wrap the call in "
                "ragpulse.conversation(id)"
            )
        if param is not None and param.kind in (param.POSITIONAL_ONLY,
                                                param.POSITIONAL_OR_KEYWORD):  # fmt: skip
            index = list(params).index(name)

    def pick(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if index is not None and index < len(args):
            return args[index]
        return kwargs.get(name)

    return pick


def _call_arguments(fn: Callable[..., Any]) -> Callable[..., dict[str, Any]]:
    """A reader of a call's arguments by parameter name (``self``/``cls`` left out,
    ``**kwargs`` spread), as a tool call's arguments are written."""
    try:
        signature: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError):
        signature = None

    def read(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if signature is None:
            return {"args": list(args), **kwargs} if args else dict(kwargs)
        try:
            bound = signature.bind_partial(*args, **kwargs)
        except TypeError:  # the call itself will fail the same way: say what it got
            return {"args": list(args), **kwargs} if args else dict(kwargs)
        out: dict[str, Any] = {}
        for index, (name, value) in enumerate(bound.arguments.items()):
            kind = signature.parameters[name].kind
            if index == 0 and name in ("self", "cls"):
                continue
            if kind is inspect.Parameter.VAR_KEYWORD and isinstance(value, dict):
                out.update(value)
            else:
                out[name] = value
        return out

    return read


class _NoRecorder(SpanRecorder):
    """Stands in when building a recorder failed: records nothing."""

    def __init__(self) -> None:  # no super(): nothing here may fail
        self._name = ""
        self._config = InstrumentConfig(capture_content=False)
        self._tracer = trace.NoOpTracer()
        self._span = INVALID_SPAN
        self._started = True
        self._ended = True
        self._truncated = False
        self._tokens = []
        self._parts = []
        self._parts_len = 0


def _safe_recorder(make: Callable[[], SpanRecorder]) -> SpanRecorder:
    try:
        recorder = make()
    except Exception:
        logger.debug("ragpulse: building a span recorder failed", exc_info=True)
        recorder = _NoRecorder()
    return recorder._start()


def _wrap(fn: F, make: Callable[[tuple[Any, ...], dict[str, Any]], SpanRecorder]) -> F:
    """Wrap ``fn`` (sync, async, generator or async generator) around a recorder."""
    if inspect.isasyncgenfunction(fn):

        @functools.wraps(fn)
        async def agen_wrapper(*args: Any, **kwargs: Any) -> Any:
            recorder = _safe_recorder(lambda: make(args, kwargs))
            try:
                inner = fn(*args, **kwargs)
            except BaseException as exc:
                recorder._fail(exc)
                raise
            stream: _TracedAsyncIterator[Any] = _TracedAsyncIterator(inner, recorder)
            sent: Any = None
            thrown: BaseException | None = None
            while True:
                try:
                    if thrown is not None:
                        pending, thrown = thrown, None
                        item = await stream.athrow(pending)
                    else:
                        item = await stream.asend(sent)
                except StopAsyncIteration:
                    return
                try:
                    sent = yield item
                except GeneratorExit:
                    await stream.aclose()
                    raise
                except BaseException as exc:
                    thrown = exc

        return cast(F, agen_wrapper)

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen_wrapper(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            recorder = _safe_recorder(lambda: make(args, kwargs))
            try:
                inner = fn(*args, **kwargs)
            except BaseException as exc:
                recorder._fail(exc)
                raise
            return (yield from _TracedIterator(inner, recorder))

        return cast(F, gen_wrapper)

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            recorder = _safe_recorder(lambda: make(args, kwargs))
            token = recorder._activate()
            try:
                result = await fn(*args, **kwargs)
            except BaseException as exc:
                recorder._deactivate(token)
                recorder._fail(exc)
                raise
            recorder._deactivate(token)
            return recorder._complete(result)

        return cast(F, async_wrapper)

    @functools.wraps(fn)
    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        recorder = _safe_recorder(lambda: make(args, kwargs))
        token = recorder._activate()
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            recorder._deactivate(token)
            recorder._fail(exc)
            raise
        recorder._deactivate(token)
        return recorder._complete(result, allow_awaitable=True)

    return cast(F, sync_wrapper)


def _decorate(func: F | None, what: str, build: Callable[[F], F]) -> F | Callable[[F], F]:
    if func is None:
        return build
    if callable(func):
        return build(func)
    raise TypeError(
        f"ragpulse.{what} takes keyword arguments, e.g. @ragpulse.{what}(name=...); got {func!r}"
    )


def _fn_name(fn: Callable[..., Any], default: str) -> str:
    return str(getattr(fn, "__name__", None) or default)
