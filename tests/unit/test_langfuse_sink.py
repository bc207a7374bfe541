"""The langfuse sink, and the delivery guarantees every tracing-tool sink shares.

No Langfuse server can run here (it needs ClickHouse, Redis, S3 and Postgres): these
tests post to a local server double that validates every request against Langfuse's
published API schema, the models the langfuse SDK generates from Langfuse's API
definition (tests/support/langfuse_double.py). Retries, partial success, refusals, a full
queue and shutdown are scripted on the same double.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from support.agent_records import agent_results, agent_turn, expected_spans
from support.helpers import new_span_id, new_trace_id
from support.kafka_env import free_port
from support.langfuse_double import LangfuseDouble

from ragpulse.config import Settings
from ragpulse.errors import ConfigError
from ragpulse.exporters.langfuse import LangfuseSink, score_id
from ragpulse.plugin_context import PluginContext
from ragpulse.record import Document, EvalResult, ExportItem, ExportKind, RagRecord

SECRET = "sk-lf-very-secret-value"


@pytest.fixture
def double() -> Iterator[LangfuseDouble]:
    with LangfuseDouble(secret_key=SECRET) as server:
        yield server


def make_sink(host: str, **options: Any) -> tuple[LangfuseSink, PluginContext]:
    config = {
        "host": host,
        "public_key": "pk-lf-test",
        "secret_key": SECRET,
        "max_wait_s": 0.05,
        "backoff_s": 0.05,
        **options,
    }
    settings = Settings(sinks={"langfuse": config})
    context = PluginContext(settings)
    sink = LangfuseSink.create(LangfuseSink.options_from(settings), context)
    return sink, context


def items(context: PluginContext, outcome: str) -> float:
    value = context.metrics.registry.get_sample_value(
        "ragpulse_sink_items_total", {"sink": "langfuse", "outcome": outcome}
    )
    return value or 0.0


def errors(context: PluginContext) -> float:
    value = context.metrics.registry.get_sample_value(
        "ragpulse_sink_errors_total", {"sink": "langfuse"}
    )
    return value or 0.0


def rag_record() -> RagRecord:
    return RagRecord(
        trace_id=new_trace_id(),
        span_id=new_span_id(),
        question="my mail is jane.doe@example.com, what is the refund policy?",
        answer="Refunds within 30 days.",
        documents=[Document(content="Refunds are possible within 30 days.")],
        generation_span_id=new_span_id(),
        retrieval_span_ids=[new_span_id()],
    )


CHEAP = [
    EvalResult(
        metric="faithfulness",
        method="lexical",
        score=0.25,
        label="low",
        explanation="jane.doe@example.com is not supported",
        details={"unsupported_tokens": ["jane.doe@example.com"]},
    ),
    EvalResult(metric="refusal", method="rules", error="RuntimeError: no answer"),
]
JUDGE = [EvalResult(metric="context_relevance", method="llm_judge", score=0.9)]


def test_scores_on_the_observation_and_the_trace(double: LangfuseDouble) -> None:
    record = rag_record()
    sink, context = make_sink(double.url)
    sink.export(ExportItem(record, [*CHEAP, *JUDGE]))
    sink.shutdown()
    assert double.invalid == []
    by_name = {s["name"]: s for s in double.scores}
    assert set(by_name) == {"faithfulness", "refusal", "context_relevance"}
    assert {s["traceId"] for s in double.scores} == {record.trace_id}

    faithfulness = by_name["faithfulness"]
    assert faithfulness["observationId"] == record.generation_span_id
    assert faithfulness["value"] == 0.25 and faithfulness["dataType"] == "NUMERIC"
    assert faithfulness["metadata"]["label"] == "low"
    assert faithfulness["metadata"]["method"] == "lexical"
    assert faithfulness["id"] == score_id(record.record_id, CHEAP[0])
    relevance = by_name["context_relevance"]
    assert relevance["observationId"] == record.retrieval_span_ids[0]
    assert relevance["metadata"]["annotator_kind"] == "LLM"
    refusal = by_name["refusal"]  # a failed evaluation: a label Langfuse accepts
    assert refusal["value"] == "error" and refusal["dataType"] == "CATEGORICAL"
    assert refusal["comment"] == "RuntimeError: no answer"
    # What the results quote is redacted before it leaves.
    assert "jane.doe@example.com" not in str(double.requests)
    assert items(context, "delivered") == 3 and errors(context) == 0


def test_an_agent_turns_scores_are_on_the_observations_they_judge(
    double: LangfuseDouble,
) -> None:
    """Faithfulness on the final model call's observation, an injection on the tool call
    that returned it, a tool error on the failed call, the step count on the agent's."""
    turn = agent_turn()
    sink, context = make_sink(double.url)
    sink.export(ExportItem(turn.record, agent_results(turn)))
    sink.shutdown()
    assert double.invalid == []
    by_name = {s["name"]: s for s in double.scores}
    assert {m: by_name[m]["observationId"] for m in by_name} == expected_spans(turn)
    assert {s["traceId"] for s in double.scores} == {turn.record.trace_id}
    # Two results on one observation keep distinct ids (idempotent per metric and span).
    assert len({s["id"] for s in double.scores}) == len(double.scores)
    assert items(context, "delivered") == len(double.scores) and errors(context) == 0


def test_one_score_per_request_where_the_server_takes_only_that(double: LangfuseDouble) -> None:
    sink, _ = make_sink(double.url, batch_scores=False)
    sink.export(ExportItem(rag_record(), CHEAP))
    sink.shutdown()
    assert double.invalid == []
    assert len(double.requests) == 2 and all(isinstance(r, dict) for r in double.requests)


def test_each_result_is_posted_once_when_a_costly_tier_follows(double: LangfuseDouble) -> None:
    """The sink contract: export() again for the same record with only the new results."""
    record = rag_record()
    sink, context = make_sink(double.url)
    sink.export(ExportItem(record, CHEAP, pending=("judge",)))
    sink.export(ExportItem(record, JUDGE, ExportKind.UPDATE, "judge"))
    sink.shutdown()
    ids = [s["id"] for s in double.scores]
    assert len(ids) == 3 and len(set(ids)) == 3
    assert items(context, "delivered") == 3


def test_retried_until_delivered(double: LangfuseDouble) -> None:
    double.answer_next(503, {"message": "busy"}, {"Retry-After": "0"})
    double.answer_next(429, {"message": "slow down"})
    sink, context = make_sink(double.url)
    sink.export(ExportItem(rag_record(), CHEAP))
    assert len(double.wait_for(2)) == 2
    sink.shutdown()
    assert len(double.requests) == 3  # two refusals, then taken
    assert items(context, "delivered") == 2 and errors(context) == 0


def test_partial_success_counts_what_was_refused(double: LangfuseDouble) -> None:
    double.answer_next(207, {"accepted": 2, "rejected": 1, "errors": [{"message": "bad"}]})
    sink, context = make_sink(double.url, max_wait_s=60)  # one batch of three
    sink.export(ExportItem(rag_record(), [*CHEAP, *JUDGE]))
    sink.shutdown()
    assert len(double.requests) == 1  # a 207 is never sent again
    assert items(context, "delivered") == 2 and items(context, "failed") == 1
    assert errors(context) == 1


def test_refused_credentials_are_counted_and_never_logged(
    double: LangfuseDouble, caplog: pytest.LogCaptureFixture
) -> None:
    double.secret_key = "sk-lf-another"
    sink, context = make_sink(double.url)
    with caplog.at_level(logging.DEBUG):
        sink.export(ExportItem(rag_record(), CHEAP))
        sink.shutdown()
    assert items(context, "failed") == 2 and errors(context) >= 1
    assert "401" in caplog.text
    assert SECRET not in caplog.text and "pk-lf-test" not in caplog.text


def test_an_unreachable_tool_loses_nothing_silently() -> None:
    """Down for longer than the flush timeout: what is left is counted at shutdown."""
    sink, context = make_sink(f"http://127.0.0.1:{free_port()}", flush_timeout_s=0.5)
    sink.export(ExportItem(rag_record(), CHEAP))
    sink.shutdown()
    assert items(context, "failed") == 2 and items(context, "delivered") == 0
    assert errors(context) >= 1


def test_a_full_queue_drops_and_counts_and_shutdown_flushes(double: LangfuseDouble) -> None:
    sink, context = make_sink(double.url, max_queue=2, max_wait_s=60)
    sink.export(ExportItem(rag_record(), [*CHEAP, *JUDGE]))  # room for two
    assert items(context, "dropped") == 1 and errors(context) == 1
    sink.shutdown()  # sends the two queued, without waiting for max_wait_s
    assert len(double.scores) == 2 and items(context, "delivered") == 2


def test_missing_keys_fail_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in ("LANGFUSE_HOST", "LANGFUSE_PUBLIC_KEY", "LANGFUSE_SECRET_KEY"):
        monkeypatch.delenv(env, raising=False)
    settings = Settings(sinks={"langfuse": {"host": "http://127.0.0.1:1"}})
    with pytest.raises(ConfigError, match="public_key and secret_key"):
        LangfuseSink.create(LangfuseSink.options_from(settings), PluginContext(settings))
