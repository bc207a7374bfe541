"""Span recorders: :class:`SpanRecorder`, the single code path that writes a
ragpulse span, and its :class:`PipelineSpan`, :class:`RetrievalSpan`,
:class:`GenerationSpan` and :class:`ToolSpan` subclasses (what the ``with`` forms
return).
"""

from __future__ import annotations

import collections.abc
import inspect
import json
import logging
from collections.abc import Iterable
from contextvars import Token
from types import TracebackType
from typing import Any, ClassVar, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, Status, StatusCode

from ragpulse import semconv as sc
from ragpulse.sdk.coerce import (
    _as_text,
    _get,
    _Guard,
    _question_text,
    _to_doc,
    _to_json,
    _token_count,
    _type_name,
    _usage,
    answer_text,
    chunk_text,
)
from ragpulse.sdk.config import REDACTION_FAILED
from ragpulse.sdk.conversation import (
    conversation_attributes,
    conversation_id_of,
    current,
    current_id,
    in_turn,
)
from ragpulse.sdk.provider import _current
from ragpulse.sdk.providers import provider_of_model, provider_of_response
from ragpulse.sdk.streams import _traced_awaitable, _TracedAsyncIterator, _TracedIterator

# Named as before instrument.py was split up, so an app's logging setup for
# "ragpulse.instrument" keeps covering every instrumentation module.
logger = logging.getLogger("ragpulse.instrument")

R = TypeVar("R", bound="SpanRecorder")


class SpanRecorder:
    """One ragpulse span, from start to end; the single code path for recording.

    Used directly through the ``with`` forms (:func:`pipeline_span`, ...) and by
    the decorators. Call contract: every method runs on the caller's thread,
    does not block (exporting happens elsewhere) and never raises: a recording
    failure is logged at DEBUG. An exception leaving a ``with`` block is recorded
    on the span (status ERROR) and propagates unchanged.
    """

    _role: ClassVar[str] = ""
    _kind: ClassVar[str] = ""
    _default_name: ClassVar[str] = ""

    def __init__(self, name: str | None = None) -> None:
        self._name = name or ""
        self._config, self._tracer = _current()
        self._span: Span = INVALID_SPAN
        self._started = False
        self._ended = False
        self._truncated = False
        self._tokens: list[Token[Context] | None] = []
        self._parts: list[str] = []
        self._parts_len = 0

    @property
    def span(self) -> Span:
        """The underlying OTel span (a non-recording one before start or on failure)."""
        return self._span

    # Life cycle ------------------------------------------------------------------

    def _start(self) -> SpanRecorder:
        if self._started:
            return self
        self._started = True
        with _Guard("starting a span"):
            attributes: dict[str, Any] = {
                sc.OPENINFERENCE_SPAN_KIND: self._kind,
                sc.RAGPULSE_ROLE: self._role,
                sc.RAGPULSE_CONTENT_CAPTURED: self._config.capture_content,
                **conversation_attributes(self._conversation_id()),
                **self._start_attributes(),
            }
            self._span = self._tracer.start_span(
                self._name or self._span_name(), kind=self._span_kind(), attributes=attributes
            )
        with _Guard("recording span inputs"):
            self._on_start()
        return self

    def _span_name(self) -> str:
        """Hook: the span name when the app gave none."""
        return self._default_name

    def _conversation_id(self) -> str | None:
        """Hook: the conversation the span belongs to (the current turn's or block's)."""
        return current_id()

    def _span_kind(self) -> SpanKind:
        """Hook: the OTel span kind."""
        return SpanKind.INTERNAL

    def _start_attributes(self) -> dict[str, Any]:
        """Hook: attributes known at creation time, which samplers get to see (the GenAI
        conventions ask for operation, provider and model there)."""
        return {}

    def _on_start(self) -> None:
        """Hook: record the inputs (question, query, prompt, model...)."""

    def _activate(self) -> Token[Context] | None:
        """Make the span current (children nest under it); pair with _deactivate."""
        try:
            return otel_context.attach(trace.set_span_in_context(self._span, self._context()))
        except Exception:
            logger.debug("ragpulse: attaching context failed", exc_info=True)
            return None

    def _context(self) -> Context | None:
        """Hook: the context the span is made current in (None: the caller's)."""
        return None

    @staticmethod
    def _deactivate(token: Token[Context] | None) -> None:
        if token is not None:
            with _Guard("detaching context"):
                otel_context.detach(token)

    def _fail(self, exc: BaseException) -> None:
        """Record an exception (Exception subclasses only, as OTel does) and end."""
        if isinstance(exc, Exception):
            self.record_exception(exc)
        self._end()

    def record_exception(self, exc: BaseException) -> None:
        """Mark the span as failed by ``exc`` (status ERROR, ``exception`` event)."""
        with _Guard("recording an exception"):
            self._set(sc.ERROR_TYPE, _type_name(exc))
            try:
                description = f"{type(exc).__name__}: {exc}"
            except Exception:
                description = type(exc).__name__
            self._span.set_status(Status(StatusCode.ERROR, description))
            self._span.record_exception(exc, escaped=True)

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        with _Guard("ending a span"):
            self._span.end()

    def __enter__(self: R) -> R:
        self._start()
        self._tokens.append(self._activate())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._deactivate(self._tokens.pop() if self._tokens else None)
        if exc is not None:
            self._fail(exc)
        else:
            self._end()

    # Recording helpers -----------------------------------------------------------

    def _set(self, key: str, value: Any) -> None:
        with _Guard(f"setting {key}"):
            self._span.set_attribute(key, value)

    def _mark_truncated(self) -> None:
        if not self._truncated:
            self._truncated = True
            self._set(sc.RAGPULSE_TRUNCATED, True)

    def _clean(self, text: str) -> str:
        """Redact, then cut to ``max_text_chars``."""
        redact = self._config.redact
        if redact is not None:
            try:
                redacted = redact(text)
                text = redacted if isinstance(redacted, str) else REDACTION_FAILED
            except Exception:
                logger.debug("ragpulse: redact hook raised", exc_info=True)
                text = REDACTION_FAILED
        limit = self._config.max_text_chars
        if len(text) > limit:
            text = text[:limit]
            self._mark_truncated()
        return text

    def _content(self, text: str | None) -> str | None:
        """A text as it may be recorded: None when content capture is off."""
        if text is None or not self._config.capture_content:
            return None
        return self._clean(text)

    def _set_io(self, value_key: str, mime_key: str, text: str | None, mime: str) -> None:
        content = self._content(text)
        if content is not None:
            self._set(value_key, content)
            self._set(mime_key, mime)

    # Results and streams ------------------------------------------------------------

    def _record_result(self, result: Any) -> None:
        """Hook: record what the decorated function returned."""

    def _observe(self, item: Any) -> None:
        """Hook: one streamed item went past; default collects its text."""
        if not self._config.capture_content:
            return
        text = chunk_text(item)
        # Keep memory bounded on endless streams; redaction sees some slack.
        if text is not None and self._parts_len <= 4 * self._config.max_text_chars:
            self._parts.append(text)
            self._parts_len += len(text)

    def _finish_stream(self, closed_early: bool) -> None:
        """Hook: the stream ended: exhausted, failed, or closed early."""
        if closed_early:
            self._set(sc.RAGPULSE_STREAM_CLOSED_EARLY, True)
        if self._parts_len > 4 * self._config.max_text_chars:
            self._mark_truncated()
        self._record_stream_answer("".join(self._parts))

    def _record_stream_answer(self, text: str) -> None:
        self._set_io(sc.OUTPUT_VALUE, sc.OUTPUT_MIME_TYPE, text, sc.MIME_TEXT)

    def _complete(self, result: Any, allow_awaitable: bool = False) -> Any:
        """Record a return value and end, or wrap a stream and end when it ends.

        Returns ``result`` itself, except for iterators/awaitables, which come back
        wrapped so the span can stay open until they finish.
        """
        try:
            if isinstance(result, collections.abc.AsyncIterator):
                return _TracedAsyncIterator(result, self)
            if isinstance(result, collections.abc.Iterator):
                return _TracedIterator(result, self)
            if allow_awaitable and inspect.iscoroutine(result):
                return _traced_awaitable(result, self)
        except Exception:
            logger.debug("ragpulse: wrapping a stream failed", exc_info=True)
        with _Guard("recording a result"):
            self._record_result(result)
        self._end()
        return result


class PipelineSpan(SpanRecorder):
    """The root span of one question -> answer exchange (OpenInference CHAIN): a turn.

    ``conversation_id`` puts the turn in a conversation (an empty one is none); without
    it, the :func:`ragpulse.conversation` block the span starts in decides. Spans opened
    inside carry the turn's conversation id too.
    """

    _role = sc.ROLE_PIPELINE
    _kind = sc.KIND_CHAIN
    _default_name = "pipeline"

    def __init__(
        self,
        question: Any = None,
        *,
        route: str | None = None,
        name: str | None = None,
        conversation_id: Any = None,
    ) -> None:
        super().__init__(name)
        self._question = question
        self._route = route
        self._conversation = conversation_id_of(conversation_id)
        self._ends = False

    @property
    def conversation_id(self) -> str | None:
        """The conversation the turn belongs to (known once the span started), or None."""
        return self._conversation

    def _conversation_id(self) -> str | None:
        block = current()
        if self._conversation is None:
            self._conversation = current_id()
        if block is not None and block.ending and block.id == self._conversation:
            self._ends = True
        return self._conversation

    def _start_attributes(self) -> dict[str, Any]:
        if self._ends and self._conversation:
            return {sc.RAGPULSE_CONVERSATION_END: True}
        return {}

    def _context(self) -> Context | None:
        return in_turn(self)

    def end_conversation(self) -> None:
        """Mark this turn as its conversation's last (``ragpulse.conversation.end``): the
        collector closes the conversation at once. Nothing without a conversation id."""
        with _Guard("ending the conversation"):
            self._ends = True
            if self._started and self._conversation:
                self._set(sc.RAGPULSE_CONVERSATION_END, True)

    def _on_start(self) -> None:
        if self._route is not None:
            self._set(sc.RAGPULSE_ROUTE, self._route)
        self._set_io(
            sc.INPUT_VALUE, sc.INPUT_MIME_TYPE, _question_text(self._question), sc.MIME_TEXT
        )

    def set_answer(self, answer: Any) -> None:
        """Record the answer: a str, a mapping with ``"answer"`` or an ``.answer``."""
        with _Guard("recording the answer"):
            text = answer_text(answer)
            self._set_io(sc.OUTPUT_VALUE, sc.OUTPUT_MIME_TYPE, text, sc.MIME_TEXT)

    def _record_result(self, result: Any) -> None:
        self.set_answer(result)


class _OperationSpan(SpanRecorder):
    """A GenAI operation (retrieval, chat): named ``{operation} {target}`` by the GenAI
    conventions, and a CLIENT span (a remote call) unless it runs in this process."""

    _operation = ""
    _in_process = False

    def _target(self) -> str | None:
        """Hook: the data source or model named in the span name."""
        return None

    def _span_name(self) -> str:
        target = self._target()
        return f"{self._operation} {target}" if target else self._operation

    def _span_kind(self) -> SpanKind:
        return SpanKind.INTERNAL if self._in_process else SpanKind.CLIENT


class RetrievalSpan(_OperationSpan):
    """One retrieval step (OpenInference RETRIEVER, GenAI ``retrieval``)."""

    _role = sc.ROLE_RETRIEVAL
    _kind = sc.KIND_RETRIEVER
    _default_name = "retrieval"
    _operation = sc.GEN_AI_OP_RETRIEVAL

    def __init__(
        self,
        query: Any = None,
        *,
        data_source: str | None = None,
        name: str | None = None,
        provider: str | None = None,
        in_process: bool = False,
    ) -> None:
        super().__init__(name)
        self._query = query
        self._data_source = data_source
        self._provider = provider
        self._in_process = in_process
        self._items: list[Any] = []
        self._count = 0

    def _target(self) -> str | None:
        return self._data_source

    def _start_attributes(self) -> dict[str, Any]:
        attributes: dict[str, Any] = {sc.GEN_AI_OPERATION_NAME: sc.GEN_AI_OP_RETRIEVAL}
        if self._data_source is not None:
            attributes[sc.GEN_AI_DATA_SOURCE_ID] = self._data_source
        if self._provider is not None:  # conditionally required: when applicable
            attributes[sc.GEN_AI_PROVIDER_NAME] = self._provider
        return attributes

    def _on_start(self) -> None:
        self._set_io(sc.INPUT_VALUE, sc.INPUT_MIME_TYPE, _question_text(self._query), sc.MIME_TEXT)

    def set_documents(self, documents: Iterable[Any]) -> None:
        """Record the retrieved documents (see :func:`retrieval` for the shapes).

        Records at most ``max_documents``; ``ragpulse.retrieval.document_count``
        keeps the full count. Without content capture only ids and scores remain.
        """
        with _Guard("recording documents"):
            if isinstance(documents, str | bytes | collections.abc.Mapping):
                documents = [documents]
            items: list[Any] = []
            count = 0
            for item in documents:
                count += 1
                if len(items) < self._config.max_documents:
                    items.append(item)
            self._write_documents(items, count)

    def _write_documents(self, items: list[Any], count: int) -> None:
        self._set(sc.RAGPULSE_DOCUMENT_COUNT, count)
        if count > len(items):
            self._mark_truncated()
        for index, item in enumerate(items):
            with _Guard("recording a document"):
                doc = _to_doc(item)
                if doc is None:
                    logger.debug("ragpulse: unrecognised document %s", type(item))
                    continue
                if doc.id is not None:
                    self._set(sc.document_attr(index, sc.DOCUMENT_ID), doc.id)
                content = self._content(doc.content)
                if content is not None:
                    self._set(sc.document_attr(index, sc.DOCUMENT_CONTENT), content)
                if doc.score is not None:
                    self._set(sc.document_attr(index, sc.DOCUMENT_SCORE), doc.score)
                if doc.metadata is not None and self._config.capture_content:
                    metadata = self._content(_to_json(doc.metadata))
                    if metadata is not None:
                        self._set(sc.document_attr(index, sc.DOCUMENT_METADATA), metadata)

    def _record_result(self, result: Any) -> None:
        if isinstance(result, list | tuple):
            self.set_documents(result)
        else:
            logger.debug("ragpulse: retrieval returned %s, not a list", type(result))

    def _observe(self, item: Any) -> None:
        self._count += 1
        if len(self._items) < self._config.max_documents:
            self._items.append(item)

    def _finish_stream(self, closed_early: bool) -> None:
        if closed_early:
            self._set(sc.RAGPULSE_STREAM_CLOSED_EARLY, True)
        self._write_documents(self._items, self._count)


class GenerationSpan(_OperationSpan):
    """One LLM call (OpenInference LLM, GenAI ``chat``)."""

    _role = sc.ROLE_GENERATION
    _kind = sc.KIND_LLM
    _default_name = "generation"
    _operation = sc.GEN_AI_OP_CHAT

    def __init__(
        self,
        model: str | None = None,
        prompt: Any = None,
        *,
        system: str | None = None,
        name: str | None = None,
        provider: str | None = None,
        in_process: bool = False,
    ) -> None:
        super().__init__(name)
        self._model = model
        self._prompt = prompt
        # ``system`` is the older name of ``provider`` (gen_ai.system was renamed).
        self._provider = provider or system or provider_of_model(model)
        self._in_process = in_process
        self._response_model: str | None = None
        self._response_id: str | None = None

    def _target(self) -> str | None:
        return self._model

    def _start_attributes(self) -> dict[str, Any]:
        attributes: dict[str, Any] = {sc.GEN_AI_OPERATION_NAME: sc.GEN_AI_OP_CHAT}
        if self._model is not None:
            attributes[sc.LLM_MODEL_NAME] = self._model
            attributes[sc.GEN_AI_REQUEST_MODEL] = self._model
        if self._provider is not None:
            attributes[sc.GEN_AI_PROVIDER_NAME] = self._provider
        return attributes

    def _end(self) -> None:
        # gen_ai.provider.name is required: the response's client library when the start
        # did not know it, "unknown" when nothing told it.
        if not self._ended and self._provider is None:
            self._provider = sc.PROVIDER_UNKNOWN
            self._set(sc.GEN_AI_PROVIDER_NAME, self._provider)
        super()._end()

    def _on_start(self) -> None:
        if self._prompt is None or not self._config.capture_content:
            return
        text = _as_text(self._prompt)
        if text is not None:
            self._set_io(sc.INPUT_VALUE, sc.INPUT_MIME_TYPE, text, sc.MIME_TEXT)
        else:
            self._set_io(sc.INPUT_VALUE, sc.INPUT_MIME_TYPE, _to_json(self._prompt), sc.MIME_JSON)

    def set_usage(self, input_tokens: int | None = None, output_tokens: int | None = None) -> None:
        """Record token counts (both vocabularies); None leaves a count unset."""
        prompt, completion = _token_count(input_tokens), _token_count(output_tokens)
        if prompt is not None:
            self._set(sc.LLM_TOKEN_COUNT_PROMPT, prompt)
            self._set(sc.GEN_AI_USAGE_INPUT_TOKENS, prompt)
        if completion is not None:
            self._set(sc.LLM_TOKEN_COUNT_COMPLETION, completion)
            self._set(sc.GEN_AI_USAGE_OUTPUT_TOKENS, completion)

    def set_answer(
        self, answer: Any, input_tokens: int | None = None, output_tokens: int | None = None
    ) -> None:
        """Record the completion: a str or an OpenAI/Anthropic/LangChain-like response.

        Token counts come from the arguments, else from the response's usage.
        """
        with _Guard("recording the completion"):
            text = answer_text(answer, generation=True)
            self._set_io(sc.OUTPUT_VALUE, sc.OUTPUT_MIME_TYPE, text, sc.MIME_TEXT)
            found_in, found_out = (None, None) if isinstance(answer, str) else _usage(answer)
            self.set_usage(
                input_tokens if input_tokens is not None else found_in,
                output_tokens if output_tokens is not None else found_out,
            )
            self._note_response_model(answer)

    def _note_response_model(self, response: Any) -> None:
        """Model, id and provider from a response object (or a stream chunk)."""
        if isinstance(response, str):
            return
        if self._response_id is None:
            response_id = _get(response, "id")
            if isinstance(response_id, str) and response_id:
                self._response_id = response_id
                self._set(sc.GEN_AI_RESPONSE_ID, response_id)
        if self._provider is None:
            provider = provider_of_response(response)
            if provider is not None:
                self._provider = provider
                self._set(sc.GEN_AI_PROVIDER_NAME, provider)
        if self._response_model is not None:
            return
        model = _as_text(_get(response, "model"))
        if model is not None:
            self._response_model = model
            self._set(sc.GEN_AI_RESPONSE_MODEL, model)
            if self._model is None:
                self._set(sc.LLM_MODEL_NAME, model)

    def _record_result(self, result: Any) -> None:
        self.set_answer(result)

    def _observe(self, item: Any) -> None:
        super()._observe(item)
        if isinstance(item, str):
            return
        with _Guard("reading a stream chunk"):
            self.set_usage(*_usage(item))
            self._note_response_model(item)


class ToolSpan(SpanRecorder):
    """One tool call of an agent (GenAI ``execute_tool``, OpenInference TOOL).

    The collector reads the result as the turn's documents: one per passage when it is
    a list of documents (recorded as a JSON list of ``{id, content, score}``, each content
    redacted and cut on its own), else one.
    """

    _role = sc.ROLE_TOOL
    _kind = sc.KIND_TOOL
    _default_name = sc.GEN_AI_OP_EXECUTE_TOOL

    def __init__(
        self,
        tool: str | None = None,
        arguments: Any = None,
        *,
        call_id: str | None = None,
        retrieval: bool = False,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self._tool = _as_text(tool) or "tool"  # never a str() that could raise
        self._arguments = arguments
        self._call_id = _as_text(call_id)
        self._retrieval = retrieval
        self._items: list[Any] = []
        self._count = 0

    def _span_name(self) -> str:
        return f"{sc.GEN_AI_OP_EXECUTE_TOOL} {self._tool}"

    def _start_attributes(self) -> dict[str, Any]:
        kind = sc.GEN_AI_TOOL_TYPE_DATASTORE if self._retrieval else sc.GEN_AI_TOOL_TYPE_FUNCTION
        attributes: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: sc.GEN_AI_OP_EXECUTE_TOOL,
            sc.GEN_AI_TOOL_NAME: self._tool,
            sc.GEN_AI_TOOL_TYPE: kind,
            sc.TOOL_NAME: self._tool,
        }
        if self._call_id:
            attributes[sc.GEN_AI_TOOL_CALL_ID] = self._call_id
        return attributes

    def _on_start(self) -> None:
        if self._arguments is None or not self._config.capture_content:
            return
        text = _as_text(self._arguments)
        mime = sc.MIME_TEXT if text is not None else sc.MIME_JSON
        content = self._content(text if text is not None else _to_json(self._arguments))
        if content is not None:
            self._set(sc.GEN_AI_TOOL_CALL_ARGUMENTS, content)
            self._set(sc.INPUT_VALUE, content)
            self._set(sc.INPUT_MIME_TYPE, mime)

    def set_result(self, result: Any) -> None:
        """Record what the tool returned: a str, a list of documents (the shapes
        :func:`ragpulse.retrieval` reads: str, mappings or objects with ``content`` /
        ``text`` / ``page_content``, ...), or anything JSON can hold."""
        with _Guard("recording the tool result"):
            if not self._config.capture_content:
                return
            content, mime = self._result_content(result)
            if content is not None:
                self._set(sc.GEN_AI_TOOL_CALL_RESULT, content)
                self._set(sc.OUTPUT_VALUE, content)
                self._set(sc.OUTPUT_MIME_TYPE, mime)

    def _result_content(self, result: Any) -> tuple[str | None, str]:
        """(the result as it may be recorded, its mime type): a list of documents as
        JSON passages, each cleaned on its own (a cut never breaks the JSON); anything
        else cleaned whole."""
        text = _as_text(result)
        if text is not None:
            return self._clean(text), sc.MIME_TEXT
        if isinstance(result, list | tuple) and result:
            passages = self._passages(result)
            if passages is not None:
                return json.dumps(passages, ensure_ascii=False), sc.MIME_JSON
        encoded = _to_json(result)
        return (None if encoded is None else self._clean(encoded)), sc.MIME_JSON

    def _passages(self, items: list[Any] | tuple[Any, ...]) -> list[dict[str, Any]] | None:
        """Each item as ``{id, content, score}`` (at most ``max_documents``); None when
        one of them is not a document with a content."""
        kept = items[: self._config.max_documents]
        out: list[dict[str, Any]] = []
        for item in kept:
            doc = _to_doc(item)
            if doc is None or doc.content is None:
                return None
            passage: dict[str, Any] = {"content": self._clean(doc.content)}
            if doc.id is not None:
                passage["id"] = doc.id
            if doc.score is not None:
                passage["score"] = doc.score
            out.append(passage)
        if len(items) > len(kept):
            self._mark_truncated()
        return out

    def _record_result(self, result: Any) -> None:
        self.set_result(result)

    def _observe(self, item: Any) -> None:
        self._count += 1
        if len(self._items) < self._config.max_documents:
            self._items.append(item)

    def _finish_stream(self, closed_early: bool) -> None:
        if closed_early:
            self._set(sc.RAGPULSE_STREAM_CLOSED_EARLY, True)
        if self._count > len(self._items):
            self._mark_truncated()
        self.set_result(self._items)
