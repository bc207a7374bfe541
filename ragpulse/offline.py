"""Offline scoring of JSONL rows ({"question", "contexts", "answer", ...}).

Each input line comes back with ``results`` added; extra keys pass through.
A line that is not a JSON object is written back as
``{"line": n, "raw": ..., "error": ...}`` so the output never silently loses a row.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragpulse import safe_json
from ragpulse.evaluation import evaluate_records
from ragpulse.evaluators.base import Evaluator
from ragpulse.exporters.jsonl import result_dict
from ragpulse.record import Document, EvalResult, RagRecord


def row_to_record(row: dict[str, Any], line: int) -> RagRecord:
    """Accepts ``contexts`` (or ``documents``) as strings or {id, content|text, score, metadata}."""
    raw_docs = row.get("contexts", row.get("documents")) or []
    if isinstance(raw_docs, str):
        raw_docs = [raw_docs]
    documents = []
    for i, d in enumerate(raw_docs):
        if isinstance(d, dict):
            metadata = d.get("metadata")
            documents.append(
                Document(
                    id=str(d["id"]) if d.get("id") is not None else None,
                    content=str(d.get("content", d.get("text", ""))),
                    score=d.get("score") if isinstance(d.get("score"), int | float) else None,
                    metadata=metadata if isinstance(metadata, dict) else {},
                )
            )
        else:
            documents.append(Document(id=str(i), content=str(d)))
    return RagRecord(
        trace_id=str(row.get("trace_id", "")),
        span_id=str(row.get("span_id", "")),
        route=row.get("route") if isinstance(row.get("route"), str) else None,
        question=str(row.get("question") or ""),
        documents=documents,
        answer=str(row.get("answer") or ""),
        attributes={"line": line},
    )


@dataclass
class ParsedLine:
    line: int
    row: dict[str, Any] | None
    error: str | None = None
    raw: str = ""


def parse_lines(lines: Iterable[str]) -> Iterator[ParsedLine]:
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            row = safe_json.loads(raw)  # bounded nesting: a deep line is a bad row, not a crash
        except ValueError as exc:
            yield ParsedLine(n, None, f"invalid JSON: {exc}", raw[:1000])
            continue
        if not isinstance(row, dict):
            yield ParsedLine(n, None, "line is not a JSON object", raw[:1000])
            continue
        yield ParsedLine(n, row)


@dataclass
class Summary:
    """Per ``metric/method``: scores, not-applicable and error counts."""

    scores: dict[str, list[float]] = field(default_factory=dict)
    not_applicable: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    bad_rows: int = 0

    def add(self, results: Sequence[EvalResult]) -> None:
        self.rows += 1
        for r in results:
            self.scores.setdefault(r.name, [])
            if r.error:
                self.errors[r.name] = self.errors.get(r.name, 0) + 1
            elif r.score is None:
                self.not_applicable[r.name] = self.not_applicable.get(r.name, 0) + 1
            else:
                self.scores[r.name].append(r.score)

    def table(self) -> list[dict[str, Any]]:
        out = []
        for name, values in sorted(self.scores.items()):
            out.append(
                {
                    "evaluator": name,
                    "scored": len(values),
                    "mean": statistics.fmean(values) if values else None,
                    "p50": statistics.median(values) if values else None,
                    "not_applicable": self.not_applicable.get(name, 0),
                    "errors": self.errors.get(name, 0),
                }
            )
        return out


def score_rows(
    parsed: Sequence[ParsedLine], evaluators: Sequence[Evaluator], summary: Summary
) -> list[str]:
    """Score a batch of parsed lines; returns output lines (JSON) in input order."""
    good = [p for p in parsed if p.row is not None]
    records = [row_to_record(p.row, p.line) for p in good if p.row is not None]
    results = evaluate_records(records, evaluators)
    by_line = {p.line: r for p, r in zip(good, results, strict=True)}
    out = []
    for p in parsed:
        if p.row is None:
            summary.bad_rows += 1
            out.append(json.dumps({"line": p.line, "raw": p.raw, "error": p.error}))
            continue
        summary.add(by_line[p.line])
        row = dict(p.row)
        row["results"] = [result_dict(r) for r in by_line[p.line]]
        out.append(json.dumps(row, ensure_ascii=False))
    return out
