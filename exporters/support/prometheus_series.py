"""The score histograms and result counters of the ``prometheus`` sink, as one collector.

``prometheus_client``'s ``Histogram`` and ``Counter`` take a lock for every increment
(three or more per observation); a record brings one observation and one count per
evaluator, so the sink paid for about twenty locked increments per record. Here a record's
results are counted under one lock into plain lists, and ``collect`` (a scrape) turns them
into the same families: ``ragpulse_eval_score`` (``_bucket`` with exemplars, ``_sum``,
``_count``) and ``ragpulse_eval_results`` (``_total``, ``_created``).
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Exemplar

from ragpulse.record import EvalResult

SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
_BOUNDS = [*map(repr, SCORE_BUCKETS), "+Inf"]  # "le" as prometheus_client writes it
EXEMPLAR_EVERY_S = 1.0
"""A bucket keeps one exemplar (the latest), so a new one is attached at most this often
per bucket: building and storing one per observation cost more than the observation.
The first score in a bucket always carries one, so rare (low) scores always do."""

SCORE = "ragpulse_eval_score"
SCORE_HELP = "Evaluation scores in [0, 1] (injection: risk; others: higher is better)."
SCORE_LABELS = ("metric", "method", "service", "route")
RESULTS = "ragpulse_eval_results"
RESULTS_HELP = "Evaluation results by outcome (scored, not_applicable, skipped, error)."
RESULTS_LABELS = ("metric", "method", "outcome")
OUTCOMES = ("scored", "not_applicable", "skipped", "error")
DECLARED = (
    (SCORE, "histogram", SCORE_HELP, SCORE_LABELS),
    (RESULTS, "counter", RESULTS_HELP, RESULTS_LABELS),
)
"""(name, type, help, labels) of each family, as the reference docs list them."""


class _Histogram:
    """One score series: observations per bucket (not cumulative), their sum, and each
    bucket's latest exemplar with the monotonic time it was taken."""

    __slots__ = ("counts", "exemplar_at", "exemplars", "total")

    def __init__(self) -> None:
        self.counts = [0] * len(_BOUNDS)
        self.total = 0.0
        self.exemplars: list[Exemplar | None] = [None] * len(_BOUNDS)
        self.exemplar_at = [-EXEMPLAR_EVERY_S] * len(_BOUNDS)


class ScoreSeries:
    """Registered with ``registry`` on creation; label values are bounded by the caller.

    ``known``: the (metric, method) of the evaluators that run; their result counters exist
    at 0 for every outcome from the first scrape, so that an error ratio reads 0 on a quiet
    collector instead of no data.
    """

    declared = DECLARED

    def __init__(
        self,
        registry: CollectorRegistry,
        known: Callable[[], Iterable[tuple[str, str]]] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._scores: dict[tuple[str, str, str, str], _Histogram] = {}
        self._results: dict[tuple[str, str, str], list[float]] = {}  # [count, created]
        self._known = known
        registry.register(self)

    def add(
        self, results: Sequence[EvalResult], service: str, route: str, exemplar: dict[str, str]
    ) -> None:
        """Count one record's results; ``exemplar``: the labels a new exemplar carries."""
        now = time.monotonic()
        with self._lock:
            for result in results:
                if result.error:
                    outcome = "error"
                elif result.label == "skipped":  # e.g. the judge budget was spent
                    outcome = "skipped"
                elif (score := result.score) is None:
                    outcome = "not_applicable"
                else:
                    outcome = "scored"
                    key = (result.metric, result.method, service, route)
                    if (series := self._scores.get(key)) is None:
                        series = self._scores[key] = _Histogram()
                    bucket = bisect_left(SCORE_BUCKETS, score)
                    series.counts[bucket] += 1
                    series.total += score
                    if now - series.exemplar_at[bucket] >= EXEMPLAR_EVERY_S:
                        series.exemplar_at[bucket] = now
                        series.exemplars[bucket] = Exemplar(exemplar, score, time.time())
                counted = (result.metric, result.method, outcome)
                if (count := self._results.get(counted)) is None:
                    count = self._results[counted] = [0, time.time()]
                count[0] += 1

    @staticmethod
    def _families() -> tuple[HistogramMetricFamily, CounterMetricFamily]:
        return (
            HistogramMetricFamily(SCORE, SCORE_HELP, labels=SCORE_LABELS),
            CounterMetricFamily(RESULTS, RESULTS_HELP, labels=RESULTS_LABELS),
        )

    def describe(self) -> list[Metric]:
        """The families' names, so that registering a second sink in one registry fails."""
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        known = list(self._known()) if self._known is not None else []
        with self._lock:  # a consistent copy; the families are built outside the lock
            for metric, method in known:
                for kind in OUTCOMES:
                    self._results.setdefault((metric, method, kind), [0, time.time()])
            scores = [
                (key, list(s.counts), s.total, list(s.exemplars)) for key, s in self._scores.items()
            ]
            outcomes = [(key, seen, created) for key, (seen, created) in self._results.items()]
        histograms, counters = self._families()
        for series, per_bucket, total, exemplars in scores:
            cumulative, buckets = 0, []
            for bound, n, exemplar in zip(_BOUNDS, per_bucket, exemplars, strict=True):
                cumulative += n
                buckets.append((bound, cumulative, exemplar) if exemplar else (bound, cumulative))
            histograms.add_metric(list(series), buckets, total)
        yield histograms
        for outcome, seen, created in outcomes:
            counters.add_metric(list(outcome), seen, created=created)
        yield counters
