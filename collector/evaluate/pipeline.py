"""Completed traces -> records -> evaluators (by tier) -> sinks.

Intake never waits for evaluation: completed traces queue here, and the
receivers answer 503 / UNAVAILABLE (retryable) when the backlog passes its bound
instead of growing memory. The cheap tier runs on one worker thread over every
record; records the sampler picks for a costly tier then queue for that tier's
stage (:mod:`ragpulse.collector.evaluate.tier_stage`: its own worker, bounded queue,
deadline, batched inference).

Cheap results never wait for a costly tier. A record sampled for one is held at
most ``evaluation.max_export_delay_s`` (2 s): when its costly tiers finish
within that, it is exported once with every result; otherwise what exists is
exported then (``ragpulse.pending`` lists the tiers still running) and each
costly tier's results follow as an update of the same record
(``ragpulse.update`` names the tier; the results are that tier's only). A tier
that skips the record (full queue, budget, deadline, shutdown) says so in
``ragpulse.sampled.<tier>`` (``skipped:<reason>``), in an update when the record
was already exported.

The costly tiers never hold the cheap tier back: the model tier runs only while
the cheap tier is idle, within a budget (``evaluation.model.budget``), and a
record waits in a tier's queue at most its ``max_delay_s`` (``evaluation.model`` and
``evaluation.judge`` take the same settings, :class:`~ragpulse.config.TierSettings`).

Every trace is finished exactly once: all its records' results exported (or the
trace skipped and counted); then its source acknowledgements are released, so a
Kafka offset is committed only once the costly tiers are done with it too.
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
from ragpulse.collector.assembly.assembler import CompletedTrace
from ragpulse.collector.conversations.stage import ConversationStage
from ragpulse.collector.evaluate.feedback import feedback_result
from ragpulse.collector.evaluate.sampling import (
    SamplingPolicy,
    reason_label,
    sampled_attributes,
)
from ragpulse.collector.evaluate.tier_stage import TierStage
from ragpulse.collector.extract.records import extract_records
from ragpulse.config import EvaluationSettings, Settings
from ragpulse.evaluation import evaluate_records, load_evaluators_safely
from ragpulse.evaluators.base import ConversationEvaluator, Evaluator, Tier
from ragpulse.exporters.base import Sink
from ragpulse.plugin_context import PluginContext
from ragpulse.record import AttributeValue, ConversationRecord, EvalResult, RagRecord
from ragpulse.telemetry import CollectorMetrics

log = logging.getLogger(__name__)


class _TraceTicket:
    """Releases a trace (acks, pending count) once all its records are finished."""

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


@dataclass(eq=False)
class _Job:
    """One record on its way through the tiers. Changed only under the pipeline's lock."""

    record: RagRecord
    ticket: _TraceTicket | None  # None: a late update (feedback), not part of a trace
    results: list[EvalResult] = field(default_factory=list)
    tiers: list[Tier] = field(default_factory=list)  # costly tiers still to run, in order
    sampled: dict[Tier, str] = field(default_factory=dict)  # tier -> why it was chosen
    running: Tier | None = None  # the costly tier that has it now
    exported: int = 0  # how many of ``results`` the sinks have seen
    shown: bool = False  # exported once already: what follows are updates
    finished: bool = False  # every tier done or skipped, and exported

    @property
    def pending(self) -> list[Tier]:
        return [*([self.running] if self.running else []), *self.tiers]


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


class _Holds:
    """Records waiting for their costly tiers, each until its export deadline.

    The delay is one setting, so deadlines come in order and a deque suffices. One
    daemon thread calls ``due`` for each record whose deadline passed.
    """

    def __init__(self, delay_s: float, due: Callable[[_Job], None]) -> None:
        self._delay_s, self._due = delay_s, due
        self._waiting: deque[tuple[float, _Job]] = deque()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="ragpulse-export", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def hold(self, job: _Job) -> None:
        with self._cond:
            self._waiting.append((time.monotonic() + self._delay_s, job))
            if len(self._waiting) == 1:
                self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    now = time.monotonic()
                    if self._waiting and self._waiting[0][0] <= now:
                        break
                    self._cond.wait(self._waiting[0][0] - now if self._waiting else None)
                if self._stopped:
                    return
                due = []
                while self._waiting and self._waiting[0][0] <= now:
                    due.append(self._waiting.popleft()[1])
            for job in due:
                try:
                    self._due(job)
                except Exception:  # the thread must survive anything
                    log.exception("export at the deadline failed")


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
        local_conversations: bool = True,
    ) -> None:
        """``local_conversations`` False: turns reach :attr:`conversations` from elsewhere
        (the Kafka turn topic, through a sink that writes them there), so an export does
        not add them, and a stop leaves open conversations open (they are read again)."""
        self._settings = s = settings or EvaluationSettings()
        self._local_conversations = local_conversations
        self.evaluators = list(evaluators)
        self.cheap = [e for e in evaluators if e.tier == Tier.CHEAP]
        # Turn records' costly tiers; the conversation stage runs the conversation metrics.
        self.by_tier = {
            t: [e for e in evaluators if e.tier == t and not isinstance(e, ConversationEvaluator)]
            for t in self.COSTLY_TIERS
        }
        self.sinks = list(sinks)
        self._metrics = metrics
        # What the evaluators load with (settings, shared models and judge clients).
        self.context = context or PluginContext(Settings(evaluation=s), metrics)
        self._sampler = sampler or SamplingPolicy(s, metrics)
        # Traces to evaluate, late updates to export, None = stop.
        self._queue: queue.Queue[CompletedTrace | _Job | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._abandon = threading.Event()  # stop() gave up waiting for the cheap worker
        self._cheap_idle = threading.Event()  # the model tier runs only while this is set
        self._cheap_idle.set()
        # Jobs change state and sinks are called under this lock: from the cheap worker,
        # the tier workers and the deadline thread, one export at a time.
        self._lock = threading.RLock()
        self._holds = _Holds(s.max_export_delay_s, self._deadline)
        # The record alone, not its results: a late update carries only the feedback's.
        self._recent: OrderedDict[str, RagRecord] = OrderedDict()
        self._sampled_counters: dict[tuple[Tier, str], Any] = {}  # labels() costs per call
        self._stages = {
            tier: self._stage(tier, evs)
            for tier, evs in self.by_tier.items()
            if evs and self._sampler.can_reach(tier)
            and not (tier == Tier.MODEL and s.model.budget <= 0)
        }  # fmt: skip
        for tier, evs in self.by_tier.items():
            if evs and tier not in self._stages:
                log.info(
                    "%s tier off (no rate, budget or priority rule sends records there): "
                    "its models are not loaded",
                    tier.value,
                )
        self.conversations = ConversationStage(
            self.context.settings.conversations,
            [e for e in evaluators if isinstance(e, ConversationEvaluator)],
            self._export_conversation,
            metrics,
            sampler=self._sampler,
            context=self.context,
            export_lock=self._lock,
        )
        self._pending = 0  # traces submitted and not yet finished
        self._backlog_bytes = 0  # their OTLP bytes, until the cheap tier has read them
        self._pending_cond = threading.Condition()

    def _stage(self, tier: Tier, evaluators: Sequence[Evaluator]) -> TierStage[_Job]:
        # The model tier yields to the cheap tier (same CPU); the judges wait on the network
        # and are budgeted in calls and tokens by themselves.
        return TierStage(
            tier,
            evaluators,
            self._tier_done,
            self._metrics,
            self._settings.tier("model" if tier is Tier.MODEL else "judge"),
            context=self.context,
            cheap_idle=self._cheap_idle if tier is Tier.MODEL else None,
            sampler=self._sampler,
        )

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    @property
    def backlog_bytes(self) -> int:
        """OTLP bytes of the completed traces waiting for the cheap tier."""
        return self._backlog_bytes

    @property
    def overloaded(self) -> bool:
        return self._queue.qsize() >= self._settings.max_backlog

    def submit(self, traces: Sequence[CompletedTrace]) -> None:
        if not traces:
            return
        with self._pending_cond:
            self._pending += len(traces)
            self._backlog_bytes += sum(trace.nbytes for trace in traces)
        for trace in traces:
            self._queue.put(trace)
        self._metrics.eval_backlog.set(self._queue.qsize())

    def start(self) -> None:
        if self._thread is None:
            self.cheap = load_evaluators_safely(self.cheap, self.context)
            self._holds.start()
            self._thread = threading.Thread(target=self._run, name="ragpulse-eval", daemon=True)
            self._thread.start()
            self.conversations.start()
            for tier, stage in self._stages.items():
                # Load at once when a rate sends records; for priority rules only, on demand.
                stage.start(load_now=self._sampler.by_rate(tier))

    def stop(self, timeout: float = 30.0, sinks_deadline: float | None = None) -> None:
        """Finish what is queued, within ``timeout`` in all, then shut the sinks down
        (waiting until ``sinks_deadline``, a ``time.monotonic()`` value, at most; None:
        as long as they take).

        The cheap tier drains first; the costly tiers then finish their queues if their
        models are loaded (never waiting for a load). At the deadline every record a
        costly tier still has, in flight or queued, is exported with its other results
        and the tier marked ``skipped:shutdown``. Only traces the cheap tier could not
        reach by then are abandoned (neither exported nor acknowledged).
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
        self._holds.stop()
        # What is open goes out, revised later (its judges get until the deadline); held
        # elsewhere too (Kafka), it is read again.
        self.conversations.stop(
            close="shutdown" if self._local_conversations else None, deadline=deadline
        )
        if sinks_deadline is None:
            self._shutdown_sinks()
            return
        closing = threading.Thread(target=self._shutdown_sinks, name="ragpulse-sinks", daemon=True)
        closing.start()
        closing.join(max(0.0, sinks_deadline - time.monotonic()))
        if closing.is_alive():
            log.warning("sinks still shutting down at the shutdown deadline; not waiting")

    def _shutdown_sinks(self) -> None:
        with self._lock:  # no export is half done
            for sink in self.sinks:
                try:
                    sink.shutdown()
                except Exception:
                    log.exception("sink %s failed to shut down", sink.name)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until every trace submitted so far is finished (tests, demo, rebalances)."""
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
            with self._lock:
                self._finish(update)
        traces = [i for i in items if isinstance(i, CompletedTrace)]
        jobs: list[_Job] = []
        for trace in traces:
            try:
                found, skip_reason = extract_records(
                    trace.spans,
                    trace.annotations,
                    self.context.settings.agents,
                    self.context.settings.conversations,
                )
            except Exception:
                log.exception("extraction failed for trace %s", trace.trace_id)
                found, skip_reason = [], "extraction_error"
            if not inline:  # submitted, so counted in the backlog
                with self._pending_cond:
                    self._backlog_bytes -= trace.nbytes
            trace.spans = []  # read: only its acknowledgements wait for the records now
            if skip_reason:
                self._metrics.traces_skipped.labels(skip_reason).inc()
            for record in found:
                notes = record.attributes.get(sc.RAGPULSE_COERCED)
                for note in notes if isinstance(notes, list) else ():
                    # The label is the field only ("document.score"): bounded cardinality.
                    self._metrics.coerced.labels(str(note).split(":", 1)[0]).inc()
            ticket = _TraceTicket(trace, len(found), self._trace_finished if not inline else _noop)
            # A turn of a conversation: numbered, and its earlier turns joined when its
            # spans carried no history (before the metrics read it).
            jobs.extend(_Job(self.conversations.prepare(record), ticket) for record in found)
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
            with self._lock:
                for job in jobs:
                    job.tiers.clear()
                    self._finish(job)
            return
        with self._lock:
            for job in jobs:
                self._advance(job)
                if job.running is None:
                    self._finish(job)
                elif self._settings.max_export_delay_s <= 0:
                    self._show(job)
                else:
                    self._holds.hold(job)

    # -- a job's way through the costly tiers (under self._lock) ---------------------------

    def _advance(self, job: _Job) -> None:
        """Offer the job to its next costly tier that takes it; the others say why not."""
        job.running = None
        while job.tiers:
            tier = job.tiers.pop(0)
            stage = self._stages.get(tier)
            priority = job.sampled.get(tier, "").startswith("priority:")
            skipped = stage.offer(job, priority) if stage is not None else "unavailable"
            if skipped is None:
                job.running = tier
                return
            job.sampled[tier] = f"skipped:{skipped}"

    def _tier_done(self, job: _Job, results: list[EvalResult], skipped: str | None) -> None:
        """A tier stage hands a job back (its worker's thread, or stop()'s)."""
        with self._lock:
            tier = job.running
            if job.finished or tier is None:
                return  # handed back twice (a shutdown race): the first one counted
            job.results.extend(results)
            if skipped is not None:
                job.sampled[tier] = f"skipped:{skipped}"
            self._advance(job)
            if job.shown:
                self._update(job, tier)
            elif job.running is None:
                self._finish(job)

    def _deadline(self, job: _Job) -> None:
        """The hold passed: export what the record has, if it was not exported yet."""
        with self._lock:
            if not job.shown and not job.finished:
                self._show(job)

    def _show(self, job: _Job) -> None:
        """The first export, while costly tiers are still to come."""
        attributes = job.record.attributes
        attributes.update(sampled_attributes(job.sampled))
        attributes[sc.RAGPULSE_PENDING] = [t.value for t in job.pending]
        self._emit(job, job.record, first=True)
        job.shown = True

    def _update(self, job: _Job, tier: Tier) -> None:
        """A follow-up export: ``tier``'s results (or why it skipped) for a shown record."""
        attributes = {**job.record.attributes, sc.RAGPULSE_UPDATE: tier.value}
        attributes.update(sampled_attributes({tier: job.sampled[tier]}))
        if job.running is None:
            attributes.pop(sc.RAGPULSE_PENDING, None)
            self._count_sampled(job)
        else:
            attributes[sc.RAGPULSE_PENDING] = [t.value for t in job.pending]
        record = job.record.model_copy(update={"attributes": attributes})
        self._emit(job, record, first=False)
        if job.running is None:
            self._close(job)

    def _finish(self, job: _Job) -> None:
        """Every tier done or skipped before the record was shown: one export, all results."""
        if job.sampled:
            # In place, not a copy: the pipeline built this record (extraction or a late
            # update) and nobody has seen it yet; a pydantic copy per record is costly.
            job.record.attributes.update(sampled_attributes(job.sampled))
            self._count_sampled(job)
        self._emit(job, job.record, first=True)
        self._close(job)

    def _close(self, job: _Job) -> None:
        job.finished = True
        if job.ticket is not None:
            job.ticket.record_done()

    def _count_sampled(self, job: _Job) -> None:
        counters = self._sampled_counters
        for tier, why in job.sampled.items():
            key = (tier, reason_label(why))  # bounded: auto_rate:<threshold> is auto_rate
            if (counter := counters.get(key)) is None:
                counter = counters[key] = self._metrics.sampled.labels(tier.value, key[1])
            counter.inc()

    def _emit(self, job: _Job, record: RagRecord, first: bool) -> None:
        """Hand the job's results not exported yet to every sink."""
        results = job.results[job.exported :]
        job.exported = len(job.results)
        for sink in self.sinks:
            try:
                sink.export(record, results)
            except Exception:
                log.exception("sink %s failed on trace %s", sink.name, record.trace_id)
                self._metrics.sink_errors.labels(sink.name).inc()
        if self._local_conversations:
            self.conversations.observe(record, results)
        elif first:
            self.conversations.exported(record)
        if not first:
            return
        self._metrics.records_evaluated.inc()
        self._recent[record.trace_id] = record
        while len(self._recent) > self.RECENT:
            self._recent.popitem(last=False)

    def _export_conversation(
        self, conversation: ConversationRecord, results: list[EvalResult]
    ) -> None:
        """Hand a closed conversation's record to every sink (one export at a time)."""
        with self._lock:
            for sink in self.sinks:
                try:
                    sink.export_conversation(conversation, results)
                except Exception:
                    log.exception(
                        "sink %s failed on conversation %s", sink.name, conversation.conversation_id
                    )
                    self._metrics.sink_errors.labels(sink.name).inc()

    def late_feedback(self, trace_id: str, attributes: dict[str, AttributeValue]) -> bool:
        """Export a late update for a recently evaluated trace; False when it is unknown.

        Thread-safe: the update is queued for the evaluation worker.
        """
        with self._lock:
            known = self._recent.get(trace_id)
        result = feedback_result(attributes)
        if known is None or result is None:
            return False
        record = known.model_copy(update={"attributes": {**known.attributes, **attributes}})
        self._queue.put(_Job(record, None, [result]))
        return True


def _noop() -> None:
    pass
