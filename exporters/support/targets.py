"""Which span of a record each evaluation result is about.

The GenAI conventions ask for a ``gen_ai.evaluation.result`` to be parented to the
GenAI operation span being evaluated; OpenInference links its EVALUATOR carrier to
the span the feedback describes. :data:`METRIC_TARGETS` says, per metric, which of
the record's spans that is; :func:`evaluated_span` resolves it on one record.

A result may name its span itself: ``details["target_span_id"]`` (the failed tool call
of ``tool_error``, the repeated call of ``tool_loop``, the hijacking call of
``injection_followed/agent``) wins over the table. In an agent turn, an injection found
in a document is about the tool call that returned it (``Document.source.span_id``), and
the answer metrics are about the final model call (``generation_span_id``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeGuard

from ragpulse.record import EvalResult, RagRecord


class Target(StrEnum):
    """Which span of the record a metric is about."""

    ROOT = "root"  # the pipeline span: the exchange as a whole
    GENERATION = "generation"  # the LLM call that wrote the answer
    RETRIEVAL = "retrieval"  # the retrieval that returned the documents
    FOUND_IN = "found_in"  # where the result found it: a document -> its span, else ROOT
    TOOL = "tool"  # the tool call that returned the document a finding is in (agents)
    NAMED = "named"  # the span the result names: details["target_span_id"]


METRIC_TARGETS: Mapping[str, Target] = {
    # about the answer, i.e. the completion that produced it
    "faithfulness": Target.GENERATION,
    "answer_relevance": Target.GENERATION,
    "answer_reward": Target.GENERATION,
    "refusal": Target.GENERATION,
    "answer_correctness": Target.GENERATION,
    "answer_compliance": Target.GENERATION,
    "answer_completeness": Target.GENERATION,
    "expected_refusal": Target.GENERATION,
    "injection_resistance": Target.GENERATION,
    "injection_followed": Target.GENERATION,  # did the answer obey a planted instruction
    "counterfactual_adoption": Target.GENERATION,
    "consistency": Target.GENERATION,  # does the answer contradict an earlier one
    # about the documents
    "context_relevance": Target.RETRIEVAL,
    # in a document: the retrieval span (in an agent turn, the tool call that returned
    # it); in the question (or nowhere): the root
    "injection": Target.FOUND_IN,
    # agent turns: about the answer; the turn as a whole (agent_steps) is the root, and
    # tool_error / tool_loop name the call they found (details.target_span_id)
    "unsupported_answer": Target.GENERATION,
}
"""metric -> the span it is about; a metric not listed is about the root span."""


@dataclass(frozen=True)
class EvaluatedSpan:
    """The span a result is about, and the completion id when it is about a completion."""

    span_id: str
    target: Target
    response_id: str | None = None


TARGET_SPAN_ID = "target_span_id"
"""``details`` key of a result about one span of the trace other than the record's root."""


def _riskiest_place(result: EvalResult) -> str | None:
    """``where`` of the riskiest finding (``details.findings[].where``): ``question`` or
    ``document:<i>``; None without findings."""
    findings = result.details.get("findings")
    if not isinstance(findings, list):
        return None
    located = [f for f in findings if isinstance(f, dict) and isinstance(f.get("where"), str)]
    if not located:
        return None

    def risk(finding: dict[str, Any]) -> float:
        value = finding.get("risk")
        return float(value) if isinstance(value, int | float) else 0.0

    return str(max(located, key=risk)["where"])


def _document_span(record: RagRecord, where: str) -> str | None:
    """The span that returned document ``i`` of ``document:<i>``, when the record says
    (an agent turn's tool call or retriever: ``Document.source``); None for a RAG record's
    document (no source) or a bad index."""
    index = where.removeprefix("document:")
    if not index.isdigit() or int(index) >= len(record.documents):
        return None
    source = record.documents[int(index)].source
    return source.span_id if source is not None and is_span_id(source.span_id) else None


def _generation(record: RagRecord, target: Target = Target.GENERATION) -> EvaluatedSpan:
    # The response id correlates the result with the completion even without its span.
    span_id = record.generation_span_id
    if not is_span_id(span_id):
        return EvaluatedSpan(record.span_id, target, record.response_id)
    return EvaluatedSpan(span_id, target, record.response_id)


def evaluated_span(record: RagRecord, result: EvalResult) -> EvaluatedSpan:
    """The span ``result`` is about: the one it names (``details.target_span_id``), else
    its metric's (:data:`METRIC_TARGETS`); the record's span when the trace did not show
    that operation. Documents from several retrievals: the first one (a RAG record does
    not say which retrieval returned which document; an agent turn's documents do)."""
    named = result.details.get(TARGET_SPAN_ID)
    if isinstance(named, str) and is_span_id(named := named.lower()):
        if named == record.generation_span_id:
            return _generation(record, Target.NAMED)
        return EvaluatedSpan(named, Target.NAMED)
    target = METRIC_TARGETS.get(result.metric, Target.ROOT)
    if target is Target.FOUND_IN:
        where = _riskiest_place(result) or ""
        if not where.startswith("document:"):
            return EvaluatedSpan(record.span_id, Target.ROOT)
        if (tool_span := _document_span(record, where)) is not None:
            return EvaluatedSpan(tool_span, Target.TOOL)
        target = Target.RETRIEVAL
    if target is Target.GENERATION:
        return _generation(record)
    retrievals = [s for s in record.retrieval_span_ids if is_span_id(s)]
    if target is Target.RETRIEVAL and retrievals:
        return EvaluatedSpan(retrievals[0], target)
    return EvaluatedSpan(record.span_id, Target.ROOT)


def is_span_id(value: str | None) -> TypeGuard[str]:
    """16 hex digits, not all zero (a malformed id falls back to the record's span)."""
    if not value or len(value) != 16:
        return False
    try:
        return int(value, 16) != 0
    except ValueError:
        return False
