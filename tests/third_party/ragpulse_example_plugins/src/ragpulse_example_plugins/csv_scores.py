"""``csv_scores``: one CSV row per result of the chosen metrics."""

from __future__ import annotations

import csv
import threading
from pathlib import Path

from pydantic import Field

from ragpulse.exporters.base import Sink
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import ExportItem, RagRecord


class CsvScoresSink(Sink["CsvScoresSink.Options"]):
    name = "csv_scores"

    class Options(PluginOptions):
        path: Path = Field(description="the CSV file (appended to)")
        metrics: list[str] = Field(default_factory=list, description="metrics kept; empty = all")

    def __init__(self, options: Options, context: PluginContext | None = None):
        super().__init__(options, context)
        self._lock = threading.Lock()
        self.options.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.options.path.open("a", newline="", encoding="utf-8")
        self._writer = csv.writer(self._file)

    def export(self, item: ExportItem[RagRecord]) -> None:
        """One row per result, as each comes (a costly tier's update brings only its new
        ones); the file is appended to, so a revision's rows follow the earlier ones and
        the last row of a trace and metric stands."""
        keep = self.options.metrics
        with self._lock:
            for r in item.results:
                if not keep or r.metric in keep:
                    self._writer.writerow([item.record.trace_id, r.name, r.score, r.label])
            self._file.flush()

    def shutdown(self) -> None:
        with self._lock:
            self._file.close()
