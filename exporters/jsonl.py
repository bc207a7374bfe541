"""One JSON line per evaluated record: the record, then its results.

A record whose costly tiers (model, judge) outlast ``evaluation.max_export_delay_s``
gets more lines: the first with what existed then (``attributes["ragpulse.pending"]``
lists the tiers to come), then one short update line per such tier
(``{"trace_id", "span_id", "service", "route", "update": "judge", "attributes",
"results"}``) with that tier's results, or none and
``ragpulse.sampled.<tier>: "skipped:<reason>"`` when it did not evaluate the record.

Every string but the record's hex ids is redacted first (the ``redaction``
section, path ``jsonl``; on by default for e-mails, phone and card numbers).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO, cast

from pydantic import Field, TypeAdapter
from typing_extensions import TypedDict

from ragpulse import semconv as sc
from ragpulse.config import RedactionSettings, Settings
from ragpulse.exporters.base import Sink
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import Direction, EvalResult, RagRecord
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


class JsonlSink(Sink):
    """``results_jsonl`` (or ``sinks.jsonl.path``): one line per evaluated record, and one
    per costly tier that reported after the record's first line."""

    name = "jsonl"
    default_enabled = True

    class Options(PluginOptions):
        path: Path | None = Field(None, description="file appended to; unset = off")
        redaction: RedactionSettings = Field(
            default_factory=RedactionSettings,
            description="the top-level redaction section (path jsonl)",
        )

    def __init__(
        self, path: str | Path | TextIO, redaction: RedactionSettings | None = None
    ) -> None:
        # Redaction is on unless told otherwise: this file is what leaves the process.
        self.redactor = Redactor.for_path(redaction or RedactionSettings(), "jsonl")
        if isinstance(path, str | Path):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._file: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115
            self._owned = True
        else:
            self._file, self._owned = path, False
        self._lock = threading.Lock()

    @classmethod
    def section(cls, settings: Settings) -> dict[str, Any]:
        return {"path": settings.results_jsonl, "redaction": settings.redaction.model_dump()}

    @classmethod
    def create(cls, options: PluginOptions, context: PluginContext) -> JsonlSink | None:
        assert isinstance(options, cls.Options)
        return cls(options.path, options.redaction) if options.path else None

    def export(self, record: RagRecord, results: Sequence[EvalResult]) -> None:
        line = record_line(record, results, self.redactor)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()  # readers (tail -f, tests) see whole lines promptly

    def shutdown(self) -> None:
        with self._lock:
            if self._owned and not self._file.closed:
                self._file.close()
