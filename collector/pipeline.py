"""Completed traces -> records -> evaluators (by tier) -> sinks.

Intake never waits for evaluation: completed traces queue here, and the
receiver answers 503 (retryable) when the backlog passes its bound instead
of growing memory. The cheap tier runs on one worker thread over every
record; records the sampler picks for the model tier then queue for the model
stage (its own worker, bounded queue, batched inference). A record is exported
once, with all its results, after its last tier. A full model queue skips the
tier for that record (counted), it never blocks the cheap tier.

Every trace is finished exactly once: its records exported, or the trace
skipped and counted; then its source acknowledgements are released.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ragpulse.collector.assembly import CompletedTrace
from ragpulse.collector.extract import extract_records
from ragpulse.collector.feedback import feedback_result
from ragpulse.collector.sampling import SamplingPolicy, sampled_attributes
from ragpulse.config import EvaluationSettings
from ragpulse.evaluation import evaluate_records, load_evaluators_safely
from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.exporters.base import Sink
from ragpulse.record import AttributeValue, EvalResult, RagRecord
from ragpulse.telemetry import CollectorMetrics

log = logging.getLogger(__name__)


class _TraceTicket:
    """Releases a trace (acks, pending count) once all its records are exported."""

    def __init__(self, trace: CompletedTrace, records: int, done: Callable[[], None]) -> None:
        self._trace, self._left, self._done = trace, records, done
        self._lock = threading.Lock()
        if records == 0:
            self._finish()

    def record_done(self) -> None:
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self._finish()

    def _finish(self) -> None:
        self._trace.release()
        self._done()


@dataclass
class _Job:
    record: RagRecord
    ticket: _TraceTicket | None  # None: a late update (feedback), not part of a trace
    results: list[EvalResult] = field(default_factory=list)
    tiers: list[Tier] = field(default_factory=list)  # costly tiers still to run, in order
    sampled: dict[Tier, str] = field(default_factory=dict)  # tier -> why it was chosen


class _TierStage:
    """One costly tier: a bounded queue and one worker that evaluates batches.

    Models and clients load on the worker (``load_evaluators_safely``), so a slow
    or failing load never delays intake. After evaluating, jobs go back to the
    pipeline, which routes them to the next tier or exports them.
    """

    def __init__(
        self,
        tier: Tier,
        evaluators: Sequence[Evaluator],
        forward: Callable[[_Job], None],
        metrics: CollectorMetrics,
        batch_size: int,
        max_wait_s: float,
        max_queue: int,
    ) -> None:
        self.tier = tier
        self._evaluators = list(evaluators)
        self._forward = forward
        self._metrics = metrics
        self._batch_size, self._max_wait_s = batch_size, max_wait_s
        self._queue: queue.Queue[_Job | None] = queue.Queue(maxsize=max_queue)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        name = f"ragpulse-{self.tier.value}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def offer(self, job: _Job) -> bool:
        """Queue a job; False (counted) when the queue is full."""
        try:
            self._queue.put_nowait(job)
            return True
        except queue.Full:
            self._metrics.tier_skipped.labels(self.tier.value, "queue_full").inc()
            return False

    def stop(self, timeout: float) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        self._evaluators = load_evaluators_safely(self._evaluators, self._metrics)
        while True:
            batch, stop = _take_batch(self._queue, self._batch_size, self._max_wait_s)
            if batch:
                try:
                    scored = evaluate_records(
                        [j.record for j in batch], self._evaluators, self._metrics
                    )
                    for job, results in zip(batch, scored, strict=True):
                        job.results.extend(results)
                except Exception:  # evaluate() never raises; this guards the worker
                    log.exception("%s-tier batch failed", self.tier.value)
                for job in batch:
                    self._forward(job)
            if stop:
                return


T = TypeVar("T")


def _take_batch(q: queue.Queue[T | None], size: int, max_wait: float) -> tuple[list[T], bool]:
    """Up to ``size`` items, waiting at most ``max_wait`` after the first; None = stop."""
    first = q.get()
    if first is None:
        return [], True
    batch = [first]
    deadline = time.monotonic() + max_wait
    while len(batch) < size:
        try:
            item = q.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if item is None:
            return batch, True
        batch.append(item)
    return batch, False


class Pipeline:
    """Thread-safe ``submit``; worker threads do the rest."""

    COSTLY_TIERS = (Tier.MODEL, Tier.JUDGE)
    RECENT = 10_000  # exported records kept for late feedback

    def __init__(
        self,
        evaluators: Sequence[Evaluator],
        sinks: Sequence[Sink],
        metrics: CollectorMetrics,
        settings: EvaluationSettings | None = None,
        sampler: SamplingPolicy | None = None,
    ) -> None:
        self._settings = s = settings or EvaluationSettings()
        self.evaluators = list(evaluators)
        self.cheap = [e for e in evaluators if e.tier == Tier.CHEAP]
        self.by_tier = {t: [e for e in evaluators if e.tier == t] for t in self.COSTLY_TIERS}
        self.sinks = list(sinks)
        self._metrics = metrics
        self._sampler = sampler or SamplingPolicy(s)
        # Traces to evaluate, late updates to export, None = stop.
        self._queue: queue.Queue[CompletedTrace | _Job | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._recent: OrderedDict[str, tuple[RagRecord, list[EvalResult]]] = OrderedDict()
        self._recent_lock = threading.Lock()
        sizes = {
            Tier.MODEL: (s.model_batch_size, s.model_max_wait_s, s.model_max_queue),
            Tier.JUDGE: (s.judge.batch_size, s.judge.max_wait_s, s.judge.max_queue),
        }
        self._stages = {
            tier: _TierStage(tier, evs, self._route, metrics, *sizes[tier])
            for tier, evs in self.by_tier.items()
            if evs
        }
        self._pending = 0  # traces submitted and not yet finished
        self._pending_cond = threading.Condition()

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    @property
    def overloaded(self) -> bool:
        return self._queue.qsize() >= self._settings.max_backlog

    def submit(self, traces: Sequence[CompletedTrace]) -> None:
        with self._pending_cond:
            self._pending += len(traces)
        for trace in traces:
            self._queue.put(trace)
        self._metrics.eval_backlog.set(self._queue.qsize())

    def start(self) -> None:
        if self._thread is None:
            self.cheap = load_evaluators_safely(self.cheap, self._metrics)
            self._thread = threading.Thread(target=self._run, name="ragpulse-eval", daemon=True)
            self._thread.start()
            for stage in self._stages.values():
                stage.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Finish what is queued in every tier, then stop and shut the sinks down."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("evaluation worker did not finish within %.0fs", timeout)
            self._thread = None
        for tier in self.COSTLY_TIERS:  # in flow order: a model job may still go to the judge
            if tier in self._stages:
                self._stages[tier].stop(timeout)
        for sink in self.sinks:
            try:
                sink.shutdown()
            except Exception:
                log.exception("sink %s failed to shut down", sink.name)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until every trace submitted so far is exported (tests, demo, rebalances)."""
        with self._pending_cond:
            return self._pending_cond.wait_for(lambda: self._pending == 0, timeout)

    def _trace_finished(self) -> None:
        with self._pending_cond:
            self._pending -= 1
            self._pending_cond.notify_all()

    def _run(self) -> None:
        s = self._settings
        while True:
            batch, stop = _take_batch(self._queue, s.batch_size, s.max_wait_s)
            if batch:
                try:
                    self._process(batch, inline=False)
                except Exception:  # never let the worker die; _process() already guards
                    log.exception("evaluation batch failed")
            self._metrics.eval_backlog.set(self._queue.qsize())
            if stop:
                return

    def process(self, traces: Sequence[CompletedTrace]) -> None:
        """Synchronous: every tier inline, on the calling thread (tests, replay)."""
        self._process(traces, inline=True)

    def _process(self, items: Sequence[CompletedTrace | _Job], inline: bool) -> None:
        for update in (i for i in items if isinstance(i, _Job)):
            self._export(update)
        traces = [i for i in items if isinstance(i, CompletedTrace)]
        jobs: list[_Job] = []
        for trace in traces:
            try:
                found, skip_reason = extract_records(trace.spans, trace.annotations)
            except Exception:
                log.exception("extraction failed for trace %s", trace.trace_id)
                found, skip_reason = [], "extraction_error"
            if skip_reason:
                self._metrics.traces_skipped.labels(skip_reason).inc()
            ticket = _TraceTicket(trace, len(found), self._trace_finished if not inline else _noop)
            jobs.extend(_Job(record, ticket) for record in found)
        cheap = evaluate_records([j.record for j in jobs], self.cheap, self._metrics)
        for job, results in zip(jobs, cheap, strict=True):
            job.results.extend(results)
            feedback = feedback_result(job.record.attributes)
            if feedback is not None:
                job.results.append(feedback)
            job.sampled = {Tier.CHEAP: "all"}
            for tier in self.COSTLY_TIERS:
                why = self._sampler.reason(job.record, tier, job.results)
                if why is not None and self.by_tier[tier]:
                    job.sampled[tier] = why
                    job.tiers.append(tier)
        if inline:
            for tier in self.COSTLY_TIERS:
                chosen = [j for j in jobs if tier in j.tiers]
                scored = evaluate_records([j.record for j in chosen], self.by_tier[tier])
                for job, results in zip(chosen, scored, strict=True):
                    job.results.extend(results)
            for job in jobs:
                self._export(job)
            return
        for job in jobs:
            self._route(job)

    def _route(self, job: _Job) -> None:
        """Send a job to its next costly tier, or export it when none is left (or all full)."""
        while job.tiers:
            tier = job.tiers.pop(0)
            stage = self._stages.get(tier)
            if stage is not None and stage.offer(job):
                return
            job.sampled[tier] = "skipped:queue_full"
        self._export(job)

    def _export(self, job: _Job) -> None:
        for tier, why in job.sampled.items():
            self._metrics.sampled.labels(tier.value, why).inc()
        if job.sampled:
            attributes = {**job.record.attributes, **sampled_attributes(job.sampled)}
            job.record = job.record.model_copy(update={"attributes": attributes})
        for sink in self.sinks:
            try:
                sink.export(job.record, job.results)
            except Exception:
                log.exception("sink %s failed on trace %s", sink.name, job.record.trace_id)
                self._metrics.sink_errors.labels(sink.name).inc()
        self._metrics.records_evaluated.inc()
        with self._recent_lock:
            self._recent[job.record.trace_id] = (job.record, job.results)
            while len(self._recent) > self.RECENT:
                self._recent.popitem(last=False)
        if job.ticket is not None:
            job.ticket.record_done()

    def late_feedback(self, trace_id: str, attributes: dict[str, AttributeValue]) -> bool:
        """Export a late update for a recently evaluated trace; False when it is unknown.

        Thread-safe: the update is queued for the evaluation worker, which owns the sinks.
        """
        with self._recent_lock:
            known = self._recent.get(trace_id)
        result = feedback_result(attributes)
        if known is None or result is None:
            return False
        record = known[0].model_copy(update={"attributes": {**known[0].attributes, **attributes}})
        self._queue.put(_Job(record, None, [result]))
        return True


def _noop() -> None:
    pass
