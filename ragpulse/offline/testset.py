"""Test-set rows: the reference fields of a labelled question (Unitxt's RAG task fields).

A row of ``ragpulse eval`` input may carry, besides ``question``/``contexts``/``answer``:
``question_id``, ``reference_answers`` (list of str), ``reference_contexts`` (list of
str), ``reference_context_ids`` (list of str), ``is_answerable_label`` (bool),
``expected_behavior`` (``"answer"`` or ``"refuse"``), ``metadata`` (object:
``question_type``, ``domain``, ...), and ``contexts_ids`` (ids of the recorded
``contexts`` when those are plain strings). Rows written by adversarial case
generation also carry ``condition`` and ``planted``. Any of them makes the record
carry a :class:`~ragpulse.record.Reference`; values of the wrong type are converted
and noted, never silently.

Test sets written for Ragas or DeepEval are read as they are: their field names are
mapped to these (:data:`ALIASES`) when the row does not carry ragpulse's own name too.
A Ragas multi-turn sample's ``user_input`` (a list of messages) is read as ``messages``:
an agent turn (:mod:`ragpulse.offline.agent_rows`), as DeepEval's ``tools_called`` is.
A field ragpulse reads under no name is kept as it is and reported (:class:`FieldReport`),
with the names ragpulse expects, so that a set in another shape never scores
"not applicable" everywhere without a word.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ragpulse.record import Reference

REFERENCE_KEYS = (
    "question_id", "reference_answers", "reference_contexts", "reference_context_ids",
    "is_answerable_label", "expected_behavior", "metadata", "condition", "planted",
)  # fmt: skip
BEHAVIORS = ("answer", "refuse")

RECORD_KEYS = (
    "question", "contexts", "contexts_ids", "answer", "trace_id", "span_id", "route",
    "messages", "tools_called", "tool_calls", "turns", "conversation_id", "turn", "history",
    "standalone_question",
)  # fmt: skip
"""What a row says about the exchange itself (``documents`` is read as ``contexts``;
``messages``, ``tools_called`` and DeepEval's ``turns`` make it an agent turn or a
conversation, ``tool_calls`` are ragpulse's own, as its record lines and ``eval`` output
write them; ``conversation_id``, ``turn``, ``history`` and ``standalone_question`` place
it in a conversation)."""

ALIASES: dict[str, str] = {
    # Ragas (SingleTurnSample; ground_truth(s): Ragas 0.1)
    "user_input": "question",
    "retrieved_contexts": "contexts",
    "retrieved_context_ids": "contexts_ids",
    "response": "answer",
    "reference": "reference_answers",
    "ground_truth": "reference_answers",
    "ground_truths": "reference_answers",
    # DeepEval (LLMTestCase, Golden): `context` is the ideal context, i.e. the gold one
    "input": "question",
    "actual_output": "answer",
    "expected_output": "reference_answers",
    "retrieval_context": "contexts",
    "context": "reference_contexts",
    # A chat session's id (OpenInference, Langfuse: session_id; LangGraph: thread_id)
    "session_id": "conversation_id",
    "thread_id": "conversation_id",
}
"""Other tools' test-set field -> ragpulse's; read only when ragpulse's own is absent."""

LIST_ALIASES: dict[str, str] = {"user_input": "messages"}
"""Where a field that is a list means another thing: a Ragas multi-turn sample's
``user_input`` is its messages, not a question."""

_LIST_FIELDS = frozenset({"reference_answers", "reference_contexts", "contexts"})

SET_LINE_KEYS = ("set", "written_at", "reason", "sampling", "record", "results")
"""The keys of a regression-set line (:mod:`ragpulse.exporters.regression` writes them)."""

KNOWN_KEYS = frozenset(
    {*RECORD_KEYS, "documents", *REFERENCE_KEYS, *ALIASES, *SET_LINE_KEYS,
     # written by ragpulse itself: eval output, harness output
     "coerced", "truncated_input", "line", "raw", "error", "recorded", "generation",
     "condition_note", "row_expected_behavior", "skipped", "not_scored", "kind",
     "model_calls", "conversation"}
)  # fmt: skip


def canonical_row(row: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``row`` with Ragas/DeepEval field names read as ragpulse's (:data:`ALIASES`), and
    the mappings that read a value (``"user_input -> question"``): a field that is null
    or empty is mapped too, but read nothing, so it is not reported. A single string
    where ragpulse reads a list (Ragas' ``reference``) becomes a one-item list: that is
    the mapping, not a coercion. The row itself is not changed."""
    targets = {k: _target(k, v) for k, v in row.items() if k in ALIASES}
    # Two aliases of one field (input and user_input): the first that holds a value wins.
    used = sorted(
        (k for k, target in targets.items() if target not in row),
        key=lambda k: not _holds_value(row[k]),
    )
    if not used:
        return row, []
    out = dict(row)
    read = []
    for key in used:
        target = targets[key]
        if target in out:
            continue
        value = out.pop(key)
        out[target] = [value] if target in _LIST_FIELDS and isinstance(value, str) else value
        if _holds_value(value):
            read.append(f"{key} -> {target}")
    return out, read


def _holds_value(value: Any) -> bool:
    """Whether a field said anything: null and an empty string, list or object did not."""
    return value is not None and value not in ("", [], {})


def _target(key: str, value: Any) -> str:
    return LIST_ALIASES[key] if key in LIST_ALIASES and isinstance(value, list) else ALIASES[key]


def expected_names() -> str:
    """The field names ragpulse reads, for a message."""
    return ", ".join([*RECORD_KEYS, *REFERENCE_KEYS])


class FieldReport:
    """Across a run's rows: which other tools' names were read, which fields no name
    explains. Not thread-safe; one per run."""

    def __init__(self) -> None:
        self.mapped: Counter[str] = Counter()
        # Rows of a file nearly always share their keys: counted by their tuple of keys,
        # each key's count is worked out once, at the end.
        self._shapes: Counter[tuple[str, ...]] = Counter()

    def add(self, row: Mapping[str, Any], mapped: Iterable[str] = ()) -> None:
        if mapped:
            self.mapped.update(mapped)
        self._shapes[tuple(row)] += 1

    @property
    def unknown(self) -> Counter[str]:
        """Rows per field read under no name."""
        unknown: Counter[str] = Counter()
        for keys, rows in self._shapes.items():
            for key in keys:
                if key not in KNOWN_KEYS:
                    unknown[key] += rows
        return unknown

    def lines(self) -> list[str]:
        out = []
        if self.mapped:
            read = ", ".join(f"{m} ({n} rows)" for m, n in self.mapped.most_common())
            out.append(f"read other tools' field names: {read}")
        unknown = self.unknown
        if unknown:
            fields = ", ".join(f"{k} ({n} rows)" for k, n in unknown.most_common(8))
            more = len(unknown) - 8
            out.append(
                f"fields ragpulse does not read (kept as they are): {fields}"
                + (f" and {more} more" if more > 0 else "")
                + f". It reads {expected_names()} (and the Ragas/DeepEval names "
                f"{', '.join(ALIASES)}); keys to slice by go under metadata"
            )
        return out


def _strings(row: dict[str, Any], key: str, note: Callable[[str], None]) -> list[str]:
    value = row.get(key)
    if value is None:
        return []
    if isinstance(value, str):
        note(f"{key}: str -> [str]")
        return [value]
    if not isinstance(value, list):
        note(f"{key}: {type(value).__name__} -> []")
        return []
    out = []
    for item in value:
        if isinstance(item, str):
            out.append(item)
        elif item is None:
            note(f"{key}[]: null dropped")
        else:
            note(f"{key}[]: {type(item).__name__} -> str")
            out.append(str(item))
    return out


def reference_from_row(row: dict[str, Any], note: Callable[[str], None]) -> Reference | None:
    """The row's :class:`Reference`, or None when it has none of the reference keys."""
    if not any(k in row for k in REFERENCE_KEYS):
        return None
    answerable = row.get("is_answerable_label")
    if answerable is not None and not isinstance(answerable, bool):
        note(f"is_answerable_label: {type(answerable).__name__} -> null")
        answerable = None
    behavior = row.get("expected_behavior")
    if behavior is not None and behavior not in BEHAVIORS:
        note(f"expected_behavior: {behavior!r} is not answer|refuse -> null")
        behavior = None
    if behavior is None and answerable is not None:
        behavior = "answer" if answerable else "refuse"  # Unitxt's label says it
    metadata = row.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        note(f"metadata: {type(metadata).__name__} -> {{}}")
        metadata = None
    planted = row.get("planted")
    qid = row.get("question_id")
    condition = row.get("condition")
    return Reference(
        question_id=None if qid is None else str(qid),
        answers=_strings(row, "reference_answers", note),
        contexts=_strings(row, "reference_contexts", note),
        context_ids=_strings(row, "reference_context_ids", note),
        answerable=answerable,
        expected_behavior=behavior,
        metadata=metadata or {},
        condition=None if condition is None else str(condition),
        planted=planted if isinstance(planted, dict) else {},
    )
