"""Which tiers evaluate a record, and why: deterministic functions of the trace id.

Every replica decides the same for the same trace, and replaying a topic
decides the same again, so a sampled share is a stable slice of traffic.
Per tier: a base rate (``evaluation.model.rate``, ``evaluation.judge.rate``),
per-route overrides, and priority rules that force a tier for records that
matter (an error, a low cheap score, an injection rule fired, negative user
feedback, high latency). Every decision has a bounded reason, carried to the sinks
by the record's export item (``sampled``; written as ``ragpulse.sampled.<tier>``) and
counted in ``ragpulse_sampled_total``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragpulse.config import EvaluationSettings, PriorityRule
from ragpulse.evaluators.base import Tier
from ragpulse.record import ConversationRecord, EvalResult, RagRecord
from ragpulse.signals import feedback_score, trace_fraction

ALL = "all"  # the cheap tier's reason: it sees every record
BASE_RATE = "base_rate"
ROUTE_RATE = "route_rate"


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
    """Stateless and thread-safe; build once from settings."""

    def __init__(self, settings: EvaluationSettings | None = None) -> None:
        settings = settings or EvaluationSettings()
        self.rates = {Tier.MODEL: settings.model.rate, Tier.JUDGE: settings.judge.rate}
        self.routes = settings.sampling.routes
        self.priorities = settings.sampling.priorities

    def reason(
        self, record: RagRecord, tier: Tier, results: Sequence[EvalResult] = ()
    ) -> str | None:
        """Why ``tier`` evaluates the record, or None; ``results`` are the cheap tier's."""
        if tier == Tier.CHEAP:
            return ALL
        for rule in self.priorities:
            if tier.value in rule.tiers and _fires(rule, record, results):
                return f"priority:{rule.when}"
        route_rates = self.routes.get(record.route or "", {})
        rate = route_rates.get("model" if tier is Tier.MODEL else "judge")
        reason = ROUTE_RATE
        if rate is None:
            rate, reason = self.rates.get(tier, 0.0), BASE_RATE
        if rate >= 1.0 or trace_fraction(record.trace_id, tier.value) < rate:
            return reason
        return None

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
        route_rates = self.routes.get(conversation.route or "", {})
        rate = route_rates.get("model" if tier is Tier.MODEL else "judge")
        reason = ROUTE_RATE
        if rate is None:
            rate, reason = self.rates.get(tier, 0.0), BASE_RATE
        if rate >= 1.0 or trace_fraction(conversation.conversation_id, tier.value) < rate:
            return reason
        return None

    def wants(self, record: RagRecord, tier: Tier, results: Sequence[EvalResult] = ()) -> bool:
        return self.reason(record, tier, results) is not None

    def by_rate(self, tier: Tier) -> bool:
        """Whether ``tier`` is sampled by a rate above zero (base or per route), not only
        by priority rules: records reach it with steady traffic."""
        if self.rates.get(tier, 0.0) > 0:
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
