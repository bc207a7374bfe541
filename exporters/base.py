"""The sink contract."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ragpulse.config import Settings
from ragpulse.plugin_context import PluginContext, PluginOptions, validate_options
from ragpulse.record import ConversationRecord, EvalResult, RagRecord

__all__ = ["Sink"]


class Sink(ABC):
    """Receives every evaluated record; the words are OpenTelemetry's ``SpanExporter``'s:
    :meth:`export`, :meth:`force_flush`, :meth:`shutdown`.

    A plug-in is one subclass in one file plus one entry-point line
    (``ragpulse.sinks``). It is configured in the settings file under
    ``sinks.<entry-point name>``; its ``Options`` model validates that mapping
    when the settings load, and naming it there is what enables a third-party
    sink (``enabled: false`` turns any sink off). The simple case needs only
    ``Options`` and ``export``: the default :meth:`create` calls
    ``cls(options, context)``. Every option of a sink is its own, under
    ``sinks.<name>``; :meth:`section` adds what the sink takes from the core's settings
    (the built-in ones: the top-level ``redaction`` section).

    Contract: ``export`` is called from the collector's worker threads, one
    call at a time (never concurrently), and may be called more than once per
    record: first with the results that exist when the record is exported (its
    cheap results at least; ``record.attributes["ragpulse.pending"]`` lists the
    costly tiers still to come), then once per such tier with only that tier's new
    results (``ragpulse.update`` names it; the results may be empty when the tier
    skipped the record, ``ragpulse.sampled.<tier>`` says why). Each result is
    handed over exactly once. ``export`` should return quickly (buffer and flush
    in the background where I/O is slow) and must not raise; the pipeline still
    guards it, counting any exception under ``ragpulse_sink_errors_total{sink}``.
    ``force_flush`` sends what is buffered and says whether it all went within the
    timeout; ``shutdown`` flushes and releases; no ``export`` follows it.

    A subclass with a ``name`` must implement ``export`` (checked when the class is
    defined); its ``__init__`` passes its options to ``Sink.__init__``, which keeps them
    as ``self.options``.
    """

    name: ClassVar[str] = "sink"
    default_enabled: ClassVar[bool] = False
    """Built without being named under ``sinks`` (when :meth:`create` says so)."""

    class Options(PluginOptions):
        """No options."""

    def __init__(
        self, options: PluginOptions | None = None, context: PluginContext | None = None
    ) -> None:
        self.options = options if options is not None else self.Options()
        self.context = context

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__ and getattr(cls.export, "__isabstractmethod__", False):
            raise TypeError(f"sink {cls.name!r} ({cls.__qualname__}) must implement export")

    @classmethod
    def section(cls, settings: Settings) -> dict[str, Any]:
        """Options this sink takes from the core's settings, outside ``sinks.<name>`` (which
        overrides them): the built-in sinks take the top-level ``redaction`` section."""
        return {}

    @classmethod
    def options_from(cls, settings: Settings) -> PluginOptions:
        """``section(settings)`` overlaid with ``sinks.<name>``, validated."""
        raw: Mapping[str, Any] = settings.sinks.get(cls.name, {})
        merged = {**cls.section(settings), **{k: v for k, v in raw.items() if k != "enabled"}}
        return validate_options("sink", cls.name, cls.Options, merged)

    @classmethod
    def create(cls, options: PluginOptions, context: PluginContext) -> Sink | None:
        """The sink ``ragpulse serve`` uses; None when these options do not enable it."""
        return cls(options, context)

    @classmethod
    def from_settings(cls, settings: Settings, context: PluginContext | None = None) -> Sink | None:
        """The sink as ``ragpulse serve`` would build it from ``settings`` (None: not enabled)."""
        return cls.create(cls.options_from(settings), context or PluginContext(settings))

    @abstractmethod
    def export(self, record: RagRecord, results: Sequence[EvalResult]) -> None:
        """Take one record's results (see the class doc for when and how often)."""

    def export_conversation(  # noqa: B027 - optional hook, most sinks keep turns only
        self, conversation: ConversationRecord, results: Sequence[EvalResult]
    ) -> None:
        """Take a closed conversation's record and its conversation metrics' results
        (called like :meth:`export`, one call at a time; a resumed conversation comes again
        with ``revision`` + 1 and the same ``identifier``). A conversation sampled for the
        judge comes first with its cheap results and ``ragpulse.pending``, then again
        with the same revision, ``ragpulse.update`` (the tier) in its attributes and that
        tier's results only, as turn records' updates do. Default: nothing, for sinks
        that keep turn records only."""

    def start(self) -> None:  # noqa: B027 - optional hook, most sinks run no thread
        """Start what delivers in the background (threads), before the first export: the
        collector calls it with its other parts; a sink that starts its threads in
        ``__init__`` instead would run them before the collector does."""

    def force_flush(self, timeout_s: float | None = None) -> bool:
        """Send what is buffered; True when it all went within ``timeout_s``. Sinks that
        write as they go (a file, a registry) have nothing to send."""
        return True

    def shutdown(self) -> None:  # noqa: B027 - optional hook, most sinks hold nothing
        """Flush buffers and release resources."""
