"""Names a user types: bare metric names, did-you-mean for metrics and gates, and test
sets written for Ragas or DeepEval.

The real command, in process (``ragpulse.cli.main``) where only its output and exit
status matter, against files written here."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ragpulse.cli import main
from ragpulse.offline.testset import ALIASES, canonical_row
from ragpulse.plugins import resolve_evaluator_names

ROW = {
    "question": "How much storage does the Pro plan include?",
    "contexts": [{"id": "pricing", "content": "The Pro plan includes 100 GB of storage."}],
    "answer": "The Pro plan includes 100 GB of storage.",
    "reference_answers": ["100 GB"],
    "reference_context_ids": ["pricing"],
    "reference_contexts": ["The Pro plan includes 100 GB of storage."],
}
RAGAS = {
    "user_input": ROW["question"],
    "retrieved_contexts": ["The Pro plan includes 100 GB of storage."],
    "response": ROW["answer"],
    "reference": "100 GB",
    "reference_contexts": ["The Pro plan includes 100 GB of storage."],
}
DEEPEVAL = {
    "input": ROW["question"],
    "actual_output": ROW["answer"],
    "expected_output": "100 GB",
    "retrieval_context": ["The Pro plan includes 100 GB of storage."],
    "context": ["The Pro plan includes 100 GB of storage."],
}


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def results(path: Path) -> list[dict[str, float | None]]:
    return [
        {f"{r['metric']}/{r['method']}": r["score"] for r in row.get("results", [])}
        for row in map(json.loads, path.read_text(encoding="utf-8").splitlines())
    ]


def test_a_bare_metric_name_selects_every_method_when_none_is_on_by_default(
    tmp_path: Path,
) -> None:
    assert resolve_evaluator_names(["mrr"]) == ["mrr/content", "mrr/ids"]
    assert resolve_evaluator_names(["faithfulness"]) == ["faithfulness/lexical"]  # its default
    source = write_rows(tmp_path / "in.jsonl", [ROW])
    assert main(["eval", str(source), "-o", str(tmp_path / "out.jsonl"), "--metrics", "mrr"]) == 0
    (scores,) = results(tmp_path / "out.jsonl")
    assert scores == {"mrr/content": 1.0, "mrr/ids": 1.0}


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--metrics", "faithfullness"], "unknown evaluator 'faithfullness' (did you mean "
         "faithfulness?)"),
        (["--replay", "ragpulse.cli.demo_app:answer", "--max-drop", "faithfullness=0.05"],
         "--max-drop faithfullness: no such metric (did you mean faithfulness?)"),
        (["--generator", "ragpulse.cli.demo_app:generate_for", "--conditions", "retrieved",
          "--max-drop", "faithfullness=0.05"],
         "--max-drop faithfullness=0.05: no metric 'faithfullness' (did you mean faithfulness?)"),
        (["--generator", "ragpulse.cli.demo_app:generate_for", "--conditions", "retrieved",
          "--max-drop", "recall@5/idz=0.05"], "did you mean recall@5/ids or"),
    ],
    ids=["metrics", "replay-gate", "harness-gate", "harness-method"],
)  # fmt: skip
def test_a_misspelt_name_is_refused_with_the_closest_before_any_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    source = write_rows(tmp_path / "in.jsonl", [ROW])
    out = tmp_path / "out.jsonl"
    assert main(["eval", str(source), "-o", str(out), *argv]) == 2
    captured = capsys.readouterr()
    assert said in " ".join((captured.out + captured.err).split())
    assert not out.exists()


def test_ragas_names_are_read_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write_rows(tmp_path / "ragas.jsonl", [RAGAS, RAGAS])
    out = tmp_path / "out.jsonl"
    assert main(["eval", str(source), "-o", str(out)]) == 0
    for scores in results(out):
        assert scores["faithfulness/lexical"] == 1.0  # scored, not "not applicable"
        assert scores["answer_relevance/lexical"] is not None
    said = " ".join(capsys.readouterr().err.split())
    assert "read other tools' field names: user_input -> question (2 rows)" in said
    assert "reference -> reference_answers (2 rows)" in said
    # The row given back is the user's own: their names, results added.
    assert set(json.loads(out.read_text().splitlines()[0])) == {*RAGAS, "results"}


def test_deepeval_names_run_the_harness(tmp_path: Path) -> None:
    source = write_rows(tmp_path / "deepeval.jsonl", [DEEPEVAL])
    out = tmp_path / "out.jsonl"
    argv = ["eval", str(source), "-o", str(out),
            "--generator", "ragpulse.cli.demo_app:generate_for",
            "--conditions", "retrieved,gold"]  # fmt: skip
    assert main(argv) == 0  # retrieval_context is the recorded run: no --retriever needed
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["condition"] for r in rows] == ["retrieved", "gold"]
    for row in rows:  # written in ragpulse's names
        assert row["question"] == ROW["question"] and row["reference_answers"] == ["100 GB"]
        assert row["reference_contexts"] == DEEPEVAL["context"]
        assert next(r for r in row["results"] if r["metric"] == "answer_correctness")["score"]
    assert rows[0]["recorded"]["answer"] == DEEPEVAL["actual_output"]


def test_unknown_fields_are_warned_about_with_the_names_ragpulse_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_rows(tmp_path / "in.jsonl", [{"query": "q?", "passages": ["p"]}])
    assert main(["eval", str(source), "-o", str(tmp_path / "out.jsonl")]) == 0
    said = " ".join(capsys.readouterr().err.split())
    assert "fields ragpulse does not read (kept as they are): query (1 rows), passages (1 rows)" \
        in said  # fmt: skip
    assert "It reads question, contexts, contexts_ids, answer" in said
    assert "user_input" in said and "keys to slice by go under metadata" in said


def test_the_mapping_never_overrides_ragpulse_names() -> None:
    row, used = canonical_row({"question": "mine", "user_input": "theirs", "reference": "x"})
    assert row["question"] == "mine" and row["reference_answers"] == ["x"]
    assert used == ["reference -> reference_answers"]
    assert set(ALIASES.values()) <= {"question", "contexts", "contexts_ids", "answer",
                                      "reference_answers", "reference_contexts",
                                      "conversation_id"}  # fmt: skip


def test_a_field_is_said_to_be_read_only_when_it_held_a_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    row = {**DEEPEVAL, "context": None, "expected_output": ""}
    source = write_rows(tmp_path / "deepeval.jsonl", [row, row])
    assert main(["eval", str(source), "-o", str(tmp_path / "out.jsonl")]) == 0
    said = " ".join(capsys.readouterr().err.split())
    assert "input -> question (2 rows)" in said and "actual_output -> answer" in said
    assert "retrieval_context -> contexts (2 rows)" in said
    assert not re.search(r"\bcontext ->", said) and "expected_output ->" not in said


def test_of_two_names_for_one_field_the_one_with_a_value_is_read() -> None:
    row, used = canonical_row({"input": None, "user_input": "theirs"})
    assert row["question"] == "theirs" and used == ["user_input -> question"]
