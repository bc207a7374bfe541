"""``answer_relevance/lexical``: the share of the question's content tokens that the answer
repeats.

An answer too short to repeat anything ("180 degrees." to "What temperature for
lasagne?") says nothing lexically: with at most ``short_answer_tokens`` content tokens and
none of the question's, it is not applicable rather than scored 0. A follow-up's
question is read standalone (the earlier turn's topic added), as every relevance metric
reads it.
"""

from __future__ import annotations

from pydantic import Field

from ragpulse.evaluators.base import ANSWERED
from ragpulse.evaluators.text.analyses import TextAnalyses
from ragpulse.evaluators.text.overlap import LexicalEvaluator, share_in
from ragpulse.plugin_context import PluginOptions
from ragpulse.record import EvalResult, RagRecord


class LexicalAnswerRelevance(LexicalEvaluator):
    """Share of the question's content tokens that the answer repeats."""

    metric = "answer_relevance"
    applies_to = ANSWERED
    method = "lexical"

    class Options(PluginOptions):
        short_answer_tokens: int = Field(
            3,
            ge=0,
            description="an answer with at most this many content tokens and none of the "
            "question's is not applicable (too short to judge lexically); 0 scores every "
            "answer",
        )

    options: Options

    def lexical(self, record: RagRecord, texts: TextAnalyses) -> EvalResult:
        question = tuple(dict.fromkeys(texts.view(record.relevance_question).tokens))
        if not question:
            return self.not_applicable("question has no content words")
        if not record.answer.strip():
            return self.result(0.0, label="empty_answer", explanation="the answer is empty")
        # The answer's tokens are read by faithfulness too: their set, not a second split.
        answer = texts.view(record.answer).token_set
        score = share_in(question, answer)
        if score == 0 and len(answer) <= self.options.short_answer_tokens:
            return self.not_applicable(
                f"the answer has {len(answer)} content word(s), none of the question's: too "
                "short to judge lexically"
            )
        return self.result(
            score,
            explanation=f"the answer repeats {score:.0%} of the question's content tokens",
            question_tokens=len(question),
        )
