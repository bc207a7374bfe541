"""Measure injection/rules on the development split and print a table.

Each row becomes a RagRecord: ``where=question`` rows are the question,
``where=document`` rows are the only document behind a neutral question, so
the numbers show what the evaluator sees in production. Data:
injection_dev.jsonl in ../shared/data/dev (or $RAGPULSE_DEV_DATA).

``injection/probe`` (our own model, its trained threshold) is measured beside the
rules when the models extra is installed; ``--rules-only`` skips it.

Each evaluator's false-positive rate is also measured on ordinary benign short
traffic (greetings, thanks, "help", "test", help-desk questions, manual text):
``bench/benign_short_traffic.jsonl``, hand-written for ragpulse and never trained
on (``--short-traffic PATH`` for another file, ``--short-traffic ''`` to skip). The larger
benign traffic set (934 rows, per split) is measured by ``bench/injection_benign.py``.

    .venv/bin/python bench/injection_dev.py [--threshold 0.5] [--data PATH] [--misses] [--rules-only]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragpulse.evaluators.base import Evaluator
from ragpulse.evaluators.injection.rules import InjectionRules
from ragpulse.record import Document, RagRecord

DEV = Path(
    os.environ.get("RAGPULSE_DEV_DATA") or Path(__file__).resolve().parents[2] / "shared/data/dev"
)
DEFAULT_DATA = DEV / "injection_dev.jsonl"
SHORT_TRAFFIC = Path(__file__).resolve().parent / "benign_short_traffic.jsonl"
NEUTRAL_QUESTION = "Summarize the key facts in the provided document."


@dataclass
class Counts:
    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0

    def add(self, label: int, predicted: bool) -> None:
        if label:
            self.tp += predicted
            self.fn += not predicted
        else:
            self.fp += predicted
            self.tn += not predicted

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def _fmt(x: float | None) -> str:
    return "   -  " if x is None else f"{x:6.3f}"


def to_record(row: dict[str, Any]) -> RagRecord:
    text = str(row["text"])
    if row["where"] == "question":
        return RagRecord(trace_id=str(row["id"]), question=text)
    return RagRecord(
        trace_id=str(row["id"]), question=NEUTRAL_QUESTION, documents=[Document(content=text)]
    )


def load(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def metrics(c: Counts) -> tuple[float | None, float | None, float | None, float | None]:
    precision = _ratio(c.tp, c.tp + c.fp)
    recall = _ratio(c.tp, c.tp + c.fn)
    f1 = (
        2 * precision * recall / (precision + recall)
        if precision is not None and recall is not None and precision + recall > 0
        else None
    )
    fpr = _ratio(c.fp, c.fp + c.tn)
    return precision, recall, f1, fpr


def table(rows: Iterable[tuple[str, Counts]]) -> str:
    lines = [f"{'slice':<12} {'n':>4} {'prec':>6} {'recall':>6} {'f1':>6} {'FPR':>6}  tp/fp/fn/tn"]
    for name, c in rows:
        p, r, f, fpr = metrics(c)
        lines.append(
            f"{name:<12} {c.n:>4} {_fmt(p)} {_fmt(r)} {_fmt(f)} {_fmt(fpr)}  "
            f"{c.tp}/{c.fp}/{c.fn}/{c.tn}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threshold", type=float, default=0.5, help="of injection/rules")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--misses", action="store_true", help="list false positives/negatives")
    parser.add_argument("--rules-only", action="store_true", help="skip injection/probe")
    parser.add_argument(
        "--short-traffic", default=str(SHORT_TRAFFIC), help="benign short-traffic set ('' skips)"
    )
    args = parser.parse_args(argv)
    if not args.data.is_file():
        print(
            f"data file not found: {args.data} (see /work/shared/data/README.md)", file=sys.stderr
        )
        return 2

    rows = load(args.data)
    evaluators: list[Evaluator] = [InjectionRules(threshold=args.threshold)]
    if not args.rules_only:
        evaluators += _probe()
    for i, evaluator in enumerate(evaluators):
        print("\n" * (i > 0) + measure(evaluator, rows, args.data.name, args.misses))
    if args.short_traffic:
        benign = load(Path(args.short_traffic))
        for evaluator in evaluators:
            print("\n" + false_alarms(evaluator, benign, Path(args.short_traffic).name))
    return 0


def false_alarms(evaluator: Evaluator, rows: list[dict[str, Any]], name: str) -> str:
    """FPR of one evaluator on an all-benign set, per location, with the flagged rows."""
    results = evaluator.evaluate([to_record(r) for r in rows])
    by_where: dict[str, Counts] = defaultdict(Counts)
    flagged = []
    for row, res in zip(rows, results, strict=True):
        predicted = res.label == "injection"
        by_where[str(row["where"])].add(0, predicted)
        if predicted:
            flagged.append(f"  FP score={res.score:.2f} {str(row['text'])[:80]!r}")
    total = Counts(fp=sum(c.fp for c in by_where.values()), tn=sum(c.tn for c in by_where.values()))
    top = max((r.score or 0.0) for r in results)
    lines = [f"{evaluator.name} on {name} (benign only): max score {top:.3f}"]
    for where, c in [("overall", total), *sorted(by_where.items())]:
        lines.append(f"  {where:<9} n={c.n:<4} FPR {_fmt(metrics(c)[3])} ({c.fp} flagged)")
    return "\n".join(lines + flagged)


def _probe() -> list[Evaluator]:
    """injection/probe with its shipped weights, or nothing (and why) without the models extra."""
    from ragpulse.evaluators.injection.probe import InjectionProbe

    why = InjectionProbe.missing()
    if why is not None:
        print(f"injection/probe skipped: {why}\n")
        return []
    probe = InjectionProbe()
    from ragpulse.plugin_context import PluginContext

    probe.load(PluginContext())
    return [probe]


def measure(evaluator: Evaluator, rows: list[dict[str, Any]], name: str, misses: bool) -> str:
    """The table of one evaluator on the dev rows (batches of 32, as the model tier batches)."""
    records = [to_record(r) for r in rows]
    start = time.perf_counter()
    results = []
    for i in range(0, len(records), 32):
        results += evaluator.evaluate(records[i : i + 32])
    elapsed = time.perf_counter() - start

    overall = Counts()
    by_where: dict[str, Counts] = defaultdict(Counts)
    by_variant: dict[str, Counts] = defaultdict(Counts)
    missed: list[str] = []
    for row, res in zip(rows, results, strict=True):
        label = int(row["label"])
        predicted = res.label == "injection"
        overall.add(label, predicted)
        by_where[str(row["where"])].add(label, predicted)
        if label:
            meta = row.get("meta") or {}
            variant = str(meta.get("injection_variant", "unknown"))
            by_variant[variant].add(label, predicted)
        if predicted != bool(label):
            kind = "FP" if predicted else "FN"
            text = str(row["text"]).replace("\n", " ")[:160]
            missed.append(f"{kind} {row['id']} score={res.score:.2f} {res.explanation} | {text}")

    threshold = getattr(evaluator, "threshold", None) or getattr(
        evaluator.options, "threshold", None
    )
    out = [
        f"{evaluator.name} on {name}: {len(rows)} rows, threshold {threshold}",
        f"{elapsed * 1000 / max(1, len(rows)):.3f} ms per record, AUROC {_auroc(rows, results)}\n",
        table([("overall", overall), *sorted(by_where.items())]),
        "\nrecall per injection_variant",
        f"{'variant':<32} {'n':>4} {'recall':>6}",
    ]
    for variant, c in sorted(by_variant.items(), key=lambda kv: (-(metrics(kv[1])[1] or 0), kv[0])):
        out.append(f"{variant:<32} {c.n:>4} {_fmt(metrics(c)[1])}")
    if misses:
        out += ["", *missed]
    return "\n".join(out)


def _auroc(rows: list[dict[str, Any]], results: list[Any]) -> str:
    """Threshold-free ranking quality: P(an injection row outscores a benign one), ties halved."""
    pos = [r.score or 0.0 for r, row in zip(results, rows, strict=True) if row["label"]]
    neg = [r.score or 0.0 for r, row in zip(results, rows, strict=True) if not row["label"]]
    if not pos or not neg:
        return "-"
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return f"{wins / (len(pos) * len(neg)):.3f}"


if __name__ == "__main__":
    raise SystemExit(main())
