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
exported then (a ``first`` export item whose ``pending`` lists the tiers still
running) and each costly tier's results follow as an ``update`` item of the same
record (its ``tier``; the results are that tier's only). A tier that skips the
record (full queue, budget, deadline, shutdown) says so in the item's
``sampled[tier]`` (``skipped:<reason>``), in an update when the record was already
exported.

The costly tiers never hold the cheap tier back: the model tier runs only while
the cheap tier is idle, within a budget (``evaluation.model.budget``), and a
record waits in a tier's queue at most its ``max_delay_s`` (``evaluation.model`` and
``evaluation.judge`` take the same settings, :class:`~ragpulse.config.TierSettings`).

Every trace is finished exactly once: all its records' results exported (or the
trace skipped and counted); then its source acknowledgements are released, so a
Kafka offset is committed only once the costly tiers are done with it too.

A trace reopened by a late span (:mod:`~ragpulse.collector.assembly.assembler`) comes
again with all its spans: each record rebuilt continues the version it shares spans with
(:class:`~ragpulse.collector.assembly.versions.RecordVersions`), keeping its
``record_id`` with the next ``revision``. The rebuilt record goes to the sinks as a
``revision`` item naming the version it replaces (or as the ``first`` when nothing of
the earlier build was exported yet); one that is the same as the exported build is not
exported again. Tier work still pending on an older build is dropped (its tier skips it,
``superseded``), and that build's acknowledgements wait for the revision's export
instead: an offset is still committed only once what its spans became was exported.

The pipeline's threads (the cheap worker, the export-deadline thread, each costly tier's
worker) are :meth:`Pipeline.parts` that the collector's lifecycle starts and stops with
the rest; the sinks are one :class:`~ragpulse.collector.evaluate.exports.Exports`, shared
with the conversation stage, which every turn export is also handed to
(:class:`Conversations`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ragpulse import semconv as sc
from ragpulse.collector.assembly.assembler import CompletedTrace
from ragpulse.collector.assembly.versions import RecordVersions, Version
from ragpulse.collector.evaluate.exports import Exports
from ragpulse.collector.evaluate.feedback import feedback_result
from ragpulse.collector.evaluate.sampling import SamplingPolicy, reason_label
from ragpulse.collector.evaluate.tier_stage import TierStage
from ragpulse.collector.extract.records import extract_records
from ragpulse.collector.lifecycle import Deadline, Lifecycle, Part
from ragpulse.config import EvaluationSettings, Settings
from ragpulse.evaluation import evaluate_records, load_evaluators_safely
from ragpulse.evaluators.base import AnyEvaluator, Evaluator, Tier
from ragpulse.plugin_context import PluginContext
from ragpulse.record import (
    AttributeValue,
    EvalResult,
    ExportItem,
    ExportKind,
    RagRecord,
)
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
    # The traces whose records it finishes: its own, and those of the earlier builds it
    # superseded before they were done (empty: a late update, feedback).
    tickets: list[_TraceTicket]
    results: list[EvalResult] = field(default_factory=list)
    tiers: list[Tier] = field(default_factory=list)  # costly tiers still to run, in order
    sampled: dict[Tier, str] = field(default_factory=dict)  # tier -> why it was chosen
    # What the record's first export said of the tiers (a late update carries it again).
    carried: dict[str, str] = field(default_factory=dict)
    running: Tier | None = None  # the costly tier that has it now
    exported: int = 0  # how many of ``results`` the sinks have seen
    shown: bool = False  # exported once already: what follows are updates
    finished: bool = False  # every tier done or skipped, and exported
    version: Version | None = None  # its record's versions (None: a late update)

    @property
    def pending(self) -> list[Tier]:
        return [*([self.running] if self.running else []), *self.tiers]

    @property
    def stale(self) -> bool:
        """A later build of its record exists: its tier work is dropped, never exported."""
        return self.version is not None and self.version.revision > self.record.revision


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


class Conversations(Part, Protocol):
    """The conversation stage, as the pipeline sees it (a part of the collector too)."""

    def prepare(self, record: RagRecord) -> RagRecord:
        """``record`` numbered in its conversation, with the earlier turns joined as its
        history when its spans carried none (before the metrics read it)."""
        ...

    def turn_exported(
        self,
        record: RagRecord,
        results: Sequence[EvalResult],
        *,
        first: bool,
        replaces: RagRecord | None = None,
    ) -> None:
        """A turn went to the sinks (``first``: its first export, or a revision, which
        ``replaces`` the version exported before with all its results; else an update)."""
        ...


class _NoConversations:
    """No conversations are followed (a pipeline on its own, in tests)."""

    name = "conversations"

    def prepare(self, record: RagRecord) -> RagRecord:
        return record

    def turn_exported(
        self,
        record: RagRecord,
        results: Sequence[EvalResult],
        *,
        first: bool,
        replaces: RagRecord | None = None,
    ) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self, deadline: Deadline) -> None:
        pass

    def close(self) -> None:
        pass


class _Holds:
    """Records waiting for their costly tiers, each until its export deadline.

    The delay is one setting, so deadlines come in order and a deque suffices. One
    daemon thread calls ``due`` for each record whose deadline passed.
    """

    name = "export deadlines"

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

    def stop(self, deadline: Deadline) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(5)

    def close(self) -> None:
        pass

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
    """Thread-safe ``submit``; worker threads (:meth:`parts`) do the rest."""

    COSTLY_TIERS = (Tier.MODEL, Tier.JUDGE)
    RECENT = 10_000  # exported records kept for late feedback
    IDLE_TICK_S = 1.0  # an idle cheap worker still wakes this often to expire waiting jobs

    def __init__(
        self,
        evaluators: Sequence[AnyEvaluator],
        exports: Exports,
        metrics: CollectorMetrics,
        settings: EvaluationSettings | None = None,
        sampler: SamplingPolicy | None = None,
        context: PluginContext | None = None,
        conversations: Conversations | None = None,
    ) -> None:
        """``conversations``: the stage every turn goes through (numbered and joined before
        it is evaluated, kept or routed after each export); None: no conversations."""
        self._settings = s = settings or EvaluationSettings()
        self.evaluators = list(evaluators)
        # Turn records' tiers; the conversation stage runs the conversation metrics.
        turns = [e for e in evaluators if isinstance(e, Evaluator)]
        self.cheap = [e for e in turns if e.tier == Tier.CHEAP]
        self.by_tier = {t: [e for e in turns if e.tier == t] for t in self.COSTLY_TIERS}
        self.exports = exports
        self.conversations: Conversations = conversations or _NoConversations()
        self._metrics = metrics
        # What the evaluators load with (settings, shared models and judge clients).
        self.context = context or PluginContext(Settings(evaluation=s), metrics)
        self._sampler = sampler or SamplingPolicy(s, metrics)
        # Traces to evaluate, late updates to export, None = stop.
        self._queue: queue.Queue[CompletedTrace | _Job | None] = queue.Queue()
        self._abandon = threading.Event()  # stop() gave up waiting for the cheap worker
        self._cheap_idle = threading.Event()  # the model tier runs only while this is set
        self._cheap_idle.set()
        # Jobs change state under this lock: from the cheap worker, the tier workers and
        # the deadline thread; their exports are made under it too (each job's in order).
        self._lock = threading.RLock()
        self._holds = _Holds(s.max_export_delay_s, self._deadline)
        self._worker = _CheapWorker(self)
        # The record and what its first export said of the tiers, not its results: a late
        # update carries only the feedback's.
        self._recent: OrderedDict[str, tuple[RagRecord, dict[str, str]]] = OrderedDict()
        self._sampled_counters: dict[tuple[Tier, str], Any] = {}  # labels() costs per call
        # The unfinished job of each record id: a revision takes over its acknowledgements.
        self._live: dict[str, _Job] = {}
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
        self._pending = 0  # traces submitted and not yet finished
        self._backlog_bytes = 0  # their OTLP bytes, until the cheap tier has read them
        self._pending_cond = threading.Condition()
        self._standalone: Lifecycle | None = None

    def _stage(self, tier: Tier, evaluators: Sequence[Evaluator]) -> TierStage[_Job]:
        # The model tier yields to the cheap tier (same CPU); the judges wait on the network
        # and are budgeted in calls and tokens by themselves.
        # Loaded at the start when a rate sends records; for priority rules only, on demand.
        return TierStage(
            tier,
            evaluators,
            self._tier_done,
            self._metrics,
            self._settings.tier("model" if tier is Tier.MODEL else "judge"),
            context=self.context,
            cheap_idle=self._cheap_idle if tier is Tier.MODEL else None,
            load_now=self._sampler.by_rate(tier),
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

    def parts(self) -> list[Part]:
        """The pipeline's threads, in the order they start (they stop the other way round:
        the cheap worker drains first, then the model tier, whose records may still go to
        the judge, then the judge, then the export deadlines)."""
        return [self._holds, *reversed(self._stages.values()), self._worker]

    def start(self) -> None:
        """Run the pipeline on its own (tests, a replay): its sinks, its conversation stage
        and its parts, in a lifecycle of its own. Under ``ragpulse serve`` the collector's
        lifecycle runs the same parts with the rest instead."""
        if self._standalone is None:
            self._standalone = Lifecycle([self.exports, self.conversations, *self.parts()])
            self._standalone.start()

    def stop(self, timeout: float = 30.0, sinks_deadline: float | None = None) -> None:
        """Stop what :meth:`start` started: finish what is queued within ``timeout``, then
        shut the sinks down (until ``sinks_deadline``, a ``time.monotonic()`` value, at
        most; None: as long as they take).

        The cheap tier drains first; the costly tiers then finish their queues if their
        models are loaded (never waiting for a load). At the deadline every record a
        costly tier still has, in flight or queued, is exported with its other results
        and the tier marked ``skipped:shutdown``. Only traces the cheap tier could not
        reach by then are abandoned (neither exported nor acknowledged).
        """
        if self._standalone is not None:
            self._standalone.stop(Deadline(time.monotonic() + timeout, sinks_deadline))
            self._standalone = None

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
        found_all: list[tuple[RagRecord, _TraceTicket, RecordVersions, bool]] = []
        for trace in traces:
            try:
                found, skip_reason = extract_records(
                    trace.spans,
                    trace.annotations,
                    self.context.settings.agents,
                    self.context.settings.conversations,
                    trace.partial,
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
                if record.partial is not None:
                    self._metrics.partial_records.labels(record.partial).inc()
            ticket = _TraceTicket(trace, len(found), self._trace_finished if not inline else _noop)
            alone = len(found) == 1
            found_all.extend((record, ticket, trace.versions, alone) for record in found)
        # A turn of a conversation: numbered, and its earlier turns joined when its spans
        # carried no history (before the metrics read it); in the order the turns started,
        # as a batch can hold a later turn before an earlier one (spans sent out of order).
        found_all.sort(key=lambda found: found[0].start_time_ns)
        jobs = []
        taken: dict[int, set[str]] = {}  # per trace: the versions this build continues
        for record, ticket, versions, alone in found_all:
            taken_here = taken.setdefault(id(versions), set())
            job = self._versioned(record, ticket, versions, taken_here, alone)
            if job is not None:
                job.record = self.conversations.prepare(job.record)
                jobs.append(job)
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

    def _versioned(
        self,
        record: RagRecord,
        ticket: _TraceTicket,
        versions: RecordVersions,
        taken: set[str],
        alone: bool,
    ) -> _Job | None:
        """The job for a record just built: a new record's, or the next revision of the
        version it continues (taking over the acknowledgements of that version's
        unfinished job); None when it is the same as the version exported (its trace's
        record is done with)."""
        spans = _spans_of(record)
        with self._lock:
            version = versions.match(record.span_id, spans, taken, alone=alone)
            if version is None:
                version = Version(record.record_id, 1, spans, built=record)
                versions.by_id[record.record_id] = version
                taken.add(record.record_id)
                job = self._live[record.record_id] = _Job(record, [ticket], version=version)
                return job
            taken.add(version.record_id)
            rebuilt = record.model_copy(
                update={"record_id": version.record_id, "revision": version.revision + 1}
            )
            if version.built is not None and _same_build(version.built, rebuilt):
                self._metrics.record_revisions.labels("unchanged").inc()
                ticket.record_done()
                return None
            version.revision, version.spans, version.built = rebuilt.revision, spans, rebuilt
            job = _Job(rebuilt, [ticket], version=version)
            earlier = self._live.get(version.record_id)
            if earlier is not None and not earlier.finished:
                job.tickets += earlier.tickets  # released once the revision is exported
                earlier.tickets = []
            self._live[version.record_id] = job
            return job

    # -- a job's way through the costly tiers (under self._lock) ---------------------------

    def _advance(self, job: _Job) -> None:
        """Offer the job to its next costly tier that takes it; the others say why not."""
        job.running = None
        if job.stale:
            job.tiers.clear()
            return
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
            if job.stale:  # a later build replaced it: nothing of it goes out any more
                self._close(job)
                return
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
            if not job.shown and not job.finished and not job.stale:
                self._show(job)

    def _show(self, job: _Job) -> None:
        """The first export, while costly tiers are still to come."""
        self._emit(job, ExportKind.FIRST)
        job.shown = True

    def _update(self, job: _Job, tier: Tier) -> None:
        """A follow-up export: ``tier``'s results (or why it skipped) for a shown record."""
        if job.running is None:
            self._count_sampled(job)
        self._emit(job, ExportKind.UPDATE, tier)
        if job.running is None:
            self._close(job)

    def _finish(self, job: _Job) -> None:
        """Every tier done or skipped before the record was shown: one export, all results."""
        if job.stale:
            self._close(job)
            return
        if job.sampled:
            self._count_sampled(job)
        self._emit(job, ExportKind.FIRST)
        self._close(job)

    def _close(self, job: _Job) -> None:
        job.finished = True
        if self._live.get(job.record.record_id) is job:
            del self._live[job.record.record_id]
        tickets, job.tickets = job.tickets, []
        for ticket in tickets:
            ticket.record_done()

    def _count_sampled(self, job: _Job) -> None:
        counters = self._sampled_counters
        for tier, why in job.sampled.items():
            key = (tier, reason_label(why))  # bounded: auto_rate:<threshold> is auto_rate
            if (counter := counters.get(key)) is None:
                counter = counters[key] = self._metrics.sampled.labels(tier.value, key[1])
            counter.inc()

    def _emit(self, job: _Job, kind: ExportKind, tier: Tier | None = None) -> None:
        """Hand the job's results not exported yet to every sink, with where the record
        stands in the tiers."""
        results = job.results[job.exported :]
        job.exported = len(job.results)
        sampled = {**job.carried, **{t.value: why for t, why in job.sampled.items()}}
        version = job.version
        previous = None
        if kind is ExportKind.FIRST and version is not None and version.exported is not None:
            kind, previous = ExportKind.REVISION, version.exported
        item = ExportItem(
            job.record,
            results,
            kind,
            tier.value if tier is not None else None,
            sampled,
            tuple(t.value for t in job.pending),
            previous,
            tuple(version.results) if previous is not None and version is not None else (),
        )
        record = job.record
        first = kind is not ExportKind.UPDATE
        if version is not None and first:
            version.exported, version.results = record, list(results)
        elif version is not None:
            version.results.extend(results)
        self.exports.export(item)
        self.conversations.turn_exported(record, results, first=first, replaces=previous)
        if kind is ExportKind.REVISION:
            self._metrics.record_revisions.labels("exported").inc()
        elif record.revision > 1 and first:
            self._metrics.record_revisions.labels("first").inc()
        if not first:
            return
        if kind is ExportKind.FIRST:
            self._metrics.records_evaluated.inc()
        self._recent[record.trace_id] = (record, sampled)
        while len(self._recent) > self.RECENT:
            self._recent.popitem(last=False)

    def late_feedback(self, trace_id: str, attributes: dict[str, AttributeValue]) -> bool:
        """Export a late update for a recently evaluated trace; False when it is unknown.

        Thread-safe: the update is queued for the evaluation worker.
        """
        with self._lock:
            known = self._recent.get(trace_id)
        result = feedback_result(attributes)
        if known is None or result is None:
            return False
        earlier, sampled = known
        record = earlier.model_copy(update={"attributes": {**earlier.attributes, **attributes}})
        self._queue.put(_Job(record, [], [result], carried=sampled))
        return True


class _CheapWorker:
    """The cheap tier's worker: loads the cheap evaluators, then takes every completed
    trace (and late update) off the pipeline's queue."""

    name = "cheap tier"

    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        p = self._pipeline
        p.cheap = load_evaluators_safely(p.cheap, p.context)
        self._thread = threading.Thread(target=p._run, name="ragpulse-eval", daemon=True)
        self._thread.start()

    def stop(self, deadline: Deadline) -> None:
        """Evaluate what is queued until ``deadline.drain``; then give up on the rest."""
        if self._thread is None:
            return
        self._pipeline._queue.put(None)
        self._thread.join(deadline.left())
        if self._thread.is_alive():
            self._pipeline._abandon.set()
            log.warning("evaluation worker did not finish by the shutdown deadline")
        self._thread = None

    def close(self) -> None:
        pass


def _noop() -> None:
    pass


def _spans_of(record: RagRecord) -> frozenset[str]:
    """The spans a record read: its root, its model call, retrievals and tool calls."""
    spans = {record.span_id, *record.retrieval_span_ids}
    spans.update(c.span_id for c in record.tool_calls if c.span_id)
    if record.generation_span_id:
        spans.add(record.generation_span_id)
    return frozenset(spans)


_BUILD_STATE = {"revision"}


def _same_build(earlier: RagRecord, rebuilt: RagRecord) -> bool:
    """Whether a rebuilt record says what its earlier build said (late spans that changed
    nothing it reads: another service's, a database call's)."""
    return earlier.model_dump(exclude=_BUILD_STATE) == rebuilt.model_dump(exclude=_BUILD_STATE)
