"""One costly tier (model or judge): a bounded queue, a deadline per record, a budget,
and one daemon worker that loads the tier's models and evaluates batches.

The stage never exports: it hands each record back to the pipeline through
``done(job, results, skipped)`` exactly once, with the tier's results or with the
reason it skipped the record (``queue_full``, ``budget``, ``deadline``,
``shutdown``, ``superseded``: a later build of the record replaced it; counted in
``ragpulse_tier_skipped_total``). Records queued or
being evaluated are shown by ``ragpulse_tier_pending{tier}``.

The model tier keeps its models busy: the detectors queue the inputs of a batch of
records on their model's queue and return
(:mod:`~ragpulse.evaluators.models.forward_queue`), so while one batch runs the worker
prepares (tokenises, queues) the next, and the rows of several batches and evaluators
share forward passes. What it queues is bounded: a few batches, and no more than a
window of tokens waiting per model.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from ragpulse.collector.lifecycle import Deadline
from ragpulse.config import TierSettings
from ragpulse.evaluation import (
    Evaluation,
    evaluate_records,
    load_evaluators_safely,
    start_evaluation,
)
from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.plugin_context import PluginContext
from ragpulse.record import EvalResult, RagRecord
from ragpulse.telemetry import CollectorMetrics

if TYPE_CHECKING:
    from ragpulse.collector.evaluate.sampling import AutoRate, SamplingPolicy
    from ragpulse.evaluators.models.forward_queue import ForwardQueues
    from ragpulse.evaluators.models.placement import Placement

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
    """Seconds of tier work allowed per second of wall clock: a token bucket over its time,
    and what the tier can finish within a record's deadline.

    Work runs only while the bucket is positive, and each batch is charged what it took,
    so the tier works at most ``share`` of the time (plus one batch). On the CPU the
    charge is busy wall time (a tier slowed by a contended CPU looks costlier and gets
    less, which is the point: the cheap tier comes first); on a GPU it is the host CPU
    time of the tier's threads, and the device's own time per record bounds admission
    separately (:meth:`spent`'s ``device_s``).

    A record is admitted when the work queued before it, itself included, at what a
    record has cost lately, can be done within ``max_delay_s``: a burst that the
    records' deadline allows waits and is scored, only what could not be is refused.
    """

    WINDOW_S = 2.0  # the bucket holds this many seconds' worth of the share: small bursts

    def __init__(
        self,
        share: float,
        clock: Callable[[], float] = time.monotonic,
        max_delay_s: float = math.inf,
    ) -> None:
        self.share = share
        self._clock = clock
        self._max_delay_s = max_delay_s
        self._capacity = share * self.WINDOW_S
        self._tokens = self._capacity
        self._at = clock()
        self._per_record: float | None = None  # seconds, once a batch has been timed
        self._device_per_record: float | None = None
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._capacity, self._tokens + (now - self._at) * self.share)
        self._at = now

    def drain_s(self, records: int) -> float:
        """Seconds until ``records`` more records are done at the measured cost (0 until a
        batch is timed)."""
        with self._lock:
            self._refill()
            if self._per_record is None:
                return 0.0
            work = self._per_record * records
            by_share = max(work, (work - self._tokens) / self.share)
            by_device = (self._device_per_record or 0.0) * records
            return max(by_share, by_device)

    def admits(self, waiting: int) -> bool:
        """Whether one more record fits, with ``waiting`` records queued before it: it would
        be done within ``max_delay_s``. Until a first batch is timed the cost is unknown and
        only the queue bound and the records' deadlines limit what waits."""
        return self.drain_s(waiting + 1) <= self._max_delay_s

    def wait_s(self) -> float:
        """How long until work may run again (0: now; always 0 at a share of 1)."""
        if self.share >= 1:
            return 0.0
        with self._lock:
            self._refill()
            return 0.0 if self._tokens > 0 else -self._tokens / self.share + 0.001

    def spent(self, seconds: float, records: int, device_s: float | None = None) -> None:
        """A batch of ``records`` took ``seconds`` of the tier's time (and ``device_s`` of
        the device's, on a GPU)."""
        with self._lock:
            self._refill()
            self._tokens -= seconds
            n = max(1, records)
            self._per_record = _smoothed(self._per_record, seconds / n)
            if device_s is not None:
                self._device_per_record = _smoothed(self._device_per_record, device_s / n)

    def records_per_s(self) -> float | None:
        """What the tier can finish a second at its share (and the device's pace), once
        measured."""
        with self._lock:
            if not self._per_record:
                return None
            rate = self.share / self._per_record
            if self._device_per_record:
                rate = min(rate, 1.0 / self._device_per_record)
            return rate


def _smoothed(last: float | None, value: float) -> float:
    return value if last is None else 0.7 * last + 0.3 * value


@dataclass(eq=False)
class _Queued(Generic[J]):
    job: J
    deadline: float
    priority: bool = False


@dataclass(eq=False)
class _InFlight(Generic[J]):
    """A batch started: its queued evaluation, and what its preparation cost."""

    part: list[_Queued[J]]
    evaluation: Evaluation
    synchronous: list[list[EvalResult]]  # the evaluators that scored while it started
    host_s: float  # the worker's time spent on it so far


class TierStage(Generic[J]):
    """A costly tier's queue and worker, shaped by the tier's settings
    (:class:`~ragpulse.config.TierSettings`: ``evaluation.model`` or ``evaluation.judge``).

    Models load on the worker, in the background: at start when a rate routes records
    here, else on the first record routed here (a priority rule), never when nothing
    can be. A record waits at most ``max_delay_s`` in the queue (a load in progress
    included); past it, or when the queue is full or the budget could not finish it in
    time, the tier is skipped for that record. Records a priority rule sent are taken
    first. ``offer`` and ``stop`` may be called from any thread; ``done`` is called from
    the worker, from ``expire``'s caller, or from ``stop``, never with the stage's lock
    held.
    """

    SLICE = 1  # records per evaluate call when yielding to the cheap tier
    MAX_IN_FLIGHT = 8  # batches queued on the models at once, at most

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
        clock: Callable[[], float] = time.monotonic,
        sampler: SamplingPolicy | None = None,
        load_now: bool = False,
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
        self._max_delay_s, self._clock = settings.max_delay_s, clock
        budget = settings.time_budget
        self._budget = Budget(budget, clock, self._max_delay_s) if budget is not None else None
        self._cheap_idle = cheap_idle  # set while the cheap tier has nothing to do
        # Records per evaluate call of an evaluator that scores while called: a call cannot
        # be interrupted, so while the stage yields to the cheap tier it evaluates a few
        # records at a time, checking in between. Queued work yields pass by pass.
        self._slice = batch_size if cheap_idle is None else min(batch_size, self.SLICE)
        self._placement: Placement | None = None
        self._auto: AutoRate | None = None
        self._sampler = sampler
        if tier is Tier.MODEL and self._evaluators:
            named = getattr(settings, "device", "auto") not in ("auto", "cpu")
            if named or sampler is None or sampler.by_rate(tier):
                # A device that is not there is an error now, at start (ConfigError). A tier
                # that loads only for a priority rule on the default device looks later:
                # finding out whether there is a GPU imports torch.
                self._place()
        self._queues: ForwardQueues | None = None
        self._jobs: deque[_Queued[J]] = deque()
        self._first: deque[_Queued[J]] = deque()  # priority records: taken before the others
        self._taken: list[_Queued[J]] = []  # off the queue, not handed back yet
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._wanted = load_now  # load now: at the start (rates) or at the first offer
        self._ready = False  # models loaded (or found unloadable): batches can run
        self._closed = False  # stop() was called: no new jobs
        self._abandoned = False  # stop() gave up: the worker hands nothing back
        self._busy_seen = (0.0, 0.0)  # the model queues' busy (wall, CPU) already charged

    def _place(self) -> None:
        from ragpulse.evaluators.models.placement import context_placement

        self._placement = context_placement(self._context)
        if self._sampler is not None:
            self._sampler.placed(self._placement)
            self._auto = self._sampler.auto

    def start(self) -> None:
        name = f"ragpulse-{self.tier.value}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def offer(self, job: J, priority: bool = False) -> str | None:
        """Queue a job (``priority``: a priority rule sent it, taken first); else the reason
        it was not (counted; ``done`` is not called)."""
        reason: str | None = None
        with self._cond:
            waiting = len(self._jobs) + len(self._first)
            if self._closed:
                reason = "shutdown"
            elif waiting >= self._max_queue:
                reason = "queue_full"
            elif self._budget is not None and not self._budget.admits(
                (len(self._first) if priority else waiting) + len(self._taken)
            ):
                reason = "budget"
            else:
                queued = _Queued(job, self._clock() + self._max_delay_s, priority)
                (self._first if priority else self._jobs).append(queued)
                self._pending.inc()
                self._wanted = True
                self._cond.notify_all()
        if reason is not None:
            self._metrics.tier_skipped.labels(self.tier.value, reason).inc()
        return reason

    def expire(self) -> None:
        """Hand back the jobs that waited past their deadline (any thread may call it)."""
        now = self._clock()
        heads = []
        for queue in (self._first, self._jobs):
            try:
                heads.append(queue[0])  # no lock needed: a stale read only waits a call
            except IndexError:
                pass
        if all(head.deadline > now for head in heads):
            return
        with self._cond:
            if self._abandoned:
                return
            late = self._pop_late()
        self._skip(late, "deadline")

    def _pop_late(self) -> list[_Queued[J]]:
        now, late = self._clock(), []
        for queue in (self._first, self._jobs):
            while queue and queue[0].deadline <= now:
                late.append(queue.popleft())
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

        Jobs not evaluated by then, the batches being evaluated included, skip the tier
        (reason ``shutdown``): they go back with their other results. Batches still
        running are abandoned; what they return later is thrown away.
        """
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            ready = self._ready
        if ready and self._thread is not None:
            self._thread.join(max(0.0, deadline.drain - self._clock()))
        with self._cond:
            self._abandoned = True
            left = [*self._taken, *self._first, *self._jobs]
            self._taken, self._first, self._jobs = [], deque(), deque()
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

    # -- the worker ---------------------------------------------------------------------

    def _run(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._wanted or self._closed)
            if self._closed:
                return
        if self.tier is Tier.MODEL and self._placement is None and self._evaluators:
            try:
                self._place()
            except Exception:  # the evaluators' loads say why, each disabled
                log.exception("model tier: cannot resolve evaluation.model.device")
        evaluators = load_evaluators_safely(self._evaluators, self._context)
        self._after_load(evaluators)
        with self._cond:
            self._evaluators, self._ready = evaluators, True
            if self._abandoned:
                return
        queued = [e for e in evaluators if type(e).start is not Evaluator.start]
        synchronous = [e for e in evaluators if e not in queued]
        in_flight: deque[_InFlight[J]] = deque()
        while True:
            while self._may_start(in_flight):
                if not in_flight:
                    self._wait_turn()
                batch, late = self._take(block=not in_flight)
                if not self._hand_back(late, "deadline"):
                    return
                stale = [q for q in batch if q.job.stale]
                if stale:  # a late span rebuilt the record: its new build is what counts
                    batch = [q for q in batch if not q.job.stale]
                    if not self._hand_back(stale, "superseded"):
                        return
                if not batch:
                    break
                started = self._start(batch, queued, synchronous)
                if started is None:
                    return  # stop() gave up on this batch and handed it back
                in_flight.append(started)
                if not started.evaluation.queued:
                    break  # scored as it started: hand it back before taking more
            if not in_flight:
                with self._cond:
                    if self._closed and not (self._jobs or self._first):
                        return
                continue
            if not self._finish(in_flight.popleft()):
                return  # stop() gave up on this batch and handed it back

    def _after_load(self, evaluators: Sequence[Evaluator]) -> None:
        from ragpulse.evaluators.models.forward_queue import FORWARD_QUEUES, ForwardQueues

        if self._placement is None:
            return
        queues = self._context.shared(FORWARD_QUEUES, ForwardQueues)
        self._queues = queues
        if self._cheap_idle is not None and not self._placement.accelerator:
            queues.set_gate(self._cheap_idle)  # on the CPU: one pass at a time while it waits
        self._busy_seen = queues.busy()

    def _may_start(self, in_flight: deque[_InFlight[J]]) -> bool:
        """Whether to take another batch now. With none in flight, always (the take waits);
        with some, only without waiting: jobs there, the models' queues short, the cheap
        tier idle and the budget positive."""
        if not in_flight:
            return True
        if len(in_flight) >= self.MAX_IN_FLIGHT or self._abandoned:
            return False
        if not (self._jobs or self._first):
            return False
        queues = self._queues
        if queues is not None and self._placement is not None:
            from ragpulse.evaluators.models.forward_queue import WINDOW

            limit = WINDOW * self._placement.max_batch_tokens(self._max_batch_tokens())
            if queues.waiting_tokens >= limit:
                return False
        if self._cheap_idle is not None and not self._cheap_idle.is_set():
            return False
        return self._budget is None or self._budget.wait_s() <= 0

    def _max_batch_tokens(self) -> int | None:
        return self._context.settings.evaluation.model.max_batch_tokens

    def _start(
        self,
        part: list[_Queued[J]],
        queued: Sequence[Evaluator],
        synchronous: Sequence[Evaluator],
    ) -> _InFlight[J] | None:
        """Queue the batch on the evaluators that queue work, and score it with the others
        (in slices, yielding to the cheap tier between them); None when stop() took it."""
        cpu = time.thread_time()
        records = [q.job.record for q in part]
        priority = any(q.priority for q in part)
        evaluation = Evaluation(len(part), [], [], self._metrics)
        if queued:
            try:
                evaluation = start_evaluation(records, queued, self._metrics, priority)
            except Exception:  # start_evaluation() never raises; this guards the worker
                log.exception("%s-tier batch failed", self.tier.value)
        host_s = time.thread_time() - cpu  # tokenising and queueing: this thread's CPU
        scored: list[list[EvalResult]] = [[] for _ in part]
        for begin in range(0, len(part), self._slice) if synchronous else ():
            if begin:
                self._wait_turn(queued=False)
                if self._abandoned:
                    return None
            wall, cpu = time.perf_counter(), time.thread_time()
            # A record rebuilt by a late span meanwhile is not scored: its new build is
            # what counts (it goes back as superseded when the batch is handed back).
            fresh = [i for i in range(begin, begin + self._slice)[: len(part) - begin]
                     if not part[i].job.stale]  # fmt: skip
            chunk = [records[i] for i in fresh]
            try:
                results = evaluate_records(chunk, synchronous, self._metrics) if chunk else []
            except Exception:  # evaluate_records() never raises; this guards the worker
                log.exception("%s-tier batch failed", self.tier.value)
                results = [[] for _ in chunk]
            for i, found in zip(fresh, results, strict=True):
                scored[i] = found
            host_s += self._host_time(wall, cpu)
        return _InFlight(part, evaluation, scored, host_s)

    def _host_time(self, wall: float, cpu: float) -> float:
        """The time an evaluator that scores on this thread took since (``wall``, ``cpu``):
        busy wall time on the CPU (its model's threads included), this thread's CPU time
        on a GPU (where waiting on the device costs the host nothing)."""
        if self._placement is not None and self._placement.accelerator:
            return time.thread_time() - cpu
        return time.perf_counter() - wall

    def _finish(self, started: _InFlight[J]) -> bool:
        """Wait for a batch's queued results and hand it back; False when stop() took it."""
        cpu = time.thread_time()
        part = started.part
        try:
            queued = started.evaluation.results()
        except Exception:  # results() never raises; this guards the worker
            log.exception("%s-tier batch failed", self.tier.value)
            queued = [[] for _ in part]
        if len(queued) != len(part):  # an empty evaluation (no evaluator queues work)
            queued = [[] for _ in part]
        self._charge(started.host_s + time.thread_time() - cpu, len(part))
        stale = [q.job.stale for q in part]  # read once: a late span may come meanwhile
        finished = [
            (q, first, later)
            for q, first, later, gone in zip(part, started.synchronous, queued, stale, strict=True)
            if not gone
        ]
        if not self._hand_back(
            [q for q, gone in zip(part, stale, strict=True) if gone], "superseded"
        ):
            return False
        if not self._hand_back([q for q, _, _ in finished], None):
            return False
        self._pending.dec(len(finished))
        for q, first, later in finished:
            self._done(q.job, self._in_order([*first, *later]), None)
        return True

    def _in_order(self, results: list[EvalResult]) -> list[EvalResult]:
        """Results in the order of the tier's evaluators (as one call would give them)."""
        if len(results) < 2:
            return results
        order = {(e.metric, e.method): i for i, e in enumerate(self._evaluators)}
        return sorted(results, key=lambda r: order.get((r.metric, r.method), len(order)))

    def _charge(self, host_s: float, records: int) -> None:
        """Charge the budget with a batch's time (``host_s``: what the worker spent on it),
        plus the forward passes run since the last charge, and tell the auto rate what the
        tier can take. The passes count their wall time on the CPU; on a GPU their host
        CPU time, and their wall time is the device's."""
        device_s: float | None = None
        if self._queues is not None and self._placement is not None:
            busy = self._queues.busy()
            wall, cpu = (now - seen for now, seen in zip(busy, self._busy_seen, strict=True))
            self._busy_seen = busy
            host_s += cpu if self._placement.accelerator else wall
            device_s = wall if self._placement.accelerator else None
        if self._budget is not None:
            self._budget.spent(host_s, records, device_s)
            if self._auto is not None and (rate := self._budget.records_per_s()) is not None:
                self._auto.capacity(rate)

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

    def _wait_turn(self, queued: bool = True) -> bool:
        """Wait until this tier may run: the cheap tier idle (its queue empty) and the
        budget positive, or stopping; with ``queued``, for a job first. Under a
        saturated cheap tier or a spent budget, jobs wait for their deadline instead
        of taking the CPU. Whether it waited at all."""
        if queued:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._jobs or self._first) or self._closed)
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

    def _take(self, block: bool) -> tuple[list[_Queued[J]], list[_Queued[J]]]:
        """(a batch, empty when there is none or the stage stops; jobs past their deadline).
        Priority jobs first, a batch of one kind. With ``block``, waits for a job and then
        up to ``max_wait_s`` for a fuller batch, except once stopping."""
        with self._cond:
            if block:
                self._cond.wait_for(lambda: bool(self._jobs or self._first) or self._closed)
            if not (self._jobs or self._first) or self._abandoned:
                return [], []
            if block:
                fill_by = self._clock() + self._max_wait_s
                while len(self._jobs) + len(self._first) < self._batch_size and not self._closed:
                    left = fill_by - self._clock()
                    if left <= 0 or not self._cond.wait(left):
                        break
            late = self._pop_late()
            source = self._first if self._first else self._jobs
            batch = [source.popleft() for _ in range(min(self._batch_size, len(source)))]
            self._taken = [*self._taken, *late, *batch]  # stop() hands these back if need be
            return batch, late
