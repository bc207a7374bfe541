"""``csv_scores``: one CSV row per result of the chosen metrics."""

from __future__ import annotations

import csv
import threading
from collections.abc import Sequence
from pathlib import Path

from pydantic import Field

from ragpulse.exporters.base import Sink
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import EvalResult, RagRecord


class CsvScoresSink(Sink):
    name = "csv_scores"

    class Options(PluginOptions):
        path: Path = Field(description="the CSV file (appended to)")
        metrics: list[str] = Field(default_factory=list, description="metrics kept; empty = all")

    options: Options

    def __init__(self, options: PluginOptions | None = None, context: PluginContext | None = None):
        super().__init__(options, context)
        self._lock = threading.Lock()
        self.options.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.options.path.open("a", newline="", encoding="utf-8")
        self._writer = csv.writer(self._file)

    def export(self, record: RagRecord, results: Sequence[EvalResult]) -> None:
        keep = self.options.metrics
        with self._lock:
            for r in results:
                if not keep or r.metric in keep:
                    self._writer.writerow([record.trace_id, r.name, r.score, r.label])
            self._file.flush()

    def shutdown(self) -> None:
        with self._lock:
            self._file.close()
