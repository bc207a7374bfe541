"""What the sinks share about results: redacting what they quote, who judged them, the
metadata and label a tracing tool shows with each."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ragpulse import semconv as sc
from ragpulse.record import ConversationRecord, EvalResult, RagRecord
from ragpulse.redaction import Redactor, scrub_words

MAX_DETAILS_CHARS = 4096
"""Longest ``details`` JSON sent along with a result; longer ones are cut and say so."""


def annotator_kind(method: str) -> str:
    """OpenInference ``annotator_kind``: LLM for a judge, CODE for every other method."""
    return sc.ANNOTATOR_LLM if "judge" in method else sc.ANNOTATOR_CODE


def redact_result(
    result: EvalResult,
    redactor: Redactor,
    words: frozenset[str] = frozenset(),
    keep: frozenset[str] = frozenset(),
) -> EvalResult:
    """``result`` with its free-text fields redacted (metric, method, label are names);
    ``words`` (:meth:`Redactor.words_of` the record) also go where quoted alone; an e-mail
    address in ``keep`` (:meth:`Redactor.destinations`) keeps its domain."""
    explanation, error = result.explanation, result.error
    return result.model_copy(
        update={
            "explanation": redactor.redact(explanation, keep) if explanation else None,
            "error": redactor.redact(error, keep) if error else None,
            "details": scrub_words(redactor.redact_json(result.details, keep), words),
        }
    )


def record_texts(record: RagRecord) -> list[str]:
    """The texts a result can quote: question, answer, documents."""
    return [record.question, record.answer, *(d.content for d in record.documents)]


def redact_results(
    record: RagRecord, results: Sequence[EvalResult], redactor: Redactor
) -> Sequence[EvalResult]:
    """``results`` with what they quote redacted; themselves (no copy) when the record
    and the results hold nothing to redact, which one quick check tells."""
    texts = record_texts(record)
    quoted = [[r.explanation, r.error, r.details] for r in results]
    if not redactor.needs_redaction([texts, quoted]):
        return results
    words = redactor.words_of(texts)
    keep = redactor.destinations(r.details for r in results)
    return [redact_result(r, redactor, words, keep) for r in results]


def redact_conversation_results(
    conversation: ConversationRecord, results: Sequence[EvalResult], redactor: Redactor
) -> Sequence[EvalResult]:
    """:func:`redact_results` for a conversation's results: what they can quote is every
    turn's question and answer."""
    texts = [text for t in conversation.turns for text in (t.question, t.answer)]
    quoted = [[r.explanation, r.error, r.details] for r in results]
    if not redactor.needs_redaction([texts, quoted]):
        return results
    words = redactor.words_of(texts)
    keep = redactor.destinations(r.details for r in results)
    return [redact_result(r, redactor, words, keep) for r in results]


def result_metadata(result: EvalResult) -> dict[str, Any]:
    """What every tool gets besides score, label and explanation: who judged, how, why."""
    meta: dict[str, Any] = {
        "evaluator": "ragpulse",
        "method": result.method,
        "annotator_kind": annotator_kind(result.method),
        "direction": result.direction.value,
    }
    if result.error:
        meta["error"] = result.error
    if result.details:
        text = json.dumps(result.details, default=str)
        if len(text) <= MAX_DETAILS_CHARS:
            meta["details"] = json.loads(text)
        else:
            meta["details"] = text[:MAX_DETAILS_CHARS]
            meta["details_truncated"] = True
    return meta


def error_label(result: EvalResult) -> str | None:
    """The label a result shows: its own; ``error`` for a failed evaluation (tools want a
    label or a score on every annotation); ``not_scored`` when it has neither."""
    if result.label:
        return result.label
    if result.error:
        return "error"
    return "not_scored" if result.score is None else None
