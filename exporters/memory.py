"""An in-memory sink for tests and notebooks (ships with the product, like OTel's)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ragpulse.exporters.base import Sink
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import EvalResult, EvaluatedRecord, RagRecord


class InMemorySink(Sink):
    name = "memory"

    def __init__(self) -> None:
        self._items: list[EvaluatedRecord] = []
        self._lock = threading.Lock()

    @classmethod
    def create(cls, options: PluginOptions, context: PluginContext) -> InMemorySink | None:
        return None  # only ever added programmatically (Collector(extra_sinks=...))

    def export(self, record: RagRecord, results: Sequence[EvalResult]) -> None:
        with self._lock:
            self._items.append(EvaluatedRecord(record=record, results=list(results)))

    @property
    def items(self) -> list[EvaluatedRecord]:
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
