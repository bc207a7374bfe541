"""Which span of a record each evaluation result is about.

The GenAI conventions ask for a ``gen_ai.evaluation.result`` to be parented to the
GenAI operation span being evaluated; OpenInference links its EVALUATOR carrier to
the span the feedback describes. :data:`METRIC_TARGETS` says, per metric, which of
the record's spans that is; :func:`evaluated_span` resolves it on one record.
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
    FOUND_IN = "found_in"  # where the result found it: a document -> RETRIEVAL, else ROOT


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
    # about the documents
    "context_relevance": Target.RETRIEVAL,
    # in a document: the retrieval span; in the question (or nowhere): the root
    "injection": Target.FOUND_IN,
}
"""metric -> the span it is about; a metric not listed is about the root span."""


@dataclass(frozen=True)
class EvaluatedSpan:
    """The span a result is about, and the completion id when it is about a completion."""

    span_id: str
    target: Target
    response_id: str | None = None


def _found_in_document(result: EvalResult) -> bool:
    """Whether the riskiest finding (``details.findings[].where``) is a document."""
    findings = result.details.get("findings")
    if not isinstance(findings, list):
        return False
    located = [f for f in findings if isinstance(f, dict) and isinstance(f.get("where"), str)]
    if not located:
        return False

    def risk(finding: dict[str, Any]) -> float:
        value = finding.get("risk")
        return float(value) if isinstance(value, int | float) else 0.0

    return str(max(located, key=risk)["where"]).startswith("document:")


def evaluated_span(record: RagRecord, result: EvalResult) -> EvaluatedSpan:
    """The span ``result`` is about (:data:`METRIC_TARGETS`); the record's span when the
    trace did not show that operation. Documents from several retrievals: the first one
    (a record does not say which retrieval returned which document)."""
    target = METRIC_TARGETS.get(result.metric, Target.ROOT)
    if target is Target.FOUND_IN:
        target = Target.RETRIEVAL if _found_in_document(result) else Target.ROOT
    if target is Target.GENERATION:
        # The response id correlates the result with the completion even without its span.
        span_id = record.generation_span_id
        return EvaluatedSpan(
            span_id if is_span_id(span_id) else record.span_id, target, record.response_id
        )
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
