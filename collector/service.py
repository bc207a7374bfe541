"""The collector process: the rooms built once, in order, and their threads under one owner.

:class:`Collector` builds, from the settings: the sinks (one
:class:`~ragpulse.collector.evaluate.exports.Exports`), the conversation stage that
exports through them, the pipeline that evaluates and exports each turn through both, the
assembler that feeds the pipeline, and last the source chosen by ``settings.source`` (a
plug-in, :mod:`ragpulse.source`), given the collector as its intake. Every thread all of
them run is a part of one :class:`~ragpulse.collector.lifecycle.Lifecycle`, started in
that order (what hands work on starts after what it hands work to) and stopped the other
way round.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from ragpulse.collector.assembly.assembler import Assembler
from ragpulse.collector.conversations.stage import ConversationStage
from ragpulse.collector.evaluate.exports import Exports
from ragpulse.collector.evaluate.feedback import FeedbackJoiner
from ragpulse.collector.evaluate.pipeline import Pipeline
from ragpulse.collector.evaluate.sampling import SamplingPolicy
from ragpulse.collector.intake.otlp_source import OtlpSource
from ragpulse.collector.lifecycle import Deadline, Lifecycle
from ragpulse.config import Settings
from ragpulse.errors import CollectorFull, PortUnavailable
from ragpulse.evaluators.base import AnyEvaluator, ConversationEvaluator
from ragpulse.exporters.base import Sink
from ragpulse.log_redaction import RedactingFilter, install_log_redaction, remove_log_redaction
from ragpulse.plugin_context import PluginContext
from ragpulse.plugins import build_sinks, build_source, load_evaluators
from ragpulse.record import ClosedBy, LogEvent, Span
from ragpulse.source import Ack, Source, SourceContext
from ragpulse.telemetry import CollectorMetrics

log = logging.getLogger(__name__)


def start_metrics_server(host: str, port: int, registry: CollectorRegistry) -> WSGIServer:
    """Prometheus ``/metrics`` on ``host:port``; PortUnavailable names the flag that moves it."""
    try:
        server, _ = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise PortUnavailable(
            host, port, "Prometheus /metrics", "--metrics-port", "metrics_port", exc
        ) from exc
    return server


@dataclass(frozen=True)
class Evaluation:
    """The evaluation side of a collector: the sinks, the conversation stage exporting
    through them, and the pipeline exporting each turn through both."""

    exports: Exports
    conversations: ConversationStage
    pipeline: Pipeline

    @classmethod
    def build(
        cls,
        evaluators: Sequence[AnyEvaluator],
        sinks: Sequence[Sink],
        context: PluginContext,
    ) -> Evaluation:
        """Wired from ``context.settings`` (its ``evaluation`` and ``conversations``), with
        ``context.metrics``: the conversation metrics go to the conversation stage, the
        others to the pipeline's tiers, one sampling policy for both."""
        settings, metrics = context.settings, context.metrics
        exports = Exports(sinks, metrics)
        sampler = SamplingPolicy(settings.evaluation, metrics)
        conversations = ConversationStage(
            settings.conversations,
            [e for e in evaluators if isinstance(e, ConversationEvaluator)],
            exports.conversation,
            metrics,
            sampler=sampler,
            context=context,
            export_lock=exports.lock,
        )
        pipeline = Pipeline(
            evaluators, exports, metrics, settings.evaluation, sampler, context, conversations
        )
        return cls(exports, conversations, pipeline)


class Collector:
    """One process worth of ragpulse.

    ``ingest`` is the single entry for every source (thread-safe, never blocks on
    evaluation). ``start`` starts every part (the sinks' delivery, the conversation
    stage, the evaluation workers, the assembly ticker, the source chosen by
    ``settings.source`` unless ``receiver=False``, then the metrics endpoint unless
    ``metrics_server=False``); ``stop`` stops them the other way round: the source stops
    taking data, open traces are drained through evaluation, the sinks shut down, and
    then the source makes its final acknowledgements.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        evaluators: Sequence[AnyEvaluator] | None = None,
        sinks: Sequence[Sink] | None = None,
        extra_sinks: Sequence[Sink] = (),
        registry: CollectorRegistry | None = None,
        receiver: bool = True,
        metrics_server: bool = True,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = CollectorMetrics(registry)
        self.context = PluginContext(settings, self.metrics)
        ev = settings.evaluation
        chosen = list(evaluators) if evaluators is not None else load_evaluators(ev.evaluators, ev)
        built = list(sinks) if sinks is not None else build_sinks(self.context)
        evaluation = Evaluation.build(chosen, [*built, *extra_sinks], self.context)
        self.exports = evaluation.exports
        self.conversations = evaluation.conversations
        self.pipeline = evaluation.pipeline
        self.assembler = Assembler(
            settings.assembly, self.metrics, clock or time.monotonic, held_elsewhere=self.pipeline
        )
        self.feedback = FeedbackJoiner(self.assembler, self.pipeline.late_feedback, self.metrics)
        self.source: Source | None = None
        if receiver:  # last: it is handed the collector, complete now, as its intake
            context = SourceContext(self, settings, self.metrics, self.conversations)
            self.source = build_source(context)
        self._metrics_endpoint = _MetricsEndpoint(
            settings.host, settings.metrics_port, self.metrics
        )
        self.lifecycle = Lifecycle(
            [
                _LogRedaction(settings),
                _Shared(self.context),
                self.exports,
                self.conversations,
                *self.pipeline.parts(),
                _AssemblyTicker(self.assembler, self.pipeline, self.metrics, settings),
                *([_SourcePart(self.source)] if self.source is not None else []),
                # /metrics last: it answering means the sources listen too (tests and
                # readiness probes wait on it).
                *([self._metrics_endpoint] if metrics_server else []),
            ]
        )

    # -- intake (what a source sees: ragpulse.source.Intake) -------------------------------
    def ingest(
        self, spans: Sequence[Span], ack: Ack | None = None, *, nbytes: int = 0, admit: bool = False
    ) -> int:
        """Add decoded spans that came in ``nbytes`` of OTLP; returns how many were refused
        for what they are (late, over the per-trace bound; counted by reason).

        With ``admit`` the request is taken whole or not at all: near the collector's
        bounds :class:`~ragpulse.errors.CollectorFull` is raised before anything is
        kept (``ack`` stays unsealed, so its batch can be offered again).
        """
        if admit:
            self._check_backlog()
        feedback, rest = self.feedback.split(spans)
        refused = self.assembler.add(rest, ack, nbytes=nbytes, admit=admit)
        try:
            self.feedback.handle(feedback)
            self.feedback.after_add(rest)
        finally:
            if ack is not None:
                ack.seal()
        return refused

    def ingest_logs(
        self, events: Sequence[LogEvent], *, nbytes: int = 0, admit: bool = False
    ) -> int:
        """Add decoded log events (joined to their spans at assembly); returns how many
        were refused for what they are. ``admit`` as for :meth:`ingest`."""
        if admit:
            self._check_backlog()
        return self.assembler.add_logs(events, nbytes=nbytes, admit=admit)

    @property
    def overloaded(self) -> bool:
        """Whether the traces waiting for evaluation (those closed to make room included)
        are at ``evaluation.max_backlog``."""
        return self.pipeline.overloaded or self._waiting() >= self.settings.evaluation.max_backlog

    def _waiting(self) -> int:
        return self.pipeline.backlog + self.assembler.closing

    def _check_backlog(self) -> None:
        if self.overloaded:
            self.metrics.intake_refused.labels("backlog").inc()
            raise CollectorFull("backlog")

    def pressure(self) -> float:
        """How full the bounded stages are (0..1): the bytes and traces waiting for
        evaluation, and the open traces whose root came (they join them within
        ``assembly.grace_s``). Traces still waiting for their root are not counted: near
        the bounds the assembler closes the least recently active ones for evaluation,
        and a source that stopped reading for them would hold back the very spans that
        finish them."""
        held = self.assembler.closing_bytes + self.pipeline.backlog_bytes
        coming = self._waiting() + self.assembler.rooted
        return max(
            held / self.settings.assembly.max_held_bytes,
            coming / self.settings.evaluation.max_backlog,
        )

    def abandon(self, predicate: Callable[[list[Ack]], bool]) -> int:
        return self.assembler.abandon(predicate)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        self.pipeline.submit(self.assembler.pop_complete())
        return self.pipeline.wait_idle(timeout)

    def settle(self, timeout: float = 10.0) -> bool:
        """Wait until every sink delivered what it was handed (a source that acknowledges
        only delivered results: follow mode); False when one did not within ``timeout``."""
        return self.exports.force_flush(timeout)

    def flush(self, timeout: float = 10.0) -> bool:
        """Close every open trace now and wait until it is exported (tests, demo, replay)."""
        self.pipeline.submit(self.assembler.drain())
        return self.pipeline.wait_idle(timeout)

    def close_conversations(self, why: ClosedBy) -> None:
        """Close every open conversation now (the end of a one-shot read: nothing more of
        them comes)."""
        self.conversations.close_all(why)

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> Collector:
        """Start everything; a port that cannot be bound raises :class:`PortUnavailable`
        (one line naming the port and the flag that moves it) with nothing left running."""
        self.lifecycle.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop intake, evaluate what is open and queued, shut the sinks down, acknowledge.

        Bounded by ``timeout`` (default ``settings.shutdown_timeout_s``) for the drain:
        the cheap tier finishes first, costly tiers finish their queues if their models
        are loaded (a load in progress is abandoned) and otherwise skip the rest (counted);
        a fifth of the bound, at most 2 s, is kept for the sinks' own shutdown.
        """
        timeout = self.settings.shutdown_timeout_s if timeout is None else timeout
        self.lifecycle.stop(Deadline.within(timeout, reserve_s=min(2.0, timeout / 5)))

    def __enter__(self) -> Collector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def sinks(self) -> list[Sink]:
        return self.exports.sinks

    @property
    def otlp_url(self) -> str | None:
        """The OTLP/HTTP receiver's base URL, when that source runs (the demo, tests)."""
        otlp = self._otlp()
        return otlp.url if otlp is not None else None

    @property
    def otlp_grpc_target(self) -> str | None:
        """``host:port`` of the OTLP/gRPC receiver, when it runs."""
        otlp = self._otlp()
        return otlp.grpc_target if otlp is not None else None

    def _otlp(self) -> OtlpSource | None:
        return self.source if isinstance(self.source, OtlpSource) else None

    @property
    def metrics_url(self) -> str | None:
        return self._metrics_endpoint.url


class _SourcePart:
    """A :class:`~ragpulse.source.Source` as a part: ``stop`` takes no deadline (sources
    bound their own waits)."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.name = f"source {source.name}"

    def start(self) -> None:
        self.source.start()

    def stop(self, deadline: Deadline) -> None:
        self.source.stop()

    def close(self) -> None:
        self.source.close()


class _AssemblyTicker:
    """Moves completed traces from the assembler to the pipeline every ``assembly.tick_s``;
    its stop closes every trace still open and hands it on (the drain)."""

    name = "assembly ticker"

    def __init__(
        self,
        assembler: Assembler,
        pipeline: Pipeline,
        metrics: CollectorMetrics,
        settings: Settings,
    ) -> None:
        self._assembler, self._pipeline, self._metrics = assembler, pipeline, metrics
        self._tick_s = settings.assembly.tick_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="ragpulse-assembly", daemon=True)
        self._thread.start()

    def stop(self, deadline: Deadline) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(deadline.left(5.0))
            self._thread = None
        self._pipeline.submit(self._assembler.drain())

    def close(self) -> None:
        pass

    def _run(self) -> None:
        while not self._stop.wait(self._tick_s):
            try:
                completed = self._assembler.pop_complete()
                if completed:
                    self._pipeline.submit(completed)
                held = self._assembler.held_bytes + self._pipeline.backlog_bytes
                self._metrics.held_bytes.set(held)
            except Exception:  # the ticker must survive anything
                log.exception("assembly tick failed")


class _MetricsEndpoint:
    """Prometheus ``/metrics``; it answers until the last pass of a stop."""

    name = "metrics endpoint"

    def __init__(self, host: str, port: int, metrics: CollectorMetrics) -> None:
        self._host, self._port, self._metrics = host, port, metrics
        self._server: WSGIServer | None = None

    def start(self) -> None:
        self._server = start_metrics_server(self._host, self._port, self._metrics.registry)

    def stop(self, deadline: Deadline) -> None:
        pass  # scraped while the collector drains

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def url(self) -> str | None:
        if self._server is None:
            return None
        return f"http://{self._host}:{self._server.server_port}/metrics"


class _LogRedaction:
    """Log lines leave the process too (``redaction.apply_to: logs``): redacted while the
    collector runs (logging is configured by then: ``ragpulse serve``'s basicConfig)."""

    name = "log redaction"

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._filter: RedactingFilter | None = None

    def start(self) -> None:
        self._filter = install_log_redaction(self._settings)

    def stop(self, deadline: Deadline) -> None:
        pass

    def close(self) -> None:
        if self._filter is not None:
            remove_log_redaction(self._filter)
            self._filter = None


class _Shared:
    """The plug-in context's shared objects (the judge clients and their event loops),
    built by the parts that need them and closed after every part stopped."""

    name = "shared plug-in objects"

    def __init__(self, context: PluginContext) -> None:
        self._context = context

    def start(self) -> None:
        pass

    def stop(self, deadline: Deadline) -> None:
        pass

    def close(self) -> None:
        self._context.close()
