"""One JSON line per evaluated record: the record, then its results."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from pydantic import Field

from ragpulse.config import Settings
from ragpulse.exporters.base import Sink
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import EvalResult, RagRecord


def result_dict(result: EvalResult) -> dict[str, Any]:
    out = result.model_dump(mode="json", exclude={"duration_ms"})
    if out.get("error") is None:
        out.pop("error", None)
    return out


def record_line(record: RagRecord, results: Sequence[EvalResult]) -> str:
    row = record.model_dump(mode="json")
    row["results"] = [result_dict(r) for r in results]
    return json.dumps(row, ensure_ascii=False)


class JsonlSink(Sink):
    """``results_jsonl`` (or ``sinks.jsonl.path``): one line per evaluated record."""

    name = "jsonl"
    default_enabled = True

    class Options(PluginOptions):
        path: Path | None = Field(None, description="file appended to; unset = off")

    def __init__(self, path: str | Path | TextIO) -> None:
        if isinstance(path, str | Path):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._file: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115
            self._owned = True
        else:
            self._file, self._owned = path, False
        self._lock = threading.Lock()

    @classmethod
    def section(cls, settings: Settings) -> dict[str, Any]:
        return {"path": settings.results_jsonl}

    @classmethod
    def create(cls, options: PluginOptions, context: PluginContext) -> JsonlSink | None:
        assert isinstance(options, cls.Options)
        return cls(options.path) if options.path else None

    def export(self, record: RagRecord, results: Sequence[EvalResult]) -> None:
        line = record_line(record, results)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()  # readers (tail -f, tests) see whole lines promptly

    def shutdown(self) -> None:
        with self._lock:
            if self._owned and not self._file.closed:
                self._file.close()
