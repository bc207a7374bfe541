"""Completed traces -> records -> evaluators -> sinks, on one worker thread.

Intake never waits for evaluation: completed traces queue here, and the
receiver answers 503 (retryable) when the backlog passes its bound instead
of growing memory. Every trace is finished exactly once: evaluated and
exported, or skipped and counted; then its source acknowledgements are
released.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence

from ragpulse.collector.assembly import CompletedTrace
from ragpulse.collector.extract import extract_records
from ragpulse.collector.telemetry import CollectorMetrics
from ragpulse.evaluators.base import Evaluator
from ragpulse.exporters.base import Sink
from ragpulse.record import EvalResult, RagRecord

log = logging.getLogger(__name__)


def evaluate_records(
    records: Sequence[RagRecord],
    evaluators: Sequence[Evaluator],
    metrics: CollectorMetrics | None = None,
) -> list[list[EvalResult]]:
    """Run every evaluator over the batch; results[i] belongs to records[i]."""
    results: list[list[EvalResult]] = [[] for _ in records]
    if not records:
        return results
    for evaluator in evaluators:
        start = time.perf_counter()
        scored = evaluator.evaluate(records)
        if metrics is not None:
            metrics.evaluator_duration.labels(evaluator.metric, evaluator.method).observe(
                time.perf_counter() - start
            )
        for i, result in enumerate(scored):
            results[i].append(result)
            if result.error and metrics is not None:
                metrics.evaluator_errors.labels(result.metric, result.method).inc()
    return results


class Pipeline:
    """Thread-safe ``submit``; a single worker thread does the rest."""

    def __init__(
        self,
        evaluators: Sequence[Evaluator],
        sinks: Sequence[Sink],
        metrics: CollectorMetrics,
        batch_size: int = 64,
        max_wait_s: float = 0.05,
        max_backlog: int = 5_000,
    ) -> None:
        self.evaluators = list(evaluators)
        self.sinks = list(sinks)
        self._metrics = metrics
        self._batch_size = batch_size
        self._max_wait_s = max_wait_s
        self._max_backlog = max_backlog
        self._queue: queue.Queue[CompletedTrace | None] = queue.Queue()  # None = stop
        self._thread: threading.Thread | None = None
        self._pending = 0  # submitted and not yet finished
        self._pending_cond = threading.Condition()

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    @property
    def overloaded(self) -> bool:
        return self._queue.qsize() >= self._max_backlog

    def submit(self, traces: Sequence[CompletedTrace]) -> None:
        with self._pending_cond:
            self._pending += len(traces)
        for trace in traces:
            self._queue.put(trace)
        self._metrics.eval_backlog.set(self._queue.qsize())

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ragpulse-eval", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Finish what is queued, then stop and shut the sinks down."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("evaluation worker did not finish within %.0fs", timeout)
            self._thread = None
        for sink in self.sinks:
            try:
                sink.shutdown()
            except Exception:
                log.exception("sink %s failed to shut down", sink.name)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until everything submitted so far is exported (tests, demo)."""
        with self._pending_cond:
            return self._pending_cond.wait_for(lambda: self._pending == 0, timeout)

    def _run(self) -> None:
        while True:
            batch, stop = self._next_batch()
            if batch:
                try:
                    self.process(batch)
                except Exception:  # never let the worker die; process() already guards
                    log.exception("evaluation batch failed")
            self._metrics.eval_backlog.set(self._queue.qsize())
            with self._pending_cond:
                self._pending -= len(batch)
                self._pending_cond.notify_all()
            if stop:
                return

    def _next_batch(self) -> tuple[list[CompletedTrace], bool]:
        first = self._queue.get()
        if first is None:
            return [], True
        batch = [first]
        deadline = time.monotonic() + self._max_wait_s
        while len(batch) < self._batch_size:
            try:
                item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    def process(self, traces: Sequence[CompletedTrace]) -> None:
        """Extract, evaluate, export; release acks. Synchronous (also used by replay)."""
        owners: list[CompletedTrace] = []
        records: list[RagRecord] = []
        for trace in traces:
            try:
                found, skip_reason = extract_records(trace.spans)
            except Exception:
                log.exception("extraction failed for trace %s", trace.trace_id)
                found, skip_reason = [], "extraction_error"
            if skip_reason:
                self._metrics.traces_skipped.labels(skip_reason).inc()
            records.extend(found)
            owners.extend([trace] * len(found))
        results = evaluate_records(records, self.evaluators, self._metrics)
        for record, record_results in zip(records, results, strict=True):
            self._export(record, record_results)
        self._metrics.records_evaluated.inc(len(records))
        for trace in traces:
            trace.release()

    def _export(self, record: RagRecord, results: list[EvalResult]) -> None:
        for sink in self.sinks:
            try:
                sink.export(record, results)
            except Exception:
                log.exception("sink %s failed on trace %s", sink.name, record.trace_id)
                self._metrics.sink_errors.labels(sink.name).inc()
