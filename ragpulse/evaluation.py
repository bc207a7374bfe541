"""Running evaluators over records: shared by the collector, ``ragpulse eval`` and replay.

Lives in the core (not the collector) so that offline scoring, benchmarks and
plug-ins use it without importing the collector.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from ragpulse.config import EvaluationSettings
from ragpulse.errors import ModelUnavailable
from ragpulse.evaluators.base import AnyEvaluator, Evaluator, EvaluatorBase, Scored, Scoring
from ragpulse.evaluators.text.analyses import ANALYSES_KEPT
from ragpulse.plugin_context import PluginContext
from ragpulse.record import EvalResult, RagRecord

if TYPE_CHECKING:
    from ragpulse.telemetry import CollectorMetrics

log = logging.getLogger(__name__)
E = TypeVar("E", bound=EvaluatorBase)

TRUNCATED_INPUT = "truncated_input"
"""The key, in every result's ``details``, listing what of the record was not evaluated."""


class Truncation(BaseModel):
    """One text cut to the evaluation limits, or the documents left out past them."""

    field: str  # "question", "answer", "documents[3].content", or "documents[7:]"
    chars: int  # characters the record had there
    evaluated_chars: int  # characters the evaluators saw
    documents: int | None = None  # for "documents[i:]": how many were left out


def text_limits(evaluators: Sequence[EvaluatorBase]) -> tuple[int, int]:
    """(max_text_chars, max_record_chars) of the settings the evaluators were loaded with.

    Read from their plug-in context so that every caller (collector, ``ragpulse eval``,
    replay) gets the configured bound without passing it; defaults when none is loaded.
    """
    for evaluator in evaluators:
        context = getattr(evaluator, "context", None)  # a plug-in may skip our __init__
        if context is not None:
            evaluation = context.settings.evaluation
            return evaluation.max_text_chars, evaluation.max_record_chars
    fields = EvaluationSettings.model_fields
    return fields["max_text_chars"].default, fields["max_record_chars"].default


def bound_record(
    record: RagRecord, max_text_chars: int, max_record_chars: int
) -> tuple[RagRecord, list[Truncation]]:
    """``record`` with each text cut to ``max_text_chars`` and the whole to
    ``max_record_chars`` (question, answer, then documents in order); what was cut.

    Texts are cut, not windowed: every tier's cost grows with the text (tokenising, a
    model's windows, the judge's prompt), and a 50 MB document must cost what 200 kB do.
    Model evaluators still window what is left by tokens.
    """
    total = (
        len(record.question) + len(record.answer) + sum(len(d.content) for d in record.documents)
    )
    if total <= max_text_chars and total <= max_record_chars:
        return record, []  # the common case: nothing to look at per text
    cuts: list[Truncation] = []
    room = max_record_chars

    def cut(field: str, text: str) -> str:
        nonlocal room
        keep = min(len(text), max_text_chars, room)
        room -= keep
        if keep < len(text):
            cuts.append(Truncation(field=field, chars=len(text), evaluated_chars=keep))
            return text[:keep]
        return text

    update: dict[str, Any] = {"question": cut("question", record.question)}
    update["answer"] = cut("answer", record.answer)
    documents = []
    for i, doc in enumerate(record.documents):
        if room <= 0:  # out of room: the rest is left out (kept when it is all empty)
            rest = record.documents[i:]
            chars = sum(len(d.content) for d in rest)
            if chars:
                cuts.append(
                    Truncation(field=f"documents[{i}:]", chars=chars, evaluated_chars=0,
                               documents=len(rest))
                )  # fmt: skip
            else:
                documents.extend(rest)
            break
        content = cut(f"documents[{i}].content", doc.content)
        documents.append(
            doc if content is doc.content else doc.model_copy(update={"content": content})
        )
    if not cuts:
        return record, []
    update["documents"] = documents
    return record.model_copy(update=update), cuts


PASS_TEXTS = ANALYSES_KEPT // 2
"""Texts (questions, answers, documents) that every evaluator reads in one pass at most.
The evaluators run one after the other over a pass, sharing each text's analysis
(``Evaluator.texts``, which keeps :data:`ANALYSES_KEPT`): a pass with more texts than
that would be analysed again by each evaluator (256 rows of 20 documents, say)."""


def _passes(records: Sequence[RagRecord]) -> list[tuple[int, int]]:
    """(start, stop) of consecutive records with at most :data:`PASS_TEXTS` texts each
    (a record with more is a pass of its own)."""
    passes, start, texts = [], 0, 0
    for i, record in enumerate(records):
        size = 2 + len(record.documents)
        if texts and texts + size > PASS_TEXTS:
            passes.append((start, i))
            start, texts = i, 0
        texts += size
    passes.append((start, len(records)))
    return passes


def evaluate_records(
    records: Sequence[RagRecord],
    evaluators: Sequence[AnyEvaluator],
    metrics: CollectorMetrics | None = None,
) -> list[list[EvalResult]]:
    """Run every evaluator of turn records over the batch; results[i] belongs to
    records[i] (conversation evaluators are the conversation stage's: left out here).

    An evaluator scores only the records whose kind it applies to
    (:attr:`~ragpulse.evaluators.base.Evaluator.applies_to`).

    Texts past ``evaluation.max_text_chars`` / ``max_record_chars`` are cut first
    (:func:`bound_record`); every result of such a record lists the cuts in
    ``details.truncated_input``. A batch of more than :data:`PASS_TEXTS` texts is
    evaluated in passes.
    """
    return start_evaluation(records, evaluators, metrics).results()


class Evaluation:
    """A batch of records handed to every evaluator (:func:`start_evaluation`)."""

    def __init__(
        self,
        size: int,
        started: list[tuple[Evaluator, Sequence[int], Scoring, float]],
        cuts: list[list[Truncation]],
        metrics: CollectorMetrics | None,
    ) -> None:
        self._size, self._started, self._cuts, self._metrics = size, started, cuts, metrics

    @property
    def queued(self) -> bool:
        """Whether some evaluator queued work (``results()`` waits on a device) rather than
        scoring while it was started."""
        return any(not isinstance(scoring, Scored) for _, _, scoring, _ in self._started)

    def results(self) -> list[list[EvalResult]]:
        """results[i] belongs to records[i]; blocks until every evaluator has them."""
        metrics = self._metrics
        results: list[list[EvalResult]] = [[] for _ in range(self._size)]
        for evaluator, positions, scoring, spent in self._started:
            began = time.perf_counter()
            scored = scoring.results()
            if metrics is not None:
                metrics.evaluator_duration.labels(evaluator.metric, evaluator.method).observe(
                    spent + time.perf_counter() - began
                )
            for i, result in zip(positions, scored, strict=True):
                results[i].append(result)
                if result.error and metrics is not None:
                    metrics.evaluator_errors.labels(result.metric, result.method).inc()
        for i, cuts in enumerate(self._cuts):
            if cuts:
                noted = [c.model_dump(exclude_none=True) for c in cuts]
                results[i] = [
                    r.model_copy(update={"details": {**r.details, TRUNCATED_INPUT: noted}})
                    for r in results[i]
                ]
        return results


def start_evaluation(
    records: Sequence[RagRecord],
    evaluators: Sequence[AnyEvaluator],
    metrics: CollectorMetrics | None = None,
    priority: bool = False,
) -> Evaluation:
    """Hand the batch to every evaluator (:meth:`~ragpulse.evaluators.base.Evaluator.start`)
    and return at once where they queue work on a device (the detectors), so that their
    work shares forward passes and the caller may prepare the next batch; ``results()``
    waits. ``priority``: the batch's queued work goes before other batches'."""
    if not records:
        return Evaluation(0, [], [], metrics)
    limits = text_limits(evaluators)
    bounded = [bound_record(r, *limits) for r in records]
    evaluated = [r for r, _ in bounded]
    started: list[tuple[Evaluator, Sequence[int], Scoring, float]] = []
    for begin, stop in _passes(evaluated):
        chunk = evaluated[begin:stop]
        kinds = {r.kind for r in chunk}
        for evaluator in evaluators:
            if not isinstance(evaluator, Evaluator):
                continue
            # Each evaluator scores the kinds of record it applies to (an answer metric
            # not a retrieval alone, an agent signal agent turns only): the rest get none.
            positions: Sequence[int] = range(begin, stop)
            if kinds <= evaluator.applies_to:
                mine = chunk
            else:
                positions = [i for i in positions if evaluated[i].kind in evaluator.applies_to]
                mine = [evaluated[i] for i in positions]
                if not mine:
                    continue
            began = time.perf_counter()
            scoring = evaluator.start(mine, priority)
            started.append((evaluator, positions, scoring, time.perf_counter() - began))
    return Evaluation(len(records), started, [cuts for _, cuts in bounded], metrics)


def load_evaluators_safely(
    evaluators: Sequence[E], context: PluginContext | None = None
) -> list[E]:
    """Load each evaluator with ``context``; drop (log once, count) those that cannot run.

    Without a context (tests, notebooks) each call gets a fresh one with default settings.
    """
    context = context if context is not None else PluginContext()
    ready = []
    for evaluator in evaluators:
        reason = evaluator.missing()
        if reason is None:
            try:
                evaluator.load(context)
            except ModelUnavailable as exc:
                reason = str(exc)
            except Exception as exc:  # a broken model must not crash-loop the collector
                reason = f"{type(exc).__name__}: {exc}"
        if reason:
            log.error("evaluator %s disabled: %s", evaluator.name, reason)
        else:
            ready.append(evaluator)
        if not context.offline:  # gauges for a collector's /metrics; offline, the log says it
            metrics = context.metrics
            metrics.evaluator_available.labels(evaluator.metric, evaluator.method).set(
                0 if reason else 1
            )
            if not reason:
                labels = (evaluator.metric, evaluator.method, evaluator.tier.value)
                metrics.evaluator_info.labels(*labels, evaluator.direction.value).set(1)
                metrics.evaluator_loaded(evaluator.metric, evaluator.method)
        placed = evaluator.placement() if not reason else None
        if placed is not None:
            log.info("%s runs its model on %s in %s", evaluator.name, *placed)
            if not context.offline:
                metrics = context.metrics
                metrics.model_placement.labels(evaluator.metric, evaluator.method, *placed).set(1)
    return ready
