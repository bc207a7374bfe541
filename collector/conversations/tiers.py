"""The costly conversation metrics (the judges): sampled, queued, judged off the ticker.

When a conversation closes, its stage scores the cheap conversation metrics at once and
exports the record. When the conversation is sampled for a costly tier
(:meth:`~ragpulse.collector.evaluate.sampling.SamplingPolicy.conversation_reason`: the tier's rate
drawn from the conversation id, and priority rules), that first export item says so
(``pending: ("judge",)``, ``sampled["judge"]``) and the record joins this worker's
bounded queue. The tier's results follow as an ``update`` item of the same conversation
record: the same identifier and revision, ``tier`` ``judge``, the tier's results only,
exactly as the turn pipeline follows up its costly tiers. The judges keep to the
judge's budget and cache (a conversation is one call per metric, fewer when its earlier
turns' verdicts are cached: :mod:`ragpulse.evaluators.judge.conversation`).

Skips are said, never silent: a full queue (``evaluation.judge.max_queue``), a record that
waited past ``evaluation.judge.max_delay_s``, or a shutdown before its turn give an update
with no results and ``sampled["judge"]`` ``skipped:<reason>``. A record whose
conversation was revised meanwhile (it resumed and closed again) is dropped, not judged
(``superseded``): the later revision is judged, and an older revision's results must not
overwrite a newer one's in a backend that upserts by identifier. All of it is counted in
``ragpulse_conversations_sampled_total{tier, reason}``.

The worker is one daemon thread; it loads the tier's evaluators (the judge client) when it
starts, so the ticker never waits for a judge.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from ragpulse.config import TierSettings
from ragpulse.evaluation import load_evaluators_safely
from ragpulse.evaluators.base import ConversationEvaluator, Tier
from ragpulse.plugin_context import PluginContext
from ragpulse.record import ConversationRecord, EvalResult, ExportItem, ExportKind
from ragpulse.telemetry import CollectorMetrics

log = logging.getLogger(__name__)

Export = Callable[[ExportItem[ConversationRecord]], None]


@dataclass(eq=False)
class ConversationJob:
    """A closed conversation's record waiting for one costly tier."""

    record: ConversationRecord
    tier: Tier
    why: str  # why the tier was chosen (base_rate, route_rate, priority:<rule>)
    deadline: float  # time.monotonic() past which it is skipped
    current: Callable[[], bool]  # still its conversation's latest revision?
    sampled: Mapping[str, str]  # what the record's first export said of the tiers


def evaluate(
    evaluators: Sequence[ConversationEvaluator], record: ConversationRecord
) -> list[EvalResult]:
    return [r for e in evaluators for r in e.evaluate_conversations([record])]


def loaded(
    evaluators: Sequence[ConversationEvaluator], context: PluginContext
) -> list[ConversationEvaluator]:
    """The evaluators ready to score: those loaded already, and the others loaded now
    (the ones that cannot run are left out, logged and counted)."""
    ready = [e for e in evaluators if e.context is not None]
    return [*ready, *load_evaluators_safely([e for e in evaluators if e.context is None], context)]


class CostlyConversations:
    """One costly tier's conversation metrics: a bounded queue and one daemon worker.

    ``offer`` and ``stop`` may be called from any thread; ``export`` is called from the
    worker (or from ``stop``) with ``guard`` held, after the job's ``current()`` said
    it is still its conversation's latest revision.
    """

    def __init__(
        self,
        tier: Tier,
        evaluators: Sequence[ConversationEvaluator],
        export: Export,
        guard: AbstractContextManager[Any],
        settings: TierSettings,
        context: PluginContext,
        metrics: CollectorMetrics,
    ) -> None:
        self.tier = tier
        self.evaluators = list(evaluators)
        self._export = export
        self._guard = guard
        self._settings = settings
        self._context = context
        self._metrics = metrics
        self._queue: deque[ConversationJob] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._busy = False
        self._closed = False  # stopped: nothing more is exported
        self._thread: threading.Thread | None = None

    @property
    def max_delay_s(self) -> float:
        """The longest a record waits in the queue (the tier's ``max_delay_s``)."""
        return self._settings.max_delay_s

    def count(self, reason: str) -> None:
        self._metrics.conversations_sampled.labels(self.tier.value, reason).inc()

    # -- from the stage ---------------------------------------------------------------------

    def offer(self, job: ConversationJob) -> str | None:
        """Queue ``job``; None when queued, else why the tier skips it (queue_full, shutdown)."""
        with self._cond:
            if self._stopping or self._thread is None:
                return "shutdown"
            if len(self._queue) >= self._settings.max_queue:
                return "queue_full"
            self._queue.append(job)
            self._cond.notify()
            return None

    def wait_idle(self, timeout: float) -> bool:
        """Until nothing is queued or being judged (an offline run's end, tests)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)

    # -- the worker -------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._stopping = self._closed = False
            self._thread = threading.Thread(
                target=self._run, name=f"ragpulse-conversations-{self.tier.value}", daemon=True
            )
            self._thread.start()

    def stop(self, deadline: float) -> None:
        """Judge what is queued until ``deadline`` (a ``time.monotonic()`` value); what is
        left then is exported as skipped (shutdown)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
            if self._thread.is_alive():
                log.warning("conversation %s tier still busy at the deadline", self.tier.value)
            self._thread = None
        with self._cond:
            left = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        for job in left:
            self.skip(job, "shutdown")
        with self._guard:  # a judgement still in flight is not exported after the sinks stop
            self._closed = True

    def _run(self) -> None:
        evaluators = loaded(self.evaluators, self._context)
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:  # stopping, and nothing left
                    return
                batch = [
                    self._queue.popleft()
                    for _ in range(min(len(self._queue), self._settings.batch_size))
                ]
                self._busy = True
            try:
                self._judge(batch, evaluators)
            except Exception:  # the worker must survive anything
                log.exception("conversation %s tier failed", self.tier.value)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _judge(self, batch: list[ConversationJob], evaluators: list[ConversationEvaluator]) -> None:
        now = time.monotonic()
        jobs = []
        for job in batch:
            if not job.current():
                self.count("skipped:superseded")
            elif now > job.deadline:
                self.skip(job, "deadline")
            elif not evaluators:
                self.skip(job, "unavailable")
            else:
                jobs.append(job)
        if not jobs:
            return
        records = [j.record for j in jobs]
        results: list[list[EvalResult]] = [[] for _ in jobs]
        for evaluator in evaluators:
            for i, result in enumerate(evaluator.evaluate_conversations(records)):
                results[i].append(result)
        for job, found in zip(jobs, results, strict=True):
            self._update(job, found, job.why)

    def skip(self, job: ConversationJob, reason: str) -> None:
        """Say, in an update of the job's record, that the tier skipped it and why."""
        self._update(job, [], f"skipped:{reason}")

    def _update(self, job: ConversationJob, results: list[EvalResult], why: str) -> None:
        """Export the tier's results (or why it skipped) as an update of the job's record,
        unless a later revision of its conversation went out meanwhile."""
        tier = self.tier.value
        item = ExportItem(job.record, results, ExportKind.UPDATE, tier, {**job.sampled, tier: why})
        with self._guard:
            if self._closed:
                self.count("skipped:shutdown")
                return
            if not job.current():
                self.count("skipped:superseded")
                return
            self.count(why)
            try:
                self._export(item)
            except Exception:  # the sinks are guarded one by one; this guards the worker
                log.exception("exporting conversation %s failed", job.record.conversation_id)
