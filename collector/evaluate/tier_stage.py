"""One costly tier (model or judge): a bounded queue, a deadline per record, a budget,
and one daemon worker that loads the tier's models and evaluates batches.

The stage never exports: it hands each record back to the pipeline through
``done(job, results, skipped)`` exactly once, with the tier's results or with the
reason it skipped the record (``queue_full``, ``budget``, ``deadline``,
``shutdown``, ``superseded``: a later build of the record replaced it; counted in
``ragpulse_tier_skipped_total``). Records queued or
being evaluated are shown by ``ragpulse_tier_pending{tier}``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from ragpulse.collector.lifecycle import Deadline
from ragpulse.config import TierSettings
from ragpulse.evaluation import evaluate_records, load_evaluators_safely
from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.plugin_context import PluginContext
from ragpulse.record import EvalResult, RagRecord
from ragpulse.telemetry import CollectorMetrics

log = logging.getLogger(__name__)


class HasRecord(Protocol):
    @property
    def record(self) -> RagRecord: ...

    @property
    def stale(self) -> bool:
        """A later build of the record replaced it: the tier skips it (``superseded``)."""
        ...


J = TypeVar("J", bound=HasRecord)
Done = Callable[[J, list[EvalResult], str | None], None]
"""(job, the tier's results, None or the reason the tier skipped it)."""


class Budget:
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


@dataclass(eq=False)
class _Queued(Generic[J]):
    job: J
    deadline: float


class TierStage(Generic[J]):
    """A costly tier's queue and worker, shaped by the tier's settings
    (:class:`~ragpulse.config.TierSettings`: ``evaluation.model`` or ``evaluation.judge``).

    Models load on the worker, in the background: at start when a rate routes records
    here, else on the first record routed here (a priority rule), never when nothing
    can be. A record waits at most ``max_delay_s`` in the queue (a load in progress
    included); past it, or when the queue is full or the budget spent, the tier is
    skipped for that record. ``offer`` and ``stop`` may be called from any thread;
    ``done`` is called from the worker, from ``expire``'s caller, or from ``stop``,
    never with the stage's lock held.
    """

    SLICE = 1  # records per evaluate call when yielding to the cheap tier

    def __init__(
        self,
        tier: Tier,
        evaluators: Sequence[Evaluator],
        done: Done[J],
        metrics: CollectorMetrics,
        settings: TierSettings,
        *,
        context: PluginContext | None = None,
        cheap_idle: threading.Event | None = None,
        load_now: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``load_now``: load the models at the start (a rate sends records here), not at
        the first record (priority rules only)."""
        self.tier = tier
        self.name = f"{tier.value} tier"
        self._evaluators = list(evaluators)
        self._done = done
        self._metrics = metrics
        self._pending = metrics.tier_pending.labels(tier.value)
        self._context = context if context is not None else PluginContext(metrics=metrics)
        batch_size = settings.batch_size
        self._batch_size, self._max_wait_s = batch_size, settings.max_wait_s
        self._max_queue = settings.max_queue
        budget = settings.time_budget
        self._budget = Budget(budget, clock) if budget is not None else None
        self._max_delay_s, self._clock = settings.max_delay_s, clock
        self._cheap_idle = cheap_idle  # set while the cheap tier has nothing to do
        # Records per evaluate call: a call cannot be interrupted, so while it yields to
        # the cheap tier a stage evaluates a few records at a time, checking in between.
        self._slice = batch_size if cheap_idle is None else min(batch_size, self.SLICE)
        self._jobs: deque[_Queued[J]] = deque()
        self._taken: list[_Queued[J]] = []  # off the queue, not handed back yet
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._wanted = load_now  # load now: at the start (rates) or at the first offer
        self._ready = False  # models loaded (or found unloadable): batches can run
        self._closed = False  # stop() was called: no new jobs
        self._abandoned = False  # stop() gave up: the worker hands nothing back

    def start(self) -> None:
        name = f"ragpulse-{self.tier.value}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def offer(self, job: J) -> str | None:
        """Queue a job; else the reason it was not (counted; ``done`` is not called)."""
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
                self._pending.inc()
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
            if self._abandoned:
                return
            late = self._pop_late()
        self._skip(late, "deadline")

    def _pop_late(self) -> list[_Queued[J]]:
        now, late = self._clock(), []
        while self._jobs and self._jobs[0].deadline <= now:
            late.append(self._jobs.popleft())
        return late

    def _skip(self, queued: Sequence[_Queued[J]], reason: str) -> None:
        if not queued:
            return
        self._metrics.tier_skipped.labels(self.tier.value, reason).inc(len(queued))
        self._pending.dec(len(queued))
        for q in queued:
            self._done(q.job, [], reason)

    def stop(self, deadline: Deadline) -> None:
        """Finish the queue by ``deadline.drain`` if the models are loaded; never wait for
        a load.

        Jobs not evaluated by then, the slice being evaluated included, skip the tier
        (reason ``shutdown``): they go back with their other results. A slice still
        running is abandoned; what it returns later is thrown away.
        """
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            ready = self._ready
        if ready and self._thread is not None:
            self._thread.join(max(0.0, deadline.drain - self._clock()))
        with self._cond:
            self._abandoned = True
            left = [*self._taken, *self._jobs]
            self._taken, self._jobs = [], deque()
        if left and ready:
            log.warning(
                "%s tier still busy at the shutdown deadline: %d records skip it "
                "(exported with their other results)",
                self.tier.value,
                len(left),
            )
        self._skip(left, "shutdown")
        self._thread = None

    def close(self) -> None:
        pass

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
            if not self._hand_back(late, "deadline"):
                return
            if batch is None:
                return
            first = True
            while batch:  # in slices: the cheap tier and the budget first, between them
                if not first and self._wait_turn(queued=False):
                    now = self._clock()
                    late = [q for q in batch if q.deadline <= now]
                    batch = [q for q in batch if q.deadline > now]
                    if not self._hand_back(late, "deadline"):
                        return
                first = False
                part, batch = batch[: self._slice], batch[self._slice :]
                stale = [q for q in part if q.job.stale]
                if stale:  # a late span rebuilt the record: its new build is what counts
                    part = [q for q in part if not q.job.stale]
                    if not self._hand_back(stale, "superseded"):
                        return
                if part and not self._evaluate(part, evaluators):
                    return  # stop() gave up on this batch and handed it back

    def _hand_back(self, queued: Sequence[_Queued[J]], reason: str | None) -> bool:
        """Take ``queued`` off the taken list and skip them (with ``reason``); False, and
        nothing done, once stop() has handed back everything taken."""
        if not queued:
            return not self._abandoned
        with self._cond:
            if self._abandoned:
                return False
            gone = set(map(id, queued))
            self._taken = [q for q in self._taken if id(q) not in gone]
        if reason is not None:
            self._skip(queued, reason)
        return True

    def _evaluate(self, part: list[_Queued[J]], evaluators: Sequence[Evaluator]) -> bool:
        """Evaluate a slice and hand it back; False when stop() took it meanwhile."""
        start = time.perf_counter()
        try:
            scored = evaluate_records([q.job.record for q in part], evaluators, self._metrics)
        except Exception:  # evaluate_records() never raises; this guards the worker
            log.exception("%s-tier batch failed", self.tier.value)
            scored = [[] for _ in part]
        if self._budget is not None:
            self._budget.spent(time.perf_counter() - start, len(part))
        if not self._hand_back(part, None):
            return False
        self._pending.dec(len(part))
        for q, results in zip(part, scored, strict=True):
            self._done(q.job, results, None)
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

    def _take(self) -> tuple[list[_Queued[J]] | None, list[_Queued[J]]]:
        """(a batch, or None to stop; jobs past their deadline). Waits up to ``max_wait_s``
        after the first job for a fuller batch, except once stopping."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._jobs) or self._closed)
            if not self._jobs or self._abandoned:
                return None, []
            fill_by = self._clock() + self._max_wait_s
            while len(self._jobs) < self._batch_size and not self._closed:
                left = fill_by - self._clock()
                if left <= 0 or not self._cond.wait(left):
                    break
            late = self._pop_late()
            n = min(self._batch_size, len(self._jobs))
            batch = [self._jobs.popleft() for _ in range(n)]
            self._taken = [*late, *batch]  # stop() hands these back if the worker cannot
            return batch, late
