"""An agent turn in the files ragpulse writes: the JSONL results and the regression sets keep
its tool calls and where each document came from (redacted like the rest), and a replay of
a regression set scores the turn again with them.

The replayed pipeline is a real module written to a temp dir and imported by ``ragpulse
eval --replay`` (as in test_replay.py); it answers with text only, so the replay scores
the new answer against the recorded tool results.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from support.agent_records import agent_turn

from ragpulse.exporters.jsonl import JsonlSink
from ragpulse.exporters.regression import RegressionSetRule, RegressionSink
from ragpulse.plugins import evaluator_classes
from ragpulse.record import EvalResult, ExportItem, RagRecord

EVALUATORS = ("faithfulness/lexical", "injection/rules")
PIPELINES = textwrap.dedent(
    '''
    def same(question):
        """The agent as it was: the answer copied from the search result."""
        return "You can return it within 30 days."


    def invented(question):
        """A changed prompt: the agent answers past its tools."""
        return "Returns are accepted for a full year, no receipt needed, at any kiosk."
    '''
)


def scored(record: RagRecord) -> list[EvalResult]:
    classes = evaluator_classes()
    return [r for name in EVALUATORS for r in classes[name]().evaluate([record])]


def test_the_jsonl_line_keeps_the_tool_calls_and_document_sources_redacted() -> None:
    turn = agent_turn()
    out = io.StringIO()
    sink = JsonlSink(out)
    sink.export(ExportItem(turn.record, scored(turn.record)))
    line = json.loads(out.getvalue())
    written = RagRecord.model_validate(line)
    assert written.kind == "agent" and written.model_calls == 2
    assert [c.name for c in written.tool_calls] == ["search_docs", "read_inbox", "send_email"]
    assert [c.span_id for c in written.tool_calls] == [c.span_id for c in turn.record.tool_calls]
    assert [c.documents for c in written.tool_calls] == [[0, 1], [2], []]
    assert written.tool_calls[2].status == "error" and written.tool_calls[2].error == "SMTP refused"
    assert [d.source for d in written.documents[:2]] == [
        d.source for d in turn.record.documents[:2]
    ]
    assert written.documents[2].source is not None
    assert written.documents[2].source.label == "tool read_inbox #1"
    # The mail's address is redacted wherever the turn holds it: the document, the
    # tool call's result, the arguments of the call that sent mail.
    text = out.getvalue()
    assert "evil@example.com" not in text and "ops@example.com" not in text
    assert "[EMAIL]" in (written.tool_calls[1].result or "")
    assert "[EMAIL]" in written.tool_calls[2].arguments
    # The injection found in the mail names the document the record's source describes.
    [injection] = [r for r in line["results"] if r["metric"] == "injection"]
    assert injection["details"]["findings"][0]["where"] == "document:2"


def write_set(directory: Path) -> tuple[Path, RagRecord]:
    turn = agent_turn()
    sink = RegressionSink(directory, {"agents": RegressionSetRule(kind="random", rate=1.0)})
    sink.export(ExportItem(turn.record, scored(turn.record)))
    sink.shutdown()
    return directory / "agents", turn.record


def replay(tmp_path: Path, function: str) -> list[dict]:  # type: ignore[type-arg]
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "pipelines.py").write_text(PIPELINES)
    set_dir, _ = write_set(tmp_path / "sets")
    [line] = [json.loads(x) for f in set_dir.glob("*.jsonl") for x in f.read_text().splitlines()]
    assert line["record"]["kind"] == "agent" and len(line["record"]["tool_calls"]) == 3
    output = tmp_path / f"{function}.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "ragpulse.cli", "eval", str(set_dir), "-o", str(output),
         "--replay", f"pipelines:{function}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(x) for x in output.read_text().splitlines()]


def test_a_replayed_agent_turn_is_scored_with_its_tool_calls_and_documents(
    tmp_path: Path,
) -> None:
    [same] = replay(tmp_path, "same")
    assert same["replay"]["documents_from"] == "recorded"
    after = same["after"]
    assert [c["name"] for c in after["tool_calls"]] == ["search_docs", "read_inbox", "send_email"]
    assert [d["source"]["tool"] for d in after["documents"]] == [
        "search_docs",
        "search_docs",
        "read_inbox",
    ]
    results = {r["metric"]: r for r in after["results"]}
    # Still flagged in the tool's result, and still grounded in the search result.
    assert results["injection"]["details"]["findings"][0]["where"] == "document:2"
    assert same["deltas"]["faithfulness/lexical"] == 0.0

    [changed] = replay(tmp_path / "changed", "invented")
    assert changed["deltas"]["faithfulness/lexical"] < -0.3
    calls = [(c["name"], c["status"]) for c in changed["after"]["tool_calls"]]
    assert calls == [("search_docs", "ok"), ("read_inbox", "ok"), ("send_email", "error")]
