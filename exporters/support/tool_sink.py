"""Evaluation results filed in a tracing tool through its API, off the evaluation thread.

The sinks that write into a tool (Phoenix annotations, MLflow assessments, Langfuse
scores) are each three parts: what a result becomes in the tool (the sink's
:meth:`ToolSink.items`), the tool's API (its transport,
:mod:`ragpulse.exporters.support.http_api`), and the delivery that queues, batches and
retries between the two (:mod:`ragpulse.exporters.support.delivery`), composed here.

``export`` finds the span each result judges
(:func:`ragpulse.exporters.support.targets.evaluated_span`), redacts what the results
quote (the ``redaction`` section, path ``otel``: every evaluation export to a tracing
tool), turns them into items and hands them to the delivery without blocking. Every kind
of export item is filed alike: a costly tier's update adds its results, and a revision's
results replace the earlier ones, each tool's sink keying them by the record's
``record_id`` (Phoenix's identifier, Langfuse's score id, the assessment MLflow's sink
updates or overrides). A revision may judge another span than the build before it (a
record first built without its root span, a later model call): each result then says
where its earlier one was (:attr:`Judged.moved_from`), for a tool that keys by span to
take that one back.
"""

from __future__ import annotations

import collections
import logging
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from ragpulse import semconv as sc
from ragpulse.config import Settings
from ragpulse.exporters.base import Sink
from ragpulse.exporters.support.delivery import ApiRequest, Delivery, DeliveryOptions, Transport
from ragpulse.exporters.support.results import redact_conversation_results, redact_results
from ragpulse.exporters.support.targets import EvaluatedSpan, evaluated_span
from ragpulse.record import ConversationRecord, EvalResult, ExportItem, ExportKind, RagRecord
from ragpulse.redaction import Redactor
from ragpulse.telemetry import CollectorMetrics

log = logging.getLogger(__name__)

ItemT = TypeVar("ItemT")
ToolOptionsT = TypeVar("ToolOptionsT", bound=DeliveryOptions)


@dataclass(frozen=True)
class Judged:
    """One result (redacted) with the span it judges."""

    result: EvalResult
    target: EvaluatedSpan
    moved_from: str | None = None
    """A revision's result whose earlier one (same record, metric and method) judged
    another span: that span."""


MOVES_KEPT = 1_000
"""Revisions whose costly tiers are still to report, remembered for where their earlier
results were (bounded: the least recent is forgotten first)."""


class SpanCheck(Protocol):
    """A read-back of the spans a sink judged
    (:class:`ragpulse.exporters.support.target_check.TargetCheck`)."""

    def offer(self, trace_id: str, project: str | None, spans: collections.Counter[str]) -> None:
        """Take these judged spans (span id -> items) for a later check; never blocks."""

    def close(self) -> None:
        """Stop checking (checks still waiting are not run)."""


class ToolSink(Sink[ToolOptionsT], Generic[ItemT, ToolOptionsT]):
    """A sink that files each result in a tracing tool (see the module doc).

    A tool's sink builds its transport (and, for a tool that takes results for spans it
    does not have, a read-back of the judged spans) from its options and passes them
    here; it fills :meth:`items` (results -> items, on the evaluation thread), and
    :meth:`conversation_items` for a conversation's results and :meth:`item_span` for the
    read-back where it has them.
    """

    def __init__(
        self,
        options: ToolOptionsT,
        transport: Transport[ItemT],
        *,
        metrics: CollectorMetrics | None = None,
        check: SpanCheck | None = None,
    ) -> None:
        super().__init__(options)
        self.redactor = Redactor.for_path(options.redaction, "otel")
        self.metrics = metrics if metrics is not None else CollectorMetrics()
        self.transport = transport
        self.delivery = Delivery(self.name, transport, options, self.metrics)
        self._check = check
        # record id -> result name -> the span an earlier build's result was filed on, for
        # a revision's results still to come (its costly tiers' updates).
        self._moves: collections.OrderedDict[str, dict[str, str]] = collections.OrderedDict()

    @classmethod
    def section(cls, settings: Settings) -> dict[str, Any]:
        return {"redaction": settings.redaction.model_dump()}

    # -- hooks --------------------------------------------------------------------------

    @abstractmethod
    def items(self, record: RagRecord, judged: Sequence[Judged]) -> list[ItemT]:
        """The items to send for these results of ``record`` (already redacted)."""

    def conversation_items(
        self, conversation: ConversationRecord, results: Sequence[EvalResult]
    ) -> list[ItemT]:
        """The items to send for a conversation's results (already redacted); none by
        default, for a tool with no place for a session's evaluations."""
        return []

    def item_span(self, item: ItemT) -> str | None:
        """The span ``item`` judges, for the read-back (only asked when there is one)."""
        return None

    # -- the evaluation thread ----------------------------------------------------------

    def preview(self, item: ExportItem[RagRecord]) -> list[ApiRequest]:
        """The requests :meth:`export` would lead to for this item, built the same way and
        not sent (``ragpulse eval --from ... --dry-run``)."""
        record = item.record
        if not record.trace_id or not record.span_id or not item.results:
            return []
        items = self._items_for(record, item.results, {})
        return self.transport.requests(items) if items else []

    def _items_for(
        self, record: RagRecord, results: Sequence[EvalResult], earlier: dict[str, str]
    ) -> list[ItemT]:
        # Targets first: where an injection was found is read from unredacted details.
        targets = [evaluated_span(record, r) for r in results]
        moved = [
            was if (was := earlier.get(r.name)) is not None and was != t.span_id else None
            for r, t in zip(results, targets, strict=True)
        ]
        if self.redactor.enabled:
            results = redact_results(record, results, self.redactor)
        judged = [Judged(r, t, m) for r, t, m in zip(results, targets, moved, strict=True)]
        return self.items(record, judged)

    def _earlier_spans(self, item: ExportItem[RagRecord]) -> dict[str, str]:
        """Result name -> the span the record's earlier build filed it on, for a revision
        (and for the updates that complete it)."""
        rid = item.record.record_id
        if item.kind is ExportKind.REVISION and item.previous is not None:
            previous = item.previous
            spans = {r.name: evaluated_span(previous, r).span_id for r in item.previous_results}
            later = {n: s for n, s in spans.items() if n not in {r.name for r in item.results}}
            self._moves.pop(rid, None)
            if later and item.pending:
                self._moves[rid] = later
                while len(self._moves) > MOVES_KEPT:
                    self._moves.popitem(last=False)
            return spans
        waiting = self._moves.get(rid) if item.kind is ExportKind.UPDATE else None
        if waiting is not None and not item.pending:
            del self._moves[rid]
        return waiting or {}

    def export(self, item: ExportItem[RagRecord]) -> None:
        record = item.record
        if not record.trace_id or not record.span_id or not item.results:
            return  # nothing in the tool to attach the results to
        try:
            items = self._items_for(record, item.results, self._earlier_spans(item))
        except Exception:
            log.exception("%s sink: cannot build items for trace %s", self.name, record.trace_id)
            self.metrics.sink_errors.labels(self.name).inc()
            return
        taken = self.delivery.put(items)
        if self._check is not None and taken:
            spans = collections.Counter(s for i in taken if (s := self.item_span(i)))
            project = record.attributes.get(sc.OPENINFERENCE_PROJECT_NAME)
            project = project if isinstance(project, str) and project else None
            self._check.offer(record.trace_id, project, spans)

    def export_conversation(self, item: ExportItem[ConversationRecord]) -> None:
        """The conversation metrics' results, as the tool files a session's evaluations
        (:meth:`conversation_items`); a revision, a repeat or a judge's update writes the
        same items again, which the tool upserts."""
        conversation, results = item.record, item.results
        if not conversation.turns or not results:
            return
        try:
            if self.redactor.enabled:
                results = redact_conversation_results(conversation, results, self.redactor)
            items = self.conversation_items(conversation, results)
        except Exception:
            log.exception(
                "%s sink: cannot build items for conversation %s",
                self.name,
                conversation.conversation_id,
            )
            self.metrics.sink_errors.labels(self.name).inc()
            return
        self.delivery.put(items)

    def force_flush(self, timeout_s: float | None = None) -> bool:
        """Send every item held now (retries included) without waiting to fill a batch;
        True when none is left within ``timeout_s`` (default ``flush_timeout_s``)."""
        return self.delivery.force_flush(timeout_s)

    def start(self) -> None:
        self.delivery.start()

    def shutdown(self) -> None:
        """Send what is held within ``flush_timeout_s``; count the rest as failed."""
        if self._check is not None:
            self._check.close()  # read-backs still waiting are not run
        self.delivery.shutdown()
