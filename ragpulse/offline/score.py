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

A row that shows several turns (its messages hold several user messages; DeepEval's
``turns``) is a conversation: every turn is scored, each with the conversation before it.
The row's own output line is its last turn's (``results`` as for any row); each earlier
turn gets a line of its own just before it: ``{"line", "conversation_id", "turn",
"question", "answer", "contexts", "results"}``. Rows that share a ``conversation_id``
(``session_id``, ``thread_id``) are the turns of one conversation, in file order; a turn
whose row shows no history is given the earlier turns as its history (as the collector
does for live turns). With a :class:`~ragpulse.offline.conversations.OfflineConversations`
each conversation is closed at the end of the run into a conversation record, which the
conversation metrics score (:mod:`ragpulse.offline.conversations`).
"""

from __future__ import annotations

import json
import statistics
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ragpulse import safe_json
from ragpulse.collector.extract.history import standalone
from ragpulse.config import AgentSettings, ConversationSettings
from ragpulse.evaluation import TRUNCATED_INPUT, evaluate_records
from ragpulse.evaluators.base import AnyEvaluator
from ragpulse.exporters.base import Sink
from ragpulse.offline.agent_rows import (
    AgentTurn,
    agent_turns,
    is_agent_row,
    recorded_tool_calls,
    with_contexts,
)
from ragpulse.offline.conversations import OfflineConversations
from ragpulse.offline.testset import FieldReport, canonical_row, reference_from_row
from ragpulse.record import (
    DocumentSource,
    EvalResult,
    ExportItem,
    ExportKind,
    HistoryMessage,
    RagRecord,
)
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


def records_and_coercions(
    row: dict[str, Any],
    line: int,
    canonical: bool = False,
    agents: AgentSettings | None = None,
    conversations: ConversationSettings | None = None,
) -> tuple[list[RagRecord], list[str]]:
    """The turn records a row describes, in order (the last is the row's own; the others
    are the earlier turns of a conversation the row shows), and every conversion it took.

    ``canonical``: the row's field names are ragpulse's already (:func:`canonical_row`).
    ``agents``: which tools retrieve, and the bounds of an agent row; ``conversations``:
    the bounds of a turn's history (the defaults when None).
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
        **_conversation_fields(row, notes),
    }
    earlier: list[AgentTurn] = []
    if is_agent_row(row):
        *earlier, turn = agent_turns(row, agents or AgentSettings(), notes.note, conversations)
        if "question" not in row and turn.question is not None:
            fields["question"] = turn.question  # the row's own fields win
        if "answer" not in row and turn.answer is not None:
            fields["answer"] = turn.answer
        fields["documents"] = [*with_contexts(turn, fields["documents"]), *turn.carried]
        fields["attributes"].update(turn.attributes)
        fields["tool_calls"] = turn.tool_calls
        fields["model_calls"] = turn.model_calls
        fields["kind"] = "agent" if turn.tool_calls else "rag"
        if turn.number is not None:
            fields.setdefault("turn", turn.number)
        if turn.history and "history" not in fields:
            fields["history"] = turn.history
            fields["standalone_question"] = fields.get("standalone_question") or (
                turn.standalone_question
            )
    elif "tool_calls" in row:  # a record line of ragpulse's JSONL sink
        calls = recorded_tool_calls(row["tool_calls"], len(fields["documents"]), notes.note)
        fields["tool_calls"] = calls
        fields["kind"] = "agent" if calls else "rag"
    if row.get("kind") in ("rag", "agent", "retrieval"):
        fields["kind"] = row["kind"]
    if earlier and not fields.get("conversation_id"):
        fields["conversation_id"] = f"line-{line}"  # a whole conversation in one row
    if fields.get("history") and not fields.get("standalone_question"):
        fields["standalone_question"] = standalone(fields["question"], fields["history"])
    records = [_earlier_turn(t, fields, line) for t in earlier]
    # One validation for the record and its documents (not one per document, then one more).
    records.append(RagRecord.model_validate(fields))
    return records, notes.lines()


def record_and_coercions(
    row: dict[str, Any],
    line: int,
    canonical: bool = False,
    agents: AgentSettings | None = None,
    conversations: ConversationSettings | None = None,
) -> tuple[RagRecord, list[str]]:
    """The row's own record (its last turn: :func:`records_and_coercions`) and every
    conversion the row took (empty when none)."""
    records, coerced = records_and_coercions(row, line, canonical, agents, conversations)
    return records[-1], coerced


def _conversation_fields(row: dict[str, Any], notes: _Coercions) -> dict[str, Any]:
    """``conversation_id``, ``turn``, ``history`` and ``standalone_question`` as the row
    gives them (ragpulse's record lines carry them all); a value of the wrong type is
    dropped and said. An empty id is no id."""
    out: dict[str, Any] = {}
    cid = row.get("conversation_id")
    if isinstance(cid, str | int) and not isinstance(cid, bool) and str(cid).strip():
        out["conversation_id"] = str(cid).strip()
    elif cid is not None and cid != "":
        notes.note(f"conversation_id: {_type(cid)} -> null")
    turn = row.get("turn")
    if isinstance(turn, int) and not isinstance(turn, bool) and turn >= 1:
        out["turn"] = turn
    elif turn is not None:
        notes.note(f"turn: {turn!r} is not a turn number -> null")
    history = row.get("history")
    if isinstance(history, list) and history:
        messages = []
        for item in history:
            try:
                messages.append(HistoryMessage.model_validate(item))
            except ValueError:
                notes.note("history[]: not a history message dropped")
        out["history"] = messages
    elif history is not None and not isinstance(history, list):
        notes.note(f"history: {_type(history)} -> []")
    standalone = row.get("standalone_question")
    if isinstance(standalone, str) and standalone.strip():
        out["standalone_question"] = standalone
    return out


def _earlier_turn(turn: AgentTurn, row: dict[str, Any], line: int) -> RagRecord:
    """An earlier turn of a conversation row as a record of its own (named by the row's
    line and its number: it has no span of its own)."""
    return RagRecord.model_validate(
        {
            "trace_id": row["trace_id"],
            "span_id": f"line-{line}.turn-{turn.number}",
            "route": row["route"],
            "question": turn.question or "",
            "answer": turn.answer or "",
            "documents": [*turn.documents, *turn.carried],
            "attributes": {"line": line},
            "tool_calls": turn.tool_calls,
            "model_calls": turn.model_calls,
            "kind": "agent" if turn.tool_calls else "rag",
            "conversation_id": row["conversation_id"],
            "turn": turn.number,
            "history": turn.history,
            "standalone_question": turn.standalone_question,
        }
    )


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
    conversation_lines_read: int = 0
    earlier_turns: int = 0
    """Earlier turns of conversation rows scored (a line each, beside the rows)."""
    conversations: int = 0
    conversation_turns: int = 0
    repeated_turns: int = 0

    def add_rows(self, rows: Sequence[Sequence[EvalResult]]) -> None:
        """Rows' results as :func:`~ragpulse.evaluation.evaluate_records` gives them,
        counted per evaluator (its name formatted once, not once per result). Rows of
        different kinds carry different evaluators' results (an agent signal scores agent
        turns only)."""
        self.rows += len(rows)
        by_evaluator: dict[tuple[str, str], list[EvalResult]] = {}
        for row in rows:
            for r in row:
                by_evaluator.setdefault((r.metric, r.method), []).append(r)
        for (metric, method), results in by_evaluator.items():
            self._count(f"{metric}/{method}", results)

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

    def _uncount(self, result: EvalResult) -> None:
        """Take back one result counted before (a record's revision replaces its results)."""
        name = result.name
        if result.error:
            self.errors[name] = max(0, self.errors.get(name, 0) - 1)
        elif result.score is None:
            self.not_applicable[name] = max(0, self.not_applicable.get(name, 0) - 1)
        elif result.score in (scores := self.scores.get(name, [])):
            scores.remove(result.score)

    def title(self, output: object) -> str:
        """The closing table's title: what was scored, and where it went."""
        if not self.earlier_turns:
            return f"{self.rows} rows scored -> {output}"
        rows = self.rows - self.earlier_turns
        return f"{rows} rows and {self.earlier_turns} earlier turns scored -> {output}"

    def add_conversations(self, conversations: OfflineConversations) -> None:
        """A run's conversations: their metrics' results in the table, their counts in
        the notes."""
        self.conversations = len(conversations.lines)
        self.conversation_turns = conversations.turns
        self.repeated_turns = conversations.repeated
        for r in conversations.results:
            self._count(r.name, (r,))

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
        if self.conversations:
            out.append(
                f"{self.conversations} conversations ({self.conversation_turns} turns) closed "
                "at the end of the run: their records are the output's last lines"
            )
        if self.repeated_turns:
            out.append(
                f"{self.repeated_turns} earlier turns shown again by a later row of their "
                "conversation were read as its history, not scored again"
            )
        if self.conversation_lines_read:
            out.append(
                f"{self.conversation_lines_read} conversation lines in the input given back as "
                "they are (their conversations are made again from their turns)"
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
    Updates of a record already counted add their results, not a row; a revision's
    results take the place of the record's earlier ones (while the last ``RECENT``
    records' results are remembered)."""

    name = "summary"
    RECENT = 10_000

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.summary = Summary()
        self._counted: OrderedDict[tuple[str, str], list[EvalResult]] = OrderedDict()

    def export(self, item: ExportItem[RagRecord]) -> None:
        key = (item.record.trace_id, item.record.span_id)
        with self._lock:
            if item.kind is ExportKind.FIRST:
                self.summary.rows += 1
            elif item.kind is ExportKind.REVISION:
                for r in self._counted.pop(key, []):
                    self.summary._uncount(r)
            for r in item.results:
                self.summary._count(r.name, (r,))
            self._counted.setdefault(key, []).extend(item.results)
            self._counted.move_to_end(key)
            while len(self._counted) > self.RECENT:
                self._counted.popitem(last=False)

    def table(self) -> list[dict[str, Any]]:
        with self._lock:
            return self.summary.table()


def score_rows(
    parsed: Sequence[ParsedLine],
    evaluators: Sequence[AnyEvaluator],
    summary: Summary,
    redactor: Redactor | None = None,
    agents: AgentSettings | None = None,
    conversations: OfflineConversations | None = None,
) -> list[str]:
    """Score a batch of parsed lines; returns output lines (JSON) in input order.

    ``redactor``: the ``eval_output`` path's (``redaction.apply_to``), applied to each
    line written; off by default, since these are the user's own rows given back.
    ``agents``: the ``agents`` settings agent rows are read with (defaults when None).
    ``conversations``: the run's conversations (turns scored in conversation order,
    conversation records at the end); None scores each row's turns on their own.
    """
    redact = redactor.redact_record_dump if redactor is not None and redactor.enabled else None
    settings = conversations.settings if conversations is not None else None
    good = [p for p in parsed if p.row is not None]
    turns: list[RagRecord] = []
    owners: list[tuple[int, bool]] = []  # (line, the row's own turn)
    coerced_by_line: dict[int, list[str]] = {}
    for p in good:
        if is_conversation_line(p.row or {}):
            continue  # a conversation record read back: its turns are rows of their own
        row, mapped = canonical_row(p.row or {})
        summary.fields.add(p.row or {}, mapped)
        records, coerced = records_and_coercions(row, p.line, True, agents, settings)
        coerced_by_line[p.line] = coerced
        for index, record in enumerate(records):
            own = index == len(records) - 1
            if conversations is None or conversations.is_new(record, own):
                turns.append(record)
                owners.append((p.line, own))
    if conversations is not None:
        turns, results = conversations.evaluate(turns, evaluators)
    else:
        results = evaluate_records(turns, evaluators)
    summary.add_rows(results)
    by_line: dict[int, list[tuple[RagRecord, list[EvalResult], bool]]] = {}
    for (line, own), record, row_results in zip(owners, turns, results, strict=True):
        by_line.setdefault(line, []).append((record, row_results, own))
    out = []
    for p in parsed:
        if p.row is None:
            summary.add_bad(p)
            bad = {"line": p.line, "raw": p.raw, "error": p.error}
            out.append(json.dumps(redact(bad) if redact else bad))
            continue
        if p.line not in by_line:  # a conversation line: given back as it is
            summary.conversation_lines_read += 1
            if redact:
                out.append(json.dumps(redact(dict(p.row)), ensure_ascii=False))
            else:
                out.append(p.text.rstrip() or json.dumps(p.row, ensure_ascii=False))
            continue
        *earlier, (record, row_results, _) = by_line[p.line]
        summary.earlier_turns += len(earlier)
        for turn, turn_results, _ in earlier:
            turn_row = _turn_line(p.line, turn, turn_results, summary)
            out.append(json.dumps(redact(turn_row) if redact else turn_row, ensure_ascii=False))
        added: dict[str, Any] = {}
        if record.tool_calls and p.row and "tool_calls" not in p.row:
            added["tool_calls"] = [c.model_dump(mode="json") for c in record.tool_calls]
        if record.conversation_id and p.row:
            for key in ("conversation_id", "turn"):  # where the row joins its conversation
                if key not in p.row and getattr(record, key) is not None:
                    added[key] = getattr(record, key)
        coerced = coerced_by_line[p.line]
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


def is_conversation_line(row: dict[str, Any]) -> bool:
    """Whether ``row`` is a conversation line (``{"conversation", "results"}``, as the
    JSONL sink and ``eval`` write them) rather than a turn."""
    conversation = row.get("conversation")
    return isinstance(conversation, dict) and "turns" in conversation and "question" not in row


def _turn_line(
    line: int, record: RagRecord, results: Sequence[EvalResult], summary: Summary
) -> dict[str, Any]:
    """An earlier turn of a conversation row, as a line of its own (read back as a turn)."""
    row: dict[str, Any] = {
        "line": line,
        "conversation_id": record.conversation_id,
        "turn": record.turn,
        "question": record.question,
        "answer": record.answer,
        "contexts": [d.model_dump(mode="json") for d in record.documents if not d.carried],
    }
    if record.tool_calls:
        row["tool_calls"] = [c.model_dump(mode="json") for c in record.tool_calls]
    row["results"] = [result_dict(r) for r in results]
    truncated = results[0].details.get(TRUNCATED_INPUT) if results else None
    if truncated:
        summary.truncated_rows += 1
        row[TRUNCATED_INPUT] = truncated
    return row


_ADDED = frozenset({"results", "coerced", TRUNCATED_INPUT})
"""The keys scoring adds to a row (a row that has one already is encoded anew)."""


def _appended(text: str, results: Sequence[EvalResult], added: dict[str, Any]) -> str:
    """The row's own line with ``results`` (and ``added``) as its last keys: the same object
    as encoding the row again, its values byte for byte as the user wrote them."""
    body = text.rstrip()[:-1].rstrip()  # a non-empty object: its last value, then "}"
    tail = "".join(f', "{k}": {json.dumps(v, ensure_ascii=False)}' for k, v in added.items())
    return f'{body}, "results": {results_json(results)}{tail}}}'
