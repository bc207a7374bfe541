"""How well do the lexical metrics separate the labelled dev rows?

Prints AUROC and the best balanced accuracy (threshold chosen on the same rows,
so optimistic) of faithfulness/lexical on the faithfulness sets,
context_relevance/lexical and answer_relevance/lexical on the ARES relevance
sets. Data: ../shared/data/dev (or $RAGPULSE_DEV_DATA).

With the models extra, faithfulness/probe (shipped weights, shipped threshold)
is measured beside faithfulness/lexical on the SAME rows (those both score):
AUROC, balanced accuracy at the probe's shipped threshold, and the best
balanced accuracy of each. SummEdits and the HaluEval dialogue dev rows are
held out of the probe's training; the shipped probe WAS trained on the ARES NQ
rows, so its ARES line is in-sample (the card gives the grouped-CV figure).
``--no-probe`` skips it.

    .venv/bin/python bench/lexical_dev.py [--no-probe]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from ragpulse.evaluators.answer_relevance.lexical import LexicalAnswerRelevance
from ragpulse.evaluators.base import Evaluator
from ragpulse.evaluators.context_relevance.lexical import LexicalContextRelevance
from ragpulse.evaluators.faithfulness.lexical import LexicalFaithfulness
from ragpulse.record import Document, RagRecord

DEV = Path(
    os.environ.get("RAGPULSE_DEV_DATA") or Path(__file__).resolve().parents[2] / "shared/data/dev"
)

SETS: list[tuple[str, Evaluator]] = [
    ("faithfulness_summedits_dev.jsonl", LexicalFaithfulness()),
    ("faithfulness_halueval_dialogue.jsonl", LexicalFaithfulness()),
    ("faithfulness_ares_nq.jsonl", LexicalFaithfulness()),
    ("context_relevance_ares_nq.jsonl", LexicalContextRelevance()),
    ("answer_relevance_ares_nq.jsonl", LexicalAnswerRelevance()),
]


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Probability that a positive outscores a negative (ties count half)."""
    order = scores.argsort(kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    # Average ranks over ties.
    i = 0
    while i < len(scores):
        j = i
        while j + 1 < len(scores) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def best_balanced_accuracy(scores: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    best = (0.0, 0.0)
    for t in np.unique(scores):
        pred = scores >= t
        tpr = (pred & (labels == 1)).sum() / max(1, (labels == 1).sum())
        tnr = (~pred & (labels == 0)).sum() / max(1, (labels == 0).sum())
        best = max(best, ((tpr + tnr) / 2, float(t)))
    return best


def record(row: dict) -> RagRecord:
    contexts = row.get("contexts") or ([row["context"]] if "context" in row else [])
    return RagRecord(
        question=row.get("question", ""),
        documents=[Document(content=c) for c in contexts],
        answer=row.get("answer", ""),
    )


def balanced_accuracy(scores: np.ndarray, labels: np.ndarray, t: float) -> float:
    pred = scores >= t
    return float((pred[labels == 1].mean() + (~pred[labels == 0]).mean()) / 2)


PROBE_SETS = {
    "faithfulness_summedits_dev.jsonl": "held out",
    "faithfulness_halueval_dialogue.jsonl": "held out",
    "faithfulness_ares_nq.jsonl": "IN TRAINING (card: grouped CV)",
}


def probe_vs_lexical() -> None:
    """faithfulness/probe beside faithfulness/lexical on the rows both of them score."""
    from ragpulse.evaluators.faithfulness.probe import FaithfulnessProbe

    why = FaithfulnessProbe.missing()
    if why is not None:
        print(f"\nfaithfulness/probe skipped: {why}")
        return
    probe = FaithfulnessProbe()
    from ragpulse.plugin_context import PluginContext

    probe.load(PluginContext())
    print(f"\nfaithfulness/probe (threshold {probe.threshold}) vs faithfulness/lexical, same rows")
    print(
        f"{'set':38} {'protocol':31} {'method':8} {'n':>5} {'AUROC':>6} {'bal@thr':>7} {'best':>6}"
    )
    for name, protocol in PROBE_SETS.items():
        rows = [json.loads(line) for line in (DEV / name).open(encoding="utf-8")]
        records = [record(r) for r in rows]
        lex = LexicalFaithfulness().evaluate(records)
        prb: list = []
        for i in range(0, len(records), 64):
            prb += probe.evaluate(records[i : i + 64])
        keep = [
            i for i, (a, b) in enumerate(zip(lex, prb, strict=True))
            if a.score is not None and b.score is not None
        ]  # fmt: skip
        labels = np.array([rows[i]["label"] for i in keep], dtype=int)
        for method, res in (("probe", prb), ("lexical", lex)):
            scores = np.array([res[i].score for i in keep], dtype=float)
            at = f"{balanced_accuracy(scores, labels, probe.threshold):7.3f}"
            print(
                f"{name:38} {protocol:31} {method:8} {len(keep):5d} {auroc(scores, labels):6.3f} "
                f"{at if method == 'probe' else '      -'} "
                f"{best_balanced_accuracy(scores, labels)[0]:6.3f}"
            )


def main() -> None:
    if not DEV.is_dir():
        print(f"dev data not found at {DEV}; set RAGPULSE_DEV_DATA", file=sys.stderr)
        raise SystemExit(2)
    print(f"{'set':40} {'evaluator':28} {'n':>5} {'AUROC':>6} {'bal.acc':>7} {'@thr':>5}")
    for name, evaluator in SETS:
        rows = [json.loads(line) for line in (DEV / name).open(encoding="utf-8")]
        results = evaluator.evaluate([record(r) for r in rows])
        pairs = [(r.score, row["label"]) for r, row in zip(results, rows, strict=True)]
        pairs = [(s, y) for s, y in pairs if s is not None]
        scores = np.array([s for s, _ in pairs], dtype=float)
        labels = np.array([y for _, y in pairs], dtype=int)
        bal, thr = best_balanced_accuracy(scores, labels)
        print(
            f"{name:40} {evaluator.name:28} {len(pairs):5d} "
            f"{auroc(scores, labels):6.3f} {bal:7.3f} {thr:5.2f}"
        )
    if "--no-probe" not in sys.argv[1:]:
        probe_vs_lexical()


if __name__ == "__main__":
    main()
