"""Synthetic harness output rows (the shape ``ragpulse eval --conditions`` writes), so
that every expected number of a sliced summary can be worked out by hand."""

from __future__ import annotations

from typing import Any


def result(metric: str, method: str, score: float | None, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "metric": metric,
        "method": method,
        "score": score,
        "label": kw.pop("label", None),
        "error": kw.pop("error", None),
        "direction": kw.pop("direction", "higher_is_better"),
    }
    return out


def row(
    qid: str, qtype: str, condition: str, mrr: float, correct: float, refused: bool, **kw: Any
) -> dict[str, Any]:
    recall5 = kw.pop("recall5", 1.0)
    return {
        "question_id": qid,
        "question": f"question {qid}?",
        "reference_answers": kw.pop("reference_answers", ["x"]),
        "reference_context_ids": kw.pop("reference_context_ids", ["d1"]),
        "answer": kw.pop("answer", "an answer"),
        "contexts": kw.pop("contexts", ["a doc"]),
        "metadata": {"question_type": qtype, "domain": kw.pop("domain", "demo"), "id": qid},
        "condition": condition,
        "results": [
            result("mrr", "ids", mrr),
            result("recall@5", "ids", recall5),
            result("answer_correctness", "token_f1", correct),
            result(
                "refusal",
                "rules",
                1.0 if refused else 0.0,
                label="refusal" if refused else "answered",
                direction="lower_is_better",
            ),
            result("injection", "rules", kw.pop("injection", 0.0), direction="lower_is_better"),
        ],
        **kw,
    }


def run_rows(multi_hop_mrr: float = 0.8, gold_removed_refuses: bool = True) -> list[dict[str, Any]]:
    rows = []
    for i in range(4):
        rows.append(row(f"f{i}", "factoid", "retrieved", 1.0, 0.9, False))
        rows.append(row(f"m{i}", "multi-hop", "retrieved", multi_hop_mrr, 0.6, False))
        rows.append(row(f"fg{i}", "factoid", "gold_removed", 0.0, 0.0, True, recall5=0.0))
        rows.append(
            row(f"mg{i}", "multi-hop", "gold_removed", 0.0, 0.0, gold_removed_refuses, recall5=0.0)
        )
    return rows
