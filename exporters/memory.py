"""An in-memory sink for tests and notebooks (ships with the product, like OTel's)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ragpulse import semconv as sc
from ragpulse.exporters.base import Sink
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import ConversationRecord, EvalResult, EvaluatedRecord, RagRecord


class InMemorySink(Sink):
    """Every evaluated record with its results, one item per record (updates joined)."""

    name = "memory"

    def __init__(self) -> None:
        super().__init__()
        self._items: list[EvaluatedRecord] = []
        self._conversations: dict[str, tuple[ConversationRecord, list[EvalResult]]] = {}
        self._lock = threading.Lock()

    @classmethod
    def create(cls, options: PluginOptions, context: PluginContext) -> InMemorySink | None:
        return None  # only ever added programmatically (Collector(extra_sinks=...))

    def export(self, record: RagRecord, results: Sequence[EvalResult]) -> None:
        """Keep the record; an update (``ragpulse.update``) joins the record's item: its
        results are added and its attributes replace the item's."""
        with self._lock:
            if sc.RAGPULSE_UPDATE in record.attributes:
                for i in range(len(self._items) - 1, -1, -1):
                    item = self._items[i]
                    if (item.record.trace_id, item.record.span_id) == (
                        record.trace_id,
                        record.span_id,
                    ):
                        attributes = {
                            k: v for k, v in record.attributes.items() if k != sc.RAGPULSE_UPDATE
                        }
                        merged = item.record.model_copy(update={"attributes": attributes})
                        self._items[i] = EvaluatedRecord(
                            record=merged, results=[*item.results, *results]
                        )
                        return
            self._items.append(EvaluatedRecord(record=record, results=list(results)))

    def export_conversation(
        self, conversation: ConversationRecord, results: Sequence[EvalResult]
    ) -> None:
        """Keep a conversation's latest record (a revision replaces the earlier one; an
        update, ``ragpulse.update``, adds its results to the record it follows)."""
        with self._lock:
            kept = self._conversations.get(conversation.conversation_id)
            if sc.RAGPULSE_UPDATE in conversation.attributes and kept is not None:
                earlier, earlier_results = kept
                if earlier.revision == conversation.revision:
                    attributes = {
                        k: v for k, v in conversation.attributes.items()
                        if k not in (sc.RAGPULSE_UPDATE, sc.RAGPULSE_PENDING)
                    }  # fmt: skip
                    merged = earlier.model_copy(update={"attributes": attributes})
                    self._conversations[conversation.conversation_id] = (
                        merged, [*earlier_results, *results]
                    )  # fmt: skip
                    return
            self._conversations[conversation.conversation_id] = (conversation, list(results))

    @property
    def items(self) -> list[EvaluatedRecord]:
        with self._lock:
            return list(self._items)

    @property
    def conversations(self) -> dict[str, tuple[ConversationRecord, list[EvalResult]]]:
        """Each conversation's latest record and results, by conversation id."""
        with self._lock:
            return dict(self._conversations)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._conversations.clear()
