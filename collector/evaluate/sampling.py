"""Which tiers evaluate a record, and why: deterministic functions of the trace id.

Every replica decides the same for the same trace, and replaying a topic
decides the same again, so a sampled share is a stable slice of traffic.
Per tier: a base rate (``evaluation.model.rate``, ``evaluation.judge.rate``),
per-route overrides, and priority rules that force a tier for records that
matter (an error, a low cheap score, an injection rule fired, negative user
feedback, high latency). Every decision has a bounded reason, carried to the sinks
by the record's export item (``sampled``; written as ``ragpulse.sampled.<tier>``) and
counted in ``ragpulse_sampled_total``.

``evaluation.model.rate: auto`` (the default when the models run on a GPU) samples by
a trace-id threshold that follows the tier's measured capacity (:class:`AutoRate`):
a record is taken when its trace fraction is under the threshold, so a record taken at
a low threshold is taken at any higher one, and each replica's threshold follows its
own capacity. The threshold is written on the record (``ragpulse.sampled.model`` =
``auto_rate:<threshold>``) and a record that already carries one (a replay) is decided
at it again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ragpulse import semconv as sc
from ragpulse.config import AUTO_RATE, EvaluationSettings, PriorityRule
from ragpulse.evaluators.base import Tier
from ragpulse.record import ConversationRecord, EvalResult, RagRecord
from ragpulse.signals import feedback_score, trace_fraction

if TYPE_CHECKING:
    from ragpulse.evaluators.models.placement import Placement
    from ragpulse.telemetry import CollectorMetrics

ALL = "all"  # the cheap tier's reason: it sees every record
BASE_RATE = "base_rate"
ROUTE_RATE = "route_rate"
AUTO = "auto_rate"
"""The reason of a record taken under ``rate: auto``; recorded as ``auto_rate:<threshold>``."""


def reason_label(why: str) -> str:
    """The bounded label of a sampling reason (``auto_rate:0.42`` counts as ``auto_rate``)."""
    return AUTO if why.startswith(AUTO + ":") else why


def recorded_threshold(record: RagRecord, tier: Tier) -> float | None:
    """The auto-rate threshold ``record`` was sampled at before (a replayed record), or None."""
    value = record.attributes.get(f"{sc.RAGPULSE_SAMPLED_PREFIX}{tier.value}")
    if not isinstance(value, str) or not value.startswith(AUTO + ":"):
        return None
    try:
        found = float(value[len(AUTO) + 1 :])
    except ValueError:
        return None
    return found if 0.0 < found <= 1.0 else None


class AutoRate:
    """The model tier's threshold under ``rate: auto``: the share of the records offered
    to it that its capacity can finish, moved once a second.

    The tier reports its capacity (records per second it can finish, measured;
    :meth:`capacity`); the sampler reports each record it decides (:meth:`offered`,
    ``forced`` for those a priority rule took, which use capacity too). The threshold is
    ``HEADROOM`` x capacity, less the forced records' rate, over the offered rate, in
    [``FLOOR``, 1], rounded to 4 decimals (so that it is written exactly on the record);
    it falls at once and rises halfway each step. Until a capacity is measured it is 1:
    the tier's queue, deadline and budget bound what waits. Thread-safe.
    """

    STEP_S = 1.0
    HEADROOM = 0.9
    FLOOR = 0.0001

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        publish: Callable[[float], None] | None = None,
    ) -> None:
        self._clock, self._publish = clock, publish
        self._threshold = 1.0
        self._capacity: float | None = None
        self._counts = [0, 0]  # offered by threshold, forced, since the last step
        self._rates: list[float] | None = None  # their per-second rates, smoothed
        self._at = clock()
        self._lock = threading.Lock()
        if publish is not None:
            publish(1.0)

    @property
    def threshold(self) -> float:
        now = self._clock()
        if now - self._at >= self.STEP_S:
            self._step(now)
        return self._threshold

    def offered(self, forced: bool = False) -> None:
        with self._lock:
            self._counts[1 if forced else 0] += 1

    def capacity(self, records_per_s: float) -> None:
        """The tier can finish about ``records_per_s`` records a second (its latest estimate)."""
        with self._lock:
            self._capacity = records_per_s

    def _step(self, now: float) -> None:
        with self._lock:
            elapsed = now - self._at
            if elapsed < self.STEP_S:
                return
            fresh = [count / elapsed for count in self._counts]
            last = self._rates or fresh
            self._rates = [0.5 * a + 0.5 * b for a, b in zip(last, fresh, strict=True)]
            self._counts, self._at = [0, 0], now
            offered, forced = self._rates
            if self._capacity is None:
                return
            room = self.HEADROOM * self._capacity - forced
            target = 1.0 if offered <= 0 else max(self.FLOOR, min(1.0, room / offered))
            old = self._threshold
            moved = target if target < old else old + 0.5 * (target - old)
            self._threshold = max(self.FLOOR, min(1.0, round(moved, 4)))
            threshold = self._threshold
        if self._publish is not None:
            self._publish(threshold)


def _fires(rule: PriorityRule, record: RagRecord, results: Sequence[EvalResult]) -> bool:
    if rule.when == "error":
        return record.error
    if rule.when == "latency_above":
        return rule.ms is not None and (record.latency_ms or 0.0) > rule.ms
    if rule.when == "negative_feedback":
        score = feedback_score(record.attributes)
        return score is not None and score < 0
    if rule.when == "injection":
        return any(r.metric == "injection" and r.label == "injection" for r in results)
    if rule.when == "low_score":
        # On the quality scale: for a lower-is-better metric (a risk) "low" means a high risk.
        return any(
            r.metric == rule.metric and r.quality is not None and rule.below is not None
            and r.quality < rule.below
            for r in results
        )  # fmt: skip
    return False


class SamplingPolicy:
    """Thread-safe; build once from settings. The model tier's rate, when the settings do
    not name one, is auto once the tier says its models run on a GPU (:meth:`placed`)."""

    def __init__(
        self,
        settings: EvaluationSettings | None = None,
        metrics: CollectorMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        settings = settings or EvaluationSettings()
        self.rates: dict[Tier, float | str] = {
            Tier.MODEL: settings.model.rate,
            Tier.JUDGE: settings.judge.rate,
        }
        self._unset = not settings.model.rate_given
        self.routes = settings.sampling.routes
        self.priorities = settings.sampling.priorities
        self._gauge = metrics.sampling_rate if metrics is not None else None
        self._clock = clock
        self.auto: AutoRate | None = None
        for tier, rate in self.rates.items():
            self._rate_chosen(tier, rate)

    def _rate_chosen(self, tier: Tier, rate: float | str) -> None:
        gauge = self._gauge.labels(tier.value) if self._gauge is not None else None
        if rate == AUTO_RATE and tier is Tier.MODEL:
            self.auto = AutoRate(self._clock, gauge.set if gauge is not None else None)
        elif gauge is not None and isinstance(rate, float):
            gauge.set(rate)

    def placed(self, placement: Placement) -> None:
        """The model tier's models run on ``placement``: an unset rate becomes auto on a GPU."""
        if self._unset and placement.accelerator and self.rates[Tier.MODEL] != AUTO_RATE:
            self.rates[Tier.MODEL] = AUTO_RATE
            self._rate_chosen(Tier.MODEL, AUTO_RATE)

    def reason(
        self, record: RagRecord, tier: Tier, results: Sequence[EvalResult] = ()
    ) -> str | None:
        """Why ``tier`` evaluates the record, or None; ``results`` are the cheap tier's."""
        if tier == Tier.CHEAP:
            return ALL
        auto = self.auto if tier is Tier.MODEL else None
        for rule in self.priorities:
            if tier.value in rule.tiers and _fires(rule, record, results):
                if auto is not None:
                    auto.offered(forced=True)
                return f"priority:{rule.when}"
        rate, reason = self._rate(record.route, tier)
        if rate == AUTO_RATE and auto is not None:
            threshold = recorded_threshold(record, tier)
            if threshold is None:  # a live record: today's threshold (a replay keeps its own)
                auto.offered()
                threshold = auto.threshold
            if trace_fraction(record.trace_id, tier.value) < threshold:
                return f"{AUTO}:{threshold:.4f}"
            return None
        return _drawn(record.trace_id, tier, rate, reason)

    def conversation_reason(
        self, conversation: ConversationRecord, tier: Tier, results: Sequence[EvalResult] = ()
    ) -> str | None:
        """Why ``tier`` evaluates a closed conversation, or None; ``results`` are its cheap
        conversation metrics'. The tier's rates, by route, as for a turn, drawn from the
        conversation id (every revision and every replica decides alike, and a revision
        is judged when its first record was); the priority rules ``low_score`` (over the
        conversation metrics: ``user_frustration`` at or above a risk, say) and
        ``negative_feedback`` (any turn's)."""
        if tier == Tier.CHEAP:
            return ALL
        for rule in self.priorities:
            if tier.value not in rule.tiers:
                continue
            if rule.when == "low_score" and any(
                r.metric == rule.metric and r.quality is not None and rule.below is not None
                and r.quality < rule.below
                for r in results
            ):  # fmt: skip
                return f"priority:{rule.when}"
            if rule.when == "negative_feedback" and any(
                (t.feedback is not None and t.feedback < 0.5)
                or any(r.metric == "user_feedback" and r.label == "negative" for r in t.results)
                for t in conversation.turns
            ):
                return f"priority:{rule.when}"
        rate, reason = self._rate(conversation.route, tier)
        if rate == AUTO_RATE:
            threshold = self.auto.threshold if self.auto is not None else 1.0
            if trace_fraction(conversation.conversation_id, tier.value) < threshold:
                return f"{AUTO}:{threshold:.4f}"
            return None
        return _drawn(conversation.conversation_id, tier, rate, reason)

    def _rate(self, route: str | None, tier: Tier) -> tuple[float | str, str]:
        """The tier's rate for ``route`` (the route's own, else the base rate) and the
        reason a record drawn at it gives."""
        rate = self.routes.get(route or "", {}).get("model" if tier is Tier.MODEL else "judge")
        if rate is None:
            return self.rates.get(tier, 0.0), BASE_RATE
        return rate, ROUTE_RATE

    def wants(self, record: RagRecord, tier: Tier, results: Sequence[EvalResult] = ()) -> bool:
        return self.reason(record, tier, results) is not None

    def by_rate(self, tier: Tier) -> bool:
        """Whether ``tier`` is sampled by a rate above zero (base or per route), not only
        by priority rules: records reach it with steady traffic."""
        rate = self.rates.get(tier, 0.0)
        if rate == AUTO_RATE or (isinstance(rate, float) and rate > 0):
            return True
        return any(
            rates.get(tier.value, 0.0) > 0  # type: ignore[call-overload]
            for rates in self.routes.values()
        )

    def can_reach(self, tier: Tier) -> bool:
        """Whether any record can ever be sampled for ``tier``: a rate above zero or a
        priority rule naming it. A tier no record can reach never loads its models."""
        if tier == Tier.CHEAP or self.by_rate(tier):
            return True
        return any(tier.value in rule.tiers for rule in self.priorities)


def _drawn(key: str, tier: Tier, rate: float | str, reason: str) -> str | None:
    """``reason`` when ``key`` is drawn at a fixed ``rate`` (every key at 1 and above)."""
    assert isinstance(rate, float)  # auto is decided before a fixed rate is drawn
    if rate >= 1.0 or trace_fraction(key, tier.value) < rate:
        return reason
    return None
