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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ragpulse.record import Reference

REFERENCE_KEYS = (
    "question_id", "reference_answers", "reference_contexts", "reference_context_ids",
    "is_answerable_label", "expected_behavior", "metadata", "condition", "planted",
)  # fmt: skip
BEHAVIORS = ("answer", "refuse")


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
