"""Build the judge calibration set shipped in ragpulse/calibration_data/ (run once, commit).

Small, label-balanced, seeded slices of the labelled dev sets (never the reserved
evaluation sets listed in the data README), one JSONL per judged metric. Rows are
interleaved (positive, negative, next source, ...) so that ``ragpulse judge
calibrate --limit N`` keeps the first N rows and stays balanced. Rows longer than
MAX_CHARS are left out so that a calibration run stays cheap and fits small
judges' context windows. Writes MANIFEST.json (version, seed, rows, sha256 per
file); ``ragpulse judge calibrate`` checks the hashes before it spends a call.

    .venv/bin/python bench/calibration_set.py [--dev ../shared/data/dev]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
from itertools import zip_longest
from pathlib import Path
from typing import Any

SEED = 20261124
VERSION = "2026-11-24.1"
MAX_CHARS = 2500
OUT = Path(__file__).resolve().parents[1] / "ragpulse" / "calibration_data"
DEV = Path(
    os.environ.get("RAGPULSE_DEV_DATA") or Path(__file__).resolve().parents[2] / "shared/data/dev"
)

# metric -> [(dev file, rows per label, split by 'where')]. injection_dev's benign rows
# are all documents: its positives are split evenly between question and document.
PLAN: dict[str, list[tuple[str, int, bool]]] = {
    "faithfulness": [
        ("faithfulness_summedits_dev.jsonl", 4, False),
        ("faithfulness_halueval_dialogue.jsonl", 4, False),
        ("faithfulness_ares_nq.jsonl", 4, False),
    ],
    "context_relevance": [("context_relevance_ares_nq.jsonl", 12, False)],
    "answer_relevance": [("answer_relevance_ares_nq.jsonl", 12, False)],
    "injection": [("injection_dev.jsonl", 12, True)],
}


def to_row(raw: dict[str, Any], file: str) -> dict[str, Any]:
    """The calibration row: what the judge sees as a RagRecord, plus the label."""
    row: dict[str, Any] = {
        "id": f"{file.removesuffix('.jsonl')}:{raw['id']}",
        "source": raw.get("source", file),
        "label": int(raw["label"]),
        "question": raw.get("question", ""),
        "contexts": raw.get("contexts") or ([raw["context"]] if raw.get("context") else []),
        "answer": raw.get("answer", ""),
    }
    if file.startswith("context_relevance"):
        row["answer"] = ""  # the judge reads question and documents only
    if file.startswith("answer_relevance"):
        row["contexts"] = []  # the judge reads question and answer only
    if "where" in raw:  # injection: the text is the question or the one document
        row["question"] = raw["text"] if raw["where"] == "question" else ""
        row["contexts"] = [raw["text"]] if raw["where"] == "document" else []
        row["where"] = raw["where"]
    return row


def size(row: dict[str, Any]) -> int:
    return len(row["question"]) + len(row["answer"]) + sum(map(len, row["contexts"]))


def pick(dev: Path, file: str, per_label: int, by_where: bool) -> list[list[dict[str, Any]]]:
    """One list per (label, where) cell, positives first, each sampled with the seed;
    ``per_label`` rows per label, split evenly over the places that label occurs in."""
    rows = [to_row(json.loads(line), file) for line in (dev / file).open(encoding="utf-8")]
    rows = sorted((r for r in rows if size(r) <= MAX_CHARS), key=lambda r: r["id"])
    cells: list[list[dict[str, Any]]] = []
    for label in (1, 0):
        labelled = [r for r in rows if r["label"] == label]
        wheres: list[str | None] = [None]
        if by_where:
            wheres = sorted({r["where"] for r in labelled})
        per_cell = per_label // len(wheres)
        for where in wheres:
            pool = [r for r in labelled if where is None or r["where"] == where]
            if len(pool) < per_cell:
                raise SystemExit(f"{file}: only {len(pool)} rows for label {label} {where or ''}")
            cells.append(random.Random(f"{SEED}:{file}:{label}:{where}").sample(pool, per_cell))
    return cells


def interleave(cells: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [r for group in zip_longest(*cells) for r in group if r is not None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev", type=Path, default=DEV, help="the dev data folder")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    files: dict[str, Any] = {}
    for metric, plan in PLAN.items():
        cells = [c for file, n, by_where in plan for c in pick(args.dev, file, n, by_where)]
        # Positive, negative, positive, ...: each label's cells (sources, places) in turn.
        by_label = [interleave([c for c in cells if c[0]["label"] == label]) for label in (1, 0)]
        rows = interleave(by_label)
        text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)
        (OUT / f"{metric}.jsonl").write_text(text, encoding="utf-8")
        files[f"{metric}.jsonl"] = {
            "rows": len(rows),
            "positives": sum(r["label"] for r in rows),
            "sources": sorted({r["source"] for r in rows}),
            "sha256": hashlib.sha256(text.encode()).hexdigest(),
        }
        print(f"{metric}: {len(rows)} rows, {files[f'{metric}.jsonl']['positives']} positive")
    manifest = {"version": VERSION, "seed": SEED, "max_chars": MAX_CHARS, "files": files}
    (OUT / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
