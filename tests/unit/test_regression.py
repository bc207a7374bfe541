"""Regression sets from live traffic: selection, dedupe, rotation, redaction, listing."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from support.helpers import new_trace_id
from support.kafka_env import wait_until
from test_sampling import feedback_span, rag_spans

from ragpulse import semconv as sc
from ragpulse.collector.service import Collector
from ragpulse.config import RedactionSettings, load_settings
from ragpulse.evaluators.faithfulness.lexical import LexicalFaithfulness
from ragpulse.exporters.memory import InMemorySink
from ragpulse.exporters.regression import (
    RegressionSetRule,
    RegressionSink,
    question_key,
    set_files,
    set_stats,
)
from ragpulse.record import Document, EvalResult, ExportItem, RagRecord
from ragpulse.redaction import Redactor, luhn_valid

LOW = EvalResult(metric="faithfulness", method="lexical", score=0.1)
HIGH = EvalResult(metric="faithfulness", method="lexical", score=0.9)
INJECTED = EvalResult(metric="injection", method="rules", score=1.0, label="injection")


def record(question: str = "Where is the Eiffel Tower?", **kw: object) -> RagRecord:
    fields: dict[str, object] = {
        "trace_id": new_trace_id(),
        "span_id": "00f067aa0ba902b7",
        "question": question,
        "answer": "In Paris.",
        "documents": [Document(id="d1", content="The Eiffel Tower is in Paris.")],
    }
    fields.update(kw)
    return RagRecord(**fields)  # type: ignore[arg-type]


def lines(set_dir: Path) -> list[dict[str, object]]:
    return [json.loads(raw) for path in set_files(set_dir) for raw in path.read_text().splitlines()]


def test_rules_select_records_and_say_why(tmp_path: Path) -> None:
    sink = RegressionSink(tmp_path)  # the default sets
    sink.export(ExportItem(record("q1"), [LOW]))
    sink.export(ExportItem(record("q2"), [HIGH]))
    sink.export(ExportItem(record("q3"), [HIGH, INJECTED]))
    sink.export(ExportItem(record("q4", attributes={sc.RAGPULSE_FEEDBACK_SCORE: -1.0}), [HIGH]))
    sink.shutdown()
    [low] = lines(tmp_path / "low_faithfulness")
    assert low["record"]["question"] == "q1"  # type: ignore[index]
    assert low["reason"] == "faithfulness/lexical score 0.100 < 0.5"
    assert low["results"][0]["score"] == 0.1  # type: ignore[index]
    assert [r["record"]["question"] for r in lines(tmp_path / "injection")] == ["q3"]  # type: ignore[index]
    [neg] = lines(tmp_path / "negative_feedback")
    assert neg["reason"] == "user feedback -1 < 0"
    # baseline keeps 1% by trace id: q2 is kept only if its trace id falls in that 1%.
    assert {s.name for s in set_stats(tmp_path)} >= {"low_faithfulness", "injection"}


def test_random_rule_is_deterministic_by_trace_id(tmp_path: Path) -> None:
    sets = {"baseline": RegressionSetRule(kind="random", rate=0.25)}
    records = [record(f"question {i}", trace_id=f"{i:032x}") for i in range(400)]
    kept = []
    for attempt in ("a", "b"):
        sink = RegressionSink(tmp_path / attempt, sets)
        for r in records:
            sink.export(ExportItem(r, [HIGH]))
        sink.shutdown()
        kept.append([line["record"]["trace_id"] for line in lines(tmp_path / attempt / "baseline")])  # type: ignore[index]
    assert kept[0] == kept[1]
    assert 60 < len(kept[0]) < 140
    assert sets["baseline"].kind == "random"


def test_dedupe_by_normalized_question_survives_restart(tmp_path: Path) -> None:
    sets = {"low": RegressionSetRule(kind="low_score", metric="faithfulness", below=0.5)}
    r = record("Where is the Eiffel Tower?")
    sink = RegressionSink(tmp_path, sets)
    sink.export(ExportItem(r, [LOW]))
    sink.export(ExportItem(r, [LOW]))  # at-least-once delivery: the same trace again
    sink.export(ExportItem(record("  where is THE eiffel tower  "), [LOW]))  # the same question
    sink.shutdown()
    assert sink.written == 1 and sink.duplicates == 2
    again = RegressionSink(tmp_path, sets)  # a restarted collector re-reads its sets
    again.export(ExportItem(r, [LOW]))
    again.export(ExportItem(record("Who built it?"), [LOW]))
    again.shutdown()
    assert [line["record"]["question"] for line in lines(tmp_path / "low")] == [  # type: ignore[index]
        "Where is the Eiffel Tower?",
        "Who built it?",
    ]
    assert question_key("Who built it?") == question_key("who built it")


def test_rotation_by_size_and_age(tmp_path: Path) -> None:
    now = [1_700_000_000.0]
    sets = {"low": RegressionSetRule(kind="low_score", metric="faithfulness", below=0.5)}
    sink = RegressionSink(tmp_path, sets, max_bytes=3000, max_age_s=60, clock=lambda: now[0])
    for i in range(6):
        sink.export(ExportItem(record(f"question {i} " + "x" * 100), [LOW]))
    first = set_files(tmp_path / "low")[0]
    assert len(first.read_text().splitlines()) == 2  # ~1.1 kB lines: a third would pass 3000
    assert len(set_files(tmp_path / "low")) == 3
    now[0] += 61  # older than max_age_s: the next line opens a new file
    sink.export(ExportItem(record("after a minute"), [LOW]))
    sink.shutdown()
    files = set_files(tmp_path / "low")
    assert len(files) == 4
    assert all(p.stat().st_size <= 3000 for p in files)
    assert len(lines(tmp_path / "low")) == 7
    [stats] = set_stats(tmp_path)
    assert (stats.files, stats.lines) == (4, 7)
    assert stats.first_written_at == "2023-11-14T22:13:20.000Z"
    assert stats.last_written_at == "2023-11-14T22:14:21.000Z"


def test_redaction_before_anything_is_written(tmp_path: Path) -> None:
    redaction = RedactionSettings(patterns={"employee_id": r"EMP-\d{6}"})
    sets = {"low": RegressionSetRule(kind="low_score", metric="faithfulness", below=0.5)}
    sink = RegressionSink(tmp_path, sets, redaction=redaction)
    question = (
        "My email is jane.doe@example.com, call +1 (555) 123-4567, card 4111 1111 1111 1111, "
        "badge EMP-123456. Order 2024-01-15 cost 12 345 678."
    )
    docs = [Document(id="d1", content="Contact ops@corp.example or 020 7946 0958.")]
    explained = LOW.model_copy(update={"explanation": "answer mentions jane.doe@example.com"})
    r = record(question, documents=docs)
    sink.export(ExportItem(r, [explained]))
    sink.shutdown()
    raw = "".join(p.read_text() for p in set_files(tmp_path / "low"))
    for secret in ("jane.doe", "555", "4111", "EMP-123456", "ops@corp", "7946"):
        assert secret not in raw
    [line] = lines(tmp_path / "low")
    assert line["record"]["question"] == (  # type: ignore[index]
        "My email is [EMAIL], call [PHONE], card [CARD], badge [EMPLOYEE_ID]. "
        "Order 2024-01-15 cost 12 345 678."
    )
    assert line["record"]["trace_id"] == r.trace_id  # type: ignore[index]  # ids are kept
    assert "[EMAIL]" in line["results"][0]["explanation"]  # type: ignore[index]


def test_redactor_leaves_ordinary_numbers() -> None:
    redactor = Redactor()
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    assert redactor.redact("ticket 4111111111111112 at 192.168.10.10") == (
        "ticket 4111111111111112 at 192.168.10.10"
    )
    assert redactor.redact(redactor.redact("a@b.io")) == "[EMAIL]"
    assert Redactor(RedactionSettings(enabled=False)).redact("a@b.io") == "a@b.io"


def test_write_failure_is_counted_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "low"
    blocker.write_text("a file where the set directory should be")
    sets = {"low": RegressionSetRule(kind="low_score", metric="faithfulness", below=0.5)}
    sink = RegressionSink(tmp_path, sets)
    sink.export(ExportItem(record(), [LOW]))
    assert sink.errors == 1 and sink.written == 0


def test_collector_writes_sets_from_live_traffic(tmp_path: Path) -> None:
    settings = load_settings(
        # The trace stays open until flush(): its feedback surely joins in the window.
        assembly={"grace_s": 600, "tick_s": 0.05},
        sinks={"regression": {"directory": str(tmp_path), "sets": {
            "negative_feedback": {"kind": "negative_feedback"},
            "everything": {"kind": "random", "rate": 1.0}}}},
    )  # fmt: skip
    sink = InMemorySink()
    c = Collector(settings, evaluators=[LexicalFaithfulness()], extra_sinks=[sink],
                  receiver=False, metrics_server=False).start()  # fmt: skip
    try:
        t = new_trace_id()
        c.ingest(rag_spans(t))
        c.ingest([feedback_span(t, -1)])  # type: ignore[list-item]
        assert c.flush(60), "the trace was not evaluated and exported within 60s of flush()"
        assert len(sink.items) == 1
        wait_until(
            lambda: set_files(tmp_path / "negative_feedback"), 60, "no negative_feedback set file"
        )
    finally:
        c.stop()
    [line] = lines(tmp_path / "everything")
    assert line["record"]["trace_id"] == t  # type: ignore[index]
    assert line["sampling"] == {"cheap": "all"}
    assert [r["record"]["trace_id"] for r in lines(tmp_path / "negative_feedback")] == [t]  # type: ignore[index]


def test_regression_list_cli(tmp_path: Path) -> None:
    sets = {"low": RegressionSetRule(kind="low_score", metric="faithfulness", below=0.5)}
    sink = RegressionSink(tmp_path, sets, clock=lambda: time.time())
    sink.export(ExportItem(record("q1"), [LOW]))
    sink.export(ExportItem(record("q2"), [LOW]))
    sink.shutdown()
    out = subprocess.run(
        [sys.executable, "-m", "ragpulse.cli", "regression", "list", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "low" in out.stdout and " 2 " in out.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "ragpulse.cli", "regression", "list"],
        capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin"},
    )  # fmt: skip
    assert missing.returncode == 2 and "no regression directory" in missing.stderr
