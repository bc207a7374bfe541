"""Completed traces -> records -> evaluators (by tier) -> sinks.

Intake never waits for evaluation: completed traces queue here, and the
receiver answers 503 (retryable) when the backlog passes its bound instead
of growing memory. The cheap tier runs on one worker thread over every
record; records the sampler picks for a costly tier then queue for that tier's
stage (its own daemon worker, bounded queue, batched inference). A record is
exported once, with all its results, after its last tier.

The costly tiers never hold the cheap tier back: the model tier runs only while
the cheap tier is idle, a few records at a time, within a budget
(``evaluation.model_budget``, a share of wall-clock time), and a record waits for
it at most ``model_max_delay_s``. (Not a lower OS priority: a thread that holds
the GIL while the scheduler holds it back stalls the cheap tier too.) A full
queue, a spent budget, a passed deadline or a shutdown skips the tier for that
record (counted in ``ragpulse_tier_skipped_total`` by reason); its other results
are exported at once. Models load in the background, and only for a tier that
some record can reach.

Every trace is finished exactly once: its records exported, or the trace
skipped and counted; then its source acknowledgements are released.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragpulse import semconv as sc
from ragpulse.collector.assembly import CompletedTrace
from ragpulse.collector.extract import extract_records
from ragpulse.collector.feedback import feedback_result
from ragpulse.collector.sampling import SamplingPolicy, sampled_attributes
from ragpulse.config import EvaluationSettings, Settings
from ragpulse.evaluation import evaluate_records, load_evaluators_safely
from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.exporters.base import Sink
from ragpulse.plugin_context import PluginContext
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


class _Budget:
    """Seconds of tier work allowed per second of wall clock: a token bucket over busy time.

    Work runs only while the bucket is positive, and each evaluation is charged the
    wall time it took, so the tier is busy at most ``share`` of the time (plus one
    slice). A record is admitted while the work already waiting, at what a record
    has cost lately, still fits. Busy wall time, not CPU time: a tier slowed by a
    contended CPU looks costlier and gets less, which is the point (the cheap tier
    comes first).
    """

    WINDOW_S = 2.0  # the bucket holds this many seconds' worth of the share: small bursts

    def __init__(self, share: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.share = share
        self._clock = clock
        self._capacity = share * self.WINDOW_S
        self._tokens = self._capacity
        self._at = clock()
        self._per_record: float | None = None  # seconds, once an evaluation has been timed
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._capacity, self._tokens + (now - self._at) * self.share)
        self._at = now

    def admits(self, waiting: int) -> bool:
        """Whether one more record fits, with ``waiting`` records queued before it.

        Until a first evaluation is timed the cost is unknown and only the queue bound
        and the records' deadlines limit what waits.
        """
        with self._lock:
            self._refill()
            if self._per_record is None:
                return self._tokens > 0
            return self._tokens - self._per_record * waiting > 0

    def wait_s(self) -> float:
        """How long until work may run again (0: now)."""
        with self._lock:
            self._refill()
            return 0.0 if self._tokens > 0 else -self._tokens / self.share + 0.001

    def spent(self, seconds: float, records: int) -> None:
        """An evaluation of ``records`` took ``seconds``."""
        with self._lock:
            self._refill()
            self._tokens -= seconds
            cost = seconds / max(1, records)
            last = self._per_record
            self._per_record = cost if last is None else 0.7 * last + 0.3 * cost


@dataclass
class _Queued:
    job: _Job
    deadline: float


class _TierStage:
    """One costly tier: a bounded queue, a budget, and one daemon worker that loads the
    tier's models and evaluates batches.

    Models load on the worker, in the background: at start when a rate routes records
    here, else on the first record routed here (a priority rule), never when nothing
    can be. A record waits at most ``max_delay_s`` in the queue (a load in progress
    included); past it, or when the queue is full or the budget spent, the tier is
    skipped for that record and counted, so its cheap results go out without waiting.
    After evaluating, jobs go back to the pipeline, which routes them to the next tier
    or exports them. ``stop`` never waits for a load: it hands the queued jobs back.
    """

    SLICE = 1  # records per evaluate call when yielding to the cheap tier

    def __init__(
        self,
        tier: Tier,
        evaluators: Sequence[Evaluator],
        forward: Callable[[_Job], None],
        metrics: CollectorMetrics,
        batch_size: int,
        max_wait_s: float,
        max_queue: int,
        *,
        context: PluginContext | None = None,
        budget: float | None = None,
        max_delay_s: float = float("inf"),
        cheap_idle: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tier = tier
        self._evaluators = list(evaluators)
        self._forward = forward
        self._metrics = metrics
        self._context = context if context is not None else PluginContext(metrics=metrics)
        self._batch_size, self._max_wait_s, self._max_queue = batch_size, max_wait_s, max_queue
        self._budget = _Budget(budget, clock) if budget is not None else None
        self._max_delay_s, self._clock = max_delay_s, clock
        self._cheap_idle = cheap_idle  # set while the cheap tier has nothing to do
        # Records per evaluate call: a call cannot be interrupted, so while it yields to
        # the cheap tier a stage evaluates a few records at a time, checking in between.
        self._slice = batch_size if cheap_idle is None else min(batch_size, self.SLICE)
        self._jobs: deque[_Queued] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._wanted = False  # load now: set at start (rates) or by the first offer
        self._ready = False  # models loaded (or found unloadable): batches can run
        self._closed = False  # stop() was called: no new jobs
        self._abandoned = False  # stop() gave up: the worker forwards nothing more

    def start(self, load_now: bool) -> None:
        with self._cond:
            self._wanted = self._wanted or load_now
        name = f"ragpulse-{self.tier.value}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def offer(self, job: _Job) -> str | None:
        """Queue a job; else the reason it was not (counted)."""
        reason: str | None = None
        with self._cond:
            if self._closed:
                reason = "shutdown"
            elif len(self._jobs) >= self._max_queue:
                reason = "queue_full"
            elif self._budget is not None and not self._budget.admits(len(self._jobs)):
                reason = "budget"
            else:
                self._jobs.append(_Queued(job, self._clock() + self._max_delay_s))
                self._wanted = True
                self._cond.notify_all()
        if reason is not None:
            self._metrics.tier_skipped.labels(self.tier.value, reason).inc()
        return reason

    def expire(self) -> None:
        """Hand back the jobs that waited past their deadline (any thread may call it)."""
        try:
            head = self._jobs[0]  # the usual case needs no lock: a stale read only waits a call
        except IndexError:
            return
        if head.deadline > self._clock():
            return
        with self._cond:
            late = self._pop_late()
        self._skip(late, "deadline")

    def _pop_late(self) -> list[_Queued]:
        now, late = self._clock(), []
        while self._jobs and self._jobs[0].deadline <= now:
            late.append(self._jobs.popleft())
        return late

    def _skip(self, queued: Sequence[_Queued], reason: str) -> None:
        if not queued:
            return
        self._metrics.tier_skipped.labels(self.tier.value, reason).inc(len(queued))
        for q in queued:
            q.job.sampled[self.tier] = f"skipped:{reason}"
            self._forward(q.job)

    def stop(self, deadline: float) -> None:
        """Finish the queue by ``deadline`` if the models are loaded; never wait for a load.

        Jobs not evaluated by then skip the tier (reason ``shutdown``) and are exported
        with their other results; a batch still running is abandoned (its records are
        neither exported nor acknowledged, so a Kafka source reads them again).
        """
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            ready = self._ready
            if not ready:  # loading, or never asked to: the worker exits when it can
                self._abandoned = True
                left = list(self._jobs)
                self._jobs.clear()
        if not ready:
            self._skip(left, "shutdown")
            return
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - self._clock()))
            if self._thread.is_alive():
                with self._cond:
                    self._abandoned = True
                    left = list(self._jobs)
                    self._jobs.clear()
                log.warning(
                    "%s tier still busy at the shutdown deadline: %d queued records skip it",
                    self.tier.value,
                    len(left),
                )
                self._skip(left, "shutdown")
        self._thread = None

    def _run(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._wanted or self._closed)
            if self._closed:
                return
        evaluators = load_evaluators_safely(self._evaluators, self._context)
        with self._cond:
            self._evaluators, self._ready = evaluators, True
            if self._abandoned:
                return
        while True:
            self._wait_turn()
            batch, late = self._take()
            self._skip(late, "deadline")
            if batch is None:
                return
            if not batch:
                continue
            first = True
            while batch:  # in slices: the cheap tier and the budget first, between them
                if not first and self._wait_turn(queued=False):
                    now = self._clock()
                    self._skip([q for q in batch if q.deadline <= now], "deadline")
                    batch = [q for q in batch if q.deadline > now]
                first = False
                part, batch = batch[: self._slice], batch[self._slice :]
                if part and not self._evaluate(part, evaluators):
                    return  # stop() gave up on this batch: the sinks may be shut down

    def _evaluate(self, batch: list[_Queued], evaluators: Sequence[Evaluator]) -> bool:
        """Evaluate and forward a slice; False when stop() abandoned it meanwhile."""
        start = time.perf_counter()
        try:
            scored = evaluate_records([q.job.record for q in batch], evaluators, self._metrics)
            for q, results in zip(batch, scored, strict=True):
                q.job.results.extend(results)
        except Exception:  # evaluate() never raises; this guards the worker
            log.exception("%s-tier batch failed", self.tier.value)
        if self._budget is not None:
            self._budget.spent(time.perf_counter() - start, len(batch))
        if self._abandoned:
            return False
        for q in batch:
            self._forward(q.job)
        return True

    def _wait_turn(self, queued: bool = True) -> bool:
        """Wait until this tier may run: the cheap tier idle (its queue empty) and the
        budget positive, or stopping; with ``queued``, for a job first. Under a
        saturated cheap tier or a spent budget, jobs wait for their deadline instead
        of taking the CPU. Whether it waited at all."""
        if queued:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._jobs) or self._closed)
        waited = False
        while not self._closed:
            if self._cheap_idle is not None and not self._cheap_idle.is_set():
                self._cheap_idle.wait(0.5)
            elif self._budget is not None and (pause := self._budget.wait_s()) > 0:
                with self._cond:  # woken early by stop()
                    self._cond.wait_for(lambda: self._closed, min(pause, 0.5))
            else:
                return waited
            waited = True
        return waited

    def _take(self) -> tuple[list[_Queued] | None, list[_Queued]]:
        """(a batch, or None to stop; jobs past their deadline). Waits up to ``max_wait_s``
        after the first job for a fuller batch, except once stopping."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._jobs) or self._closed)
            if not self._jobs:
                return None, []
            fill_by = self._clock() + self._max_wait_s
            while len(self._jobs) < self._batch_size and not self._closed:
                left = fill_by - self._clock()
                if left <= 0 or not self._cond.wait(left):
                    break
            late = self._pop_late()
            n = min(self._batch_size, len(self._jobs))
            return [self._jobs.popleft() for _ in range(n)], late


_Item = CompletedTrace | _Job  # what the cheap worker takes: traces, and late updates


def _take_batch(
    q: queue.Queue[_Item | None], size: int, max_wait: float, idle: float | None = None
) -> tuple[list[_Item], bool]:
    """Up to ``size`` items, waiting at most ``max_wait`` after the first; None = stop.

    With ``idle``, gives up (an empty batch) when nothing came for that long.
    """
    try:
        first = q.get(timeout=idle)
    except queue.Empty:
        return [], False
    if first is None:
        return [], True
    batch = [first]
    deadline = time.monotonic() + max_wait
    while len(batch) < size:
        try:
            item = (
                q.get_nowait()
                if q.qsize()
                else q.get(timeout=max(0.0, deadline - time.monotonic()))
            )
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
    IDLE_TICK_S = 1.0  # an idle cheap worker still wakes this often to expire waiting jobs

    def __init__(
        self,
        evaluators: Sequence[Evaluator],
        sinks: Sequence[Sink],
        metrics: CollectorMetrics,
        settings: EvaluationSettings | None = None,
        sampler: SamplingPolicy | None = None,
        context: PluginContext | None = None,
    ) -> None:
        self._settings = s = settings or EvaluationSettings()
        self.evaluators = list(evaluators)
        self.cheap = [e for e in evaluators if e.tier == Tier.CHEAP]
        self.by_tier = {t: [e for e in evaluators if e.tier == t] for t in self.COSTLY_TIERS}
        self.sinks = list(sinks)
        self._metrics = metrics
        # What the evaluators load with (settings, shared models and judge clients).
        self.context = context or PluginContext(Settings(evaluation=s), metrics)
        self._sampler = sampler or SamplingPolicy(s)
        # Traces to evaluate, late updates to export, None = stop.
        self._queue: queue.Queue[CompletedTrace | _Job | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._abandon = threading.Event()  # stop() gave up waiting for the cheap worker
        self._cheap_idle = threading.Event()  # the model tier runs only while this is set
        self._cheap_idle.set()
        self._recent: OrderedDict[str, tuple[RagRecord, list[EvalResult]]] = OrderedDict()
        self._recent_lock = threading.Lock()
        self._sampled_counters: dict[tuple[Tier, str], Any] = {}  # labels() costs per call
        self._stages = {
            tier: self._stage(tier, evs)
            for tier, evs in self.by_tier.items()
            if evs and self._sampler.can_reach(tier)
            and not (tier == Tier.MODEL and s.model_budget <= 0)
        }  # fmt: skip
        for tier, evs in self.by_tier.items():
            if evs and tier not in self._stages:
                log.info(
                    "%s tier off (no rate, budget or priority rule sends records there): "
                    "its models are not loaded",
                    tier.value,
                )
        self._pending = 0  # traces submitted and not yet finished
        self._pending_cond = threading.Condition()

    def _stage(self, tier: Tier, evaluators: Sequence[Evaluator]) -> _TierStage:
        s = self._settings
        if tier == Tier.MODEL:
            return _TierStage(
                tier, evaluators, self._route, self._metrics,
                s.model_batch_size, s.model_max_wait_s, s.model_max_queue, context=self.context,
                budget=s.model_budget, max_delay_s=s.model_max_delay_s,
                cheap_idle=self._cheap_idle,
            )  # fmt: skip
        j = s.judge  # budgeted in calls and tokens by the judges themselves
        return _TierStage(tier, evaluators, self._route, self._metrics, j.batch_size,
                          j.max_wait_s, j.max_queue, context=self.context)  # fmt: skip

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    @property
    def overloaded(self) -> bool:
        return self._queue.qsize() >= self._settings.max_backlog

    def submit(self, traces: Sequence[CompletedTrace]) -> None:
        if not traces:
            return
        with self._pending_cond:
            self._pending += len(traces)
        for trace in traces:
            self._queue.put(trace)
        self._metrics.eval_backlog.set(self._queue.qsize())

    def start(self) -> None:
        if self._thread is None:
            self.cheap = load_evaluators_safely(self.cheap, self.context)
            self._thread = threading.Thread(target=self._run, name="ragpulse-eval", daemon=True)
            self._thread.start()
            for tier, stage in self._stages.items():
                # Load at once when a rate sends records; for priority rules only, on demand.
                stage.start(load_now=self._sampler.by_rate(tier))

    def stop(self, timeout: float = 30.0, sinks_deadline: float | None = None) -> None:
        """Finish what is queued, within ``timeout`` in all, then shut the sinks down
        (waiting until ``sinks_deadline``, a ``time.monotonic()`` value, at most; None:
        as long as they take).

        The cheap tier drains first; the costly tiers then finish their queues if their
        models are loaded (never waiting for a load), else their records skip them.
        What is still running at the deadline is abandoned, neither exported nor
        acknowledged.
        """
        deadline = time.monotonic() + timeout
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(max(0.0, deadline - time.monotonic()))
            if self._thread.is_alive():
                self._abandon.set()
                log.warning("evaluation worker did not finish within %.1fs", timeout)
            self._thread = None
        for tier in self.COSTLY_TIERS:  # in flow order: a model job may still go to the judge
            if tier in self._stages:
                self._stages[tier].stop(deadline)
        if sinks_deadline is None:
            self._shutdown_sinks()
            return
        closing = threading.Thread(target=self._shutdown_sinks, name="ragpulse-sinks", daemon=True)
        closing.start()
        closing.join(max(0.0, sinks_deadline - time.monotonic()))
        if closing.is_alive():
            log.warning("sinks still shutting down at the shutdown deadline; not waiting")

    def _shutdown_sinks(self) -> None:
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
        while not self._abandon.is_set():
            batch, stop = _take_batch(self._queue, s.batch_size, s.max_wait_s, self.IDLE_TICK_S)
            if batch and not self._abandon.is_set():
                self._cheap_idle.clear()
                try:
                    self._process(batch, inline=False)
                except Exception:  # never let the worker die; _process() already guards
                    log.exception("evaluation batch failed")
            if stop or self._queue.empty():
                self._cheap_idle.set()
            for stage in self._stages.values():
                stage.expire()
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
            for record in found:
                notes = record.attributes.get(sc.RAGPULSE_COERCED)
                for note in notes if isinstance(notes, list) else ():
                    # The label is the field only ("document.score"): bounded cardinality.
                    self._metrics.coerced.labels(str(note).split(":", 1)[0]).inc()
            ticket = _TraceTicket(trace, len(found), self._trace_finished if not inline else _noop)
            jobs.extend(_Job(record, ticket) for record in found)
        cheap = evaluate_records([j.record for j in jobs], self.cheap, self._metrics)
        # Costly tiers a record can go to: inline, every tier with evaluators; else the
        # tiers with a running stage (none for a tier that nothing can reach).
        tiers = [t for t in self.COSTLY_TIERS if (self.by_tier[t] if inline else t in self._stages)]
        for job, results in zip(jobs, cheap, strict=True):
            job.results.extend(results)
            feedback = feedback_result(job.record.attributes)
            if feedback is not None:
                job.results.append(feedback)
            job.sampled = {Tier.CHEAP: "all"}
            for tier in tiers:
                why = self._sampler.reason(job.record, tier, job.results)
                if why is not None:
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
        """Send a job to its next costly tier, or export it when none is left (or takes it)."""
        while job.tiers:
            tier = job.tiers.pop(0)
            stage = self._stages.get(tier)
            skipped = stage.offer(job) if stage is not None else "unavailable"
            if skipped is None:
                return
            job.sampled[tier] = f"skipped:{skipped}"
        self._export(job)

    def _export(self, job: _Job) -> None:
        counters = self._sampled_counters
        for tier_why in job.sampled.items():
            if (counter := counters.get(tier_why)) is None:
                counter = counters[tier_why] = self._metrics.sampled.labels(
                    tier_why[0].value, tier_why[1]
                )
            counter.inc()
        if job.sampled:
            # In place, not a copy: the pipeline built this record (extraction or a late
            # update) and nobody has seen it yet; a pydantic copy per record is costly.
            job.record.attributes.update(sampled_attributes(job.sampled))
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
