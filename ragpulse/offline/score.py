"""Offline scoring of JSONL rows ({"question", "contexts", "answer", ...}).

Each input line comes back with ``results`` added; extra keys pass through.
A line that is not a JSON object is written back as
``{"line": n, "raw": ..., "error": ...}`` so the output never silently loses a row.
A value of the wrong type is converted, and the row says how in ``coerced``
(``"question: int -> str"``); a text cut to the evaluation limits is listed in
``truncated_input``. Ragas and DeepEval field names are read too
(:data:`ragpulse.offline.testset.ALIASES`); fields read under no name are reported at the end.
A row of an agent turn (OpenAI-style ``messages``, a Ragas multi-turn ``user_input``,
DeepEval's ``tools_called``) is read by :mod:`ragpulse.offline.agent_rows`; its output
line gains ``tool_calls`` (ragpulse's, naming which documents each call returned) unless
it has that field already.
"""

from __future__ import annotations

import json
import statistics
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragpulse import safe_json
from ragpulse import semconv as sc
from ragpulse.config import AgentSettings
from ragpulse.evaluation import TRUNCATED_INPUT, evaluate_records
from ragpulse.evaluators.base import Evaluator
from ragpulse.exporters.base import Sink
from ragpulse.offline.agent_rows import (
    agent_turn,
    is_agent_row,
    recorded_tool_calls,
    with_contexts,
)
from ragpulse.offline.testset import FieldReport, canonical_row, reference_from_row
from ragpulse.record import DocumentSource, EvalResult, RagRecord
from ragpulse.redaction import Redactor
from ragpulse.results import result_dict, results_json

_JSON_TYPES = {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "dict"}


def _type(value: Any) -> str:
    return "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)


class _Coercions:
    """What was converted, as ``"field: from -> to"`` lines, repeats counted."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def note(self, what: str) -> None:
        self.seen[what] = self.seen.get(what, 0) + 1

    def text(self, value: Any, name: str, present: bool = True) -> str:
        """``value`` as a text: numbers as written, lists and objects as JSON, null as ''."""
        if isinstance(value, str):
            return value
        if value is None:
            if present:
                self.note(f"{name}: null -> ''")
            return ""
        self.note(f"{name}: {_type(value)} -> str")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        return json.dumps(value, ensure_ascii=False, default=str)

    def lines(self) -> list[str]:
        return [what if n == 1 else f"{what} ({n}x)" for what, n in self.seen.items()]


def _documents(row: dict[str, Any], notes: _Coercions) -> list[dict[str, Any]]:
    """The fields of each :class:`Document` of ``contexts`` (or ``documents``): strings or
    {id, content|text, score, metadata}. The record validates them with itself."""
    name = "contexts" if "contexts" in row else "documents"
    raw = row.get(name)
    if raw is None:
        if name in row:
            notes.note(f"{name}: null -> []")
        return []
    if not isinstance(raw, list):
        notes.note(f"{name}: {_type(raw)} -> [{'dict' if isinstance(raw, dict) else 'str'}]")
        raw = [raw]
    raw_ids = row.get("contexts_ids")
    ids = [str(x) for x in raw_ids] if isinstance(raw_ids, list) else []
    documents: list[dict[str, Any]] = []
    for i, d in enumerate(raw):
        if not isinstance(d, dict):
            doc_id = ids[i] if i < len(ids) else str(i)  # Unitxt's contexts_ids name them
            documents.append({"id": doc_id, "content": notes.text(d, f"{name}[]")})
            continue
        key = "content" if "content" in d else "text"
        if key not in d:
            notes.note(f"{name}[]: no content or text -> ''")
        content = notes.text(d.get(key), f"{name}[].{key}", present=key in d)
        score = d.get("score")
        if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)):
            notes.note(f"{name}[].score: {_type(score)} -> null")
            score = None
        metadata = d.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            notes.note(f"{name}[].metadata: {_type(metadata)} -> {{}}")
        documents.append(
            {
                "id": str(d["id"]) if d.get("id") is not None else None,  # 7 and "7" alike
                "content": content,
                "score": score,
                "metadata": metadata if isinstance(metadata, dict) else {},
                "source": _source(d.get("source"), name, notes),
            }
        )
    return documents


def _source(value: Any, name: str, notes: _Coercions) -> DocumentSource | None:
    """A document's tool call, as ragpulse's record lines write it (an object naming the
    ``tool``); a ``source`` of another kind (a file name, a URL) is the user's, not read."""
    if not isinstance(value, dict) or "tool" not in value:
        return None
    try:
        return DocumentSource.model_validate(value)
    except ValueError:
        notes.note(f"{name}[].source: not a tool call's source -> null")
        return None


def record_and_coercions(
    row: dict[str, Any],
    line: int,
    canonical: bool = False,
    agents: AgentSettings | None = None,
) -> tuple[RagRecord, list[str]]:
    """The record a row describes, and every conversion it took (empty when none).

    ``canonical``: the row's field names are ragpulse's already (:func:`canonical_row`).
    ``agents``: which tools retrieve, and the bounds of an agent row (the defaults when
    None).
    """
    if not canonical:
        row = canonical_row(row)[0]
    notes = _Coercions()
    route = row.get("route")
    if route is not None and not isinstance(route, str):
        notes.note(f"route: {_type(route)} -> null")
    fields: dict[str, Any] = {
        "trace_id": notes.text(row.get("trace_id"), "trace_id", "trace_id" in row),
        "span_id": notes.text(row.get("span_id"), "span_id", "span_id" in row),
        "route": route if isinstance(route, str) else None,
        "question": notes.text(row.get("question"), "question", "question" in row),
        "documents": _documents(row, notes),
        "answer": notes.text(row.get("answer"), "answer", "answer" in row),
        "attributes": {"line": line},
        "reference": reference_from_row(row, notes.note),
    }
    if is_agent_row(row):
        turn = agent_turn(row, agents or AgentSettings(), notes.note)
        if "question" not in row and turn.question is not None:
            fields["question"] = turn.question  # the row's own fields win
        if "answer" not in row and turn.answer is not None:
            fields["answer"] = turn.answer
        fields["documents"] = with_contexts(turn, fields["documents"])
        fields["attributes"].update(turn.attributes)
        fields["tool_calls"] = turn.tool_calls
        fields["model_calls"] = turn.model_calls
        fields["kind"] = "agent" if turn.tool_calls else "rag"
    elif "tool_calls" in row:  # a record line of ragpulse's JSONL sink
        calls = recorded_tool_calls(row["tool_calls"], len(fields["documents"]), notes.note)
        fields["tool_calls"] = calls
        fields["kind"] = "agent" if calls else "rag"
    if row.get("kind") in ("rag", "agent", "retrieval"):
        fields["kind"] = row["kind"]
    # One validation for the record and its documents (not one per document, then one more).
    return RagRecord.model_validate(fields), notes.lines()


def row_to_record(row: dict[str, Any], line: int) -> RagRecord:
    """Accepts ``contexts`` (or ``documents``) as strings or {id, content|text, score, metadata}."""
    return record_and_coercions(row, line)[0]


KEEP_TEXT_CHARS = 1 << 20
"""A row up to this many characters keeps its line, written back with the results appended
(no second encoding of the row); a longer row is encoded again from what was parsed, so
that a giant row is never held twice."""


@dataclass
class ParsedLine:
    line: int
    row: dict[str, Any] | None
    error: str | None = None
    raw: str = ""
    size: int = 0  # characters of the line: batches are bounded by it
    text: str = ""  # the line as read, for a row kept to be written back (parse_line)


def parse_line(n: int, raw: str, keep_text: bool = False) -> ParsedLine | None:
    """Line ``n``: a row, an error row, or None when blank.

    ``keep_text``: a row keeps its line (up to :data:`KEEP_TEXT_CHARS`) for :func:`score_rows`.
    """
    if not raw or raw.isspace():  # not raw.strip(): that copies every line
        return None
    try:
        row = safe_json.loads(raw)  # bounded nesting: a deep line is a bad row, not a crash
    except ValueError as exc:
        return ParsedLine(n, None, f"invalid JSON: {exc}", raw[:1000], size=len(raw))
    if not isinstance(row, dict):
        return ParsedLine(n, None, "line is not a JSON object", raw[:1000], size=len(raw))
    text = raw if keep_text and len(raw) <= KEEP_TEXT_CHARS else ""
    return ParsedLine(n, row, size=len(raw), text=text)


def parse_lines(lines: Iterable[str]) -> Iterator[ParsedLine]:
    for n, raw in enumerate(lines, 1):
        parsed = parse_line(n, raw)
        if parsed is not None:
            yield parsed


@dataclass
class Summary:
    """Per ``metric/method``: scores, not-applicable and error counts; per run: rows
    scored, unreadable, coerced and truncated."""

    scores: dict[str, list[float]] = field(default_factory=dict)
    not_applicable: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    first_error: dict[str, str] = field(default_factory=dict)
    rows: int = 0
    bad_rows: int = 0
    coerced_rows: int = 0
    truncated_rows: int = 0
    first_bad: str | None = None
    fields: FieldReport = field(default_factory=FieldReport)

    def add_rows(self, rows: Sequence[Sequence[EvalResult]]) -> None:
        """Rows' results as :func:`~ragpulse.evaluation.evaluate_records` gives them: each
        row's in the order of the evaluators, so counted per evaluator, its name formatted
        once instead of once per result."""
        self.rows += len(rows)
        for column in zip(*rows, strict=True):
            self._count(column[0].name, column)

    def _count(self, name: str, results: Sequence[EvalResult]) -> None:
        """Results of one evaluator (``name``), in row order."""
        scores = self.scores.setdefault(name, [])
        for r in results:
            if r.error:
                self.errors[name] = self.errors.get(name, 0) + 1
                self.first_error.setdefault(name, r.error)
            elif r.score is None:
                self.not_applicable[name] = self.not_applicable.get(name, 0) + 1
            else:
                scores.append(r.score)

    def add_bad(self, parsed: ParsedLine) -> None:
        self.bad_rows += 1
        if self.first_bad is None:
            self.first_bad = f"line {parsed.line}: {parsed.error}"

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

    def notes(self) -> list[str]:
        """Lines for the end of a run: what was kept with an error, converted or cut."""
        out = []
        if self.bad_rows:
            out.append(
                f"{self.bad_rows} unreadable lines kept with an error field "
                f"(first: {self.first_bad})"
            )
        if self.coerced_rows:
            out.append(
                f"{self.coerced_rows} rows coerced: a value of the wrong type was converted "
                "(each says how in its `coerced` field)"
            )
        if self.truncated_rows:
            out.append(
                f"{self.truncated_rows} rows cut to evaluation.max_text_chars / max_record_chars "
                "(each says where in its `truncated_input` field)"
            )
        return out + self.fields.lines()

    def failure(self, not_loaded: Sequence[str] = ()) -> str | None:
        """One line saying why the run failed (nothing scored, or an evaluator failed on
        every row, or could not load); None when it did its job."""
        if not self.rows:
            if not self.bad_rows:
                return "no rows: the input has no non-blank lines"
            return f"nothing scored: all {self.bad_rows} lines are unreadable ({self.first_bad})"
        failed = [n for n in sorted(self.errors) if self.errors[n] == self.rows]
        if failed:
            return (
                f"{', '.join(failed)} failed on every row ({self.rows}): "
                f"{self.first_error[failed[0]]}"
            )
        if not_loaded:
            return f"could not load {', '.join(not_loaded)} (see the errors above)"
        return None


class SummarySink(Sink):
    """A :class:`Summary` of what a collector scored (``ragpulse eval --from``'s closing
    table): a sink, since the records come from the collector's pipeline, not from rows.
    Updates of a record already counted add their results, not a row."""

    name = "summary"

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.summary = Summary()

    def export(self, record: RagRecord, results: Sequence[EvalResult]) -> None:
        with self._lock:
            if sc.RAGPULSE_UPDATE not in record.attributes:
                self.summary.rows += 1
            for r in results:
                self.summary._count(r.name, (r,))

    def table(self) -> list[dict[str, Any]]:
        with self._lock:
            return self.summary.table()


def score_rows(
    parsed: Sequence[ParsedLine],
    evaluators: Sequence[Evaluator],
    summary: Summary,
    redactor: Redactor | None = None,
    agents: AgentSettings | None = None,
) -> list[str]:
    """Score a batch of parsed lines; returns output lines (JSON) in input order.

    ``redactor``: the ``eval_output`` path's (``redaction.apply_to``), applied to each
    line written; off by default, since these are the user's own rows given back.
    ``agents``: the ``agents`` settings agent rows are read with (defaults when None).
    """
    redact = redactor.redact_record_dump if redactor is not None and redactor.enabled else None
    good = [p for p in parsed if p.row is not None]
    converted = []
    for p in good:
        row, mapped = canonical_row(p.row or {})
        summary.fields.add(p.row or {}, mapped)
        converted.append(record_and_coercions(row, p.line, canonical=True, agents=agents))
    results = evaluate_records([record for record, _ in converted], evaluators)
    summary.add_rows(results)
    by_line = {p.line: (r, c) for p, r, c in zip(good, results, converted, strict=True)}
    out = []
    for p in parsed:
        if p.row is None:
            summary.add_bad(p)
            bad = {"line": p.line, "raw": p.raw, "error": p.error}
            out.append(json.dumps(redact(bad) if redact else bad))
            continue
        row_results, (record, coerced) = by_line[p.line]
        added: dict[str, Any] = {}
        if record.tool_calls and p.row and "tool_calls" not in p.row:
            added["tool_calls"] = [c.model_dump(mode="json") for c in record.tool_calls]
        if coerced:
            summary.coerced_rows += 1
            added["coerced"] = coerced
        truncated = row_results[0].details.get(TRUNCATED_INPUT) if row_results else None
        if truncated:
            summary.truncated_rows += 1
            added[TRUNCATED_INPUT] = truncated
        if p.text and not redact and p.row and _ADDED.isdisjoint(p.row):
            out.append(_appended(p.text, row_results, added))
            continue
        row = dict(p.row)
        row["results"] = [result_dict(r) for r in row_results]
        row.update(added)
        out.append(json.dumps(redact(row) if redact else row, ensure_ascii=False))
    return out


_ADDED = frozenset({"results", "coerced", TRUNCATED_INPUT})
"""The keys scoring adds to a row (a row that has one already is encoded anew)."""


def _appended(text: str, results: Sequence[EvalResult], added: dict[str, Any]) -> str:
    """The row's own line with ``results`` (and ``added``) as its last keys: the same object
    as encoding the row again, its values byte for byte as the user wrote them."""
    body = text.rstrip()[:-1].rstrip()  # a non-empty object: its last value, then "}"
    tail = "".join(f', "{k}": {json.dumps(v, ensure_ascii=False)}' for k, v in added.items())
    return f'{body}, "results": {results_json(results)}{tail}}}'
