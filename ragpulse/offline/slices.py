"""Sliced summary of a harness run: per-slice means, behaviour rates, baseline deltas, gates.

A *slice* is a set of constraints on a row: ``all`` (none), ``question_type=multi-hop``
(one metadata key), ``condition=gold_removed`` or both crossed,
``question_type=multi-hop,condition=gold_removed``. Slice names use the same
``key=value[,key=value]`` text the ``--max-drop`` gates use, so a gate names a slice
exactly as the report prints it.

Gates (``--max-drop``) are read by :mod:`ragpulse.offline.gates` (the grammar is there); a
relative gate without a baseline is reported as not checked and does not fail (the first
run makes the baseline); a gate that matches no metric in any slice fails, so a typo
cannot pass silently.

Figures per slice (``metric/method``, each with mean, n, errors, not_applicable, group):
every evaluator result on the rows, except ``refusal``, which reads the wrong way round where
refusing is right and is reported as two rates instead: ``refusal_rate`` (share refused
among rows that should refuse: ``gold_removed``, ``irrelevant_only``, expected ``refuse``;
higher is better) and ``false_refusal_rate`` (share refused among the others; lower is
better). Joint: ``correct_given_recall5_hit`` / ``correct_given_recall5_miss``, answer
correctness on rows whose ``recall@5`` is 1 / below 1, which tells the retriever's misses
from the generator's.

Like with like: each figure is averaged over the conditions where it means something.
Retrieval and joint figures come from ``retrieved`` rows only (on ``gold`` recall is 1 by
construction, on ``gold_removed`` 0), in every slice. In ``all`` and the metadata slices,
generation (and other) figures come from ``retrieved`` rows too (the system as it runs);
each ``condition=...`` slice has its own. Behaviour figures come from the conditions that
test them (injection resistance from ``injected``, refusal rate from the rows that should
refuse, ...). Every figure records the conditions it was computed from
(``conditions``), and a baseline figure is compared only when it was computed from the
same ones: runs with other conditions are compared per condition, never pooled. Rows
written ``skipped`` (a condition the row lacked input for) are counted, never scored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ragpulse.offline.conditions import EXPECT_REFUSAL
from ragpulse.offline.gates import GateSpec, parse_gates

# A metadata key with more distinct values than this is not sliced by default (ids, free text).
MAX_DEFAULT_VALUES = 12
WORST_PER_SLICE = 5
_EPS = 1e-12

RETRIEVAL = ("recall@", "precision@", "hit@", "mrr", "map", "ndcg", "context_")
GENERATION = ("faithfulness", "answer_")
# Behaviour under the conditions; the injection detectors (injection/rules, ...) look at the
# documents, like the other metrics: their `all` is the retrieved rows, not the planted ones.
BEHAVIOUR = ("refusal", "injection_resistance", "counterfactual", "expected_refusal")
DERIVED = ("refusal_rate", "false_refusal_rate", "correct_given_recall5_hit",
           "correct_given_recall5_miss")  # fmt: skip
"""Figures the summary derives from evaluator results (gates may name them)."""
RETRIEVED = "retrieved"
NO_CONDITION = "(none)"  # rows scored without a condition: a recorded run, as it ran


def metric_group(metric: str) -> str:
    """retrieval / generation / behaviour / joint / other, by the metric's name."""
    if metric.startswith("correct_given_"):
        return "joint"
    if metric.startswith(BEHAVIOUR) or metric.endswith("refusal_rate"):
        return "behaviour"
    if metric.startswith(RETRIEVAL):
        return "retrieval"
    if metric.startswith(GENERATION):
        return "generation"
    return "other"


# --- Gates ----------------------------------------------------------------------------------


def gate_names_problem(gates: Sequence[GateSpec]) -> str | None:
    """One line for a gate naming a metric (or method) that no evaluator here has, with
    the closest names; None when every gate names a known figure."""
    from ragpulse.plugins import evaluator_names, metric_names
    from ragpulse.suggestions import did_you_mean

    metrics = [*metric_names(), *DERIVED]
    full = evaluator_names()
    for gate in gates:
        if gate.metric not in metrics:
            return f"--max-drop {gate.text}: no metric {gate.metric!r}" + did_you_mean(
                gate.metric, metrics
            )
        name = f"{gate.metric}/{gate.method}"
        if gate.method and gate.metric not in DERIVED and name not in full:
            return f"--max-drop {gate.text}: no method {name!r}" + did_you_mean(name, full)
    return None


def run_conditions(summary: Mapping[str, Any]) -> list[str]:
    """The conditions a summary's run had (read from its slices for older summaries)."""
    listed = summary.get("conditions")
    if isinstance(listed, list):
        return [str(c) for c in listed]
    slices = summary.get("slices")
    found = {
        str(info["where"]["condition"])
        for info in (slices.values() if isinstance(slices, Mapping) else [])
        if isinstance(info, Mapping)
        and isinstance(info.get("where"), Mapping)
        and "condition" in info["where"]
    }
    return sorted(found)


def baseline_problem(baseline: Any, conditions: Sequence[str], name: str) -> str | None:
    """Why ``baseline`` cannot be compared with a run of ``conditions`` (one line), or None."""
    if not isinstance(baseline, Mapping) or baseline.get("kind") != "sliced_summary":
        return (
            f"--baseline {name} is not a harness summary (the .summary.json that "
            "`ragpulse eval --generator` writes)"
        )
    before = run_conditions(baseline)
    if before and not set(before) & set(conditions):
        return (
            f"--baseline {name} ran conditions {','.join(before)}; this run "
            f"{','.join(conditions)}: no condition in common, nothing to compare"
        )
    return None


# --- Row helpers ----------------------------------------------------------------------------


def _quality(result: Mapping[str, Any], should_refuse: bool) -> float | None:
    """The score turned so that higher is better; refusing is good where refusal is expected."""
    score = result.get("score")
    if not isinstance(score, int | float) or isinstance(score, bool) or result.get("error"):
        return None
    if result.get("metric") == "refusal" and should_refuse:
        return float(score)
    if result.get("direction") == "lower_is_better":
        return 1.0 - float(score)
    return float(score)


def should_refuse(row: Mapping[str, Any]) -> bool:
    if row.get("condition") in EXPECT_REFUSAL:
        return True
    if row.get("expected_behavior") == "refuse":
        return True
    return row.get("expected_behavior") is None and row.get("is_answerable_label") is False


def _refused(result: Mapping[str, Any]) -> bool | None:
    if result.get("error"):
        return None
    score = result.get("score")
    if isinstance(score, int | float) and not isinstance(score, bool):
        return float(score) >= 0.5
    return None if result.get("label") in (None, "not_applicable") else result["label"] == "refusal"


def _results(row: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    results = row.get("results")
    if not isinstance(results, list):
        return []
    return [r for r in results if isinstance(r, Mapping) and isinstance(r.get("metric"), str)]


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | list | dict) and not value)


def missing_counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many rows lacked what the reference-based metrics (or any metric) need."""
    out = {
        "no_reference": 0,
        "no_reference_answers": 0,
        "no_reference_contexts": 0,
        "no_answer": 0,
        "no_contexts": 0,
        "row_errors": 0,
        "no_results": 0,
    }
    for row in rows:
        no_answers = _empty(row.get("reference_answers"))
        no_ctx = _empty(row.get("reference_contexts")) and _empty(row.get("reference_context_ids"))
        out["no_reference_answers"] += no_answers
        out["no_reference_contexts"] += no_ctx
        out["no_reference"] += no_answers and no_ctx and row.get("expected_behavior") is None
        out["no_answer"] += _empty(row.get("answer"))
        out["no_contexts"] += _empty(row.get("contexts"))
        out["row_errors"] += bool(row.get("error"))
        out["no_results"] += not _results(row)
    return out


# --- Slices ---------------------------------------------------------------------------------


def _scalar(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return None


def _metadata(row: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = row.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def default_slice_keys(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Metadata keys with 2..MAX_DEFAULT_VALUES distinct scalar values, in first-seen order."""
    values: dict[str, set[str]] = {}
    for row in rows:
        for key, value in _metadata(row).items():
            text = _scalar(value)
            if text is not None and key != "condition":
                values.setdefault(str(key), set()).add(text)
    return [k for k, v in values.items() if 2 <= len(v) <= MAX_DEFAULT_VALUES]


def slice_name(constraints: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in constraints.items()) or "all"


def _row_slices(
    row: Mapping[str, Any], keys: Sequence[str], by_condition: bool
) -> list[dict[str, str]]:
    meta = _metadata(row)
    condition = str(row.get("condition") or "(none)")
    out: list[dict[str, str]] = [{}]
    for key in keys:
        value = _scalar(meta.get(key)) if key in meta else "(missing)"
        out.append({key: value if value is not None else "(other)"})
        if by_condition:
            out.append({key: out[-1][key], "condition": condition})
    if by_condition:
        out.append({"condition": condition})
    return out


class _Acc:
    """Running sums of one figure (metric/method) in one slice."""

    __slots__ = ("conditions", "errors", "higher_is_better", "n", "not_applicable", "total")

    def __init__(self, higher_is_better: bool) -> None:
        self.n = self.errors = self.not_applicable = 0
        self.total = 0.0
        self.higher_is_better = higher_is_better
        self.conditions: set[str] = set()

    def add(self, value: float, condition: str) -> None:
        self.n += 1
        self.total += value
        self.conditions.add(condition)

    def out(self, metric: str, method: str) -> dict[str, Any]:
        return {
            "metric": metric,
            "method": method,
            "group": metric_group(metric),
            "mean": self.total / self.n if self.n else None,
            "n": self.n,
            "errors": self.errors,
            "not_applicable": self.not_applicable,
            "higher_is_better": self.higher_is_better,
            "conditions": sorted(self.conditions),
        }


def in_scope(group: str, row_condition: str, condition_slice: bool) -> bool:
    """Whether a row of ``row_condition`` counts towards a figure of ``group`` in a slice
    (``condition_slice``: one constrained to a condition). See the module docstring."""
    as_it_runs = row_condition in (RETRIEVED, NO_CONDITION)
    if group in ("retrieval", "joint"):
        return as_it_runs
    if group == "behaviour":
        return True
    return as_it_runs or condition_slice


def _row_figures(row: Mapping[str, Any]) -> Iterable[tuple[str, str, bool, float | None, str]]:
    """(metric, method, higher_is_better, value or None, status) for every figure of a row.

    status: ``ok``, ``error`` or ``not_applicable``. Besides the evaluators' own results:
    ``refusal`` becomes ``refusal_rate`` (share refused where refusing is right: missing-gold
    conditions, expected ``refuse``) or ``false_refusal_rate`` (elsewhere), and joint figures
    (correctness when retrieval found every gold document in the top 5, or not).
    """
    results = _results(row)
    refuse = should_refuse(row)
    recall5: float | None = None
    for r in results:
        metric, method = r["metric"], str(r.get("method", "?"))
        higher = r.get("direction") != "lower_is_better"
        score = r.get("score")
        if r.get("error"):
            yield metric, method, higher, None, "error"
            continue
        if not isinstance(score, int | float) or isinstance(score, bool):
            yield metric, method, higher, None, "not_applicable"
            continue
        if metric == "refusal":
            # The raw refusal score reads the wrong way round where refusing is right, so it
            # is reported only as these two rates, each with its own direction.
            refused = _refused(r)
            if refused is not None:
                name = "refusal_rate" if refuse else "false_refusal_rate"
                yield name, method, refuse, float(refused), "ok"
            continue
        yield metric, method, higher, float(score), "ok"
        if metric == "recall@5" and recall5 is None:
            recall5 = float(score)
    if recall5 is None:
        return
    hit = recall5 >= 1.0 - _EPS
    for r in results:
        if r["metric"] == "answer_correctness" and not r.get("error"):
            score = r.get("score")
            if isinstance(score, int | float) and not isinstance(score, bool):
                name = "correct_given_recall5_hit" if hit else "correct_given_recall5_miss"
                yield name, str(r.get("method", "?")), True, float(score), "ok"


def _row_quality(row: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """How well the row went, and the name of its worst result.

    Where refusing is right (missing gold, expected ``refuse``) only the refusal counts: an
    answer invented from irrelevant documents is the failure, low relevance is expected.
    Elsewhere, the mean quality over the row's scored results.
    """
    refuse = should_refuse(row)
    results = _results(row)
    if refuse:
        for metric in ("expected_refusal", "refusal"):
            for r in results:
                if r["metric"] == metric and (q := _quality(r, True)) is not None:
                    return q, f"{metric}/{r.get('method', '?')}"
    scored = [
        (q, f"{r['metric']}/{r.get('method', '?')}")
        for r in results
        if (q := _quality(r, refuse)) is not None
    ]
    if not scored:
        return None, None
    worst = min(scored, key=lambda x: x[0])
    return sum(q for q, _ in scored) / len(scored), worst[1]


def sliced_summary(
    rows: list[dict[str, Any]],
    slice_by: list[str] | None,
    baseline: dict[str, Any] | None,
    max_drop: list[str],
    conditions: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Per-slice figures of a harness run, compared with ``baseline`` and gated by ``max_drop``.

    ``conditions``: the run's (default: those its rows carry). Raises ValueError (naming
    the item) for a gate that cannot be parsed, before any work.
    """
    gates = parse_gates(max_drop)
    skipped = [row for row in rows if row.get("skipped")]
    rows = [row for row in rows if not row.get("skipped")]
    keys = list(slice_by) if slice_by else default_slice_keys(rows)
    by_condition = any(row.get("condition") for row in rows)

    slices: dict[str, dict[str, Any]] = {}
    accs: dict[str, dict[tuple[str, str], _Acc]] = {}
    members: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        figures = [(*f, metric_group(f[0])) for f in _row_figures(row)]
        condition = str(row.get("condition") or NO_CONDITION)
        for constraints in _row_slices(row, keys, by_condition):
            name = slice_name(constraints)
            if name not in slices:
                slices[name] = {"name": name, "where": constraints}
                accs[name], members[name] = {}, []
            members[name].append(index)
            acc = accs[name]
            condition_slice = "condition" in constraints
            for metric, method, higher, value, status, group in figures:
                if not in_scope(group, condition, condition_slice):
                    continue
                a = acc.setdefault((metric, method), _Acc(higher))
                if status == "error":
                    a.errors += 1
                    a.conditions.add(condition)
                elif status == "not_applicable":
                    a.not_applicable += 1
                elif value is not None:
                    a.add(value, condition)

    qualities = [_row_quality(row) for row in rows]
    for name, info in slices.items():
        picked = [rows[i] for i in members[name]]
        info["count"] = len(picked)
        info["missing"] = missing_counts(picked)
        info["metrics"] = {
            f"{m}/{meth}": a.out(m, meth) for (m, meth), a in sorted(accs[name].items())
        }
        info["worst"] = _worst(rows, members[name], qualities)

    ordered = dict(sorted(slices.items(), key=lambda kv: (len(kv[1]["where"]), kv[0])))
    if conditions is None:
        conditions = sorted({str(r.get("condition")) for r in [*rows, *skipped]
                             if r.get("condition")})  # fmt: skip
    comparison = _add_deltas(ordered, baseline, conditions) if baseline is not None else None
    checked = [_check_gate(g, ordered, baseline is not None) for g in gates]
    return {
        "kind": "sliced_summary",
        "rows": len(rows),
        "conditions": list(conditions),
        "slice_by": keys,
        "by_condition": by_condition,
        "missing": missing_counts(rows),
        "skipped": skipped_counts(skipped),
        "has_baseline": baseline is not None,
        "comparison": comparison,
        "slices": ordered,
        "gates": checked,
        "passed": all(g["passed"] for g in checked),
    }


def skipped_counts(skipped: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Cases not generated: how many, per condition and reason."""
    by: dict[str, dict[str, int]] = {}
    for row in skipped:
        reasons = by.setdefault(str(row.get("condition") or NO_CONDITION), {})
        reasons[str(row["skipped"])] = reasons.get(str(row["skipped"]), 0) + 1
    return {"cases": len(skipped), "by_condition": by}


def _worst(
    rows: Sequence[Mapping[str, Any]],
    indices: Sequence[int],
    qualities: Sequence[tuple[float | None, str | None]],
) -> list[dict[str, Any]]:
    # Error rows (the generator raised or timed out) come first: nothing could be scored.
    failed = [i for i in indices if rows[i].get("error")]
    scored = [i for i in indices if qualities[i][0] is not None and not rows[i].get("error")]
    scored.sort(key=lambda i: (qualities[i][0] or 0.0, i))
    out = []
    for i in (failed + scored)[:WORST_PER_SLICE]:
        row = rows[i]
        line = row.get("line")
        out.append(
            {
                "row": line if isinstance(line, int) and not isinstance(line, bool) else i + 1,
                "question_id": row.get("question_id"),
                "question": str(row.get("question") or ""),
                "condition": row.get("condition"),
                "quality": qualities[i][0],
                "worst_metric": "error" if row.get("error") else qualities[i][1],
                "error": str(row["error"]) if row.get("error") else None,
            }
        )
    return out


def _scope(fig: Mapping[str, Any], where: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The conditions a figure was computed from; for a summary that predates the record,
    the slice's own condition, else unknown (None)."""
    listed = fig.get("conditions")
    if isinstance(listed, list):
        return tuple(sorted(str(c) for c in listed))
    if isinstance(where, Mapping) and "condition" in where:
        return (str(where["condition"]),)
    return None


def _add_deltas(
    slices: Mapping[str, dict[str, Any]], baseline: Mapping[str, Any], conditions: Sequence[str]
) -> dict[str, Any]:
    """Baseline mean and direction-aware change (positive = better) on every figure that
    was computed from the same conditions in both runs; the others say why not."""
    base_slices = baseline.get("slices")
    base_slices = base_slices if isinstance(base_slices, Mapping) else {}
    compared = refused = 0
    for name, info in slices.items():
        base_info = base_slices.get(name) or {}
        base_metrics = base_info.get("metrics") or {}
        for key, fig in info["metrics"].items():
            base = base_metrics.get(key) or {}
            before = base.get("mean")
            fig["baseline_mean"] = before
            fig["delta"] = fig["change"] = None
            if not isinstance(before, int | float) or fig["mean"] is None:
                continue
            was, now = _scope(base, base_info.get("where") or {}), tuple(fig["conditions"])
            if was != now:
                fig["not_comparable"] = (
                    f"baseline from {','.join(was) if was else 'unknown conditions'}, "
                    f"now from {','.join(now)}"
                )
                refused += 1
                continue
            compared += 1
            delta = fig["mean"] - before
            fig["delta"] = delta
            fig["change"] = delta if fig["higher_is_better"] else -delta
    before_conditions = run_conditions(baseline)
    return {
        "baseline_conditions": before_conditions,
        "conditions": list(conditions),
        "same_conditions": sorted(before_conditions) == sorted(conditions),
        "compared": compared,
        "not_comparable": refused,
    }


def _check_gate(
    gate: GateSpec, slices: Mapping[str, Mapping[str, Any]], has_baseline: bool
) -> dict[str, Any]:
    checks: list[dict[str, Any]] = []
    for name, info in slices.items():
        if not gate.matches_slice(info["where"]):
            continue
        for key, fig in info["metrics"].items():
            if gate.matches_metric(fig["metric"], fig["method"]):
                checks.append(_check_one(gate, name, key, fig))
    counted = [c for c in checks if not c.get("not_comparable")]
    out: dict[str, Any] = {
        "gate": gate.text,
        "metric": gate.metric,
        "method": gate.method,
        "slice": None if gate.where is None else slice_name(gate.where),
        "kind": gate.kind,
        "value": gate.value,
        "checks": checks,
        "note": None,
    }
    if not checks:
        out["note"] = "matched no metric in any slice" + _near_miss(gate, slices)
        out["passed"] = False
    elif gate.kind == "max_drop" and not has_baseline:
        out["note"] = "not checked: no baseline (this run can be the baseline)"
        out["passed"] = True
    elif not counted:
        out["note"] = (
            "no figure comparable with the baseline (it pooled other conditions); name a "
            "condition slice, e.g. @condition=retrieved"
        )
        out["passed"] = False
    else:
        out["passed"] = all(c["passed"] for c in counted)
        failed = [c for c in counted if not c["passed"]]
        notes = [f"{len(failed)} of {len(counted)} checks failed"] * bool(failed)
        if len(counted) < len(checks):
            notes.append(f"{len(checks) - len(counted)} not comparable (other conditions)")
        out["note"] = "; ".join(notes) or None
    return out


def _near_miss(gate: GateSpec, slices: Mapping[str, Mapping[str, Any]]) -> str:
    """Why a gate matched nothing: the closest slice (when the metric exists) or metric."""
    from ragpulse.suggestions import did_you_mean

    figures = {(f["metric"], f["method"]) for i in slices.values() for f in i["metrics"].values()}
    if any(gate.matches_metric(m, meth) for m, meth in figures):
        name = slice_name(gate.where or {})
        return f": no slice {name!r}" + did_you_mean(name, slices)
    return f": no figure {gate.metric!r}" + did_you_mean(gate.metric, {m for m, _ in figures})


def _check_one(gate: GateSpec, slice_: str, key: str, fig: Mapping[str, Any]) -> dict[str, Any]:
    current = fig["mean"]
    check: dict[str, Any] = {"slice": slice_, "figure": key, "current": current, "passed": True}
    if gate.kind == "max_drop":
        before = fig.get("baseline_mean")
        check["baseline"] = before
        if fig.get("not_comparable"):
            check["not_comparable"] = True
            check["note"] = f"not comparable: {fig['not_comparable']}"
        elif before is None:
            check["note"] = "not in baseline"
        elif current is None:
            check["passed"] = False
            check["note"] = "no score now"
        else:
            drop = (before - current) if fig["higher_is_better"] else (current - before)
            check["drop"] = drop
            check["passed"] = drop <= gate.value + _EPS
    elif current is None:
        check["passed"] = False
        check["note"] = "no score"
    elif gate.kind == "min":
        check["passed"] = current >= gate.value - _EPS
    else:
        check["passed"] = current <= gate.value + _EPS
    return check
