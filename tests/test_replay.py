"""`ragpulse eval SET --replay module:function`: replay a regression set, compare, gate.

The user's pipelines are real modules written to a temp dir and imported by the
CLI in a subprocess, exactly as a CI job would run it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import new_trace_id

from ragpulse.config import RegressionSetRule
from ragpulse.evaluators.lexical import LexicalFaithfulness
from ragpulse.exporters.regression import RegressionSink
from ragpulse.record import Document, RagRecord

FACTS = {
    "Where is the Eiffel Tower?": "The Eiffel Tower stands in Paris on the Champ de Mars.",
    "Who wrote Hamlet?": "Hamlet is a tragedy written by William Shakespeare around 1600.",
    "What is the boiling point of water?": "Water boils at 100 degrees Celsius at sea level.",
    "How tall is Mount Everest?": "Mount Everest is 8,849 metres tall above sea level.",
}

PIPELINES = textwrap.dedent(
    '''
    import asyncio

    import ragpulse

    FACTS = {facts!r}


    def grounded(question):
        """The pipeline as it was: answers from the document."""
        return {{"answer": FACTS[question], "documents": [FACTS[question]]}}


    def hallucinating(question):
        """A changed prompt: answers without looking at the documents."""
        if question.startswith("Who"):
            raise RuntimeError("model endpoint said 503")
        return "Probably Zanzibar, according to legends told by sailors in 1492."


    async def grounded_async(question):
        await asyncio.sleep(0.01)
        return FACTS[question]


    def with_contact(question):
        """An answer that carries an e-mail address."""
        return "Ask desk.agent@example.com about: " + question


    @ragpulse.retrieval
    def retrieve(question):
        return [FACTS[question]]


    @ragpulse.generation(model="test-model")
    def generate(question, documents):
        return documents[0]


    @ragpulse.pipeline(route="/ask")
    def traced(question):
        return generate(question, retrieve(question))
    '''
).format(facts=FACTS)


def write_set(directory: Path) -> Path:
    """A regression set as `ragpulse serve` writes it, scored by the lexical tier."""
    evaluator = LexicalFaithfulness()
    sink = RegressionSink(directory, {"all": RegressionSetRule(kind="random", rate=1.0)})
    for question, fact in FACTS.items():
        record = RagRecord(
            trace_id=new_trace_id(),
            question=question,
            answer=fact,
            documents=[Document(id="d1", content=fact)],
        )
        sink.export(record, evaluator.evaluate([record]))
    sink.export(RagRecord(trace_id=new_trace_id(), question=""), [])  # nothing to replay
    sink.shutdown()
    return directory / "all"


def run_replay(
    tmp_path: Path, function: str, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pipelines.py").write_text(PIPELINES)
    set_dir = write_set(tmp_path / "sets")
    return subprocess.run(
        [sys.executable, "-m", "ragpulse.cli", "eval", str(set_dir), "-o",
         str(tmp_path / "out" / "replayed.jsonl"), "--replay", f"pipelines:{function}", *extra],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def summary(tmp_path: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((tmp_path / "out" / "replayed.summary.json").read_text())


def test_unchanged_pipeline_passes_the_gate(tmp_path: Path) -> None:
    done = run_replay(tmp_path, "grounded", "--max-drop", "faithfulness=0.05")
    assert done.returncode == 0, done.stdout + done.stderr
    s = summary(tmp_path)
    assert s["replayed"] == 4 and s["replay_errors"] == 0 and s["passed"]
    [m] = s["metrics"]
    assert m["evaluator"] == "faithfulness/lexical" and m["paired"] == 4
    assert m["mean_before"] == m["mean_after"] and m["regressed"] == 0
    assert (tmp_path / "out" / "replayed.report.md").is_file()


def test_changed_pipeline_shows_regressions_and_exits_non_zero(tmp_path: Path) -> None:
    done = run_replay(tmp_path, "hallucinating", "--max-drop", "faithfulness=0.1", "--html")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED" in done.stdout and "worst regressions" in done.stdout
    s = summary(tmp_path)
    assert s["replayed"] == 3 and s["replay_errors"] == 1  # the 503 is a result, not a crash
    assert "RuntimeError: model endpoint said 503" in s["error_examples"][0]["error"]
    [m] = s["metrics"]
    assert m["mean_after"] < m["mean_before"] and m["regressed_share"] == 1.0
    worst = s["worst_regressions"][0]
    assert len(worst["trace_id"]) == 32 and worst["answer_after"].startswith("Probably Zanzibar")
    [threshold] = s["thresholds"]
    assert threshold["exceeded"] and threshold["evaluator"] == "faithfulness/lexical"
    report = (tmp_path / "out" / "replayed.report.md").read_text()
    assert worst["trace_id"] in report
    page = (tmp_path / "out" / "replayed.report.html").read_text()
    assert page.count("<svg") >= 1
    lines = [json.loads(x) for x in (tmp_path / "out" / "replayed.jsonl").read_text().splitlines()]
    assert len(lines) == 5  # every input line has an output line, the empty question included
    assert sum(1 for x in lines if x.get("error") == "no question to replay") == 1


def test_async_and_traced_pipelines(tmp_path: Path) -> None:
    done = run_replay(tmp_path, "grounded_async", "--concurrency", "4")
    assert done.returncode == 0, done.stdout + done.stderr
    assert summary(tmp_path)["metrics"][0]["regressed"] == 0
    done = run_replay(tmp_path, "traced")
    assert done.returncode == 0, done.stdout + done.stderr
    out = [json.loads(x) for x in (tmp_path / "out" / "replayed.jsonl").read_text().splitlines()]
    replayed = [x["replay"] for x in out if "replay" in x]
    # what the pipeline retrieved and answered comes from its own spans
    assert {r["documents_from"] for r in replayed} == {"spans"}
    assert {r["answer_from"] for r in replayed} == {"spans"}
    assert all(len(r["trace_id"]) == 32 and r["duration_ms"] >= 0 for r in replayed)


def test_bad_replay_target_is_a_clear_error(tmp_path: Path) -> None:
    done = run_replay(tmp_path, "no_such_function")
    assert done.returncode == 2
    assert "has no attribute 'no_such_function'" in done.stdout + done.stderr


def test_replay_output_is_redacted_when_apply_to_names_eval_output(tmp_path: Path) -> None:
    """eval_output redaction is opt-in (the user's own rows); named, it covers replays."""
    out = tmp_path / "out" / "replayed.jsonl"
    done = run_replay(tmp_path, "with_contact")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "desk.agent@example.com" in out.read_text()
    env = {"RAGPULSE_REDACTION__APPLY_TO": '["eval_output"]'}
    done = run_replay(tmp_path, "with_contact", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    text = out.read_text()
    assert "desk.agent@example.com" not in text and "[EMAIL]" in text
