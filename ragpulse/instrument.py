"""App-side instrumentation: decorators and ``with`` forms that write RAG spans.

``@ragpulse.pipeline``, ``@ragpulse.retrieval`` and ``@ragpulse.generation`` (and
``pipeline_span`` / ``retrieval_span`` / ``generation_span`` for code that cannot
be decorated) open OpenTelemetry spans carrying the question, the retrieved
documents, the prompt, the answer, the model and token counts, in both the
OpenInference and the OTel GenAI vocabularies (see :mod:`ragpulse.semconv`).

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
"""

from __future__ import annotations

import atexit
import collections.abc
import dataclasses
import functools
import inspect
import json
import logging
import numbers
import os
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterable, Iterator
from contextvars import Token
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, NamedTuple, TypeVar, cast, overload

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace import INVALID_SPAN, Span, Status, StatusCode, Tracer, TracerProvider

from ragpulse import semconv as sc
from ragpulse.errors import ConfigError
from ragpulse.record import Document

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
    "configure",
    "generation",
    "generation_span",
    "pipeline",
    "pipeline_span",
    "retrieval",
    "retrieval_span",
    "shutdown",
]

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
R = TypeVar("R", bound="SpanRecorder")

_TRACER_NAME = "ragpulse"
_TRACER_VERSION = "0.1.0"

# --- Environment variables (explicit argument > env var > default) -------------
ENV_SERVICE_NAME = "RAGPULSE_SERVICE_NAME"
ENV_OTEL_SERVICE_NAME = "OTEL_SERVICE_NAME"
"""Fallback for the service name when ``RAGPULSE_SERVICE_NAME`` is unset."""
ENV_ENDPOINT = "RAGPULSE_ENDPOINT"
"""Base URL of the OTLP/HTTP receiver; ``/v1/traces`` is appended."""
ENV_API_TOKEN = "RAGPULSE_API_TOKEN"
"""Sent as ``Authorization: Bearer <token>`` unless headers carry their own."""
ENV_EXPORTER = "RAGPULSE_EXPORTER"
"""``otlp`` (default), ``console`` or ``none``."""
ENV_EXPORT_TIMEOUT = "RAGPULSE_EXPORT_TIMEOUT"
"""Seconds one OTLP export (retries included) may take."""
ENV_CAPTURE_CONTENT = "RAGPULSE_CAPTURE_CONTENT"
"""``true``/``false``: record question, document and answer texts."""
ENV_MAX_TEXT_CHARS = "RAGPULSE_MAX_TEXT_CHARS"
"""Longest recorded text, in characters; longer texts are cut."""
ENV_MAX_DOCUMENTS = "RAGPULSE_MAX_DOCUMENTS"
"""Most documents recorded per retrieval span."""

DEFAULT_ENDPOINT = "http://127.0.0.1:4318"
TRACES_PATH = "/v1/traces"
DEFAULT_EXPORT_TIMEOUT_S = 10.0
DEFAULT_MAX_TEXT_CHARS = 16000
DEFAULT_MAX_DOCUMENTS = 25
REDACTION_FAILED = "[redaction failed]"
"""Recorded instead of a text when the redact hook raised: never the raw text."""

_EXPORTER_NAMES = ("otlp", "console", "none")
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True)
class InstrumentConfig:
    """Resolved instrumentation settings: explicit argument, then env var, then default.

    Built once by :func:`configure` (or from the environment alone when the app
    never calls it) and read by every span; it never changes afterwards.
    """

    service_name: str | None = None
    """``service.name`` of spans from a provider ragpulse creates. Env:
    ``RAGPULSE_SERVICE_NAME``, then ``OTEL_SERVICE_NAME``; default: OTel's
    ``unknown_service``. Ignored when ragpulse joins an existing provider."""
    endpoint: str = DEFAULT_ENDPOINT + TRACES_PATH
    """Full OTLP/HTTP traces URL (the base URL with ``/v1/traces``). Env:
    ``RAGPULSE_ENDPOINT`` (a base URL)."""
    headers: dict[str, str] = field(default_factory=dict, repr=False, hash=False)
    """Extra HTTP headers for the OTLP exporter. Env: ``RAGPULSE_API_TOKEN`` adds
    ``Authorization: Bearer <token>``. Not shown in repr (it holds secrets)."""
    exporter: str | SpanExporter = "otlp"
    """``otlp``, ``console``, ``none`` or a ``SpanExporter`` instance. Env:
    ``RAGPULSE_EXPORTER``."""
    export_timeout_s: float = DEFAULT_EXPORT_TIMEOUT_S
    """Seconds one OTLP export may take, retries included; bounds how long
    :func:`shutdown` can wait on a dead receiver. Env: ``RAGPULSE_EXPORT_TIMEOUT``."""
    capture_content: bool = True
    """Record question, documents, prompt and answer texts. When false only ids,
    scores, counts and token usage are recorded. Env: ``RAGPULSE_CAPTURE_CONTENT``."""
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
    """Longest recorded text; longer ones are cut and the span gets
    ``ragpulse.truncated=true``. Env: ``RAGPULSE_MAX_TEXT_CHARS``."""
    max_documents: int = DEFAULT_MAX_DOCUMENTS
    """Most documents recorded per retrieval span (4 attributes each). The OTel
    SDK keeps 128 attributes per span by default and evicts the *oldest* beyond
    that, so raise ``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT`` along with this. Env:
    ``RAGPULSE_MAX_DOCUMENTS``."""
    redact: Callable[[str], str] | None = field(default=None, compare=False, hash=False)
    """Rewrites every recorded text (question, document content and metadata,
    prompt, answer) before it is recorded; if it raises, ``[redaction failed]``
    is recorded instead. No env var."""
    resource_attributes: dict[str, Any] = field(default_factory=dict, hash=False)
    """Extra resource attributes for a provider ragpulse creates. No env var
    (OTel's own ``OTEL_RESOURCE_ATTRIBUTES`` is honoured too)."""


def _env(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def _parse_bool(name: str, raw: str) -> bool:
    lowered = raw.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean: use true or false")


def _parse_positive(name: str, raw: str, kind: type[int] | type[float]) -> Any:
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number: use e.g. {name}=10") from None
    if value <= 0:
        raise ConfigError(f"{name}={raw!r} must be greater than 0")
    return value


def _traces_url(endpoint: str) -> str:
    """Base URL -> traces URL: ``/v1/traces`` is appended unless already there."""
    url = endpoint.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(
            f"endpoint {endpoint!r} must be an http:// or https:// URL, e.g. {DEFAULT_ENDPOINT!r}"
        )
    return url if url.endswith(TRACES_PATH) else url + TRACES_PATH


def _resolve_config(
    service_name: str | None = None,
    endpoint: str | None = None,
    *,
    headers: dict[str, str] | None = None,
    exporter: str | SpanExporter | None = None,
    export_timeout_s: float | None = None,
    capture_content: bool | None = None,
    max_text_chars: int | None = None,
    max_documents: int | None = None,
    redact: Callable[[str], str] | None = None,
    resource_attributes: dict[str, Any] | None = None,
) -> InstrumentConfig:
    """Explicit argument, then environment variable, then default; raises ConfigError."""
    if service_name is None:
        service_name = _env(ENV_SERVICE_NAME) or _env(ENV_OTEL_SERVICE_NAME)

    url = _traces_url(endpoint or _env(ENV_ENDPOINT) or DEFAULT_ENDPOINT)

    merged = dict(headers or {})
    token = _env(ENV_API_TOKEN)
    if token and not any(key.lower() == "authorization" for key in merged):
        merged["Authorization"] = f"Bearer {token}"

    if exporter is None:
        exporter = _env(ENV_EXPORTER) or "otlp"
    if isinstance(exporter, str):
        exporter = exporter.strip().lower()
        if exporter not in _EXPORTER_NAMES:
            hint = " (a Kafka span exporter is planned, not available yet)"
            raise ConfigError(
                f"unknown exporter {exporter!r}{hint if exporter == 'kafka' else ''}: use "
                "'otlp', 'console', 'none' or pass a SpanExporter instance"
            )
    elif not isinstance(exporter, SpanExporter):
        raise ConfigError(
            f"exporter must be a name or an opentelemetry SpanExporter, got {type(exporter)!r}"
        )

    if export_timeout_s is None:
        raw = _env(ENV_EXPORT_TIMEOUT)
        export_timeout_s = (
            _parse_positive(ENV_EXPORT_TIMEOUT, raw, float) if raw else DEFAULT_EXPORT_TIMEOUT_S
        )
    if capture_content is None:
        raw = _env(ENV_CAPTURE_CONTENT)
        capture_content = _parse_bool(ENV_CAPTURE_CONTENT, raw) if raw else True
    if max_text_chars is None:
        raw = _env(ENV_MAX_TEXT_CHARS)
        max_text_chars = (
            _parse_positive(ENV_MAX_TEXT_CHARS, raw, int) if raw else DEFAULT_MAX_TEXT_CHARS
        )
    if max_documents is None:
        raw = _env(ENV_MAX_DOCUMENTS)
        max_documents = (
            _parse_positive(ENV_MAX_DOCUMENTS, raw, int) if raw else DEFAULT_MAX_DOCUMENTS
        )

    for name, number in (
        ("export_timeout_s", export_timeout_s),
        ("max_text_chars", max_text_chars),
        ("max_documents", max_documents),
    ):
        if number <= 0:
            raise ConfigError(f"{name}={number!r} must be greater than 0")
    if redact is not None and not callable(redact):
        raise ConfigError("redact must be a callable taking and returning a str")

    return InstrumentConfig(
        service_name=service_name,
        endpoint=url,
        headers=merged,
        exporter=exporter,
        export_timeout_s=float(export_timeout_s),
        capture_content=bool(capture_content),
        max_text_chars=int(max_text_chars),
        max_documents=int(max_documents),
        redact=redact,
        resource_attributes=dict(resource_attributes or {}),
    )


# --- Exporters ------------------------------------------------------------------


def _otlp_exporter(config: InstrumentConfig) -> tuple[SpanExporter, bool]:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter(
        endpoint=config.endpoint, headers=config.headers, timeout=config.export_timeout_s
    )
    return exporter, True


def _console_exporter(config: InstrumentConfig) -> tuple[SpanExporter, bool]:
    return ConsoleSpanExporter(service_name=config.service_name), False


_EXPORTER_FACTORIES: dict[str, Callable[[InstrumentConfig], tuple[SpanExporter, bool]]] = {
    "otlp": _otlp_exporter,
    "console": _console_exporter,
}
"""Exporter name -> factory returning (exporter, batch?). Network exporters batch;
a new transport (e.g. ``kafka``) is one more entry here."""


def _build_processor(config: InstrumentConfig) -> SpanProcessor | None:
    """The processor for ``config.exporter``; None for ``none``.

    Network exporters go behind a BatchSpanProcessor (the app never waits on the
    network); an exporter instance passed in gets a SimpleSpanProcessor so that
    spans reach it as they end (deterministic in tests).
    """
    exporter = config.exporter
    if isinstance(exporter, SpanExporter):
        return SimpleSpanProcessor(exporter)
    if exporter == "none":
        return None
    instance, batch = _EXPORTER_FACTORIES[exporter](config)
    return BatchSpanProcessor(instance) if batch else SimpleSpanProcessor(instance)


class _DetachableProcessor(SpanProcessor):
    """ragpulse's hold on a provider: forwards to its processor until shut down.

    SDK providers cannot remove a processor, so reconfiguring or shutting down
    detaches instead; a detached processor drops every span silently (a shut
    down SDK processor would log a warning per span).
    """

    def __init__(self, inner: SpanProcessor) -> None:
        self._inner: SpanProcessor | None = inner

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        inner = self._inner
        if inner is not None:
            inner.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        inner = self._inner
        if inner is not None:
            inner.on_end(span)

    def shutdown(self) -> None:
        inner, self._inner = self._inner, None
        if inner is not None:
            inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        inner = self._inner
        return inner.force_flush(timeout_millis) if inner is not None else True


# --- Global state -----------------------------------------------------------------


@dataclass
class _Installed:
    config: InstrumentConfig
    provider: TracerProvider
    owns_provider: bool
    processor: _DetachableProcessor | None
    tracer: Tracer


_lock = threading.RLock()
_installed: _Installed | None = None
_env_config: InstrumentConfig | None = None
_global_tracer: tuple[TracerProvider, Tracer] | None = None
_created: weakref.WeakKeyDictionary[TracerProvider, str] = weakref.WeakKeyDictionary()
"""Providers configure() created -> the resource input they were built from."""
_atexit_registered = False


def configure(
    service_name: str | None = None,
    endpoint: str | None = None,
    *,
    headers: dict[str, str] | None = None,
    exporter: str | SpanExporter | None = None,
    tracer_provider: TracerProvider | None = None,
    capture_content: bool | None = None,
    max_text_chars: int | None = None,
    max_documents: int | None = None,
    export_timeout_s: float | None = None,
    redact: Callable[[str], str] | None = None,
    resource_attributes: dict[str, Any] | None = None,
) -> InstrumentConfig:
    """Send ragpulse spans somewhere; returns the resolved configuration.

    Each setting: explicit argument, then its env var (see
    :class:`InstrumentConfig`), then the default. ``exporter`` defaults to
    ``otlp``: OTLP/HTTP protobuf to ``endpoint`` + ``/v1/traces`` through a
    BatchSpanProcessor.

    Provider: ``tracer_provider`` if given; else the global provider when it is
    a real SDK ``TracerProvider`` the app set up (ragpulse *joins* it: adds its
    processor, never replaces it, so the app's own exporters keep working);
    else ragpulse creates one (with ``service_name`` and
    ``resource_attributes``) and makes it the global provider if none is set.
    ``exporter="none"`` adds no processor, for apps that already export; an
    exporter instance is shut down along with this configuration.

    Calling it again reconfigures cleanly: the previous processor is flushed and
    detached first. Thread-safe; blocks at most about ``export_timeout_s`` while
    flushing a previous configuration. Raises :class:`ConfigError` when a
    setting is invalid (nothing changes then); it never raises otherwise.
    """
    global _installed, _atexit_registered
    config = _resolve_config(
        service_name,
        endpoint,
        headers=headers,
        exporter=exporter,
        export_timeout_s=export_timeout_s,
        capture_content=capture_content,
        max_text_chars=max_text_chars,
        max_documents=max_documents,
        redact=redact,
        resource_attributes=resource_attributes,
    )
    if (
        tracer_provider is not None
        and not isinstance(tracer_provider, SdkTracerProvider)
        and config.exporter != "none"
    ):
        raise ConfigError(
            "tracer_provider is not an opentelemetry.sdk.trace.TracerProvider, so ragpulse "
            "cannot add its exporter to it: pass an SDK provider, or exporter='none'"
        )
    processor = _build_processor(config)
    with _lock:
        _shutdown_locked()
        provider, owns = _choose_provider(tracer_provider, config)
        held: _DetachableProcessor | None = None
        if processor is not None and isinstance(provider, SdkTracerProvider):
            held = _DetachableProcessor(processor)
            provider.add_span_processor(held)
        tracer = provider.get_tracer(_TRACER_NAME, _TRACER_VERSION)
        _installed = _Installed(config, provider, owns, held, tracer)
        if not _atexit_registered:
            atexit.register(shutdown)
            _atexit_registered = True
    return config


def _resource_attributes(config: InstrumentConfig) -> dict[str, Any]:
    attributes = dict(config.resource_attributes)
    if config.service_name is not None:
        attributes[sc.SERVICE_NAME] = config.service_name
    return attributes


def _choose_provider(
    explicit: TracerProvider | None, config: InstrumentConfig
) -> tuple[TracerProvider, bool]:
    """(provider, owned): the one to join, or a new one ragpulse owns."""
    if explicit is not None:
        return explicit, explicit in _created
    current = trace.get_tracer_provider()
    attributes = _resource_attributes(config)
    # Resources carry a random service.instance.id: compare what they were built from.
    key = _to_json(sorted(attributes.items())) or ""
    if isinstance(current, SdkTracerProvider):
        if current not in _created:
            return current, False
        if _created[current] == key:
            return current, True  # our own global provider from an earlier configure()
    created = SdkTracerProvider(resource=Resource.create(attributes), shutdown_on_exit=False)
    _created[created] = key
    if isinstance(current, trace.ProxyTracerProvider):
        trace.set_tracer_provider(created)
    else:
        logger.debug("global TracerProvider already set; ragpulse uses its own provider")
    return created, True


def shutdown() -> None:
    """Flush and shut down what :func:`configure` set up; also runs at exit.

    A provider ragpulse created is shut down; a provider it joined is only
    flushed (ragpulse's processor is detached, the app's keep running).
    Afterwards spans go to the global provider again. Blocks at most about
    twice ``export_timeout_s``; never raises; safe to call repeatedly.
    """
    with _lock:
        _shutdown_locked()


def _shutdown_locked() -> None:
    global _installed, _global_tracer, _env_config
    installed, _installed = _installed, None
    _global_tracer = None
    _env_config = None
    if installed is None:
        return
    timeout_ms = int(installed.config.export_timeout_s * 1000) + 1000
    provider = installed.provider
    try:
        if installed.processor is not None:
            installed.processor.force_flush(timeout_ms)
        elif isinstance(provider, SdkTracerProvider):
            provider.force_flush(timeout_ms)
        if installed.processor is not None:
            installed.processor.shutdown()
        if installed.owns_provider and isinstance(provider, SdkTracerProvider):
            provider.shutdown()
    except Exception:
        logger.debug("ragpulse shutdown failed", exc_info=True)


def _current() -> tuple[InstrumentConfig, Tracer]:
    """The configuration and tracer a new span uses; never raises."""
    global _env_config, _global_tracer
    installed = _installed
    if installed is not None:
        return installed.config, installed.tracer
    config = _env_config
    if config is None:
        try:
            config = _resolve_config()
        except Exception as exc:
            # Fail closed: a broken setting must not turn content capture back on.
            logger.warning(
                "ragpulse: invalid environment settings (%s); not capturing content", exc
            )
            config = InstrumentConfig(capture_content=False)
        _env_config = config
    provider = trace.get_tracer_provider()
    cached = _global_tracer
    if cached is not None and cached[0] is provider:
        return config, cached[1]
    tracer = provider.get_tracer(_TRACER_NAME, _TRACER_VERSION)
    _global_tracer = (provider, tracer)
    return config, tracer


# --- Value extraction (duck-typed, never raising) --------------------------------------


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


def _answer_text(result: Any, generation: bool = False) -> str | None:
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


def _chunk_text(chunk: Any) -> str | None:
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

    Accepts str, :class:`ragpulse.Document`, mappings and objects with
    ``id``/``content`` (or ``text``/``page_content``)/``score``/``metadata``
    (LangChain ``Document``), ``(document, score)`` pairs (LangChain
    ``similarity_search_with_score``) and ``.node``/``.score`` wrappers
    (LlamaIndex ``NodeWithScore``).
    """
    if isinstance(item, str | bytes | bytearray):
        return _Doc(None, _as_text(item), None, None)
    if isinstance(item, Document):
        return _Doc(item.id, item.content, item.score, item.metadata or None)
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


# --- Recorders ---------------------------------------------------------------------------


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
        self._name = name or self._default_name
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
            }
            self._span = self._tracer.start_span(self._name, attributes=attributes)
        with _Guard("recording span inputs"):
            self._on_start()
        return self

    def _on_start(self) -> None:
        """Hook: record the inputs (question, query, prompt, model...)."""

    def _activate(self) -> Token[Context] | None:
        """Make the span current (children nest under it); pair with _deactivate."""
        try:
            return otel_context.attach(trace.set_span_in_context(self._span))
        except Exception:
            logger.debug("ragpulse: attaching context failed", exc_info=True)
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
        text = _chunk_text(item)
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
    """The root span of one question -> answer exchange (OpenInference CHAIN)."""

    _role = sc.ROLE_PIPELINE
    _kind = sc.KIND_CHAIN
    _default_name = "pipeline"

    def __init__(
        self, question: Any = None, *, route: str | None = None, name: str | None = None
    ) -> None:
        super().__init__(name)
        self._question = question
        self._route = route

    def _on_start(self) -> None:
        if self._route is not None:
            self._set(sc.RAGPULSE_ROUTE, self._route)
        self._set_io(
            sc.INPUT_VALUE, sc.INPUT_MIME_TYPE, _question_text(self._question), sc.MIME_TEXT
        )

    def set_answer(self, answer: Any) -> None:
        """Record the answer: a str, a mapping with ``"answer"`` or an ``.answer``."""
        with _Guard("recording the answer"):
            text = _answer_text(answer)
            self._set_io(sc.OUTPUT_VALUE, sc.OUTPUT_MIME_TYPE, text, sc.MIME_TEXT)

    def _record_result(self, result: Any) -> None:
        self.set_answer(result)


class RetrievalSpan(SpanRecorder):
    """One retrieval step (OpenInference RETRIEVER, GenAI ``retrieval``)."""

    _role = sc.ROLE_RETRIEVAL
    _kind = sc.KIND_RETRIEVER
    _default_name = "retrieval"

    def __init__(
        self, query: Any = None, *, data_source: str | None = None, name: str | None = None
    ) -> None:
        super().__init__(name)
        self._query = query
        self._data_source = data_source
        self._items: list[Any] = []
        self._count = 0

    def _on_start(self) -> None:
        self._set(sc.GEN_AI_OPERATION_NAME, sc.GEN_AI_OP_RETRIEVAL)
        if self._data_source is not None:
            self._set(sc.GEN_AI_DATA_SOURCE_ID, self._data_source)
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


class GenerationSpan(SpanRecorder):
    """One LLM call (OpenInference LLM, GenAI ``chat``)."""

    _role = sc.ROLE_GENERATION
    _kind = sc.KIND_LLM
    _default_name = "generation"

    def __init__(
        self,
        model: str | None = None,
        prompt: Any = None,
        *,
        system: str | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self._model = model
        self._prompt = prompt
        self._system = system
        self._response_model: str | None = None

    def _on_start(self) -> None:
        self._set(sc.GEN_AI_OPERATION_NAME, sc.GEN_AI_OP_CHAT)
        if self._model is not None:
            self._set(sc.LLM_MODEL_NAME, self._model)
            self._set(sc.GEN_AI_REQUEST_MODEL, self._model)
        if self._system is not None:
            self._set(sc.GEN_AI_PROVIDER_NAME, self._system)
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
            text = _answer_text(answer, generation=True)
            self._set_io(sc.OUTPUT_VALUE, sc.OUTPUT_MIME_TYPE, text, sc.MIME_TEXT)
            found_in, found_out = (None, None) if isinstance(answer, str) else _usage(answer)
            self.set_usage(
                input_tokens if input_tokens is not None else found_in,
                output_tokens if output_tokens is not None else found_out,
            )
            self._note_response_model(answer)

    def _note_response_model(self, response: Any) -> None:
        if self._response_model is not None or isinstance(response, str):
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


# --- Stream wrappers ----------------------------------------------------------------------


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


# --- Decorators -------------------------------------------------------------------------------


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


@overload
def pipeline(func: F, /) -> F: ...
@overload
def pipeline(
    func: None = None, /, *, name: str | None = None, route: str | None = None
) -> Callable[[F], F]: ...
def pipeline(
    func: F | None = None, /, *, name: str | None = None, route: str | None = None
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
    Return values and exceptions pass through unchanged; recording never raises.
    """

    def build(fn: F) -> F:
        span_name = name or _fn_name(fn, "pipeline")
        pick = _first_argument(fn, ("question", "query"))

        def make(args: tuple[Any, ...], kwargs: dict[str, Any]) -> SpanRecorder:
            return PipelineSpan(pick(args, kwargs), route=route, name=span_name)

        return _wrap(fn, make)

    return _decorate(func, "pipeline", build)


@overload
def retrieval(func: F, /) -> F: ...
@overload
def retrieval(
    func: None = None, /, *, name: str | None = None, data_source: str | None = None
) -> Callable[[F], F]: ...
def retrieval(
    func: F | None = None, /, *, name: str | None = None, data_source: str | None = None
) -> F | Callable[[F], F]:
    """Trace a retriever as a ``retrieval`` span (OpenInference RETRIEVER).

    The query is the first argument (after ``self``/``cls``) or a
    ``query``/``question`` keyword. The documents are the return value (a list
    or tuple; a returned or yielded stream is collected as it passes) of: str,
    :class:`ragpulse.Document`, mappings or objects with ``id``, ``content`` (or
    ``text`` / ``page_content``), ``score``, ``metadata`` (LangChain
    ``Document``), ``(document, score)`` pairs, or ``.node``/``.score`` wrappers
    (LlamaIndex). ``data_source`` becomes ``gen_ai.data_source.id``.
    Return values and exceptions pass through unchanged; recording never raises.
    """

    def build(fn: F) -> F:
        span_name = name or _fn_name(fn, "retrieval")
        pick = _first_argument(fn, ("query", "question"))

        def make(args: tuple[Any, ...], kwargs: dict[str, Any]) -> SpanRecorder:
            return RetrievalSpan(pick(args, kwargs), data_source=data_source, name=span_name)

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
    system: str | None = None,
) -> Callable[[F], F]: ...
def generation(
    func: F | None = None,
    /,
    *,
    model: str | None = None,
    name: str | None = None,
    system: str | None = None,
) -> F | Callable[[F], F]:
    """Trace an LLM call as a ``generation`` span (OpenInference LLM, GenAI chat).

    The prompt is the first argument (after ``self``/``cls``) or a
    ``prompt``/``messages``/``question``/``query`` keyword: a str, or chat
    messages (recorded as JSON). The answer is the return value: a str, a
    mapping with ``"answer"``, ``.answer``, an OpenAI ChatCompletion-like
    object (``choices[0].message.content`` plus ``usage`` token counts and
    ``model``), an Anthropic-/LangChain-like message, or a stream of text
    chunks or OpenAI chunk objects. ``system`` is the provider
    (``gen_ai.provider.name``, e.g. ``"openai"``).
    Return values and exceptions pass through unchanged; recording never raises.
    """

    def build(fn: F) -> F:
        span_name = name or _fn_name(fn, "generation")
        pick = _first_argument(fn, ("prompt", "messages", "question", "query"))

        def make(args: tuple[Any, ...], kwargs: dict[str, Any]) -> SpanRecorder:
            return GenerationSpan(model, pick(args, kwargs), system=system, name=span_name)

        return _wrap(fn, make)

    return _decorate(func, "generation", build)


# --- Context-manager forms ---------------------------------------------------------------


def pipeline_span(
    question: Any = None, route: str | None = None, name: str = "pipeline"
) -> PipelineSpan:
    """``with ragpulse.pipeline_span(question) as s: ...; s.set_answer(text)``.

    For code that cannot be decorated; works in sync and async code. The span
    starts on ``__enter__`` and is current inside the block.
    """
    return PipelineSpan(question, route=route, name=name)


def retrieval_span(
    query: Any = None, data_source: str | None = None, name: str = "retrieval"
) -> RetrievalSpan:
    """``with ragpulse.retrieval_span(query) as r: ...; r.set_documents(docs)``."""
    return RetrievalSpan(query, data_source=data_source, name=name)


def generation_span(
    model: str | None = None,
    prompt: Any = None,
    *,
    system: str | None = None,
    name: str = "generation",
) -> GenerationSpan:
    """``with ragpulse.generation_span(model=m, prompt=p) as g: ...; g.set_answer(text)``."""
    return GenerationSpan(model, prompt, system=system, name=name)
