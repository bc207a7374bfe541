"""Lexical (token-overlap) metrics: microseconds per record, run on all traffic.

The three read the same analysis of each text (:attr:`Evaluator.texts`): a document is
tokenised once for all of them, and once only while it keeps being retrieved.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.evaluators.injection.planted import evidence_documents
from ragpulse.evaluators.text import TextAnalyses
from ragpulse.record import EvalResult, RagRecord


def _share_in(unique: Sequence[str], vocabulary: frozenset[str]) -> float:
    """The share of ``unique`` (distinct content tokens) found in ``vocabulary`` (a
    :attr:`~ragpulse.evaluators.text.TextView.word_set` or ``token_set``)."""
    return len(vocabulary.intersection(unique)) / len(unique)


class _Lexical(Evaluator):
    """Scores a batch with one :class:`TextAnalyses` (the context's, once loaded)."""

    def _score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        texts = self.texts
        return [self._lexical(r, texts) for r in records]

    def _score(self, record: RagRecord) -> EvalResult:
        return self._lexical(record, self.texts)

    def _lexical(self, record: RagRecord, texts: TextAnalyses) -> EvalResult:
        raise NotImplementedError


class LexicalFaithfulness(_Lexical):
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

    def _lexical(self, record: RagRecord, texts: TextAnalyses) -> EvalResult:
        if not record.documents:
            return self.not_applicable("no documents retrieved")
        answer = texts.view(record.answer).tokens
        if not answer:
            return self.not_applicable("answer has no content words")
        # Planted instructions are not evidence (evaluators/injection/planted.py).
        evidence = [texts.view(t).word_set for t in evidence_documents(record, texts=texts)]
        # The answer's tokens that no document has (set operations in C, no union built).
        missing = frozenset(answer).difference(*evidence)
        score = (len(answer) - sum(map(missing.__contains__, answer))) / len(answer)
        unsupported = sorted(missing)
        return self.result(
            score,
            explanation=f"{score:.0%} of {len(answer)} answer content tokens are in the documents",
            answer_tokens=len(answer),
            unsupported_tokens=unsupported[:50],
        )


class LexicalContextRelevance(_Lexical):
    """Per document, the share of the question's content tokens it contains; max over documents."""

    metric = "context_relevance"
    method = "lexical"
    tier = Tier.CHEAP

    def _lexical(self, record: RagRecord, texts: TextAnalyses) -> EvalResult:
        if not record.documents:
            return self.not_applicable("no documents retrieved")
        question = texts.view(record.question).tokens
        if not question:
            return self.not_applicable("question has no content words")
        unique = tuple(dict.fromkeys(question))
        view = texts.view
        per_doc = [round(_share_in(unique, view(d.content).word_set), 4) for d in record.documents]
        best = max(range(len(per_doc)), key=per_doc.__getitem__)
        return self.result(
            per_doc[best],
            explanation=f"document {best} has {per_doc[best]:.0%} of the question's content words",
            per_document=per_doc,
            mean=round(sum(per_doc) / len(per_doc), 4),
            best_document=best,
        )


class LexicalAnswerRelevance(_Lexical):
    """Share of the question's content tokens that the answer repeats."""

    metric = "answer_relevance"
    method = "lexical"
    tier = Tier.CHEAP

    def _lexical(self, record: RagRecord, texts: TextAnalyses) -> EvalResult:
        question = tuple(dict.fromkeys(texts.view(record.question).tokens))
        if not question:
            return self.not_applicable("question has no content words")
        if not record.answer.strip():
            return self.result(0.0, label="empty_answer", explanation="the answer is empty")
        # The answer's tokens are read by faithfulness too: their set, not a second split.
        score = _share_in(question, texts.view(record.answer).token_set)
        return self.result(
            score,
            explanation=f"the answer repeats {score:.0%} of the question's content tokens",
            question_tokens=len(question),
        )
