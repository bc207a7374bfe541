"""``answer_relevance/lexical``: the share of the question's content tokens that the answer
repeats."""

from __future__ import annotations

from ragpulse.evaluators.base import ANSWERED
from ragpulse.evaluators.text.analyses import TextAnalyses
from ragpulse.evaluators.text.overlap import LexicalEvaluator, share_in
from ragpulse.record import EvalResult, RagRecord


class LexicalAnswerRelevance(LexicalEvaluator):
    """Share of the question's content tokens that the answer repeats."""

    metric = "answer_relevance"
    applies_to = ANSWERED
    method = "lexical"

    def lexical(self, record: RagRecord, texts: TextAnalyses) -> EvalResult:
        question = tuple(dict.fromkeys(texts.view(record.question).tokens))
        if not question:
            return self.not_applicable("question has no content words")
        if not record.answer.strip():
            return self.result(0.0, label="empty_answer", explanation="the answer is empty")
        # The answer's tokens are read by faithfulness too: their set, not a second split.
        score = share_in(question, texts.view(record.answer).token_set)
        return self.result(
            score,
            explanation=f"the answer repeats {score:.0%} of the question's content tokens",
            question_tokens=len(question),
        )
