"""``evaluation.model.rate: auto``: a trace-id threshold that follows the model tier's
capacity, recorded on each record so that a replay decides the same; and the budget's
admission, which takes a burst the records' deadline allows."""

from __future__ import annotations

from support.helpers import Clock, make_span, new_trace_id

from ragpulse.collector.assembly.assembler import CompletedTrace
from ragpulse.collector.evaluate.exports import Exports
from ragpulse.collector.evaluate.pipeline import Pipeline
from ragpulse.collector.evaluate.sampling import SamplingPolicy
from ragpulse.collector.evaluate.tier_stage import Budget
from ragpulse.config import EvaluationSettings, ModelTierSettings
from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.evaluators.faithfulness.lexical import LexicalFaithfulness
from ragpulse.exporters.memory import InMemorySink
from ragpulse.record import EvalResult, RagRecord
from ragpulse.signals import trace_fraction
from ragpulse.telemetry import CollectorMetrics

IDS = [f"{i:032x}" for i in range(0, 20_000, 7)]
SAMPLED = "ragpulse.sampled.model"


def auto_policy(clock: Clock, metrics: CollectorMetrics | None = None) -> SamplingPolicy:
    settings = EvaluationSettings(model=ModelTierSettings(rate="auto"))
    return SamplingPolicy(settings, metrics, clock=clock)


def decide(policy: SamplingPolicy, ids: list[str]) -> list[str | None]:
    return [policy.reason(RagRecord(trace_id=t), Tier.MODEL) for t in ids]


def test_auto_sheds_by_a_threshold_that_follows_capacity() -> None:
    clock, metrics = Clock(100.0), CollectorMetrics()
    policy = auto_policy(clock, metrics)
    assert policy.auto is not None
    assert set(decide(policy, IDS[:100])) == {"auto_rate:1.0000"}  # nothing measured yet
    policy.auto.capacity(10.0)  # the tier finishes 10 records a second
    clock.now += 1.0  # ... while 100 a second were offered: 0.9 x 10 / 100
    assert policy.auto.threshold == 0.09
    chosen = decide(policy, IDS)
    value = metrics.registry.get_sample_value
    assert value("ragpulse_sampling_rate", {"tier": "model"}) == 0.09
    taken = [t for t, why in zip(IDS, chosen, strict=True) if why is not None]
    assert set(chosen) == {"auto_rate:0.0900", None}
    assert all(trace_fraction(t, "model") < 0.09 for t in taken)
    assert 0.06 < len(taken) / len(IDS) < 0.12
    assert decide(policy, IDS) == chosen  # deterministic
    # More capacity: the threshold rises halfway a step, and what was taken stays taken.
    policy.auto.capacity(1_000.0)
    clock.now += 1.0
    wider = decide(policy, IDS)
    assert 0.09 < policy.auto.threshold < 1.0
    assert all(wider[IDS.index(t)] is not None for t in taken)


def test_a_replay_decides_at_the_threshold_written_on_the_record() -> None:
    clock = Clock(100.0)
    live = auto_policy(clock)
    assert live.auto is not None
    live.auto.capacity(5.0)
    for t in IDS:
        live.reason(RagRecord(trace_id=t), Tier.MODEL)
    clock.now += 1.0
    first = {t: live.reason(RagRecord(trace_id=t), Tier.MODEL) for t in IDS}
    threshold = live.auto.threshold
    assert threshold < 0.2
    # Replayed elsewhere: another collector, with nothing measured (threshold 1), reading
    # the records with what the first wrote on them.
    replay = auto_policy(Clock(100.0))
    for t, why in first.items():
        recorded = {SAMPLED: why or f"auto_rate:{threshold:.4f}"}
        again = replay.reason(RagRecord(trace_id=t, attributes=recorded), Tier.MODEL)
        assert again == why


def test_priority_rules_still_force_under_auto() -> None:
    clock = Clock(100.0)
    policy = auto_policy(clock)
    assert policy.auto is not None
    policy.auto.capacity(0.001)
    decide(policy, IDS)
    clock.now += 1.0
    decide(policy, IDS[:10])
    assert policy.auto.threshold == policy.auto.FLOOR
    errored = RagRecord(trace_id=IDS[3], error=True)
    assert policy.reason(errored, Tier.MODEL) == "priority:error"


class Model(Evaluator):
    """A model-tier stand-in: the sampling is what is tested."""

    metric, method = "stand_in", "model"
    tier = Tier.MODEL

    def score(self, record: RagRecord) -> EvalResult:
        return self.result(0.5)


def test_records_carry_their_threshold_and_count_as_auto_rate() -> None:
    metrics, memory = CollectorMetrics(), InMemorySink()
    settings = EvaluationSettings(model=ModelTierSettings(rate="auto"))
    pipeline = Pipeline(
        [LexicalFaithfulness(), Model()], Exports([memory], metrics), metrics, settings
    )
    traces = []
    for _ in range(5):
        t = new_trace_id()
        attributes = {"ragpulse.role": "pipeline", "input.value": "q?", "output.value": "a."}
        traces.append(CompletedTrace(t, [make_span(t, "p", attributes)], "quiet", 0.0))
    pipeline.process(traces)
    # The threshold each record was taken at goes out with it (as ragpulse.sampled.model in
    # the results file, where a replay reads it back).
    assert [i.sampled["model"] for i in memory.items] == ["auto_rate:1.0000"] * 5
    assert all([r.name for r in i.results][-1] == "stand_in/model" for i in memory.items)
    value = metrics.registry.get_sample_value
    assert value("ragpulse_sampled_total", {"tier": "model", "reason": "auto_rate"}) == 5
    assert value("ragpulse_sampling_rate", {"tier": "model"}) == 1.0


def test_a_burst_the_deadline_allows_is_admitted() -> None:
    clock = Clock(100.0)
    budget = Budget(0.25, clock, max_delay_s=10.0)
    assert budget.admits(1_000)  # nothing timed yet: the queue and deadlines bound it
    budget.spent(0.1, 1)  # a record costs 0.1 s; 0.4 s of the 0.5 s bucket is left
    # 20 queued: 2.1 s of work at a quarter of the time, 0.4 s in hand: done in 6.8 s.
    assert budget.admits(20)
    assert not budget.admits(40)  # 14.8 s: past the records' deadline
    assert budget.records_per_s() == 2.5
    assert budget.wait_s() == 0.0
    budget.spent(1.0, 1)
    assert budget.wait_s() > 0  # spent: the tier waits for the bucket to refill
    assert Budget(1.0, clock).wait_s() == 0.0  # a share of 1 never pauses
