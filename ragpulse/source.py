"""The source contract: where spans come from, and what a source may ask of the collector.

A trace source is a plug-in like a sink: one :class:`Source` subclass in one file plus one
entry-point line (``ragpulse.sources``); ``ragpulse serve --source <name>`` runs it.
ragpulse's own are registered the same way: ``otlp_http`` (the OTLP/HTTP receiver, and
the OTLP/gRPC one unless ``otlp_grpc_port`` is 0), ``kafka``, and the tracing tools whose
stored traces it follows. The collector builds the chosen source once, with a
:class:`SourceContext`: the :class:`Intake` it feeds, the settings, the metrics and the
conversation stage's :class:`ConversationHooks`. A batch of spans comes with an
:class:`Ack` when the source must know once every trace it fed was exported (Kafka
commits its offsets from it).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ragpulse.config import ConversationSettings, Settings
from ragpulse.options import PluginOptions, validate_options
from ragpulse.plugin_context import unimplemented
from ragpulse.record import ConversationRecord, EvalResult, LogEvent, RagRecord, Span, TurnSummary

if TYPE_CHECKING:
    from ragpulse.telemetry import CollectorMetrics

__all__ = ["Ack", "ConversationHooks", "Intake", "Source", "SourceContext", "TurnRoute"]


class Ack:
    """Acknowledgement of one source batch, fired once every trace it fed is finished.

    The assembler ``hold``s it once per trace the batch touched and ``seal``s it
    after intake; each finished (evaluated, exported or dropped) trace releases
    its holds. The HTTP source needs none; the Kafka source commits offsets from it.
    """

    __slots__ = ("_done", "_lock", "_on_done", "_pending", "_sealed", "source")

    def __init__(self, on_done: Callable[[], None] | None = None, source: object = None) -> None:
        self._on_done = on_done
        self.source = source  # where the batch came from, e.g. a Kafka TopicPartition
        self._pending = 0
        self._sealed = False
        self._done = False
        self._lock = threading.Lock()

    def hold(self) -> None:
        with self._lock:
            self._pending += 1

    def release(self) -> None:
        with self._lock:
            self._pending -= 1
            fire = self._sealed and self._pending <= 0 and not self._done
            self._done = self._done or fire
        if fire and self._on_done:
            self._on_done()

    def seal(self) -> None:
        with self._lock:
            self._sealed = True
            fire = self._pending <= 0 and not self._done
            self._done = self._done or fire
        if fire and self._on_done:
            self._on_done()

    @property
    def done(self) -> bool:
        return self._done


class Intake(Protocol):
    """The collector, as a source sees it. Every method is thread-safe."""

    def ingest(
        self, spans: Sequence[Span], ack: Ack | None = None, *, nbytes: int = 0, admit: bool = False
    ) -> int:
        """Add decoded spans (sealing ``ack``); returns how many were refused and counted.
        With ``admit``: all or nothing, CollectorFull (``ack`` unsealed) near the bounds."""
        ...

    def ingest_logs(
        self, events: Sequence[LogEvent], *, nbytes: int = 0, admit: bool = False
    ) -> int:
        """Add decoded OTLP log events (joined to their spans at assembly); as ``ingest``."""
        ...

    @property
    def overloaded(self) -> bool:
        """Whether the evaluation backlog is at its bound (answer "retry later" now)."""
        ...

    def pressure(self) -> float:
        """How full the stages after assembly are, 0..1 (what waits for evaluation)."""
        ...

    def abandon(self, predicate: Callable[[list[Ack]], bool]) -> int:
        """Drop open traces whose acks match, leaving the acks unreleased."""
        ...

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every completed trace has been exported."""
        ...

    def settle(self, timeout: float) -> bool:
        """Wait until every sink delivered what it was handed; False when one did not
        within ``timeout`` (a source that acknowledges delivered results only)."""
        ...


class TurnRoute(Protocol):
    """Where conversations are held when not in this process (Kafka: the conversation
    topic, read by the member that owns a conversation's partition). Called after the
    sinks, one call at a time; neither method may block on the network."""

    def turn(
        self,
        record: RagRecord,
        results: Sequence[EvalResult],
        *,
        replaces: RagRecord | None = None,
    ) -> None:
        """Each export of a turn record: the first, then each costly tier's update; a
        revision (``replaces``: the turn as exported before) with all its results."""
        ...

    def conversation(self, record: ConversationRecord, results: Sequence[EvalResult]) -> None:
        """Each export of a conversation record (its state, for whoever holds it next)."""
        ...


class ConversationHooks(Protocol):
    """The conversation stage, as a source that carries conversations between replicas
    (Kafka) sees it. Thread-safe."""

    @property
    def settings(self) -> ConversationSettings: ...

    def hold_elsewhere(self, route: TurnRoute) -> None:
        """From now on exported turns go to ``route``, not into this stage, and a stop
        leaves open conversations open (they are read again). Called before the start."""
        ...

    def numbered_on_arrival(self, trace_id: str, span_id: str) -> bool:
        """Whether this replica numbered the turn in order of arrival (its spans did not)."""
        ...

    def holds(self, conversation_id: str) -> bool: ...

    def held_ids(self) -> set[str]:
        """The conversations held now, open or kept closed."""
        ...

    def add_turn(
        self,
        conversation_id: str,
        service: str,
        route: str | None,
        summary: TurnSummary,
        *,
        documents: Sequence[str] = (),
        end: bool = False,
        replaces: str | None = None,
    ) -> None:
        """Keep a turn summarised elsewhere (``summary.turn`` 0: numbered on arrival);
        ``replaces``: a revision's, the span id of the turn (same trace) it replaces."""
        ...

    def restore(self, record: ConversationRecord, closed_ago_s: float) -> bool:
        """Take a conversation's state from its record as exported ``closed_ago_s`` ago;
        True when the record alone can rebuild what the stage holds of it now."""
        ...

    def drop(self, conversation_ids: Iterable[str]) -> int:
        """Forget conversations without closing them (another process holds them now)."""
        ...


@dataclass(frozen=True)
class SourceContext:
    """What a source is built with: the :class:`Intake` it feeds, the settings, the
    metrics registry's series (``metrics.registry`` for series of its own) and the
    conversation stage's hooks."""

    intake: Intake
    settings: Settings
    metrics: CollectorMetrics
    conversations: ConversationHooks


class NoOptions(PluginOptions):
    """No options."""


class Source(ABC):
    """A stream of span batches feeding an :class:`Intake`.

    A plug-in is one subclass in one file plus one entry-point line (``ragpulse.sources``);
    ``ragpulse serve --source <name>`` (the ``source`` setting) runs it. Its ``Options``
    model validates ``sources.<name>`` in the settings file when the settings load;
    ragpulse's own sources read their settings where they have always been (``kafka``,
    ``stored_traces``, the receivers' top-level keys), overriding :meth:`options_from`.
    The default :meth:`create` calls ``cls(options, context)``.

    Contract: ``start`` returns once the source is ready (a receiver listens); an
    ``OSError`` from it (a port in use) stops the collector's start. ``stop`` stops taking
    new data; ``close`` runs after the collector drained what the source gave it, the place
    for final acknowledgements. None of them raise for transport errors: sources log,
    count and retry. A subclass with a ``name`` must implement ``start``, ``stop`` and any
    other abstract method of its bases (checked when the class is defined); its
    ``__init__`` passes its options and context to ``Source.__init__``, which keeps them
    as ``self.options`` and ``self.context``.
    """

    name: ClassVar[str] = "source"
    url_shape: ClassVar[str | None] = None
    """For a source that reads what a tracing tool stores, named by a URL
    (``stored_traces.url``, ``--source-url``, ``eval --from``): the URL's shape, as help
    texts show it (``phoenix://HOST:PORT/PROJECT``); None for any other."""

    Options: ClassVar[type[PluginOptions]] = NoOptions
    """The model of ``sources.<name>`` (a nested ``class Options(PluginOptions)``, or a
    settings section a built-in source reads); none by default."""

    def __init__(
        self, options: PluginOptions | None = None, context: SourceContext | None = None
    ) -> None:
        self.options = options if options is not None else self.Options()
        self.context = context

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__ and (missing := unimplemented(cls)):
            raise TypeError(
                f"source {cls.name!r} ({cls.__qualname__}) must implement {', '.join(missing)}"
            )

    @classmethod
    def options_from(cls, settings: Settings) -> PluginOptions:
        """``sources.<name>``, validated."""
        raw: Mapping[str, Any] = settings.sources.get(cls.name, {})
        return validate_options("source", cls.name, cls.Options, raw)

    @classmethod
    def run_settings(cls, settings: Settings) -> Settings:
        """The settings ``ragpulse serve`` runs this source with: as given, unless the
        source needs a sink of its own (a tracing tool writes results back to itself)."""
        return settings

    @classmethod
    def create(cls, options: PluginOptions, context: SourceContext) -> Source:
        """The source ``ragpulse serve`` runs; by default ``cls(options, context)``."""
        return cls(options, context)

    @abstractmethod
    def start(self) -> None:
        """Begin taking data; return once ready (a receiver listens, a consumer joined)."""

    @abstractmethod
    def stop(self) -> None:
        """Stop taking new data (what is held stays unacknowledged)."""

    def close(self) -> None:  # noqa: B027 - most sources have nothing left to acknowledge
        """Final acknowledgements, after the collector drained what this source gave it."""

    def describe(self) -> list[str]:
        """What the started collector logs about this source: the addresses it listens
        on, the topic or tool it reads."""
        return []
