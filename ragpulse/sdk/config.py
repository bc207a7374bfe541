"""Instrumentation settings: env var names, defaults and :class:`InstrumentConfig`.

Every setting resolves as explicit argument, then environment variable, then
default (:func:`_resolve_config`). Nothing here holds state or touches
OpenTelemetry's globals; :mod:`ragpulse.sdk.provider` does that.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ragpulse.errors import ConfigError

if TYPE_CHECKING:  # imported where used: `ragpulse eval` and serve read ENV_* names only
    from opentelemetry.sdk.trace.export import SpanExporter

from ragpulse.app_env import (  # explicit argument > env var > default
    ENV_API_TOKEN,
    ENV_CAPTURE_CONTENT,
    ENV_ENDPOINT,
    ENV_EXPORT_TIMEOUT,
    ENV_EXPORTER,
    ENV_KAFKA_BOOTSTRAP,
    ENV_KAFKA_TOPIC,
    ENV_MAX_DOCUMENTS,
    ENV_MAX_TEXT_CHARS,
    ENV_OTEL_SERVICE_NAME,
    ENV_SERVICE_NAME,
)

DEFAULT_ENDPOINT = "http://127.0.0.1:4318"
TRACES_PATH = "/v1/traces"
DEFAULT_EXPORT_TIMEOUT_S = 10.0
DEFAULT_MAX_TEXT_CHARS = 16000
DEFAULT_MAX_DOCUMENTS = 25
DEFAULT_KAFKA_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_KAFKA_TOPIC = "otlp_spans"
REDACTION_FAILED = "[redaction failed]"
"""Recorded instead of a text when the redact hook raised: never the raw text."""

_EXPORTER_NAMES = ("otlp", "kafka", "console", "none")
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
    """``otlp``, ``kafka``, ``console``, ``none`` or a ``SpanExporter`` instance. Env:
    ``RAGPULSE_EXPORTER``."""
    kafka_bootstrap: str = DEFAULT_KAFKA_BOOTSTRAP
    """Brokers for ``exporter="kafka"``. Env: ``RAGPULSE_KAFKA__BOOTSTRAP``."""
    kafka_topic: str = DEFAULT_KAFKA_TOPIC
    """Topic for ``exporter="kafka"``; messages are keyed by trace id. Env:
    ``RAGPULSE_KAFKA__TOPIC``."""
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
    also_to: tuple[str | SpanExporter, ...] = field(default=(), hash=False)
    """More places the same spans go, each through a BatchSpanProcessor of its own:
    the tracing tool that shows ragpulse's evaluations must have the app's spans too.
    An OTLP/HTTP URL (a base URL, or the full traces URL: Phoenix's
    ``http://HOST:6006``), sent without ragpulse's ``headers``; or a ``SpanExporter``
    instance, for a tool that needs headers of its own (MLflow's
    ``x-mlflow-experiment-id``, Langfuse's Basic auth). No env var."""


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
    kafka_bootstrap: str | None = None,
    kafka_topic: str | None = None,
    also_to: Sequence[str | SpanExporter] | None = None,
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
            raise ConfigError(
                f"unknown exporter {exporter!r}: use 'otlp', 'kafka', 'console', 'none' "
                "or pass a SpanExporter instance"
            )
    elif not isinstance(exporter, _span_exporter()):
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
    if isinstance(also_to, str | bytes):
        raise ConfigError("also_to takes a list of URLs or exporters, e.g. also_to=[url]")
    destinations: list[str | SpanExporter] = []
    for where in also_to or ():
        if isinstance(where, str):
            destinations.append(_traces_url(where))
        elif isinstance(where, _span_exporter()):
            destinations.append(where)
        else:
            raise ConfigError(
                "also_to takes OTLP/HTTP URLs or opentelemetry SpanExporter instances, "
                f"got {type(where)!r}"
            )

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
        kafka_bootstrap=kafka_bootstrap or _env(ENV_KAFKA_BOOTSTRAP) or DEFAULT_KAFKA_BOOTSTRAP,
        kafka_topic=kafka_topic or _env(ENV_KAFKA_TOPIC) or DEFAULT_KAFKA_TOPIC,
        also_to=tuple(destinations),
    )


def _span_exporter() -> type[SpanExporter]:
    from opentelemetry.sdk.trace.export import SpanExporter

    return SpanExporter
