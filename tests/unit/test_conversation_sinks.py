"""Conversation records through every sink: Prometheus series, Phoenix session annotations,
MLflow assessments on the first trace, Langfuse session scores.

Phoenix and MLflow run for real in tests/live/test_conversation_exports.py; here a local
HTTP server keeps what their sinks post (the request each sink sends). No Langfuse server
can run here (it needs ClickHouse, Redis, S3 and Postgres): its sink posts to the double in
tests/support/langfuse_double.py, which checks every score against Langfuse's published
API schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support.helpers import new_span_id, new_trace_id
from support.langfuse_double import LangfuseDouble
from support.sink_recorder import Recorder, delivered, sink_posting_to

from ragpulse.config import Settings
from ragpulse.exporters.langfuse import LangfuseSink, session_score_id
from ragpulse.exporters.phoenix import PhoenixSink
from ragpulse.exporters.prometheus import PrometheusSink
from ragpulse.record import ConversationRecord, EvalResult, ExportItem, ExportKind, TurnSummary


def conversation(revision: int = 1, turns: int = 2, **attributes: Any) -> ConversationRecord:
    return ConversationRecord(
        conversation_id="conv-42",
        service="shop",
        route="/chat",
        turns=[
            TurnSummary(
                turn=i + 1,
                trace_id=new_trace_id(),
                span_id=new_span_id(),
                question=f"question {i} from jane.doe@example.com",
                answer=f"answer {i}",
            )
            for i in range(turns)
        ],
        revision=revision,
        closed_by="idle",
        attributes=attributes,
    )


FRUSTRATED = EvalResult(
    metric="user_frustration",
    method="rules",
    score=0.5,
    label="frustrated",
    explanation="jane.doe@example.com asked twice",
)
CALM_JUDGE = EvalResult(
    metric="user_frustration", method="llm_judge", score=0.0, label="not_frustrated"
)
GROUNDED = EvalResult(metric="conversation_groundedness", method="rules", score=0.75)


# -- Prometheus -------------------------------------------------------------------------


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def test_prometheus_counts_records_turns_frustration_and_scores() -> None:
    registry = CollectorRegistry()
    sink = PrometheusSink(registry)
    first = conversation()
    sink.export_conversation(ExportItem(first, [FRUSTRATED, GROUNDED]))
    # the judge's update of the same record: its scores only, the record not again
    sink.export_conversation(ExportItem(first, [CALM_JUDGE], ExportKind.UPDATE, "judge"))
    revised = conversation(revision=2, turns=3)
    sink.export_conversation(ExportItem(revised, [FRUSTRATED], ExportKind.REVISION))

    where = {"service": "shop", "route": "/chat"}
    records = "ragpulse_conversation_records_total"
    assert sample(registry, records, **where, closed_by="idle", outcome="new") == 1
    assert sample(registry, records, **where, closed_by="idle", outcome="revised") == 1
    assert sample(registry, "ragpulse_conversation_turns_count", **where) == 2
    assert sample(registry, "ragpulse_conversation_turns_sum", **where) == 5
    assert sample(registry, "ragpulse_conversation_turns_bucket", **where, le="2.0") == 1
    frustrated = "ragpulse_conversation_frustrated_total"
    assert sample(registry, frustrated, **where, method="rules") == 2
    assert sample(registry, frustrated, **where, method="llm_judge") == 0
    score = "ragpulse_eval_score_count"
    assert sample(registry, score, metric="user_frustration", method="rules", **where) == 2
    assert sample(registry, score, metric="user_frustration", method="llm_judge", **where) == 1
    assert sample(registry, score, metric="conversation_groundedness", method="rules", **where)


def test_prometheus_conversation_labels_are_bounded_and_never_ids() -> None:
    registry = CollectorRegistry()
    sink = PrometheusSink(registry, PrometheusSink.Options(max_services=1))
    sink.export_conversation(ExportItem(conversation(), [GROUNDED]))
    other = conversation().model_copy(update={"service": "another", "route": "/x"})
    sink.export_conversation(ExportItem(other, [GROUNDED]))
    exposed = [
        s.labels
        for family in registry.collect()
        if family.name.startswith("ragpulse_conversation")
        for s in family.samples
    ]
    assert {labels["service"] for labels in exposed} == {"shop", "other"}
    assert not any("conv-42" in str(labels) for labels in exposed)


# -- Phoenix and MLflow: what their sinks post --------------------------------------------


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    with Recorder() as server:
        yield server


def export(sink_name: str, url: str, record: ConversationRecord, results: list[EvalResult]) -> None:
    sink, context = sink_posting_to(sink_name, url)
    sink.export_conversation(ExportItem(record, results))
    sink.shutdown()
    count = delivered(context, sink_name)
    assert count == len(results)


def test_phoenix_session_annotations_one_per_metric_and_method(recorder: Recorder) -> None:
    record = conversation(revision=2)
    export("phoenix", recorder.url, record, [FRUSTRATED, GROUNDED])
    [(path, body)] = recorder.posts
    assert path == "/v1/session_annotations"
    by_name = {a["name"]: a for a in body["data"]}
    frustration = by_name["user_frustration"]
    assert frustration["session_id"] == "conv-42"
    assert frustration["identifier"] == "ragpulse.rules"  # Phoenix upserts on it
    assert frustration["annotator_kind"] == "CODE"
    assert frustration["result"]["label"] == "frustrated"
    assert frustration["result"]["score"] == 0.5
    assert frustration["metadata"]["conversation_revision"] == 2
    assert "jane.doe@example.com" not in json.dumps(body)  # redacted before it leaves


def test_mlflow_assessments_on_the_first_trace_as_session_scorers_log_them(
    recorder: Recorder,
) -> None:
    record = conversation(turns=3)
    export("mlflow", recorder.url, record, [FRUSTRATED, GROUNDED])
    paths = {path for path, _ in recorder.posts}
    assert paths == {f"/api/3.0/mlflow/traces/tr-{record.first.trace_id}/assessments"}
    assessments = {b["assessment"]["assessment_name"]: b["assessment"] for _, b in recorder.posts}
    frustration = assessments["user_frustration"]
    assert "span_id" not in frustration  # the trace as a whole
    assert frustration["source"] == {"source_type": "CODE", "source_id": "ragpulse.rules"}
    assert frustration["feedback"] == {"value": 0.5}
    assert frustration["metadata"]["mlflow.trace.session"] == "conv-42"
    assert frustration["metadata"]["label"] == "frustrated"
    assert "jane.doe@example.com" not in json.dumps(recorder.posts)


def test_a_conversation_without_results_posts_nothing(recorder: Recorder) -> None:
    settings = Settings(sinks={"phoenix": {"endpoint": recorder.url, "max_wait_s": 0}})
    sink = PhoenixSink.from_settings(settings)
    assert sink is not None
    sink.export_conversation(ExportItem(conversation(), []))
    sink.shutdown()
    assert recorder.posts == []


# -- Langfuse (a double) ------------------------------------------------------------------


def test_langfuse_session_scores_keep_their_id_across_revisions_and_repeats() -> None:
    """Checked against tests/support/langfuse_double.py, a double: no Langfuse server runs
    here. The same id each time is what makes Langfuse update the score."""
    with LangfuseDouble(secret_key="sk-lf-test") as double:
        settings = Settings(
            sinks={
                "langfuse": {
                    "host": double.url,
                    "public_key": "pk-lf-test",
                    "secret_key": "sk-lf-test",
                    "max_wait_s": 0,
                }
            }
        )
        sink = LangfuseSink.from_settings(settings)
        assert sink is not None
        first = conversation()
        sink.export_conversation(ExportItem(first, [FRUSTRATED, GROUNDED]))
        # the at-least-once repeat, then the resumed conversation's revision
        sink.export_conversation(ExportItem(first, [FRUSTRATED, GROUNDED]))
        revised = conversation(revision=2, turns=3)
        sink.export_conversation(ExportItem(revised, [FRUSTRATED, GROUNDED], ExportKind.REVISION))
        sink.shutdown()
        assert double.invalid == []
        scores = double.scores
    assert len(scores) == 6
    assert {s["sessionId"] for s in scores} == {"conv-42"}
    assert not any("traceId" in s or "observationId" in s for s in scores)
    ids = {(s["name"], s["id"]) for s in scores}
    assert ids == {
        ("user_frustration", session_score_id("ragpulse.conversation.conv-42", FRUSTRATED)),
        ("conversation_groundedness", session_score_id("ragpulse.conversation.conv-42", GROUNDED)),
    }
    frustration = next(s for s in scores if s["name"] == "user_frustration")
    assert frustration["value"] == 0.5 and frustration["dataType"] == "NUMERIC"
    assert frustration["metadata"]["label"] == "frustrated"
