"""Where ragpulse spans go: exporters, the provider joined or created, and
:func:`configure` / :func:`shutdown`.

The installed configuration is module state that lives here and nowhere else;
the recorders read it through :func:`_current`.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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
from opentelemetry.trace import Tracer, TracerProvider

from ragpulse import extras
from ragpulse import semconv as sc
from ragpulse.errors import ConfigError
from ragpulse.sdk.coerce import _to_json
from ragpulse.sdk.config import InstrumentConfig, _resolve_config

if TYPE_CHECKING:  # imported with the network exporters: requests costs an app's import
    from ragpulse.sdk.export_guard import GuardedExporter

# Named as before instrument.py was split up, so an app's logging setup for
# "ragpulse.instrument" keeps covering every instrumentation module.
logger = logging.getLogger("ragpulse.instrument")

_TRACER_NAME = "ragpulse"
_TRACER_VERSION = "0.1.0"

# --- Exporters ------------------------------------------------------------------


def _otlp_exporter(config: InstrumentConfig) -> tuple[SpanExporter, bool]:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from ragpulse.sdk.export_guard import BoundedSession, GuardedExporter

    session = BoundedSession()
    exporter = OTLPSpanExporter(
        endpoint=config.endpoint,
        headers=config.headers,
        timeout=config.export_timeout_s,
        session=session,
    )
    fix = "start `ragpulse serve` there or point RAGPULSE_ENDPOINT at a collector"
    return GuardedExporter(exporter, config.endpoint, session, fix=fix), True


def _console_exporter(config: InstrumentConfig) -> tuple[SpanExporter, bool]:
    return ConsoleSpanExporter(service_name=config.service_name), False


def _kafka_exporter(config: InstrumentConfig) -> tuple[SpanExporter, bool]:
    from ragpulse.sdk.export_guard import GuardedExporter

    try:
        from ragpulse.sdk.kafka_exporter import KafkaSpanExporter
    except ModuleNotFoundError as exc:  # an invalid setting here: nothing is configured
        absent = [str(exc.name)]
        raise ConfigError(extras.needs("kafka", "exporter='kafka'", absent)) from exc

    exporter = KafkaSpanExporter(
        config.kafka_bootstrap, config.kafka_topic, timeout_s=config.export_timeout_s
    )
    target = f"Kafka topic {config.kafka_topic} at {config.kafka_bootstrap}"
    return GuardedExporter(exporter, target, fix="check RAGPULSE_KAFKA__BOOTSTRAP"), True


_EXPORTER_FACTORIES: dict[str, Callable[[InstrumentConfig], tuple[SpanExporter, bool]]] = {
    "otlp": _otlp_exporter,
    "kafka": _kafka_exporter,
    "console": _console_exporter,
}
"""Exporter name -> factory returning (exporter, batch?). Network exporters batch;
a new transport is one more entry here."""


def _also_to(config: InstrumentConfig) -> tuple[list[SpanProcessor], list[GuardedExporter]]:
    """A BatchSpanProcessor per ``also_to`` destination; a URL's exporter goes behind a
    guard (one warning when the tool is down, not one per batch)."""
    processors: list[SpanProcessor] = []
    guards: list[GuardedExporter] = []
    for where in config.also_to:
        if isinstance(where, SpanExporter):
            processors.append(BatchSpanProcessor(where))
            continue
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        from ragpulse.sdk.export_guard import BoundedSession, GuardedExporter

        session = BoundedSession()
        exporter = OTLPSpanExporter(
            endpoint=where, timeout=config.export_timeout_s, session=session
        )
        guard = GuardedExporter(exporter, where, session, fix="is the tool running there?")
        processors.append(BatchSpanProcessor(guard))
        guards.append(guard)
    return processors, guards


def _build_processor(
    config: InstrumentConfig,
) -> tuple[SpanProcessor | None, list[GuardedExporter]]:
    """ragpulse's processor and the ``also_to`` ones, as one (None when there is none),
    and the guards of their network exporters, told when ragpulse shuts down."""
    main, guard = _ragpulse_processor(config)
    extra, guards = _also_to(config)
    if guard is not None:
        guards.insert(0, guard)
    processors = [p for p in (main, *extra) if p is not None]
    if len(processors) <= 1:
        return (processors[0] if processors else None), guards
    return _FanOut(processors), guards


class _FanOut(SpanProcessor):
    """Every span to each processor in turn (ragpulse's, then the ``also_to`` ones);
    each batches, so none waits on the network."""

    def __init__(self, processors: Sequence[SpanProcessor]) -> None:
        self._processors = tuple(processors)

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        for processor in self._processors:
            processor.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        for processor in self._processors:
            processor.on_end(span)

    def shutdown(self) -> None:
        for processor in self._processors:
            processor.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return all([p.force_flush(timeout_millis) for p in self._processors])


def _ragpulse_processor(
    config: InstrumentConfig,
) -> tuple[SpanProcessor | None, GuardedExporter | None]:
    """The processor for ``config.exporter`` (None for ``none``), and the guard of its
    network exporter (:mod:`ragpulse.sdk.export_guard`), told when ragpulse shuts down.

    Network exporters go behind a BatchSpanProcessor (the app never waits on the
    network); an exporter instance passed in gets a SimpleSpanProcessor so that
    spans reach it as they end (deterministic in tests).
    """
    exporter = config.exporter
    if isinstance(exporter, SpanExporter):
        return SimpleSpanProcessor(exporter), None
    if exporter == "none":
        return None, None
    from ragpulse.sdk.export_guard import GuardedExporter

    instance, batch = _EXPORTER_FACTORIES[exporter](config)
    processor = BatchSpanProcessor(instance) if batch else SimpleSpanProcessor(instance)
    return processor, instance if isinstance(instance, GuardedExporter) else None


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
    guards: list[GuardedExporter] = field(default_factory=list)


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
    kafka_bootstrap: str | None = None,
    kafka_topic: str | None = None,
    also_to: Sequence[str | SpanExporter] | None = None,
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

    ``also_to`` sends the same spans to more places, the tracing tool that shows
    ragpulse's evaluations above all (it must have the spans they judge): OTLP/HTTP
    URLs (``["http://127.0.0.1:6006"]`` for Phoenix) or ``SpanExporter`` instances,
    each through a BatchSpanProcessor of its own, on the provider ragpulse joins or
    creates.

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
        kafka_bootstrap=kafka_bootstrap,
        kafka_topic=kafka_topic,
        also_to=also_to,
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
    processor, guards = _build_processor(config)
    with _lock:
        _shutdown_locked()
        provider, owns = _choose_provider(tracer_provider, config)
        held: _DetachableProcessor | None = None
        if processor is not None and isinstance(provider, SdkTracerProvider):
            held = _DetachableProcessor(processor)
            provider.add_span_processor(held)
        tracer = provider.get_tracer(_TRACER_NAME, _TRACER_VERSION)
        _installed = _Installed(config, provider, owns, held, tracer, guards)
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
    for guard in installed.guards:
        guard.closing()  # the last batches: one attempt each, no retries
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
