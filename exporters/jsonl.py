"""One JSON line per evaluated record: the record, then its results.

A record whose costly tiers (model, judge) outlast ``evaluation.max_export_delay_s``
gets more lines: the first with what existed then (``attributes["ragpulse.pending"]``
lists the tiers to come), then one short update line per such tier
(``{"trace_id", "span_id", "record_id", "revision", "service", "route", "update":
"judge", "attributes", "results"}``) with that tier's results, or none and
``ragpulse.sampled.<tier>: "skipped:<reason>"`` when it did not evaluate the record. A
record rebuilt from more spans (a revision) gets a whole line again, with
``"revised": true`` and a higher ``revision``: the last whole line of a ``record_id``
stands (its span may differ: a record first built without its root span is rooted
at the root once it came). A record built without its root span says why in
``partial``.

Every string but the record's hex ids is redacted first (the ``redaction``
section, path ``jsonl``; on by default for e-mails, phone and card numbers). Each text
is stored up to ``sinks.jsonl.max_text_chars`` (default ``evaluation.max_text_chars``,
what the evaluators saw); a longer one is cut and listed under ``truncated`` with its
length (:func:`ragpulse.results.stored_row`).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, TextIO

from pydantic import Field

from ragpulse.config import RedactionSettings, Settings
from ragpulse.exporters.base import Sink
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import ConversationRecord, ExportItem, RagRecord
from ragpulse.redaction import Redactor
from ragpulse.results import EVALUATED_CHARS, conversation_line, record_line


class JsonlSink(Sink["JsonlSink.Options"]):
    """``sinks.jsonl.path`` (``serve --results-jsonl``): one line per evaluated record, and
    one per costly tier that reported after the record's first line."""

    name = "jsonl"
    default_enabled = True

    class Options(PluginOptions):
        path: Path | None = Field(None, description="file appended to; unset = off")
        redaction: RedactionSettings = Field(
            default_factory=RedactionSettings,
            description="the top-level redaction section (path jsonl)",
        )
        max_text_chars: int = Field(
            EVALUATED_CHARS,
            ge=1,
            description="Longest text (question, answer, one document, a tool call's "
            "arguments or result) stored; a longer one is cut and the line's `truncated` "
            "gives its length. Default: evaluation.max_text_chars, what was evaluated.",
        )

    def __init__(
        self,
        path: str | Path | TextIO,
        redaction: RedactionSettings | None = None,
        max_text_chars: int = EVALUATED_CHARS,
    ) -> None:
        redaction = redaction or RedactionSettings()
        file = Path(path) if isinstance(path, str | Path) else None
        super().__init__(
            self.Options(path=file, redaction=redaction, max_text_chars=max_text_chars)
        )
        self.max_text_chars = max_text_chars
        # Redaction is on unless told otherwise: this file is what leaves the process.
        self.redactor = Redactor.for_path(redaction, "jsonl")
        if isinstance(path, str | Path):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._file: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115
            self._owned = True
        else:
            self._file, self._owned = path, False
        self._lock = threading.Lock()

    @classmethod
    def section(cls, settings: Settings) -> dict[str, Any]:
        return {
            "redaction": settings.redaction.model_dump(),
            "max_text_chars": settings.evaluation.max_text_chars,
        }

    @classmethod
    def create(cls, options: JsonlSink.Options, context: PluginContext) -> JsonlSink | None:
        if not options.path:
            return None
        return cls(options.path, options.redaction, options.max_text_chars)

    def export(self, item: ExportItem[RagRecord]) -> None:
        line = record_line(item, self.redactor, self.max_text_chars)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()  # readers (tail -f, tests) see whole lines promptly

    def export_conversation(self, item: ExportItem[ConversationRecord]) -> None:
        """One line ``{"conversation": ..., "results": ...}`` per closed (or revised)
        conversation, and per judge's update of one."""
        line = conversation_line(item, self.redactor)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def shutdown(self) -> None:
        with self._lock:
            if self._owned and not self._file.closed:
                self._file.close()
