"""App-side instrumentation: decorators and ``with`` forms that write RAG and agent spans.

``@ragpulse.pipeline``, ``@ragpulse.retrieval``, ``@ragpulse.generation`` and
``@ragpulse.tool`` (and ``pipeline_span`` / ``retrieval_span`` / ``generation_span`` /
``tool_span`` for code that cannot be decorated) open OpenTelemetry spans carrying the
question, the retrieved documents, the prompt, the answer, the model and token counts,
the tool calls and their results, in both the OpenInference and the OTel GenAI
vocabularies (see :mod:`ragpulse.semconv`).

Two promises hold everywhere in this module:

* Instrumentation never raises into the app. Every recording step is guarded; a
  failure is logged at DEBUG and the app's call goes on untouched.
* The app's values pass through unchanged: the very same return value, the very
  same exception, the very same stream chunks. The one exception is a stream
  (a returned iterator): the caller gets a thin wrapper that yields the same
  chunks, because the span has to stay open until the stream ends.

``configure()`` is optional: without it spans go through whatever global
``TracerProvider`` exists (a no-op one by default), with settings read from the
environment.

This module is the public surface. The work happens in private modules:
:mod:`ragpulse.sdk.config` (settings), :mod:`ragpulse.sdk.provider` (exporters,
provider, configure/shutdown and the installed state), :mod:`ragpulse.sdk.coerce`
(reading the app's values), :mod:`ragpulse.sdk.recorders` (the span recorders),
:mod:`ragpulse.sdk.streams` (stream wrappers), :mod:`ragpulse.sdk.wrapping`
(decorator machinery) and :mod:`ragpulse.sdk.conversation` (``ragpulse.conversation``:
which conversation a turn belongs to).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

from ragpulse.app_env import (
    ENV_API_TOKEN,
    ENV_CAPTURE_CONTENT,
    ENV_ENDPOINT,
    ENV_EXPORT_TIMEOUT,
    ENV_EXPORTER,
    ENV_MAX_DOCUMENTS,
    ENV_MAX_TEXT_CHARS,
    ENV_OTEL_SERVICE_NAME,
    ENV_SERVICE_NAME,
)
from ragpulse.sdk.config import REDACTION_FAILED, InstrumentConfig
from ragpulse.sdk.provider import configure, shutdown
from ragpulse.sdk.recorders import (
    GenerationSpan,
    PipelineSpan,
    RetrievalSpan,
    SpanRecorder,
    ToolSpan,
)
from ragpulse.sdk.wrapping import (
    _call_arguments,
    _decorate,
    _first_argument,
    _fn_name,
    _named_argument,
    _wrap,
)

__all__ = [
    "ENV_API_TOKEN",
    "ENV_CAPTURE_CONTENT",
    "ENV_ENDPOINT",
    "ENV_EXPORTER",
    "ENV_EXPORT_TIMEOUT",
    "ENV_MAX_DOCUMENTS",
    "ENV_MAX_TEXT_CHARS",
    "ENV_OTEL_SERVICE_NAME",
    "ENV_SERVICE_NAME",
    "REDACTION_FAILED",
    "GenerationSpan",
    "InstrumentConfig",
    "PipelineSpan",
    "RetrievalSpan",
    "SpanRecorder",
    "ToolSpan",
    "configure",
    "generation",
    "generation_span",
    "pipeline",
    "pipeline_span",
    "retrieval",
    "retrieval_span",
    "shutdown",
    "tool",
    "tool_span",
]

F = TypeVar("F", bound=Callable[..., Any])


# --- Decorators -------------------------------------------------------------------------------


@overload
def pipeline(func: F, /) -> F: ...
@overload
def pipeline(
    func: None = None,
    /,
    *,
    name: str | None = None,
    route: str | None = None,
    conversation_id: str | None = None,
) -> Callable[[F], F]: ...
def pipeline(
    func: F | None = None,
    /,
    *,
    name: str | None = None,
    route: str | None = None,
    conversation_id: str | None = None,
) -> F | Callable[[F], F]:
    """Trace a RAG entry point as the root ``pipeline`` span (OpenInference CHAIN).

    Use bare (``@ragpulse.pipeline``) or with arguments
    (``@ragpulse.pipeline(name="answer", route="/ask")``) on sync, async,
    generator and async-generator functions and methods. The question is the
    first argument (after ``self``/``cls``) or a ``question``/``query`` keyword;
    the answer is the return value: a str, a mapping with ``"answer"``, an
    object with ``.answer``, or a stream of text chunks (returned or yielded;
    the span ends when the stream does and the answer is the joined chunks).
    Retrieval and generation spans opened inside become its children.
    ``conversation_id`` names the function's parameter that holds the conversation
    (chat session) id (``@ragpulse.pipeline(conversation_id="session_id")``): each call
    is a turn of the conversation its argument names (an empty one is none; the
    function must have that parameter, else TypeError here). Without it, the
    :func:`ragpulse.conversation` block the call runs in decides.
    Return values and exceptions pass through unchanged; recording never raises.
    """

    def build(fn: F) -> F:
        span_name = name or _fn_name(fn, "pipeline")
        pick = _first_argument(fn, ("question", "query"))
        pick_conversation = (
            _named_argument(fn, conversation_id, "ragpulse.pipeline(conversation_id=...)")
            if conversation_id
            else None
        )

        def make(args: tuple[Any, ...], kwargs: dict[str, Any]) -> SpanRecorder:
            return PipelineSpan(
                pick(args, kwargs),
                route=route,
                name=span_name,
                conversation_id=pick_conversation(args, kwargs) if pick_conversation else None,
            )

        return _wrap(fn, make)

    return _decorate(func, "pipeline", build)


@overload
def retrieval(func: F, /) -> F: ...
@overload
def retrieval(
    func: None = None,
    /,
    *,
    name: str | None = None,
    data_source: str | None = None,
    provider: str | None = None,
    in_process: bool = False,
) -> Callable[[F], F]: ...
def retrieval(
    func: F | None = None,
    /,
    *,
    name: str | None = None,
    data_source: str | None = None,
    provider: str | None = None,
    in_process: bool = False,
) -> F | Callable[[F], F]:
    """Trace a retriever as a GenAI ``retrieval`` span (OpenInference RETRIEVER).

    The query is the first argument (after ``self``/``cls``) or a
    ``query``/``question`` keyword. The documents are the return value (a list
    or tuple; a returned or yielded stream is collected as it passes) of: str,
    :class:`ragpulse.Document`, mappings or objects with ``id``, ``content`` (or
    ``text`` / ``page_content``), ``score``, ``metadata`` (LangChain
    ``Document``), ``(document, score)`` pairs, or ``.node``/``.score`` wrappers
    (LlamaIndex). ``data_source`` becomes ``gen_ai.data_source.id``, ``provider``
    ``gen_ai.provider.name`` (a hosted retrieval, e.g. ``"openai"`` for vector-store
    search; unset otherwise). The span is named as the GenAI conventions say,
    ``retrieval {data_source}`` (``retrieval`` without one), unless ``name`` is given;
    its kind is CLIENT, or INTERNAL with ``in_process=True``.
    Return values and exceptions pass through unchanged; recording never raises.
    """

    def build(fn: F) -> F:
        pick = _first_argument(fn, ("query", "question"))

        def make(args: tuple[Any, ...], kwargs: dict[str, Any]) -> SpanRecorder:
            return RetrievalSpan(
                pick(args, kwargs),
                data_source=data_source,
                name=name,
                provider=provider,
                in_process=in_process,
            )

        return _wrap(fn, make)

    return _decorate(func, "retrieval", build)


@overload
def generation(func: F, /) -> F: ...
@overload
def generation(
    func: None = None,
    /,
    *,
    model: str | None = None,
    name: str | None = None,
    provider: str | None = None,
    system: str | None = None,
    in_process: bool = False,
) -> Callable[[F], F]: ...
def generation(
    func: F | None = None,
    /,
    *,
    model: str | None = None,
    name: str | None = None,
    provider: str | None = None,
    system: str | None = None,
    in_process: bool = False,
) -> F | Callable[[F], F]:
    """Trace an LLM call as a GenAI ``chat`` span (OpenInference LLM).

    The prompt is the first argument (after ``self``/``cls``) or a
    ``prompt``/``messages``/``question``/``query`` keyword: a str, or chat
    messages (recorded as JSON). The answer is the return value: a str, a
    mapping with ``"answer"``, ``.answer``, an OpenAI ChatCompletion-like
    object (``choices[0].message.content`` plus ``usage`` token counts and
    ``model``), an Anthropic-/LangChain-like message, or a stream of text
    chunks or OpenAI chunk objects; the response's ``id`` becomes
    ``gen_ai.response.id``. ``provider`` is ``gen_ai.provider.name`` (``system`` is
    its older name), required by the GenAI conventions: when not given, it is
    inferred from the model (``gpt-*`` -> ``openai``, ``claude*`` -> ``anthropic``,
    ...), else from the response's client library, else ``"unknown"``. The span is
    named ``chat {model}`` (``chat`` without a model) unless ``name`` is given; its
    kind is CLIENT, or INTERNAL with ``in_process=True`` (a model in this process).
    Return values and exceptions pass through unchanged; recording never raises.
    """

    def build(fn: F) -> F:
        pick = _first_argument(fn, ("prompt", "messages", "question", "query"))

        def make(args: tuple[Any, ...], kwargs: dict[str, Any]) -> SpanRecorder:
            return GenerationSpan(
                model,
                pick(args, kwargs),
                system=system,
                name=name,
                provider=provider,
                in_process=in_process,
            )

        return _wrap(fn, make)

    return _decorate(func, "generation", build)


@overload
def tool(func: F, /) -> F: ...
@overload
def tool(
    func: None = None, /, *, name: str | None = None, retrieval: bool = False
) -> Callable[[F], F]: ...
def tool(
    func: F | None = None, /, *, name: str | None = None, retrieval: bool = False
) -> F | Callable[[F], F]:
    """Trace a tool an agent calls as a GenAI ``execute_tool`` span (OpenInference TOOL).

    The tool's name is ``name``, else the function's. Its arguments are the call's, by
    parameter name (``self``/``cls`` left out), recorded as JSON
    (``gen_ai.tool.call.arguments``, ``input.value``); its result is the return value
    (``gen_ai.tool.call.result``, ``output.value``): a str, a list of documents (the
    shapes :func:`retrieval` reads, recorded as a JSON list of ``{id, content, score}``
    so the collector reads one document per passage), or anything JSON can hold; a
    returned or yielded stream is collected as it passes. ``retrieval=True`` types the
    tool ``datastore`` (``gen_ai.tool.type``; else ``function``): its documents count for
    context relevance and the retrieval metrics, and the query they answer is the call's
    ``query`` argument. Texts are redacted and cut as every recorded text is; nothing is
    recorded of them with content capture off. Inside a :func:`pipeline` with a
    :func:`generation`, the collector makes the call an agent turn whose documents are
    the tool results. Return values and exceptions pass through unchanged (an exception
    marks the call failed); recording never raises.
    """

    def build(fn: F) -> F:
        tool_name = name or _fn_name(fn, "tool")
        read = _call_arguments(fn)

        def make(args: tuple[Any, ...], kwargs: dict[str, Any]) -> SpanRecorder:
            return ToolSpan(tool_name, read(args, kwargs), retrieval=retrieval)

        return _wrap(fn, make)

    return _decorate(func, "tool", build)


# --- Context-manager forms ---------------------------------------------------------------


def pipeline_span(
    question: Any = None,
    route: str | None = None,
    name: str = "pipeline",
    *,
    conversation_id: Any = None,
) -> PipelineSpan:
    """``with ragpulse.pipeline_span(question) as s: ...; s.set_answer(text)``.

    For code that cannot be decorated; works in sync and async code. The span
    starts on ``__enter__`` and is current inside the block. ``conversation_id`` puts
    the turn in that conversation (an empty one is none: the
    :func:`ragpulse.conversation` block decides); ``s.end_conversation()`` marks it as
    the conversation's last.
    """
    return PipelineSpan(question, route=route, name=name, conversation_id=conversation_id)


def retrieval_span(
    query: Any = None,
    data_source: str | None = None,
    name: str | None = None,
    *,
    provider: str | None = None,
    in_process: bool = False,
) -> RetrievalSpan:
    """``with ragpulse.retrieval_span(query) as r: ...; r.set_documents(docs)``.

    Arguments as for :func:`retrieval`."""
    return RetrievalSpan(
        query, data_source=data_source, name=name, provider=provider, in_process=in_process
    )


def generation_span(
    model: str | None = None,
    prompt: Any = None,
    *,
    system: str | None = None,
    name: str | None = None,
    provider: str | None = None,
    in_process: bool = False,
) -> GenerationSpan:
    """``with ragpulse.generation_span(model=m, prompt=p) as g: ...; g.set_answer(text)``.

    Arguments as for :func:`generation`."""
    return GenerationSpan(
        model, prompt, system=system, name=name, provider=provider, in_process=in_process
    )


def tool_span(
    name: str,
    arguments: Any = None,
    *,
    call_id: str | None = None,
    retrieval: bool = False,
) -> ToolSpan:
    """``with ragpulse.tool_span("search_docs", {"query": q}) as t: ...; t.set_result(r)``.

    ``call_id`` is the model's id for the call (``gen_ai.tool.call.id``), when the code
    running the tool has it. Arguments as for :func:`tool`."""
    return ToolSpan(name, arguments, call_id=call_id, retrieval=retrieval)
