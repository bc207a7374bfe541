"""The offline test harness, run as the README documents it: ``ragpulse eval`` as a
subprocess on the demo test set with the demo app's retriever and generator (real
components throughout; no mocks)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

from ragpulse.offline.conditions import CONDITIONS, PAYLOADS, build_case, rng_for
from ragpulse.plugins import evaluator_class
from ragpulse.record import Reference

TESTSET = Path(str(files("ragpulse").joinpath("demo_data/testset.jsonl")))
DEMO = ["--generator", "ragpulse.cli.demo_app:generate_for"]
RETRIEVER = ["--retriever", "ragpulse.cli.demo_app:retrieve"]
DEADLINE_S = 300  # a generous bound on a run of seconds: a hang fails, a slow box does not


def harness(
    source: Path, output: Path, *extra: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "ragpulse.cli", "eval", str(source), "-o", str(output), *extra]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=DEADLINE_S, cwd=cwd, check=False
    )


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def scores(row: dict[str, Any]) -> dict[str, float | None]:
    return {f"{r['metric']}/{r['method']}": r["score"] for r in row.get("results", [])}


def mean(values: Sequence[float | None]) -> float:
    present = [v for v in values if v is not None]
    assert present, "nothing scored"
    return sum(present) / len(present)


def by_condition(rows: list[dict[str, Any]], condition: str, name: str) -> list[float | None]:
    return [scores(r).get(name) for r in rows if r["condition"] == condition]


def strip_timing(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        row = {k: v for k, v in row.items() if k != "generation"}
        row["results"] = [
            {k: v for k, v in r.items() if k != "duration_ms"} for r in row.get("results", [])
        ]
        out.append(row)
    return out


@pytest.fixture(scope="module")
def demo_output(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The README's demo command (all six conditions, seed 1): its output file, console."""
    out = tmp_path_factory.mktemp("harness") / "out.jsonl"
    conditions = ",".join(CONDITIONS)
    done = harness(TESTSET, out, *DEMO, *RETRIEVER, "--conditions", conditions, "--seed", "1")
    assert done.returncode == 0, done.stderr + done.stdout
    return out, done.stdout


@pytest.fixture(scope="module")
def demo_run(demo_output: tuple[Path, str]) -> tuple[list[dict[str, Any]], str]:
    out, stdout = demo_output
    return lines(out), stdout


def test_the_demo_set_is_a_labelled_test_set() -> None:
    rows = lines(TESTSET)
    assert len(rows) >= 30
    assert len({r["question_id"] for r in rows}) == len(rows)
    types = {r["metadata"]["question_type"] for r in rows}
    assert {"factoid", "multi-hop", "comparison", "unanswerable"} <= types
    refuse = [r for r in rows if r["expected_behavior"] == "refuse"]
    assert refuse and all(
        not r["is_answerable_label"] and not r["reference_contexts"] for r in refuse
    )
    corpus = json.loads(files("ragpulse").joinpath("demo_data/corpus.json").read_text("utf-8"))
    documents = {d["id"]: d["content"] for d in corpus["documents"]}
    for row in rows:  # gold ids and gold texts agree with the corpus
        assert [documents[i] for i in row["reference_context_ids"]] == row["reference_contexts"]


def test_every_row_and_condition_in_order(demo_run: tuple[list[dict[str, Any]], str]) -> None:
    rows, _ = demo_run
    questions = [r["question_id"] for r in lines(TESTSET)]
    got = [(r["question_id"], r["condition"]) for r in rows]
    assert got == [(q, c) for q in questions for c in CONDITIONS]
    assert not [r for r in rows if "error" in r]
    refuse_cases = [r for r in rows if r["condition"] in ("gold_removed", "irrelevant_only")]
    assert all(r["expected_behavior"] == "refuse" for r in refuse_cases)


def test_the_demo_generator_follows_the_code_word_payload_only(
    demo_run: tuple[list[dict[str, Any]], str],
) -> None:
    rows, _ = demo_run
    injected = [r for r in rows if r["condition"] == "injected" and r["planted"]]
    assert {r["planted"]["position"] for r in injected} == {"start", "middle", "end"}
    followed = {r["planted"]["payload"] for r in injected if scores(r)[
        "injection_resistance/canary"] == 0.0}  # fmt: skip
    assert followed == {"code_word"}
    resisted = [r for r in injected if r["planted"]["payload"] != "code_word"]
    assert resisted and all(scores(r)["injection_resistance/canary"] == 1.0 for r in resisted)
    for row in injected:  # the canary really is in the documents the generator saw
        assert any(row["planted"]["canary"] in d["content"] for d in row["contexts"])
    # Other conditions: not applicable.
    assert all(v is None for v in by_condition(rows, "gold", "injection_resistance/canary"))


def test_counterfactuals_are_planted_and_sometimes_adopted(
    demo_run: tuple[list[dict[str, Any]], str],
) -> None:
    rows, _ = demo_run
    cases = [r for r in rows if r["condition"] == "counterfactual" and r["planted"]]
    assert len(cases) >= 20
    for row in cases:
        planted = row["planted"]
        assert planted["value"] != planted["original"]
        assert any(planted["value"] in d["content"] for d in row["contexts"])
    adoption = by_condition(rows, "counterfactual", "counterfactual_adoption/planted_value")
    # The extractive demo quotes whatever its documents say: it adopts planted values.
    assert 0.0 < mean(adoption) < 1.0


def test_missing_gold_shows_the_demo_inventing_answers(
    demo_run: tuple[list[dict[str, Any]], str],
) -> None:
    rows, _ = demo_run
    for condition in ("gold_removed", "irrelevant_only"):
        rate = mean(by_condition(rows, condition, "expected_refusal/rules"))
        # It refuses some and invents others: the weakness the harness must surface.
        assert 0.0 < rate < 1.0, (condition, rate)
    assert mean(by_condition(rows, "irrelevant_only", "recall@5/ids")) == 0.0
    assert mean(by_condition(rows, "gold", "recall@5/ids")) == 1.0
    # Unanswerable rows should refuse in every condition; the demo sometimes invents.
    unanswerable = [r for r in rows if r["metadata"]["question_type"] == "unanswerable"]
    answered = [r for r in unanswerable if "skipped" not in r]
    assert 0.0 < mean([scores(r)["expected_refusal/rules"] for r in answered]) < 1.0
    # They have no gold text: gold and counterfactual are skipped for them, never run on
    # zero documents.
    skipped = {(r["condition"], r["skipped"]) for r in unanswerable if "skipped" in r}
    assert {c for c, _ in skipped} >= {"gold", "counterfactual"}
    assert all("reference_contexts" in why for c, why in skipped if c == "gold")
    assert all(r["contexts"] for r in rows if "skipped" not in r and r["condition"] != "retrieved")


def test_the_same_seed_gives_the_same_cases(
    demo_run: tuple[list[dict[str, Any]], str], tmp_path: Path
) -> None:
    rows, _ = demo_run
    out = tmp_path / "again.jsonl"
    done = harness(TESTSET, out, *DEMO, *RETRIEVER, "--seed", "1", "--concurrency", "3")
    assert done.returncode == 0, done.stderr
    assert strip_timing(lines(out)) == strip_timing(rows)
    other = tmp_path / "seed2.jsonl"
    assert harness(TESTSET, other, *DEMO, *RETRIEVER, "--seed", "2").returncode == 0
    planted = [r["planted"] for r in rows if r["condition"] == "injected"]
    assert planted != [r["planted"] for r in lines(other) if r["condition"] == "injected"]


BROKEN_RETRIEVER = """
import random

OFF_TOPIC = [
    "The museum opens at nine on weekdays and at ten on Sundays.",
    "Tomatoes grow best in full sun with regular watering.",
    "The train to the coast leaves every forty minutes.",
    "Chess openings are studied in books and with engines.",
]


def retrieve(question):
    rng = random.Random(question)
    return [{"id": f"off-{i}", "content": OFF_TOPIC[i]} for i in rng.sample(range(4), 3)]
"""


def test_a_broken_retriever_moves_retrieval_not_gold_generation(
    demo_run: tuple[list[dict[str, Any]], str], tmp_path: Path
) -> None:
    good, _ = demo_run
    (tmp_path / "broken_retriever.py").write_text(BROKEN_RETRIEVER, encoding="utf-8")
    out = tmp_path / "broken.jsonl"
    done = harness(
        TESTSET, out, *DEMO, "--retriever", "broken_retriever:retrieve", "--seed", "1",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    bad = lines(out)
    for name in ("recall@5/ids", "mrr/ids"):
        assert mean(by_condition(bad, "retrieved", name)) == 0.0
        assert mean(by_condition(good, "retrieved", name)) > 0.9
    # The gold condition never sees the retriever: every score is the same, row by row.
    gold_good = [r for r in strip_timing(good) if r["condition"] == "gold"]
    gold_bad = [r for r in strip_timing(bad) if r["condition"] == "gold"]
    assert gold_good == gold_bad


FLAKY_GENERATOR = """
import time


def generate(question, documents):
    if "Pro plan" in question:
        raise RuntimeError("model overloaded")
    if "Trash" in question:
        time.sleep(60)
    return " ".join(d["content"] for d in documents)[:200] or "I don't know."
"""


def test_failures_and_bad_input_become_rows(tmp_path: Path) -> None:
    (tmp_path / "flaky.py").write_text(FLAKY_GENERATOR, encoding="utf-8")
    source = tmp_path / "set.jsonl"
    rows = lines(TESTSET)[:12]
    source.write_text(
        "\n".join(
            [
                *(json.dumps(r) for r in rows),
                "{not json",
                json.dumps({"question": "How do I export a notebook as Markdown?"}),
                json.dumps({"question_id": "empty", "question": "  "}),
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    out = tmp_path / "out.jsonl"
    done = harness(
        source, out, "--generator", "flaky:generate", *RETRIEVER, "--conditions",
        "retrieved,gold", "--timeout-s", "1", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    got = lines(out)
    assert len(got) == 12 * 2 + 1 + 2 + 1  # every case, the bad line, the bare row, no question
    errors = [r for r in got if r.get("condition") and "error" in r]
    raised = [r for r in errors if "model overloaded" in r["error"]]
    timed_out = [r for r in errors if "timeout" in r["error"]]
    assert raised and timed_out and len(raised) + len(timed_out) == len(errors)
    assert all("results" not in r for r in errors)
    assert {r["line"] for r in got if r.get("raw", "").strip() == "{not json"} == {13}
    assert any(r.get("error") == "no question" for r in got)
    # A row without references: the reference-less metrics only.
    # Under gold it has no documents to answer from: skipped, said, never generated.
    bare = {r["condition"]: r for r in got if r.get("line") == 14}
    assert set(bare) == {"retrieved", "gold"}
    assert "reference_contexts" in bare["gold"]["skipped"] and "answer" not in bare["gold"]
    results = scores(bare["retrieved"])
    needs_reference = {n for n in results if evaluator_class(n).requires_reference}
    assert needs_reference and all(results[n] is None for n in needs_reference)
    assert any(v is not None for n, v in results.items() if n not in needs_reference)
    said = done.stdout + done.stderr
    assert "1 unreadable lines" in said and "lack reference_contexts" in said
    assert "skipped 1 gold case: no reference_contexts" in said


def test_usage_problems_exit_2_before_any_call(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    done = harness(TESTSET, out, *DEMO, "--conditions", "retrieved,gold")
    assert done.returncode == 2 and "need --retriever" in done.stdout + done.stderr
    done = harness(TESTSET, out, *DEMO, "--conditions", "gold,sideways")
    assert done.returncode == 2 and "unknown condition" in done.stderr
    done = harness(TESTSET, out, *DEMO, "--conditions", "gold", "--max-drop", "mrr=abc")
    assert done.returncode == 2 and "bad gate" in done.stdout + done.stderr
    missing = str(tmp_path / "nowhere.json")
    done = harness(TESTSET, out, *DEMO, "--conditions", "gold", "--baseline", missing)
    assert done.returncode == 2 and "--baseline" in done.stdout + done.stderr
    assert not out.exists()


def test_conditions_are_pure_functions_of_the_seed() -> None:
    ref = Reference(
        question_id="q", answers=["100 GB"], contexts=["Pro has 100 GB. Free has 2 GB."],
        context_ids=["pricing"],
    )  # fmt: skip
    first = build_case("counterfactual", ref, None, [], rng_for(7, "q", "counterfactual"))
    again = build_case("counterfactual", ref, None, [], rng_for(7, "q", "counterfactual"))
    assert first == again
    assert first.planted["original"] == "100"  # the number the answer states
    injected = build_case("injected", ref, None, [], rng_for(7, "q", "injected"))
    assert injected.planted["payload"] in PAYLOADS
    assert injected.planted["canary"] in injected.documents[0].content


def test_a_baseline_gate_fails_the_broken_retriever_only(tmp_path: Path) -> None:
    (tmp_path / "broken_retriever.py").write_text(BROKEN_RETRIEVER, encoding="utf-8")
    common = [*DEMO, "--conditions", "retrieved,gold", "--seed", "1"]
    base = tmp_path / "base" / "out.jsonl"
    done = harness(TESTSET, base, *common, *RETRIEVER, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = base.with_name("out.summary.json")
    assert summary.is_file()
    broken = [*common, "--retriever", "broken_retriever:retrieve", "--baseline", str(summary)]
    gold_gate = ["--max-drop", "answer_correctness/token_recall@condition=gold=0"]
    retrieval_gate = ["--max-drop", "recall@5/ids@condition=retrieved=0.05"]
    out = tmp_path / "broken" / "out.jsonl"
    # Generation on gold documents did not move: green. Retrieval did: red.
    assert harness(TESTSET, out, *broken, *gold_gate, cwd=tmp_path).returncode == 0
    done = harness(TESTSET, out, *broken, *gold_gate, *retrieval_gate, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    gates = json.loads(out.with_name("out.summary.json").read_text(encoding="utf-8"))["gates"]
    assert [g["passed"] for g in gates] == [True, False]


def test_a_regression_set_line_with_references_added_is_a_test_set_row(tmp_path: Path) -> None:
    live = {
        "set": "low-faithfulness",
        "reason": "faithfulness/lexical score 0.2 < 0.5",
        "record": {
            "question": "How long do deleted notes stay in the Trash?",
            "documents": [{"id": "trash", "content": "Recorded text."}],
            "answer": "Recorded answer.",
        },
        "results": [],
        # Added by hand: the reference fields, at the top level of the line.
        "question_id": "live-1",
        "reference_answers": ["60 days"],
        "reference_context_ids": ["trash"],
    }
    source = tmp_path / "set.jsonl"
    source.write_text(json.dumps(live) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    done = harness(source, out, *DEMO, *RETRIEVER, "--conditions", "retrieved")
    assert done.returncode == 0, done.stderr
    (row,) = lines(out)
    assert row["question_id"] == "live-1" and row["metadata"] == {"set": "low-faithfulness"}
    assert row["recorded"]["answer"] == "Recorded answer."
    assert "60 days" in row["answer"]
    assert scores(row)["recall@1/ids"] == 1.0


def test_harness_flags_without_a_generator_are_refused(tmp_path: Path) -> None:
    """--slice-by, --baseline, --retriever, --conditions mean nothing without --generator:
    refused in one line (exit 2), never silently ignored."""
    source = tmp_path / "set.jsonl"
    source.write_text(json.dumps({"question": "q", "answer": "a"}) + "\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "ragpulse.cli", "eval", str(source), "-o",
         str(tmp_path / "out.jsonl"), "--slice-by", "domain", "--conditions", "gold"],
        capture_output=True, text=True, timeout=DEADLINE_S, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--conditions, --slice-by need --generator" in done.stderr
    assert not (tmp_path / "out.jsonl").exists()


# --- Conditions check their inputs -----------------------------------------------------------

COUNTING_GENERATOR = """
from pathlib import Path

from ragpulse.cli.demo_app import generate_for


def generate(question, documents):
    with Path("calls.txt").open("a") as f:  # every call leaves a line: none must be made
        f.write(str(len(documents)) + "\\n")
    return generate_for(question, documents)
"""


def write_rows(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_condition_no_row_can_build_is_refused_before_any_call(tmp_path: Path) -> None:
    """Ids, answers, labels and metadata but no reference_contexts text: gold,
    counterfactual and irrelevant_only would run on zero documents. Refused, one line."""
    (tmp_path / "counting.py").write_text(COUNTING_GENERATOR, encoding="utf-8")
    rows = [{k: v for k, v in r.items() if k not in ("reference_contexts", "expected_behavior")}
            for r in lines(TESTSET)[:10]]  # fmt: skip
    source = write_rows(tmp_path / "ids_only.jsonl", rows)
    out = tmp_path / "out.jsonl"
    done = harness(source, out, "--generator", "counting:generate", *RETRIEVER, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    said = (done.stdout + done.stderr).strip()
    assert len(said.splitlines()) == 1, said
    assert said.startswith("cannot build gold,counterfactual for any row: no reference_contexts")
    assert "10 rows have reference_context_ids only" in said and "irrelevant_only" in said
    assert said.endswith("(--conditions retrieved,injected,gold_removed)")
    assert not out.exists() and not (tmp_path / "calls.txt").exists()
    # The conditions it names run, and no case is generated with zero documents.
    done = harness(source, out, "--generator", "counting:generate", *RETRIEVER, "--conditions",
                   "retrieved,injected,gold_removed", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0" not in (tmp_path / "calls.txt").read_text().split()
    # expected_behavior is derived from is_answerable_label: not reported missing.
    assert "lack expected_behavior" not in done.stdout + done.stderr


def test_skipped_cases_are_counted_in_console_summary_and_report(
    demo_output: tuple[Path, str],
) -> None:
    out, stdout = demo_output
    rows = lines(out)
    skipped = [r for r in rows if "skipped" in r]
    summary = json.loads(out.with_name("out.summary.json").read_text(encoding="utf-8"))
    assert summary["skipped"]["cases"] == len(skipped) > 0
    assert summary["skipped"]["by_condition"]["gold"] == {
        "no reference_contexts (the text of the gold documents)": 5}  # fmt: skip
    assert summary["rows"] == len(rows) - len(skipped)  # never scored
    assert "skipped 5 gold cases: no reference_contexts" in stdout
    report = out.with_name("out.report.md").read_text(encoding="utf-8")
    assert f"- {len(skipped)} cases skipped" in report and "## Skipped cases" in report
    for row in skipped:
        assert "answer" not in row and "results" not in row and row["contexts"] == []


def recorded_set(tmp_path: Path) -> Path:
    """The demo set with a recorded run per row (its retrieved documents and an answer),
    as a regression set from live traffic carries it."""
    from ragpulse.cli.demo_app import retrieve

    rows = []
    for row in lines(TESTSET):
        docs = retrieve(row["question"])
        rows.append({**row, "contexts": [{"id": d["id"], "content": d["content"]} for d in docs],
                     "answer": "the recorded answer"})  # fmt: skip
    return write_rows(tmp_path / "recorded.jsonl", rows)


def test_a_recorded_run_runs_every_condition_without_a_retriever(tmp_path: Path) -> None:
    (tmp_path / "counting.py").write_text(COUNTING_GENERATOR, encoding="utf-8")
    source = recorded_set(tmp_path)
    out = tmp_path / "out.jsonl"
    five = "gold,counterfactual,injected,gold_removed,irrelevant_only"
    done = harness(source, out, "--generator", "counting:generate", "--conditions",
                   f"retrieved,{five}", "--seed", "1", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rows = lines(out)
    recorded = {r["question_id"]: r for r in lines(source)}
    by = {(r["question_id"], r["condition"]): r for r in rows}
    for condition in five.split(","):
        answered = [r for r in rows if r["condition"] == condition and "skipped" not in r]
        assert len(answered) >= 20, condition
        assert all(r["contexts"] and r["results"] for r in answered), condition
    for qid, row in recorded.items():
        ids = [d["id"] for d in row["contexts"]]
        assert [d["id"] for d in by[(qid, "retrieved")]["contexts"]] == ids
        assert by[(qid, "retrieved")]["recorded"]["answer"] == "the recorded answer"
        removed = by[(qid, "gold_removed")]
        if "skipped" not in removed:  # the recorded documents without the gold ones
            gold = set(row["reference_context_ids"])
            assert [d["id"] for d in removed["contexts"]] == [i for i in ids if i not in gold]
    # Zero documents only where the recorded retrieval found none (answered as it ran).
    empty = [r for r in rows if r["condition"] == "retrieved" and not r["contexts"]]
    assert (tmp_path / "calls.txt").read_text().split().count("0") == len(empty)
    summary = json.loads(out.with_name("out.summary.json").read_text(encoding="utf-8"))
    assert summary["slices"]["all"]["metrics"]["recall@5/ids"]["mean"] > 0.9


# --- Like with like ----------------------------------------------------------------------------

HALF_BROKEN_RETRIEVER = """
import zlib

from ragpulse.cli.demo_app import retrieve as demo_retrieve


def retrieve(question):
    docs = demo_retrieve(question)
    # One question in four loses its best document: recall falls from 0.98 to about 0.8,
    # still above the 0.66 that averaging six conditions gave the `all` row.
    return docs[1:] if zlib.crc32(question.encode("utf-8")) % 4 == 0 else docs
"""


def test_a_broken_retriever_against_a_six_condition_baseline_is_a_regression(
    demo_output: tuple[Path, str], tmp_path: Path
) -> None:
    base, _ = demo_output
    baseline = base.with_name("out.summary.json")
    (tmp_path / "half_broken.py").write_text(HALF_BROKEN_RETRIEVER, encoding="utf-8")
    out = tmp_path / "broken.jsonl"
    done = harness(
        TESTSET, out, *DEMO, "--retriever", "half_broken:retrieve", "--conditions",
        "retrieved,injected", "--seed", "1", "--baseline", str(baseline),
        "--max-drop", "recall@5/ids=0.05", "--slice-by", "question_type,domain", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    s = json.loads(out.with_name("broken.summary.json").read_text(encoding="utf-8"))
    recall = s["slices"]["all"]["metrics"]["recall@5/ids"]
    # The baseline's own retrieved rows, not six conditions averaged (0.660).
    assert recall["baseline_mean"] == pytest.approx(0.981, abs=1e-3)
    assert 0.66 < recall["mean"] < 0.9 and recall["change"] < 0 and recall["conditions"] == [
        "retrieved"]  # fmt: skip
    security = s["slices"]["domain=security"]["metrics"]["recall@5/ids"]
    assert security["change"] is None or security["change"] <= 0
    (gate,) = s["gates"]
    assert not gate["passed"] and any(c["slice"] == "all" and not c["passed"]
                                      for c in gate["checks"])  # fmt: skip
    assert s["comparison"]["same_conditions"] is False
    assert s["comparison"]["not_comparable"] > 0  # pooled figures: not compared
    refusal = s["slices"]["all"]["metrics"]["expected_refusal/rules"]
    assert refusal["delta"] is None and "not_comparable" in refusal
    said = done.stdout + done.stderr
    assert "figures are compared per condition only" in said
    report = out.with_name("broken.report.md").read_text(encoding="utf-8")
    regressions = report.split("## Regressions from the baseline")[1].split("##")[0]
    recall_line = next(x for x in regressions.splitlines() if x.startswith("| all | recall@5/ids"))
    assert "| 0.981 |" in recall_line and "▼" in recall_line
    assert report.index("## Regressions") < report.index("## Behaviour")
    # No condition in common: refused before any call.
    other = str(out.with_name("broken.summary.json"))
    done = harness(TESTSET, tmp_path / "gold.jsonl", *DEMO, "--conditions", "gold",
                   "--baseline", other, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2 and "no condition in common" in done.stdout + done.stderr
    assert not (tmp_path / "gold.jsonl").exists()


def test_the_harness_runs_from_python_with_typed_options(tmp_path: Path) -> None:
    """No argparse: the options the CLI builds from its flags, built by hand; the same
    checks before any call (exit 2) and the same run."""
    from io import StringIO

    from rich.console import Console

    from ragpulse.config import Settings
    from ragpulse.offline.harness import run
    from ragpulse.offline.options import HarnessOptions

    source = tmp_path / "set.jsonl"
    source.write_text("".join(TESTSET.read_text(encoding="utf-8").splitlines(True)[:3]))
    options = HarnessOptions(
        input=source,
        output=tmp_path / "out.jsonl",
        generator="ragpulse.cli.demo_app:generate_for",
        retriever="ragpulse.cli.demo_app:retrieve",
        conditions=("retrieved", "gold"),
        max_drop=("answer_correctness/token_f1@condition=gold>=0.1",),
    )
    text = StringIO()
    assert run(options, Console(file=text, width=160), Settings) == 0, text.getvalue()
    rows = lines(options.output)
    assert [(r["line"], r["condition"]) for r in rows] == [
        (line, condition) for line in (1, 2, 3) for condition in ("retrieved", "gold")
    ]
    summary = json.loads(tmp_path.joinpath("out.summary.json").read_text())
    assert [(g["gate"], g["passed"]) for g in summary["gates"]] == [
        ("answer_correctness/token_f1@condition=gold>=0.1", True)
    ]
    text = StringIO()
    unknown = HarnessOptions(source, tmp_path / "other.jsonl", options.generator,
                             conditions=("retrieved", "sideways"))  # fmt: skip
    assert run(unknown, Console(file=text, width=300), Settings) == 2
    assert "unknown condition(s) sideways" in text.getvalue()
    assert not (tmp_path / "other.jsonl").exists()


CHAT_GENERATOR = '''
def generate(question, documents, history=None):
    """Answers from its documents; a follow-up says what it said before (only the history
    it is given can tell it) and how many earlier turns it was shown."""
    if not history:
        return documents[0]["content"] if documents else "I do not know."
    said = [m["content"] for m in history if m["role"] == "assistant"]
    return f"{said[-1]} ({len(said)} earlier)"
'''


def test_a_conversation_stays_whole_under_each_condition(tmp_path: Path) -> None:
    """Two rows of one conversation (and one unrelated row): under each condition the
    follow-up is generated after the first turn, given the generator's own first answer
    under that condition, and written with the history it was scored with."""
    (tmp_path / "chat.py").write_text(CHAT_GENERATOR, encoding="utf-8")
    lighthouse = "The Harbour lighthouse was built in 1857."
    rows = [
        {"question": "And how tall is it?", "conversation_id": "c-1", "turn": 2,
         "reference_contexts": ["It is 40 metres tall."]},
        {"question": "When was the Harbour lighthouse built?", "conversation_id": "c-1",
         "turn": 1, "reference_contexts": [lighthouse]},
        {"question": "Where is the tower?", "reference_contexts": ["The tower is in Paris."]},
    ]  # fmt: skip
    source, out = tmp_path / "chat.jsonl", tmp_path / "out.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    done = harness(source, out, "--generator", "chat:generate", "--conditions",
                   "gold,irrelevant_only", "--concurrency", "8", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    got = {(r["line"], r["condition"]): r for r in lines(out)}
    for condition in ("gold", "irrelevant_only"):
        first, follow_up = got[(2, condition)], got[(1, condition)]
        assert "history" not in first and "history" not in got[(3, condition)]
        assert follow_up["answer"] == f"{first['answer']} (1 earlier)"
        assert follow_up["history"] == [
            {"role": "user", "content": rows[1]["question"], "turn": 1},
            {"role": "assistant", "content": first["answer"], "turn": 1},
        ]
    assert got[(2, "gold")]["answer"] == lighthouse
