"""The results format: how a record and its evaluation results are written as JSON.

One shape for every writer (the JSONL sink, regression sets, ``ragpulse eval``'s output,
replays): the record's fields, then ``results``, each result without its timing
(``duration_ms``) and without ``error`` when it has none. What a sink's export item says
of the tiers is written among the record's ``attributes`` (:func:`state_attributes`). A
record that a costly tier reported on after its first line gets a short *update* line,
a record rebuilt from more spans a whole line again (:func:`record_line`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from pydantic import TypeAdapter
from typing_extensions import TypedDict

from ragpulse import semconv as sc
from ragpulse.config import EvaluationSettings
from ragpulse.record import (
    AttributeValue,
    ConversationRecord,
    Direction,
    EvalResult,
    ExportItem,
    ExportKind,
    RagRecord,
)
from ragpulse.redaction import Redactor

_ALWAYS_LEFT_OUT = frozenset({"duration_ms"})
_LEFT_OUT_WITHOUT_ERROR = frozenset({"duration_ms", "error"})


class WrittenResult(TypedDict):
    """A result without an error, as a line stores it: every field of :class:`EvalResult`
    but ``duration_ms`` (a timing, not a finding) and ``error``."""

    metric: str
    method: str
    score: float | None
    label: str | None
    explanation: str | None
    details: dict[str, Any]
    direction: Direction


# Encoding a result's fields through this shape drops the other two: no exclude set for
# pydantic to read on every call (a third of the cost of encoding a record's results).
_WRITTEN_LIST = TypeAdapter(list[WrittenResult])


def _not_written(result: EvalResult) -> frozenset[str]:
    """What a written result leaves out: its duration always, its error when it has none."""
    return _ALWAYS_LEFT_OUT if result.error is not None else _LEFT_OUT_WITHOUT_ERROR


def result_dict(result: EvalResult) -> dict[str, Any]:
    return result.model_dump(mode="json", exclude=set(_not_written(result)))


def results_json(results: Sequence[EvalResult]) -> str:
    """``[result_dict, ...]`` as JSON text, encoded by pydantic: the whole list in one call
    when no result has an error (nearly always), else one call per result."""
    if not any(r.error is not None for r in results):
        # A result's fields: the written ones and the two that the shape drops.
        fields = cast(list[WrittenResult], [vars(r) for r in results])
        return _WRITTEN_LIST.dump_json(fields).decode()
    parts = (r.model_dump_json(exclude=set(_not_written(r))) for r in results)
    return f"[{','.join(parts)}]"


UPDATE_FIELDS = ("trace_id", "span_id", "record_id", "revision", "service", "route")
"""What an update line keeps of the record: enough to join it to the record's line (by
``record_id``; ``revision`` says which build of it the update is about)."""

REVISED = "revised"
"""The key, on a record line, saying (true) that the record was rebuilt from more spans:
the line replaces the earlier ones of its ``record_id``, results and all (its
``revision`` is higher)."""


def state_attributes(item: ExportItem[Any]) -> dict[str, AttributeValue]:
    """What the item says of the tiers, as a line shows it among the record's attributes:
    ``ragpulse.sampled.<tier>`` (why each tier evaluated the record, or skipped it),
    ``ragpulse.pending`` (the costly tiers still to come, when there are) and, on an
    update, ``ragpulse.update`` (its tier)."""
    attributes: dict[str, AttributeValue] = {
        f"{sc.RAGPULSE_SAMPLED_PREFIX}{tier}": why for tier, why in item.sampled.items()
    }
    if item.pending:
        attributes[sc.RAGPULSE_PENDING] = list(item.pending)
    if item.tier is not None:
        attributes[sc.RAGPULSE_UPDATE] = item.tier
    return attributes


EVALUATED_CHARS: int = EvaluationSettings.model_fields["max_text_chars"].default
"""A sink's default bound on a stored text: the evaluated length (a sink built from the
settings takes the configured ``evaluation.max_text_chars``, through its ``section``)."""

TRUNCATED = "truncated"
"""The key, on a stored line, listing each text cut to the sink's ``max_text_chars``:
``{"field": "documents[0].content", "chars": 10485760, "stored_chars": 200000}`` (chars:
the record's length there). Absent when nothing was cut."""

REDACTION_MARGIN = 256
"""Characters past the bound that are redacted before the final cut: a personal value
that straddles the cut (an e-mail, a card number) is replaced whole, never stored half."""

_Path = tuple[str, int, str] | tuple[str]


def _long_texts(record: RagRecord, limit: int) -> list[tuple[_Path, int]]:
    """(where, length) of every stored text longer than ``limit``: the question, the
    answer, each document's content, each tool call's arguments and result."""
    found: list[tuple[_Path, int]] = []
    for name in ("question", "answer"):
        if len(getattr(record, name)) > limit:
            found.append(((name,), len(getattr(record, name))))
    for i, doc in enumerate(record.documents):
        if len(doc.content) > limit:
            found.append((("documents", i, "content"), len(doc.content)))
    for i, call in enumerate(record.tool_calls):
        for name in ("arguments", "result"):
            text = getattr(call, name)
            if text is not None and len(text) > limit:
                found.append((("tool_calls", i, name), len(text)))
    return found


def _field(path: _Path) -> str:
    return path[0] if len(path) == 1 else f"{path[0]}[{path[1]}].{path[2]}"


def _cut_record(record: RagRecord, paths: Sequence[_Path], keep: int) -> RagRecord:
    """``record`` with the texts at ``paths`` cut to ``keep`` characters."""
    update: dict[str, Any] = {}
    documents, calls = list(record.documents), list(record.tool_calls)
    for path in paths:
        if len(path) == 1:
            update[path[0]] = getattr(record, path[0])[:keep]
        elif path[0] == "documents":
            doc = documents[path[1]]
            documents[path[1]] = doc.model_copy(update={"content": doc.content[:keep]})
        else:
            call = calls[path[1]]
            calls[path[1]] = call.model_copy(update={path[2]: getattr(call, path[2])[:keep]})
    return record.model_copy(update={**update, "documents": documents, "tool_calls": calls})


def stored_row(
    record: RagRecord,
    results: Sequence[EvalResult],
    redactor: Redactor | None = None,
    max_text_chars: int | None = None,
    state: Mapping[str, AttributeValue] | None = None,
) -> dict[str, Any]:
    """The record's fields and ``results`` as a sink stores them: redacted, each text cut
    to ``max_text_chars`` (None: kept whole) and, when one was, :data:`TRUNCATED` saying
    which and how long it was; ``state`` (:func:`state_attributes`) joins the record's
    attributes. A 10 MB document costs what ``max_text_chars`` does: it is cut (with
    :data:`REDACTION_MARGIN`) before it is encoded and redacted."""
    long = _long_texts(record, max_text_chars) if max_text_chars is not None else []
    if long:
        assert max_text_chars is not None
        record = _cut_record(record, [p for p, _ in long], max_text_chars + REDACTION_MARGIN)
    row = record.model_dump(mode="json")
    if state:
        row["attributes"].update(state)
    row["results"] = [result_dict(r) for r in results]
    if redactor is not None:
        # The whole record, even for an update: a result may quote a word of a value
        # redacted in the record, which only the whole row shows.
        row = redactor.redact_record_dump(row)
    if long:
        assert max_text_chars is not None
        cuts = []
        for path, chars in long:
            node: Any = row
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = kept = node[path[-1]][:max_text_chars]
            cuts.append({"field": _field(path), "chars": chars, "stored_chars": len(kept)})
        row[TRUNCATED] = cuts
    return row


def record_line(
    item: ExportItem[RagRecord],
    redactor: Redactor | None = None,
    max_text_chars: int | None = None,
) -> str:
    """The item's record and results (:func:`stored_row`, with :func:`state_attributes`
    among its attributes); for an update, a short line; for a revision, the whole line
    with :data:`REVISED`.

    An update line carries the record's ids, ``update`` (the tier), the
    ``ragpulse.sampled.*`` / ``ragpulse.pending`` attributes and that tier's results:
    join it to the record's line by ``record_id``.
    """
    row = stored_row(item.record, item.results, redactor, max_text_chars, state_attributes(item))
    if item.kind is ExportKind.UPDATE:
        state = {
            key: value
            for key, value in row["attributes"].items()
            if key.startswith(sc.RAGPULSE_SAMPLED_PREFIX) or key == sc.RAGPULSE_PENDING
        }
        row = {
            **{key: row[key] for key in UPDATE_FIELDS},
            "update": item.tier,
            "attributes": state,
            "results": row["results"],
        }
    elif item.kind is ExportKind.REVISION:
        row[REVISED] = True
    return json.dumps(row, ensure_ascii=False)


def conversation_line(
    item: ExportItem[ConversationRecord], redactor: Redactor | None = None
) -> str:
    """A conversation and its results as one line: ``{"conversation": {...}, "results":
    [...]}``, with :func:`state_attributes` among its attributes. A resumed
    conversation's revised record comes as a later line with the same
    ``conversation_id`` and a higher ``revision``: the last one stands."""
    dump = item.record.model_dump(mode="json")
    dump["attributes"].update(state_attributes(item))
    row: dict[str, Any] = {
        "conversation": dump,
        "results": [result_dict(r) for r in item.results],
    }
    if redactor is not None and redactor.enabled:
        kept = {k: dump[k] for k in ("conversation_id",)}
        ids = [(t["trace_id"], t["span_id"]) for t in dump["turns"]]
        row = redactor.redact_json(row, redactor.destinations(r.details for r in item.results))
        row["conversation"].update(kept)
        for turn, (trace_id, span_id) in zip(row["conversation"]["turns"], ids, strict=True):
            turn["trace_id"], turn["span_id"] = trace_id, span_id
    return json.dumps(row, ensure_ascii=False)
