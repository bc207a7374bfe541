"""An in-memory sink for tests and notebooks (ships with the product, like OTel's)."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import TypeVar

from ragpulse.exporters.base import Sink
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import ConversationRecord, ExportItem, ExportKind, RagRecord

R = TypeVar("R", RagRecord, ConversationRecord)


class InMemorySink(Sink):
    """Every evaluated record as one export item, its record's later items joined (by
    ``record_id``): an update's results are added (its ``sampled`` and ``pending`` replace
    the item's), a revision replaces the item."""

    name = "memory"

    def __init__(self) -> None:
        super().__init__()
        self._items: list[ExportItem[RagRecord]] = []
        self._conversations: dict[str, ExportItem[ConversationRecord]] = {}
        self._lock = threading.Lock()

    @classmethod
    def create(cls, options: PluginOptions, context: PluginContext) -> InMemorySink | None:
        return None  # only ever added programmatically (Collector(extra_sinks=...))

    def export(self, item: ExportItem[RagRecord]) -> None:
        with self._lock:
            if item.kind is not ExportKind.FIRST:
                key = item.record.record_id
                for i in range(len(self._items) - 1, -1, -1):
                    kept = self._items[i]
                    if kept.record.record_id == key:
                        self._items[i] = _joined(kept, item)
                        return
            self._items.append(item)

    def export_conversation(self, item: ExportItem[ConversationRecord]) -> None:
        """Keep a conversation's latest record (a revision replaces the earlier one; an
        update adds its results to the record of the same revision it follows)."""
        with self._lock:
            cid = item.record.conversation_id
            kept = self._conversations.get(cid)
            if kept is not None and kept.record.revision == item.record.revision:
                self._conversations[cid] = _joined(kept, item)
            else:
                self._conversations[cid] = item

    @property
    def items(self) -> list[ExportItem[RagRecord]]:
        with self._lock:
            return list(self._items)

    @property
    def conversations(self) -> dict[str, ExportItem[ConversationRecord]]:
        """Each conversation's latest record and results, by conversation id."""
        with self._lock:
            return dict(self._conversations)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._conversations.clear()


def _joined(kept: ExportItem[R], item: ExportItem[R]) -> ExportItem[R]:
    """``item`` as kept after ``kept``: an update joined to it, anything else in its place."""
    if item.kind is not ExportKind.UPDATE:
        return item
    return replace(
        kept,
        results=[*kept.results, *item.results],
        sampled={**kept.sampled, **item.sampled},
        pending=item.pending,
    )
