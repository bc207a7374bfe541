"""Sampling policy (deterministic, priorities, routes) and user feedback joins."""

from __future__ import annotations

import json
import subprocess
import sys

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.helpers import make_span, new_span_id, new_trace_id
from support.kafka_env import wait_until

import ragpulse
from ragpulse import semconv as sc
from ragpulse.collector.evaluate.sampling import SamplingPolicy
from ragpulse.collector.service import Collector
from ragpulse.config import EvaluationSettings, JudgeSettings, ModelTierSettings, load_settings
from ragpulse.evaluators.base import Tier
from ragpulse.evaluators.faithfulness.lexical import LexicalFaithfulness
from ragpulse.exporters.memory import InMemorySink
from ragpulse.record import EvalResult, RagRecord

IDS = [f"{i:032x}" for i in range(0, 4000, 7)]


def policy(**kw: object) -> SamplingPolicy:
    return SamplingPolicy(EvaluationSettings(**kw))  # type: ignore[arg-type]


def test_same_trace_same_decision_in_another_process() -> None:
    here = [
        policy(model=ModelTierSettings(rate=0.3)).wants(RagRecord(trace_id=t), Tier.MODEL)
        for t in IDS
    ]
    code = (
        "import json, sys\n"
        "from ragpulse.collector.evaluate.sampling import SamplingPolicy\n"
        "from ragpulse.config import EvaluationSettings, ModelTierSettings\n"
        "from ragpulse.evaluators.base import Tier\n"
        "from ragpulse.record import RagRecord\n"
        "p = SamplingPolicy(EvaluationSettings(model=ModelTierSettings(rate=0.3)))\n"
        "ids = json.loads(sys.stdin.read())\n"
        "print(json.dumps([p.wants(RagRecord(trace_id=t), Tier.MODEL) for t in ids]))\n"
    )
    there = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(IDS),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(there.stdout) == here
    assert 0.2 < sum(here) / len(here) < 0.4


def test_priority_rules_override_base_rates() -> None:
    p = policy(model=ModelTierSettings(rate=0.0), judge=JudgeSettings(rate=0.0))
    plain = RagRecord(trace_id=IDS[0])
    assert p.reason(plain, Tier.MODEL) is None and p.reason(plain, Tier.JUDGE) is None
    assert p.reason(plain, Tier.CHEAP) == "all"
    errored = plain.model_copy(update={"error": True})
    assert p.reason(errored, Tier.MODEL) == "priority:error"
    low = [EvalResult(metric="faithfulness", method="lexical", score=0.2)]
    assert p.reason(plain, Tier.JUDGE, low) == "priority:low_score"
    injected = [EvalResult(metric="injection", method="rules", score=0.9, label="injection")]
    assert p.reason(plain, Tier.JUDGE, injected) == "priority:injection"
    unhappy = plain.model_copy(update={"attributes": {sc.RAGPULSE_FEEDBACK_SCORE: -1.0}})
    assert (
        p.reason(unhappy, Tier.MODEL)
        == p.reason(unhappy, Tier.JUDGE)
        == "priority:negative_feedback"
    )


def test_route_overrides_and_latency_rule() -> None:
    from ragpulse.config import PriorityRule, SamplingSettings

    sampling = SamplingSettings(
        routes={"/vip": {"judge": 1.0}},
        priorities=[PriorityRule(when="latency_above", ms=500, tiers=["model"])],
    )
    p = policy(model=ModelTierSettings(rate=0.0), judge=JudgeSettings(rate=0.0), sampling=sampling)
    assert p.reason(RagRecord(trace_id=IDS[1], route="/vip"), Tier.JUDGE) == "route_rate"
    assert p.reason(RagRecord(trace_id=IDS[1], route="/ask"), Tier.JUDGE) is None
    slow = RagRecord(trace_id=IDS[1], latency_ms=900)
    assert p.reason(slow, Tier.MODEL) == "priority:latency_above"


def rag_spans(trace_id: str, answer: str = "Paris is the capital.") -> list:
    root = new_span_id()
    return [
        make_span(
            trace_id,
            "ask",
            {"ragpulse.role": "pipeline", "input.value": "Capital?", "output.value": answer},
            span_id=root,
        ),
        make_span(
            trace_id,
            "r",
            {
                "openinference.span.kind": "RETRIEVER",
                "retrieval.documents.0.document.content": "Paris is the capital.",
            },
            parent=root,
        ),
    ]


def feedback_span(target: str, score: float) -> object:
    return make_span(new_trace_id(), "ragpulse.feedback", {
        sc.RAGPULSE_ROLE: sc.ROLE_FEEDBACK, sc.RAGPULSE_FEEDBACK_TRACE_ID: target,
        sc.RAGPULSE_FEEDBACK_SCORE: score, sc.RAGPULSE_FEEDBACK_COMMENT: "wrong city"})  # fmt: skip


def collector(grace_s: float = 0.2) -> tuple[Collector, InMemorySink]:
    sink = InMemorySink()
    settings = load_settings(assembly={"grace_s": grace_s, "tick_s": 0.05})
    c = Collector(settings, evaluators=[LexicalFaithfulness()], sinks=[sink], receiver=False,
                  metrics_server=False)  # fmt: skip
    return c.start(), sink


def joined(c: Collector, how: str) -> float:
    return c.metrics.registry.get_sample_value("ragpulse_feedback_total", {"joined": how}) or 0


def test_feedback_within_the_window_joins_the_record() -> None:
    # A quiet period longer than the test: the trace is surely open when its feedback
    # comes, however slow the machine; flush() then closes it.
    c, sink = collector(grace_s=600)
    try:
        t = new_trace_id()
        c.ingest(rag_spans(t))
        c.ingest([feedback_span(t, -1)])  # type: ignore[list-item]
        assert c.flush(60), "the trace was not evaluated and exported within 60s of flush()"
        assert len(sink.items) == 1
        [item] = sink.items
        assert item.record.attributes[sc.RAGPULSE_FEEDBACK_SCORE] == -1
        assert item.results[-1].metric == "user_feedback" and item.results[-1].label == "negative"
        assert item.sampled["cheap"] == "all"
        assert joined(c, "in_window") == 1
    finally:
        c.stop()


def test_late_and_early_feedback_are_joined_and_counted() -> None:
    c, sink = collector()
    try:
        late, early = new_trace_id(), new_trace_id()
        c.ingest(rag_spans(late))
        wait_until(lambda: len(sink.items) == 1, 60, "the trace was not exported")
        c.ingest([feedback_span(late, -1)])  # type: ignore[list-item]
        wait_until(lambda: len(sink.items) == 2, 60, "the late feedback update was not exported")
        update = sink.items[1]
        assert update.record.trace_id == late
        assert [r.metric for r in update.results] == ["user_feedback"]
        assert joined(c, "late") == 1
        c.ingest([feedback_span(early, 1)])  # before its trace: waits for it
        assert joined(c, "waiting") == 1
        c.ingest(rag_spans(early))
        wait_until(lambda: len(sink.items) == 3, 60, "the early-feedback trace was not exported")
        assert sink.items[2].results[-1].label == "positive" and joined(c, "in_window") == 1
        c.ingest([feedback_span("not-a-trace-id", 1)])  # type: ignore[list-item]
        assert joined(c, "invalid") == 1
    finally:
        c.stop()


def test_app_side_feedback_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    ragpulse.configure(exporter=exporter, tracer_provider=provider)
    try:
        target, span = new_trace_id(), new_span_id()
        ragpulse.feedback(target, -1, comment="wrong", span_id=span)
        ragpulse.feedback("zz", 1)  # a bad trace id never raises into the app
    finally:
        ragpulse.shutdown()
    spans = exporter.get_finished_spans()
    first = spans[0]
    assert first.attributes[sc.RAGPULSE_FEEDBACK_TRACE_ID] == target
    assert first.attributes[sc.RAGPULSE_FEEDBACK_SCORE] == -1.0
    assert first.links[0].context.span_id == int(span, 16)
