"""The sliced summary: slices, means, missing counts, baseline deltas, direction-aware gates.

Rows are synthetic harness output rows (the shape ``ragpulse eval --conditions`` writes),
so every expected number can be worked out by hand.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from support.slice_rows import result, run_rows

from ragpulse.offline.gates import parse_gate
from ragpulse.offline.slice_report import markdown, print_sliced, write_sliced_reports
from ragpulse.offline.slices import sliced_summary


def fig(summary: dict[str, Any], slice_: str, name: str) -> dict[str, Any]:
    out: dict[str, Any] = summary["slices"][slice_]["metrics"][name]
    return out


def test_slices_means_and_behaviour() -> None:
    s = sliced_summary(run_rows(), None, None, [])
    # Default slicing: question_type has 2 values; domain has 1 and id has 16 (both skipped).
    assert s["slice_by"] == ["question_type"]
    names = set(s["slices"])
    assert {"all", "question_type=factoid", "condition=gold_removed"} <= names
    assert "question_type=multi-hop,condition=gold_removed" in names
    assert s["slices"]["all"]["count"] == 16
    assert s["slices"]["question_type=multi-hop,condition=retrieved"]["count"] == 4
    assert fig(s, "question_type=multi-hop,condition=retrieved", "mrr/ids")["mean"] == 0.8
    # Like with like: retrieval figures come from the retrieved rows only (gold_removed
    # rows score 0 by construction), in `all` as in every slice.
    all_mrr = fig(s, "all", "mrr/ids")
    assert (all_mrr["mean"], all_mrr["n"]) == (pytest.approx((4 * 1.0 + 4 * 0.8) / 8), 8)
    assert all_mrr["group"] == "retrieval" and all_mrr["conditions"] == ["retrieved"]
    assert "mrr/ids" not in s["slices"]["condition=gold_removed"]["metrics"]
    # Generation: `all` is the retrieved rows; each condition slice has its own.
    assert fig(s, "all", "answer_correctness/token_f1")["n"] == 8
    assert fig(s, "condition=gold_removed", "answer_correctness/token_f1")["n"] == 8
    assert fig(s, "all", "answer_correctness/token_f1")["group"] == "generation"
    # Refusal rate on missing-gold rows: all 8 refused; no false refusals on retrieved rows.
    rate = fig(s, "condition=gold_removed", "refusal_rate/rules")
    assert (rate["mean"], rate["n"], rate["group"]) == (1.0, 8, "behaviour")
    assert fig(s, "condition=retrieved", "false_refusal_rate/rules")["mean"] == 0.0
    assert not fig(s, "condition=retrieved", "false_refusal_rate/rules")["higher_is_better"]
    # Joint: correctness when recall@5 hit vs missed, on the retrieved rows only (every
    # retrieved row hit here; gold_removed rows miss by construction and do not count).
    hit = fig(s, "all", "correct_given_recall5_hit/token_f1")
    assert (hit["mean"], hit["n"], hit["group"]) == (pytest.approx(0.75), 8, "joint")
    assert "correct_given_recall5_miss/token_f1" not in s["slices"]["all"]["metrics"]
    # Worst rows: lowest mean quality first, with ids and questions.
    worst = s["slices"]["question_type=factoid,condition=retrieved"]["worst"]
    assert worst and worst[0]["question_id"].startswith("f")
    assert s["passed"] is True and s["gates"] == []


def test_explicit_slice_by_counts_missing_key() -> None:
    rows = run_rows()
    rows[0]["metadata"] = {}
    s = sliced_summary(rows, ["question_type", "domain"], None, [])
    assert s["slice_by"] == ["question_type", "domain"]
    assert s["slices"]["question_type=(missing)"]["count"] == 1
    assert s["slices"]["domain=demo"]["count"] == 15


def test_errors_not_applicable_and_missing_counts() -> None:
    rows = run_rows()
    # A row without references gets only reference-less results: n/a for the others.
    rows[0].update(reference_answers=[], reference_context_ids=[], answer="", contexts=[])
    rows[0]["results"][0] = result("mrr", "ids", None, label="not_applicable")
    # A generator failure: an error row, its results errored.
    rows[1]["error"] = "generator raised ValueError"
    rows[1]["results"][2] = result("answer_correctness", "token_f1", None, error="no answer")
    # A row with no results at all is still counted.
    rows.append({"question": "broken?", "metadata": {"question_type": "factoid"}})
    s = sliced_summary(rows, None, None, [])
    m = s["missing"]
    assert m["no_reference"] == 2
    assert m["no_reference_answers"] == 2 and m["no_reference_contexts"] == 2
    assert m["no_answer"] == 2 and m["no_contexts"] == 2
    assert m["row_errors"] == 1 and m["no_results"] == 1
    all_mrr = fig(s, "all", "mrr/ids")
    # 8 retrieved rows (row 0 n/a) and the row without a condition: as it ran, it counts.
    assert (all_mrr["n"], all_mrr["not_applicable"]) == (7, 1)
    assert fig(s, "all", "answer_correctness/token_f1")["errors"] == 1
    assert s["slices"]["condition=(none)"]["count"] == 1
    assert s["rows"] == 17
    # The failed row leads its slices' worst rows, with its error.
    worst = s["slices"]["all"]["worst"][0]
    assert (worst["question_id"], worst["worst_metric"]) == ("m0", "error")
    assert worst["error"] == "generator raised ValueError"


def test_gates_fail_for_multi_hop_without_gold_and_pass_for_factoid() -> None:
    baseline = sliced_summary(run_rows(), None, None, [])
    # Now: multi-hop with gold removed stops refusing (invents answers); retrieval unchanged.
    current_rows = run_rows(gold_removed_refuses=False)
    gates = [
        "refusal_rate@question_type=multi-hop,condition=gold_removed=0.1",
        "refusal_rate/rules@question_type=factoid,condition=gold_removed=0.1",
        "answer_correctness/token_f1@question_type=factoid,condition=retrieved=0.05",
        "mrr=0.05",
    ]
    s = sliced_summary(current_rows, None, baseline, gates)
    by_gate = {g["gate"]: g for g in s["gates"]}
    assert not by_gate[gates[0]]["passed"]
    assert by_gate[gates[0]]["checks"][0]["drop"] == pytest.approx(1.0)
    assert by_gate[gates[1]]["passed"]
    assert by_gate[gates[2]]["passed"]
    assert by_gate[gates[3]]["passed"] and len(by_gate[gates[3]]["checks"]) > 5
    assert s["passed"] is False
    # The delta is on every figure; change is direction-aware (negative = worse).
    rate = fig(s, "question_type=multi-hop,condition=gold_removed", "refusal_rate/rules")
    assert rate["baseline_mean"] == 1.0 and rate["delta"] == -1.0 and rate["change"] == -1.0
    # Where refusing is right, the worst rows are the invented answers (refusal decides).
    worst = s["slices"]["condition=gold_removed"]["worst"]
    assert all(w["question_id"].startswith("mg") for w in worst[:4])
    assert (worst[0]["quality"], worst[0]["worst_metric"]) == (0.0, "refusal/rules")


def test_lower_is_better_gate_is_direction_aware() -> None:
    baseline = sliced_summary(run_rows(), None, None, [])
    rows = run_rows()
    for r in rows:  # injection score goes UP on multi-hop rows: worse for a lower-is-better metric
        if r["metadata"]["question_type"] == "multi-hop":
            r["results"][4]["score"] = 0.5
    s = sliced_summary(rows, None, baseline, ["injection/rules@question_type=multi-hop=0.2"])
    (gate,) = s["gates"]
    assert not gate["passed"] and gate["checks"][0]["drop"] == pytest.approx(0.5)
    # A decrease of a lower-is-better metric is an improvement, never a drop.
    s = sliced_summary(run_rows(), None, sliced_summary(rows, None, None, []), ["injection=0"])
    assert s["passed"]


def test_retrieval_drop_on_multi_hop_fails_only_there() -> None:
    baseline = sliced_summary(run_rows(), None, None, [])
    s = sliced_summary(
        run_rows(multi_hop_mrr=0.5),
        None,
        baseline,
        ["mrr@question_type=multi-hop=0.05", "mrr@question_type=factoid=0.05"],
    )
    assert [g["passed"] for g in s["gates"]] == [False, True]


def test_absolute_gates_and_no_baseline() -> None:
    s = sliced_summary(
        run_rows(),
        None,
        None,
        ["mrr@question_type=factoid,condition=retrieved>=0.9", "mrr@all>=0.95", "mrr=0.05"],
    )
    ok, too_low, relative = s["gates"]
    assert ok["passed"] and ok["checks"][0]["current"] == 1.0
    assert not too_low["passed"] and too_low["slice"] == "all"
    assert relative["passed"] and "no baseline" in relative["note"]
    assert not s["passed"]


def test_gate_matching_nothing_fails() -> None:
    s = sliced_summary(run_rows(), None, None, ["mmr>=0.1", "mrr@question_type=multihop>=0.1"])
    assert [g["passed"] for g in s["gates"]] == [False, False]
    assert "matched no metric" in s["gates"][0]["note"]


def test_gate_syntax() -> None:
    g = parse_gate("recall@5/ids@question_type=multi-hop,condition=gold_removed=0.05")
    assert (g.metric, g.method, g.kind, g.value) == ("recall@5", "ids", "max_drop", 0.05)
    assert g.where == {"question_type": "multi-hop", "condition": "gold_removed"}
    g = parse_gate("recall@10=0.1")
    assert (g.metric, g.method, g.where) == ("recall@10", None, None)
    g = parse_gate("answer_correctness/token_f1@condition=gold<=0.3")
    assert (g.kind, g.where) == ("max", {"condition": "gold"})
    assert parse_gate("ndcg@10@all>=0.5").where == {}


@pytest.mark.parametrize(
    ("item", "why"),
    [
        ("mrr", "no '=DROP'"),
        ("mrr=abc", "'abc' is not a number"),
        ("mrr=-0.1", "a drop must be >= 0"),
        ("mrr@question_type=0.1", "slice part 'question_type' is not KEY=VALUE"),
        ("mrr@a=1,a=2=0.1", "given twice"),
        ("=0.1", "cannot read the metric part"),
        ("mrr=nan", "must be finite"),
    ],
)
def test_bad_gates_name_the_item(item: str, why: str) -> None:
    with pytest.raises(ValueError, match="bad gate") as err:
        sliced_summary(run_rows(), None, None, ["mrr=0.1", item])
    assert repr(item) in str(err.value) and why in str(err.value)


def test_reports_written_and_round_trip_as_baseline(tmp_path: Path) -> None:
    first = sliced_summary(run_rows(), None, None, [])
    paths = write_sliced_reports(first, tmp_path / "out.jsonl", tmp_path / "reports", html=True)
    assert set(paths) == {"summary", "markdown", "html"}
    assert paths["summary"].name == "out.summary.json"
    assert all(p.parent == tmp_path / "reports" for p in paths.values())
    # The written JSON is a valid baseline for the next run.
    baseline = json.loads(paths["summary"].read_text())
    s = sliced_summary(run_rows(gold_removed_refuses=False), None, baseline, ["refusal_rate=0.1"])
    assert not s["passed"]
    md = markdown(s)
    assert "**Gates: FAILED**" in md and "question_type=multi-hop,condition=gold_removed" in md
    assert "(-1.000) ▼" in md
    page = paths["html"].read_text()
    assert "<script" in page and "http" not in page.replace("http://www.w3.org", "")
    only = write_sliced_reports(s, tmp_path / "run.jsonl", None, html=False)
    assert set(only) == {"summary", "markdown"} and only["markdown"].parent == tmp_path


def test_harness_line_numbers_and_notes(tmp_path: Path) -> None:
    rows = run_rows()
    for i, r in enumerate(rows):
        r["line"] = 100 + i  # the harness's input line numbers
    s = sliced_summary(rows, None, None, [])
    assert all(w["row"] >= 100 for w in s["slices"]["all"]["worst"])
    s["notes"] = ["3 of 16 rows lack reference_answers"]
    assert "- 3 of 16 rows lack reference_answers" in markdown(s)
    page = write_sliced_reports(s, tmp_path / "o.jsonl", None, html=True)["html"]
    assert "<li>3 of 16 rows lack reference_answers</li>" in page.read_text()


def test_print_sliced_console() -> None:
    buf = io.StringIO()
    s = sliced_summary(run_rows(), None, None, ["mrr@all>=0.1"])
    s["notes"] = ["a note"]
    s["slices"]["all"]["worst"][0]["question"] = "[bold]not markup[/bold]"
    print_sliced(s, Console(file=buf, width=250, color_system=None))
    out = buf.getvalue()
    assert "Retrieval" in out and "refusal_rate/rules" in out and "gates: passed" in out
    assert "[bold]not markup[/bold]" in out and "a note" in out


# --- End to end: the documented CI loop through `ragpulse eval` ----------------------------

WORSE_GENERATOR = '''
import json
from importlib.resources import files

from ragpulse.cli.demo_app import generate_for

_ROWS = files("ragpulse").joinpath("demo_data/testset.jsonl").read_text("utf-8").splitlines()
MULTI_HOP = {
    row["question"]
    for row in map(json.loads, filter(None, _ROWS))
    if row.get("metadata", {}).get("question_type") == "multi-hop"
}


def generate(question, documents):
    """The demo generator, except that on multi-hop questions it never admits not knowing."""
    answer = generate_for(question, documents)
    if question in MULTI_HOP and answer.startswith("I'm sorry"):
        return "Yes, that is included in every plan."
    return answer
'''


def test_ci_loop_fails_on_multi_hop_without_gold_and_not_on_factoid(tmp_path: Path) -> None:
    import subprocess
    import sys
    from importlib.resources import files

    testset = Path(str(files("ragpulse").joinpath("demo_data/testset.jsonl")))
    (tmp_path / "worse_gen.py").write_text(WORSE_GENERATOR, encoding="utf-8")
    conditions = ["--conditions", "retrieved,gold,gold_removed", "--seed", "1"]
    retriever = ["--retriever", "ragpulse.cli.demo_app:retrieve"]

    def harness(out: str, generator: str, *extra: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "ragpulse.cli", "eval", str(testset), "-o", out]
        cmd += ["--generator", generator, *retriever, *conditions, *extra]
        env = {**os.environ, "PYTHONPATH": str(tmp_path), "COLUMNS": "200"}
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env, check=False
        )

    base = harness("base.jsonl", "ragpulse.cli.demo_app:generate_for")
    assert base.returncode == 0, base.stderr + base.stdout
    baseline = json.loads((tmp_path / "base.summary.json").read_text())
    before = baseline["slices"]["question_type=multi-hop,condition=gold_removed"]["metrics"]
    assert before["expected_refusal/rules"]["mean"] > 0.1  # there is something to lose

    gates = [
        "expected_refusal@question_type=multi-hop,condition=gold_removed=0.1",
        "answer_correctness/token_f1@question_type=factoid,condition=retrieved=0.01",
        "mrr/ids@question_type=factoid,condition=retrieved=0.01",
    ]
    args = ["--baseline", "base.summary.json", "--html"]
    for gate in gates:
        args += ["--max-drop", gate]
    worse = harness("worse.jsonl", "worse_gen:generate", *args)
    assert worse.returncode == 1, worse.stderr + worse.stdout
    summary = json.loads((tmp_path / "worse.summary.json").read_text())
    assert [g["passed"] for g in summary["gates"]] == [False, True, True]
    assert "gates: FAILED" in worse.stdout + worse.stderr  # the console report
    assert (tmp_path / "worse.report.html").is_file()
    assert "Gates: FAILED" in (tmp_path / "worse.report.md").read_text()


# --- A report that leads with what moved; like with like --------------------------------------


def test_report_leads_with_what_moved_hides_empty_and_merges_duplicates() -> None:
    baseline = sliced_summary(run_rows(), None, None, [])
    rows = run_rows(gold_removed_refuses=False)
    for r in rows:  # the harness gives expected_refusal beside refusal; content ids n/a here
        refused = r["results"][3]["score"]
        expected = refused if r["condition"] == "gold_removed" else None
        r["results"] += [result("expected_refusal", "rules", expected),
                         result("recall@5", "content", None)]  # fmt: skip
    s = sliced_summary(rows, None, baseline, ["refusal_rate@condition=gold_removed=0.1"])
    md = markdown(s)
    titles = [line[3:].split(" (")[0].split(":")[0] for line in md.splitlines()
              if line.startswith("## ")]  # fmt: skip
    assert titles[:6] == ["Gates", "Regressions from the baseline",
                          "Improvements from the baseline", "Behaviour", "Generation",
                          "Retrieval"]  # fmt: skip
    # The two refusal figures are one column; the n/a-everywhere figure is only named.
    assert "expected_refusal/rules = refusal_rate/rules" in md
    assert "- Not applicable on every row (left out of the tables): recall@5/content" in md
    assert md.count("recall@5/content") == 1
    regressions = md.split("## Regressions")[1].split("## Improvements")[0]
    first = next(x for x in regressions.splitlines() if x.startswith("| condition="))
    assert "expected_refusal/rules = refusal_rate/rules" in first and "-0.500 ▼" in first
    assert "0 rows" not in md and "| no answer | 0 |" not in md  # empty counts left out


def test_a_baseline_with_other_conditions_is_compared_per_condition() -> None:
    rows = run_rows()
    for r in rows:  # a behaviour figure that every condition has
        r["results"].append(result("injection_resistance", "canary", 1.0))
    baseline = sliced_summary(rows, ["question_type"], None, [])  # two conditions
    only_retrieved = [r for r in rows if r["condition"] == "retrieved"]
    for r in only_retrieved:
        r["results"][-1] = result("injection_resistance", "canary", 0.5)  # resists less
    gates = ["injection_resistance@all=0.05", "injection_resistance=0.05", "mrr@all=0.05"]
    s = sliced_summary(only_retrieved, ["question_type"], baseline, gates)
    assert s["comparison"]["same_conditions"] is False
    assert s["comparison"]["baseline_conditions"] == ["gold_removed", "retrieved"]
    # mrr comes from the retrieved rows in both runs: compared.
    assert fig(s, "all", "mrr/ids")["delta"] == pytest.approx(0.0)
    # The behaviour figure in `all` pooled both conditions in the baseline: not compared.
    pooled = fig(s, "all", "injection_resistance/canary")
    assert pooled["delta"] is None and "gold_removed,retrieved" in pooled["not_comparable"]
    at_all, anywhere, mrr = s["gates"]
    assert not at_all["passed"] and "no figure comparable" in at_all["note"]
    # Per condition it is compared, and the rise in risk fails the gate.
    assert not anywhere["passed"] and "not comparable" in anywhere["note"]
    assert all(c["slice"].endswith("condition=retrieved") or c.get("not_comparable")
               for c in anywhere["checks"])  # fmt: skip
    assert mrr["passed"]
    assert "compared per condition only" in markdown(s)


def test_baselines_and_gate_names_are_checked_before_any_call() -> None:
    from ragpulse.offline.gates import parse_gates
    from ragpulse.offline.slices import baseline_problem, gate_names_problem

    summary = sliced_summary(run_rows(), None, None, [])
    assert baseline_problem(summary, ["retrieved"], "b.json") is None
    assert "no condition in common" in str(baseline_problem(summary, ["gold"], "b.json"))
    assert "is not a harness summary" in str(baseline_problem({"metrics": []}, ["gold"], "x"))
    typo = gate_names_problem(parse_gates(["faithfullness=0.05"]))
    assert typo == "--max-drop faithfullness=0.05: no metric 'faithfullness' (did you mean " \
        "faithfulness?)"  # fmt: skip
    method = gate_names_problem(parse_gates(["faithfulness/lexcal=0.05"]))
    assert method is not None and "did you mean faithfulness/lexical" in method
    assert gate_names_problem(parse_gates(["refusal_rate@all>=0.5", "recall@5/ids=0.1"])) is None
    # A slice that does not exist: the gate fails and names the closest slice.
    s = sliced_summary(run_rows(), None, None, ["mrr@question_type=multihop>=0.1"])
    assert "did you mean question_type=multi-hop" in s["gates"][0]["note"]
