"""Export items: what every sink makes of a first export, a costly tier's update and a
revision, and the sink contract checked when a plug-in class is defined."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support.helpers import new_trace_id

from ragpulse.exporters.base import Sink
from ragpulse.exporters.jsonl import JsonlSink
from ragpulse.exporters.memory import InMemorySink
from ragpulse.exporters.prometheus import PrometheusSink
from ragpulse.exporters.regression import RegressionSetRule, RegressionSink, set_files
from ragpulse.exporters.support.delivery import DeliveryOptions
from ragpulse.exporters.support.tool_sink import ToolSink
from ragpulse.offline.score import SummarySink
from ragpulse.record import (
    ConversationRecord,
    Document,
    EvalResult,
    ExportItem,
    ExportKind,
    RagRecord,
    ToolCall,
    TurnSummary,
)

CHEAP = EvalResult(metric="faithfulness", method="lexical", score=0.8)
JUDGED = EvalResult(metric="faithfulness", method="llm_judge", score=0.2)
REVISED = EvalResult(metric="faithfulness", method="lexical", score=0.4)


def record(**fields: Any) -> RagRecord:
    base: dict[str, Any] = {
        "trace_id": "0d4df99a365065f14b811705bf3ffed2",
        "span_id": "28ef2dfb18b6863b",
        "service": "support-bot",
        "route": "/ask",
        "question": "Where is the Eiffel Tower?",
        "answer": "In Paris.",
        "documents": [Document(id="d1", content="The Eiffel Tower is in Paris.")],
        "attributes": {"app.tenant": "acme"},
    }
    return RagRecord(**{**base, **fields})


FIRST = ExportItem(
    record(), [CHEAP], sampled={"cheap": "all", "judge": "base_rate"}, pending=("judge",)
)
UPDATE = ExportItem(
    record(), [JUDGED], ExportKind.UPDATE, "judge", {"cheap": "all", "judge": "base_rate"}
)
REVISION = ExportItem(record(), [REVISED, JUDGED], ExportKind.REVISION, sampled={"cheap": "all"})


def test_an_update_names_its_tier_and_only_an_update_does() -> None:
    with pytest.raises(ValueError, match="update names its tier"):
        ExportItem(record(), [], ExportKind.UPDATE)
    with pytest.raises(ValueError, match="update names its tier"):
        ExportItem(record(), [], tier="judge")


# -- the contract, checked when a class is defined ---------------------------------------


def test_a_named_sink_without_export_is_refused_when_defined() -> None:
    with pytest.raises(TypeError, match=r"sink 'mute' \(.*Mute\) must implement export"):

        class Mute(Sink):
            name = "mute"


def test_a_named_tool_sink_without_items_is_refused_and_a_base_may_stay_abstract() -> None:
    class Base(ToolSink[dict[str, Any], DeliveryOptions]):
        """No name: a base for tool sinks keeps ``items`` abstract."""

    with pytest.raises(TypeError, match=r"sink 'tool' .* must implement items"):

        class Tool(Base):
            name = "tool"


# -- the results format: the same lines as the attributes said before ---------------------


def test_jsonl_lines_for_a_first_export_an_update_and_a_revision() -> None:
    out = io.StringIO()
    sink = JsonlSink(out)
    for item in (FIRST, UPDATE, REVISION):
        sink.export(item)
    first, update, revision = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["attributes"] == {
        "app.tenant": "acme",
        "ragpulse.sampled.cheap": "all",
        "ragpulse.sampled.judge": "base_rate",
        "ragpulse.pending": ["judge"],
    }
    assert [r["method"] for r in first["results"]] == ["lexical"]
    assert "revised" not in first and "update" not in first
    assert update == {
        "trace_id": "0d4df99a365065f14b811705bf3ffed2",
        "span_id": "28ef2dfb18b6863b",
        "record_id": "0d4df99a365065f14b811705bf3ffed2/28ef2dfb18b6863b",
        "revision": 1,
        "service": "support-bot",
        "route": "/ask",
        "update": "judge",
        "attributes": {"ragpulse.sampled.cheap": "all", "ragpulse.sampled.judge": "base_rate"},
        "results": [
            {
                "metric": "faithfulness",
                "method": "llm_judge",
                "score": 0.2,
                "label": None,
                "explanation": None,
                "details": {},
                "direction": "higher_is_better",
            }
        ],
    }
    assert revision["revised"] is True and revision["question"] == "Where is the Eiffel Tower?"
    assert revision["attributes"] == {"app.tenant": "acme", "ragpulse.sampled.cheap": "all"}
    assert [r["score"] for r in revision["results"]] == [0.4, 0.2]


def conversation(revision: int = 1) -> ConversationRecord:
    turns = [
        TurnSummary(turn=i, trace_id=new_trace_id(), span_id=f"{i:016x}", question=f"q{i}?")
        for i in (1, 2)
    ]
    return ConversationRecord(
        conversation_id="chat-9",
        turns=turns,
        revision=revision,
        attributes={"ragpulse.conversation.turns_dropped": 1},
    )


def test_jsonl_conversation_lines_carry_the_tiers_in_their_attributes() -> None:
    out = io.StringIO()
    sink = JsonlSink(out)
    first = conversation()
    sink.export_conversation(
        ExportItem(first, [CHEAP], sampled={"judge": "base_rate"}, pending=("judge",))
    )
    sink.export_conversation(
        ExportItem(first, [JUDGED], ExportKind.UPDATE, "judge", {"judge": "base_rate"})
    )
    lines = [
        json.loads(line)["conversation"]["attributes"] for line in out.getvalue().split("\n")[:2]
    ]
    assert lines == [
        {
            "ragpulse.conversation.turns_dropped": 1,
            "ragpulse.sampled.judge": "base_rate",
            "ragpulse.pending": ["judge"],
        },
        {
            "ragpulse.conversation.turns_dropped": 1,
            "ragpulse.sampled.judge": "base_rate",
            "ragpulse.update": "judge",
        },
    ]


# -- sinks that join a record's exports --------------------------------------------------


def test_the_memory_sink_joins_an_update_and_replaces_on_a_revision() -> None:
    sink = InMemorySink()
    sink.export(FIRST)
    sink.export(UPDATE)
    [joined] = sink.items
    assert (joined.kind, joined.results, joined.pending) == (ExportKind.FIRST, [CHEAP, JUDGED], ())
    sink.export(REVISION)
    [revised] = sink.items
    assert revised.kind is ExportKind.REVISION and revised.results == [REVISED, JUDGED]


def test_a_regression_line_of_an_update_carries_the_earlier_results_and_a_revision_its_own(
    tmp_path: Path,
) -> None:
    low = RegressionSetRule(kind="low_score", metric="faithfulness", below=0.5)
    sink = RegressionSink(tmp_path, {"low": low})
    sink.export(FIRST)  # 0.8: not low
    sink.export(UPDATE)  # the judge's 0.2: low, with the cheap result beside it
    other = record(trace_id=new_trace_id(), question="Who built it?")
    sink.export(ExportItem(other, [CHEAP], pending=("judge",)))
    sink.export(ExportItem(other, [REVISED], ExportKind.REVISION))  # 0.4: low, alone
    lines = [json.loads(raw) for path in set_files(tmp_path / "low") for raw in path.open()]
    assert [[r["score"] for r in line["results"]] for line in lines] == [[0.8, 0.2], [0.4]]
    assert lines[0]["sampling"] == {"cheap": "all", "judge": "base_rate"}
    assert lines[0]["record"]["attributes"]["ragpulse.update"] == "judge"


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def test_prometheus_counts_a_revision_apart_and_an_agent_turn_once() -> None:
    registry = CollectorRegistry()
    sink = PrometheusSink(registry)
    turn = record(kind="agent", tool_calls=[ToolCall(name="search", result="Paris.")])
    sink.export(ExportItem(turn, [CHEAP], pending=("judge",)))
    sink.export(ExportItem(turn, [JUDGED], ExportKind.UPDATE, "judge"))
    sink.export(ExportItem(turn, [REVISED, JUDGED], ExportKind.REVISION))
    where = {"service": "support-bot", "route": "/ask"}
    scores = "ragpulse_eval_score_count"
    assert value(registry, scores, metric="faithfulness", method="lexical", **where) == 1
    assert value(registry, scores, metric="faithfulness", method="llm_judge", **where) == 1
    assert value(registry, "ragpulse_records_revised_total", **where) == 1
    assert value(registry, "ragpulse_agent_turns_total", service="support-bot") == 1


def test_the_summary_takes_a_revisions_results_in_place_of_the_earlier_ones() -> None:
    sink = SummarySink()
    sink.export(FIRST)
    sink.export(UPDATE)
    sink.export(REVISION)
    table = {row["evaluator"]: row for row in sink.table()}
    assert sink.summary.rows == 1
    assert table["faithfulness/lexical"]["scored"] == 1
    assert table["faithfulness/lexical"]["mean"] == pytest.approx(0.4)
    assert table["faithfulness/llm_judge"]["scored"] == 1
