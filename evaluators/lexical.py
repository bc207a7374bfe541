"""Lexical (token-overlap) metrics: microseconds per record, run on all traffic."""

from __future__ import annotations

from functools import lru_cache

from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.evaluators.injection.planted import evidence_documents
from ragpulse.evaluators.text import content_tokens
from ragpulse.record import EvalResult, RagRecord


@lru_cache(maxsize=4096)
def content_token_set(text: str) -> frozenset[str]:
    """The set of :func:`content_tokens`, cached too: documents are looked up once per
    evaluator per record, and building the set costs more than finding it."""
    return frozenset(content_tokens(text))


def _coverage(tokens: tuple[str, ...], vocabulary: frozenset[str]) -> float:
    return sum(tok in vocabulary for tok in tokens) / len(tokens)


class LexicalFaithfulness(Evaluator):
    """K-Precision: the share of the answer's content tokens found in the documents.

    Reference: Adlakha et al., "Evaluating Correctness and Faithfulness of
    Instruction-Following Models for Question Answering" (2023). Counts token
    occurrences, so a repeated unsupported word weighs as often as it appears.
    Text of an instruction planted in a document (a span the injection rules
    flag) is not support: copying an attacker's words is not faithfulness.
    """

    metric = "faithfulness"
    method = "lexical"
    tier = Tier.CHEAP

    def _score(self, record: RagRecord) -> EvalResult:
        if not record.documents:
            return self.not_applicable("no documents retrieved")
        answer = content_tokens(record.answer)
        if not answer:
            return self.not_applicable("answer has no content words")
        # Planted instructions are not evidence (evaluators/injection/planted.py).
        evidence = evidence_documents(record)
        vocabulary = frozenset().union(*(content_token_set(text) for text in evidence))
        score = _coverage(answer, vocabulary)
        unsupported = sorted({tok for tok in answer if tok not in vocabulary})
        return self.result(
            score,
            explanation=f"{score:.0%} of {len(answer)} answer content tokens are in the documents",
            answer_tokens=len(answer),
            unsupported_tokens=unsupported[:50],
        )


class LexicalContextRelevance(Evaluator):
    """Per document, the share of the question's content tokens it contains; max over documents."""

    metric = "context_relevance"
    method = "lexical"
    tier = Tier.CHEAP

    def _score(self, record: RagRecord) -> EvalResult:
        if not record.documents:
            return self.not_applicable("no documents retrieved")
        question = content_tokens(record.question)
        if not question:
            return self.not_applicable("question has no content words")
        unique = tuple(dict.fromkeys(question))
        per_doc = [
            round(_coverage(unique, content_token_set(d.content)), 4) for d in record.documents
        ]
        best = max(range(len(per_doc)), key=per_doc.__getitem__)
        return self.result(
            per_doc[best],
            explanation=f"document {best} has {per_doc[best]:.0%} of the question's content words",
            per_document=per_doc,
            mean=round(sum(per_doc) / len(per_doc), 4),
            best_document=best,
        )


class LexicalAnswerRelevance(Evaluator):
    """Share of the question's content tokens that the answer repeats."""

    metric = "answer_relevance"
    method = "lexical"
    tier = Tier.CHEAP

    def _score(self, record: RagRecord) -> EvalResult:
        question = tuple(dict.fromkeys(content_tokens(record.question)))
        if not question:
            return self.not_applicable("question has no content words")
        if not record.answer.strip():
            return self.result(0.0, label="empty_answer", explanation="the answer is empty")
        score = _coverage(question, content_token_set(record.answer))
        return self.result(
            score,
            explanation=f"the answer repeats {score:.0%} of the question's content tokens",
            question_tokens=len(question),
        )
