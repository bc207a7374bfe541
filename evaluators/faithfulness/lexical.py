"""``faithfulness/lexical``: K-Precision, the share of the answer's content tokens found in
the documents. Microseconds per record, run on all traffic."""

from __future__ import annotations

from ragpulse.evaluators.base import ANSWERED
from ragpulse.evaluators.injection_engine.planted import evidence_documents
from ragpulse.evaluators.text.analyses import TextAnalyses
from ragpulse.evaluators.text.overlap import LexicalEvaluator
from ragpulse.record import EvalResult, RagRecord


class LexicalFaithfulness(LexicalEvaluator):
    """K-Precision: the share of the answer's content tokens found in the documents.

    Reference: Adlakha et al., "Evaluating Correctness and Faithfulness of
    Instruction-Following Models for Question Answering" (2023). Counts token
    occurrences, so a repeated unsupported word weighs as often as it appears.
    Text of an instruction planted in a document (a span the injection rules
    flag) is not support: copying an attacker's words is not faithfulness.
    """

    metric = "faithfulness"
    applies_to = ANSWERED
    method = "lexical"

    def lexical(self, record: RagRecord, texts: TextAnalyses) -> EvalResult:
        if not record.documents:
            return self.not_applicable("no documents retrieved")
        answer = texts.view(record.answer).tokens
        if not answer:
            return self.not_applicable("answer has no content words")
        # Planted instructions are not evidence (evaluators/injection_engine/planted.py).
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
