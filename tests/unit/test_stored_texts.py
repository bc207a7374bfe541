"""The JSONL and regression sinks store each text up to a bound of their own
(``sinks.<name>.max_text_chars``, default ``evaluation.max_text_chars``) and say what
they cut: a 10 MB document costs a line what the evaluated 200,000 characters do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ragpulse.config import load_settings
from ragpulse.exporters.jsonl import JsonlSink
from ragpulse.exporters.regression import RegressionSink
from ragpulse.plugin_context import PluginContext
from ragpulse.record import Direction, Document, EvalResult, ExportItem, RagRecord, ToolCall
from ragpulse.results import EVALUATED_CHARS, TRUNCATED

TEN_MB = 10 * 1024 * 1024
RESULTS = [
    EvalResult(
        metric="faithfulness", method="lexical", score=0.2, direction=Direction.HIGHER_IS_BETTER
    )
]


def big_record(document: str) -> RagRecord:
    return RagRecord(
        trace_id="a" * 32,
        span_id="b" * 16,
        question="What temperature for lasagne?",
        documents=[
            Document(id="small", content="Bake at 180 degrees."),
            Document(id="big", content=document),
        ],
        answer="180 degrees.",
    )


def ten_mb_document() -> str:
    return ("Lasagne bakes at 180 degrees for 45 minutes. " * 240_000)[:TEN_MB]


def sinks(tmp_path: Path, **settings: Any) -> tuple[JsonlSink, RegressionSink]:
    jsonl = {"path": str(tmp_path / "results.jsonl"), **settings.pop("jsonl", {})}
    regression = {
        "directory": str(tmp_path / "sets"),
        "sets": {"all": {"kind": "random", "rate": 1.0}},
        **settings.pop("regression", {}),
    }
    loaded = load_settings(None, sinks={"jsonl": jsonl, "regression": regression}, **settings)
    context = PluginContext(loaded)
    made = JsonlSink.from_settings(loaded, context), RegressionSink.from_settings(loaded, context)
    assert isinstance(made[0], JsonlSink) and isinstance(made[1], RegressionSink)
    return made


def written(tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any], int, int]:
    """The JSONL line, the set line, and the bytes each file holds."""
    results = tmp_path / "results.jsonl"
    (set_file,) = (tmp_path / "sets" / "all").glob("*.jsonl")
    line = json.loads(results.read_text(encoding="utf-8"))
    set_line = json.loads(set_file.read_text(encoding="utf-8"))
    return line, set_line, results.stat().st_size, set_file.stat().st_size


def test_a_10_mb_document_is_stored_up_to_the_evaluated_length(tmp_path: Path) -> None:
    jsonl, regression = sinks(tmp_path)
    assert jsonl.max_text_chars == regression.max_text_chars == EVALUATED_CHARS == 200_000
    document = ten_mb_document()
    for sink in (jsonl, regression):
        sink.export(ExportItem(big_record(document), RESULTS))
        sink.shutdown()
    line, set_line, line_bytes, set_bytes = written(tmp_path)
    expected = [{"field": "documents[1].content", "chars": TEN_MB, "stored_chars": 200_000}]
    for stored, cut in ((line, line[TRUNCATED]), (set_line["record"], set_line[TRUNCATED])):
        assert cut == expected
        assert stored["documents"][1]["content"] == document[:200_000]
        assert stored["documents"][0]["content"] == "Bake at 180 degrees."  # short: whole
        assert stored["question"] == "What temperature for lasagne?"
        assert stored["answer"] == "180 degrees."
    assert line["results"][0]["score"] == 0.2 and set_line["results"][0]["score"] == 0.2
    # 10.5 MB per record before; now the bound plus the line's own fields.
    assert line_bytes < 210_000 and set_bytes < 210_000


def test_the_bound_follows_the_evaluated_length_unless_the_sink_sets_its_own(
    tmp_path: Path,
) -> None:
    jsonl, regression = sinks(
        tmp_path, evaluation={"max_text_chars": 50_000}, regression={"max_text_chars": 1_000}
    )
    assert (jsonl.max_text_chars, regression.max_text_chars) == (50_000, 1_000)
    record = big_record("x" * 60_000)
    for sink in (jsonl, regression):
        sink.export(ExportItem(record, RESULTS))
        sink.shutdown()
    line, set_line, _, _ = written(tmp_path)
    assert line[TRUNCATED][0]["stored_chars"] == len(line["documents"][1]["content"]) == 50_000
    assert set_line[TRUNCATED][0]["stored_chars"] == 1_000
    assert set_line[TRUNCATED][0]["chars"] == line[TRUNCATED][0]["chars"] == 60_000


def test_nothing_cut_nothing_said(tmp_path: Path) -> None:
    jsonl, regression = sinks(tmp_path)
    for sink in (jsonl, regression):
        sink.export(ExportItem(big_record("short"), RESULTS))
        sink.shutdown()
    line, set_line, _, _ = written(tmp_path)
    assert TRUNCATED not in line and TRUNCATED not in set_line


def test_a_personal_value_across_the_cut_is_redacted_whole(tmp_path: Path) -> None:
    """The cut comes after redaction: an e-mail that straddles it is never stored half."""
    jsonl, _ = sinks(tmp_path, jsonl={"max_text_chars": 1_000})
    document = "y" * 990 + " jane.doe@example.com and more text after it"
    jsonl.export(ExportItem(big_record(document), RESULTS))
    jsonl.shutdown()
    stored = json.loads((tmp_path / "results.jsonl").read_text())["documents"][1]["content"]
    assert len(stored) == 1_000 and "jane" not in stored and " [EMAIL] " in stored


def test_tool_call_arguments_and_results_are_bounded_too(tmp_path: Path) -> None:
    jsonl, _ = sinks(tmp_path, jsonl={"max_text_chars": 1_000})
    record = big_record("short").model_copy(
        update={
            "kind": "agent",
            "tool_calls": [ToolCall(name="search", arguments="{}", result="r" * 5_000)],
        }
    )
    jsonl.export(ExportItem(record, RESULTS))
    jsonl.shutdown()
    line = json.loads((tmp_path / "results.jsonl").read_text())
    assert line["tool_calls"][0]["result"] == "r" * 1_000
    assert line[TRUNCATED] == [
        {"field": "tool_calls[0].result", "chars": 5_000, "stored_chars": 1_000}
    ]
