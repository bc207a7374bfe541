"""The results format: how a record and its evaluation results are written as JSON.

One shape for every writer (the JSONL sink, regression sets, ``ragpulse eval``'s output,
replays): the record's fields, then ``results``, each result without its timing
(``duration_ms``) and without ``error`` when it has none. A record that a costly tier
reported on after its first line gets a short *update* line (:func:`record_line`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

from pydantic import TypeAdapter
from typing_extensions import TypedDict

from ragpulse import semconv as sc
from ragpulse.record import ConversationRecord, Direction, EvalResult, RagRecord
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


UPDATE_FIELDS = ("trace_id", "span_id", "service", "route")
"""What an update line keeps of the record: enough to join it to the record's first line."""


def record_line(
    record: RagRecord, results: Sequence[EvalResult], redactor: Redactor | None = None
) -> str:
    """The record and its results; for an update (``ragpulse.update``), a short line.

    An update line carries the record's ids, ``update`` (the tier), the record's
    ``ragpulse.sampled.*`` / ``ragpulse.pending`` attributes and that tier's results:
    join it to the record's first line by ``trace_id`` and ``span_id``.
    """
    row = record.model_dump(mode="json")
    row["results"] = [result_dict(r) for r in results]
    if redactor is not None:
        # The whole record, even for an update: a result may quote a word of a value
        # redacted in the record, which only the whole row shows.
        row = redactor.redact_record_dump(row)
    tier = record.attributes.get(sc.RAGPULSE_UPDATE)
    if tier is not None:
        attributes = {
            key: value
            for key, value in row["attributes"].items()
            if key.startswith(sc.RAGPULSE_SAMPLED_PREFIX) or key == sc.RAGPULSE_PENDING
        }
        row = {
            **{key: row[key] for key in UPDATE_FIELDS},
            "update": tier,
            "attributes": attributes,
            "results": row["results"],
        }
    return json.dumps(row, ensure_ascii=False)


def conversation_line(
    conversation: ConversationRecord,
    results: Sequence[EvalResult],
    redactor: Redactor | None = None,
) -> str:
    """A conversation and its results as one line: ``{"conversation": {...}, "results":
    [...]}``. A resumed conversation's revised record comes as a later line with the same
    ``conversation_id`` and a higher ``revision``: the last one stands."""
    dump = conversation.model_dump(mode="json")
    row: dict[str, Any] = {"conversation": dump, "results": [result_dict(r) for r in results]}
    if redactor is not None and redactor.enabled:
        kept = {k: dump[k] for k in ("conversation_id",)}
        ids = [(t["trace_id"], t["span_id"]) for t in dump["turns"]]
        row = redactor.redact_json(row)
        row["conversation"].update(kept)
        for turn, (trace_id, span_id) in zip(row["conversation"]["turns"], ids, strict=True):
            turn["trace_id"], turn["span_id"] = trace_id, span_id
    return json.dumps(row, ensure_ascii=False)
