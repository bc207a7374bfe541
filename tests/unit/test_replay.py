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

import pytest
from support.helpers import new_trace_id

from ragpulse.evaluators.faithfulness.lexical import LexicalFaithfulness
from ragpulse.exporters.regression import RegressionSetRule, RegressionSink
from ragpulse.record import Document, ExportItem, RagRecord

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
        sink.export(ExportItem(record, evaluator.evaluate([record])))
    sink.export(
        ExportItem(RagRecord(trace_id=new_trace_id(), question=""), [])
    )  # nothing to replay
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


# --- Selected by a score: regression to the mean, and a control ------------------------------

INVENTED = "Probably Zanzibar, according to legends told by sailors in 1492."


def write_low_set(directory: Path) -> Path:
    """A low_faithfulness set as live traffic fills it: the records whose answer was
    invented that time (the pipeline grounds most answers; these were the unlucky ones)."""
    evaluator = LexicalFaithfulness()
    rule = RegressionSetRule(kind="low_score", metric="faithfulness", below=0.5)
    sink = RegressionSink(directory, {"low_faithfulness": rule})
    for question, fact in FACTS.items():
        record = RagRecord(trace_id=new_trace_id(), question=question, answer=INVENTED,
                           documents=[Document(id="d1", content=fact)])  # fmt: skip
        sink.export(ExportItem(record, evaluator.evaluate([record])))
    sink.shutdown()
    return directory / "low_faithfulness"


def replay_cmd(tmp_path: Path, source: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pipelines.py").write_text(PIPELINES)
    return subprocess.run(
        [sys.executable, "-m", "ragpulse.cli", "eval", str(source), "-o",
         str(tmp_path / "out" / "replayed.jsonl"), *extra],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_set_selected_by_a_score_says_so(tmp_path: Path) -> None:
    low = write_low_set(tmp_path / "sets")
    done = replay_cmd(tmp_path, low, "--replay", "pipelines:grounded")
    assert done.returncode == 0, done.stdout + done.stderr
    s = summary(tmp_path)
    [m] = s["metrics"]
    # The unchanged pipeline "improves" the set it was picked for: regression to the mean.
    assert m["delta"] > 0.5 and m["selected_on"]
    [picked] = s["selection"]
    assert picked == {"set": "low_faithfulness", "kind": "low_score", "biased": True,
                      "rule": "faithfulness/lexical score < 0.5", "metric":
                      "faithfulness/lexical", "rows": 4}  # fmt: skip
    said = " ".join(done.stdout.split())
    assert "Selected by outcome: set low_faithfulness: faithfulness/lexical score < 0.5 (4 rows)" \
        in said and "regression to the mean" in said and "--control" in said  # fmt: skip
    assert "the set was selected on it" in said
    report = (tmp_path / "out" / "replayed.report.md").read_text()
    assert "**Selected by outcome" in report
    # A random set was not selected by anything: nothing is said.
    done = replay_cmd(tmp_path, write_set(tmp_path / "random"), "--replay", "pipelines:grounded")
    assert done.returncode == 0 and "Selected by outcome" not in done.stdout
    assert summary(tmp_path)["selected_by_outcome"] is False


def test_the_unchanged_pipeline_as_control_tells_a_change_from_the_mean(tmp_path: Path) -> None:
    low = write_low_set(tmp_path / "sets")
    gate = ["--max-drop", "faithfulness=0.05"]
    # Against the recorded (invented) answers, a change to inventing looks harmless...
    done = replay_cmd(tmp_path, low, "--replay", "pipelines:hallucinating", *gate)
    assert done.returncode == 0, done.stdout + done.stderr
    # ...against the unchanged pipeline on the same rows, it is the regression it is.
    control = ["--control", "pipelines:grounded"]
    done = replay_cmd(tmp_path, low, "--replay", "pipelines:hallucinating", *control, *gate)
    assert done.returncode == 1, done.stdout + done.stderr
    s = summary(tmp_path)
    assert s["control"]["kind"] == "pipeline" and s["control"]["replayed"] == 4
    [net] = s["control"]["net"]["metrics"]
    assert net["mean_before"] == 1.0 and net["mean_after"] < 0.5 and net["regressed"] == 3
    [threshold] = s["thresholds"]
    assert threshold["exceeded"] and threshold["against"] == "control"
    assert s["regressions_against"] == "control"
    assert "against the control" in done.stdout and "Change net of the control" in done.stdout
    out = [json.loads(x) for x in (tmp_path / "out" / "replayed.jsonl").read_text().splitlines()]
    replayed = [x for x in out if "control" in x]
    assert len(replayed) == 4 and all(x["control"]["answer"] in FACTS.values() for x in replayed)
    assert any(x["deltas_vs_control"].get("faithfulness/lexical", 0) < -0.5 for x in replayed)
    # The unchanged pipeline against itself: no change, the gate passes.
    done = replay_cmd(tmp_path, low, "--replay", "pipelines:grounded", *control, *gate)
    assert done.returncode == 0, done.stdout + done.stderr
    [net] = summary(tmp_path)["control"]["net"]["metrics"]
    assert net["delta"] == 0.0 and net["improved"] == 0


def test_a_random_set_as_control_is_replayed_through_the_change(tmp_path: Path) -> None:
    low = write_low_set(tmp_path / "sets")
    baseline = write_set(tmp_path / "live")  # every record kept, by trace id (random rule)
    gate = ["--max-drop", "faithfulness=0.05"]
    done = replay_cmd(tmp_path, low, "--replay", "pipelines:hallucinating",
                      "--control", str(baseline), *gate)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    s = summary(tmp_path)
    assert s["control"]["kind"] == "set" and s["control"]["replayed"] == 3
    assert s["control"]["selection"][0]["kind"] == "random"
    [control_metric] = s["control"]["metrics"]
    assert control_metric["delta"] < -0.5  # on traffic nobody picked, the change hurts
    rules = {t["rule"]: t["exceeded"] for t in s["thresholds"]}
    assert rules == {"faithfulness=0.05": False, "faithfulness=0.05 (control set)": True}
    control_out = tmp_path / "out" / "replayed.control.jsonl"
    assert len(control_out.read_text().splitlines()) == 5  # 4 rows and the empty question


def test_control_is_checked_before_any_call(tmp_path: Path) -> None:
    low = write_low_set(tmp_path / "sets")
    done = replay_cmd(tmp_path, low, "--replay", "pipelines:grounded", "--control", "nowhere")
    assert done.returncode == 2 and "--control takes MODULE:FUNCTION" in done.stderr
    assert not (tmp_path / "out" / "replayed.jsonl").exists()
    done = replay_cmd(tmp_path, low, "--control", "pipelines:grounded")
    assert done.returncode == 2 and "--control need --replay" in done.stderr


# --- Conversations ------------------------------------------------------------------------

CHAT_PIPELINES = textwrap.dedent(
    '''
    import asyncio

    import ragpulse

    PASSAGE = "The Harbour lighthouse was rebuilt in 1902 after a storm."


    def answer(question, history):
        """The changed pipeline: a new first answer, and a follow-up built from its own
        earlier answer (which only the history it is given can tell it)."""
        if question.startswith("When"):
            return {"answer": "It was rebuilt in 1902.", "documents": [PASSAGE]}
        said = [m["content"] for m in history if m["role"] == "assistant"]
        asked = [m["content"] for m in history if m["role"] == "user"]
        if asked != ["When was the Harbour lighthouse built?"]:
            return f"unexpected history: {history!r}"
        return said[-1]  # what it said before: the history it is given tells it


    def chat(question, history=None, conversation_id=None):
        return answer(question, history)


    async def chat_async(question, history=None):
        await asyncio.sleep(0.01)
        return answer(question, history)


    @ragpulse.pipeline(conversation_id="conversation_id")
    def traced(question, history=None, conversation_id=None):
        with ragpulse.retrieval_span(question) as r:
            r.set_documents([PASSAGE] if question.startswith("When") else [])
        found = answer(question, history)
        return found["answer"] if isinstance(found, dict) else found
    '''
)
FIRST_Q, FOLLOW_Q = "When was the Harbour lighthouse built?", "And what year did you say?"
RECORDED = "The Harbour lighthouse was built in 1857."


@pytest.mark.parametrize("function", ["chat", "chat_async", "traced"])
def test_a_replayed_conversation_feeds_each_turn_the_new_answers(
    tmp_path: Path, function: str
) -> None:
    """Two rows sharing a conversation id, and a conversation row (both turns in its
    messages): the follow-up is called after the first turn, with the changed pipeline's
    own first answer in its history (not the recorded one), and scored with it."""
    (tmp_path / "chats.py").write_text(CHAT_PIPELINES)
    rows = [
        {"question": FOLLOW_Q, "answer": "I said 1857.", "conversation_id": "c-1", "turn": 2},
        {"question": FIRST_Q, "contexts": [RECORDED], "answer": "It was built in 1857.",
         "conversation_id": "c-1", "turn": 1},
        {"messages": [
            {"role": "user", "content": FIRST_Q},
            {"role": "assistant", "content": "It was built in 1857."},
            {"role": "user", "content": FOLLOW_Q},
            {"role": "assistant", "content": "I said 1857."},
        ]},
    ]  # fmt: skip
    source = tmp_path / "set.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "replayed.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "ragpulse.cli", "eval", str(source), "-o", str(out), "--replay",
         f"chats:{function}", "--concurrency", "4", "--metrics", "faithfulness/lexical"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    # Input order; the conversation row is a line per turn.
    assert [(x["line"], x.get("conversation_id"), x.get("turn")) for x in lines] == [
        (1, "c-1", 2), (2, "c-1", 1), (3, "line-3", 1), (3, "line-3", 2),
    ]  # fmt: skip
    follow_ups = [x for x in lines if x["turn"] == 2]
    for line in follow_ups:
        assert line["after"]["answer"] == "It was rebuilt in 1902.", line
        assert line["before"]["answer"] == "I said 1857."
        # Scored with the new history: the first turn's new passage is its evidence.
        [faithful] = line["after"]["results"]
        assert faithful["score"] >= 0.7
    if function == "traced":  # the pipeline's own spans carry the conversation id
        assert {x["replay"]["documents_from"] for x in lines if x["turn"] == 1} == {"spans"}
