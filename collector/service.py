"""The collector process: intake -> assembly -> evaluation -> sinks, wired from settings."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from ragpulse.collector.assembly.assembler import Ack, Assembler
from ragpulse.collector.evaluate.feedback import FeedbackJoiner
from ragpulse.collector.evaluate.pipeline import Pipeline
from ragpulse.collector.intake.otlp_grpc import OtlpGrpcReceiver
from ragpulse.collector.intake.otlp_http import OtlpHttpReceiver
from ragpulse.collector.intake.source import Source
from ragpulse.config import BACKEND_SOURCES, Settings
from ragpulse.errors import CollectorFull, PortUnavailable
from ragpulse.evaluators.base import AnyEvaluator
from ragpulse.exporters.base import Sink
from ragpulse.log_redaction import RedactingFilter, install_log_redaction, remove_log_redaction
from ragpulse.plugin_context import PluginContext
from ragpulse.plugins import build_sinks, load_evaluators
from ragpulse.record import LogEvent, Span
from ragpulse.telemetry import CollectorMetrics

_R = TypeVar("_R", OtlpHttpReceiver, OtlpGrpcReceiver)

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


class Collector:
    """One process worth of ragpulse.

    ``ingest`` is the single entry for every source (thread-safe, never
    blocks on evaluation). ``start`` launches the evaluation worker, the
    completion ticker, the metrics endpoint (unless ``metrics_server=False``)
    and the source chosen by ``settings.source`` (the OTLP/HTTP receiver, with the
    OTLP/gRPC one unless ``otlp_grpc_port`` is 0, or
    Kafka; none when ``receiver=False``); ``stop`` drains open traces through
    evaluation before the sources make their final acknowledgements.
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
        self.assembler = Assembler(
            settings.assembly,
            self.metrics,
            clock or time.monotonic,
            held_elsewhere=lambda: self.pipeline.backlog_bytes,
        )
        ev = settings.evaluation
        chosen = list(evaluators) if evaluators is not None else load_evaluators(ev.evaluators, ev)
        self.context = PluginContext(settings, self.metrics)
        all_sinks = list(sinks) if sinks is not None else build_sinks(self.context)
        # Kafka: a conversation's turns come through different replicas; written to the
        # conversation topic (the last sink: after the others took a conversation record),
        # they meet in the member of the conversation group that owns their partition.
        turns = None
        if receiver and settings.source == "kafka" and settings.kafka.turn_topic():
            from ragpulse.collector.conversations.turn_writer import TurnTopicMetrics, TurnWriter

            turn_metrics = TurnTopicMetrics(self.metrics.registry)
            turns = TurnWriter(
                settings.kafka,
                turn_metrics,
                lambda t, s: self.pipeline.conversations.numbered_on_arrival(t, s),
            )
        self.pipeline = Pipeline(
            chosen, [*all_sinks, *extra_sinks, *([turns] if turns else [])], self.metrics, ev,
            context=self.context, local_conversations=turns is None,
        )  # fmt: skip
        self.feedback = FeedbackJoiner(self.assembler, self.pipeline.late_feedback, self.metrics)
        self.receiver: OtlpHttpReceiver | None = None
        self.grpc_receiver: OtlpGrpcReceiver | None = None
        self.sources: list[Source] = []
        if receiver and settings.source == "otlp_http":
            token = settings.auth_token.get_secret_value() if settings.auth_token else None

            def otlp_receiver(kind: type[_R], port: int) -> _R:
                # Both transports: the same intake, limits, token and backpressure.
                return kind(
                    self.ingest,
                    self.metrics,
                    host=settings.host,
                    port=port,
                    max_body_bytes=settings.max_body_bytes,
                    auth_token=token,
                    overloaded=lambda: self.pipeline.overloaded,
                    ingest_logs=self.ingest_logs,
                )

            self.receiver = otlp_receiver(OtlpHttpReceiver, settings.otlp_http_port)
            self.sources.append(self.receiver)
            if settings.otlp_grpc_port:  # 0 = no gRPC receiver
                self.grpc_receiver = otlp_receiver(OtlpGrpcReceiver, settings.otlp_grpc_port)
                self.sources.append(self.grpc_receiver)
        elif receiver and settings.source == "kafka":
            from ragpulse.collector.intake.kafka import KafkaSource

            delivered = turns.delivered if turns is not None else None
            self.sources.append(
                KafkaSource(settings.kafka, self, self.metrics, before_commit=delivered)
            )
            if turns is not None:
                from ragpulse.collector.conversations.turn_consumer import TurnConsumer

                self.sources.append(
                    TurnConsumer(settings.kafka, self.pipeline.conversations, turn_metrics)
                )
        elif receiver and settings.source in BACKEND_SOURCES:
            from ragpulse.collector.stored.follow import FollowSource

            self.sources.append(FollowSource(settings, self, self.metrics, settle=self.settle))
        self._want_metrics_server = metrics_server
        self._metrics_server: WSGIServer | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._log_filter: RedactingFilter | None = None

    # -- intake ---------------------------------------------------------------
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

    def _check_backlog(self) -> None:
        if self.pipeline.overloaded:
            self.metrics.intake_refused.labels("backlog").inc()
            raise CollectorFull("backlog")

    def pressure(self) -> float:
        """How full the bounded stages are (0..1): open traces, held bytes, evaluation
        backlog."""
        held = self.assembler.held_bytes + self.pipeline.backlog_bytes
        return max(
            len(self.assembler) / self.settings.assembly.max_open_traces,
            held / self.settings.assembly.max_held_bytes,
            self.pipeline.backlog / self.settings.evaluation.max_backlog,
        )

    def abandon(self, predicate: Callable[[list[Ack]], bool]) -> int:
        return self.assembler.abandon(predicate)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        self.pipeline.submit(self.assembler.pop_complete())
        return self.pipeline.wait_idle(timeout)

    def settle(self, timeout: float = 10.0) -> bool:
        """Wait until every sink delivered what it was handed (a source that acknowledges
        only delivered results: follow mode); False when one did not within ``timeout``."""
        deadline = time.monotonic() + timeout
        return all(
            sink.force_flush(max(0.0, deadline - time.monotonic())) for sink in self.pipeline.sinks
        )

    def flush(self, timeout: float = 10.0) -> bool:
        """Close every open trace now and wait until it is exported (tests, demo, replay)."""
        self.pipeline.submit(self.assembler.drain())
        return self.pipeline.wait_idle(timeout)

    # -- lifecycle --------------------------------------------------------------
    def start(self) -> Collector:
        """Start everything; a port that cannot be bound raises :class:`PortUnavailable`
        (one line naming the port and the flag that moves it) with nothing left running."""
        s = self.settings
        # Log lines leave the process too (redaction.apply_to: logs); logging is
        # configured by now (ragpulse serve's basicConfig).
        self._log_filter = install_log_redaction(self.settings)
        self.pipeline.start()
        self._ticker = threading.Thread(target=self._tick, name="ragpulse-assembly", daemon=True)
        self._ticker.start()
        for source in self.sources:
            try:
                source.start()
            except OSError as exc:
                self.stop(timeout=1.0)  # what did start stops again
                if source is self.receiver:
                    raise PortUnavailable(
                        s.host, s.otlp_http_port, "OTLP/HTTP receiver", "--otlp-http-port",
                        "otlp_http_port", exc,
                    ) from exc  # fmt: skip
                if source is self.grpc_receiver:
                    raise PortUnavailable(
                        s.host, s.otlp_grpc_port, "OTLP/gRPC receiver", "--otlp-grpc-port",
                        "otlp_grpc_port", exc,
                    ) from exc  # fmt: skip
                raise
        # /metrics last: it answering means the sources listen too (tests and readiness
        # probes wait on it); a port in use stops what started, leaving nothing running.
        if self._want_metrics_server:
            try:
                self._metrics_server = start_metrics_server(
                    s.host, s.metrics_port, self.metrics.registry
                )
            except PortUnavailable:
                self.stop(timeout=1.0)
                raise
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop intake, evaluate what is open and queued, acknowledge, shut the sinks down.

        Bounded by ``timeout`` (default ``settings.shutdown_timeout_s``) for the drain:
        the cheap tier finishes first, costly tiers finish their queues if their models
        are loaded (a load in progress is abandoned) and otherwise skip the rest (counted);
        a fifth of the bound, at most 2 s, is kept for the sinks' own shutdown.
        """
        timeout = self.settings.shutdown_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        for source in self.sources:
            source.stop()
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(max(0.0, min(5.0, deadline - time.monotonic())))
        self.pipeline.submit(self.assembler.drain())
        reserve = min(2.0, timeout / 5)
        self.pipeline.stop(max(0.0, deadline - reserve - time.monotonic()), sinks_deadline=deadline)
        for source in self.sources:
            source.close()
        self.context.close()  # judge clients' event loops
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
            self._metrics_server = None
        if self._log_filter is not None:
            remove_log_redaction(self._log_filter)
            self._log_filter = None

    def __enter__(self) -> Collector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def otlp_url(self) -> str | None:
        return self.receiver.url if self.receiver is not None else None

    @property
    def otlp_grpc_target(self) -> str | None:
        """``host:port`` of the OTLP/gRPC receiver, when it runs."""
        return self.grpc_receiver.target if self.grpc_receiver is not None else None

    @property
    def metrics_url(self) -> str | None:
        if self._metrics_server is None:
            return None
        return f"http://{self.settings.host}:{self._metrics_server.server_port}/metrics"

    def _tick(self) -> None:
        while not self._stop.wait(self.settings.assembly.tick_s):
            try:
                completed = self.assembler.pop_complete()
                if completed:
                    self.pipeline.submit(completed)
                self.metrics.held_bytes.set(self.assembler.held_bytes + self.pipeline.backlog_bytes)
            except Exception:  # the ticker must survive anything
                log.exception("assembly tick failed")
