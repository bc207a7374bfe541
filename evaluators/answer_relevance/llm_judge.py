"""``answer_relevance/llm_judge``: does the answer address the question (yes / partly /
no, with a reason)?"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ragpulse.evaluators.base import ANSWERED
from ragpulse.evaluators.judge.base import JudgeEvaluator
from ragpulse.evaluators.judge.prompts import Prompt
from ragpulse.record import EvalResult, RagRecord


class AnswerInput(BaseModel):
    question: str
    answer: str


class AnswerVerdict(BaseModel):
    verdict: Literal["yes", "partly", "no"]
    reason: str = Field(max_length=500)


ANSWER = Prompt(
    name="answer_relevance.verdict",
    version="2",
    instruction=(
        "Does the answer address the question that was asked? 'yes': it answers it (a "
        "refusal or 'I don't know' addresses it too); 'partly': it answers part of it or "
        "drifts; 'no': it answers something else. Judge relevance only, not correctness."
    ),
    input_model=AnswerInput,
    output_model=AnswerVerdict,
)
_ANSWER_SCORE = {"yes": 1.0, "partly": 0.5, "no": 0.0}


class JudgeAnswerRelevance(JudgeEvaluator):
    metric = "answer_relevance"
    applies_to = ANSWERED
    method = "llm_judge"

    async def _judge(self, record: RagRecord) -> EvalResult:
        if not record.question.strip() or not record.answer.strip():
            return self.not_applicable("question or answer is empty")
        assert self.client is not None
        verdict, usage = await self.client.ask(
            ANSWER, AnswerInput(question=record.question, answer=record.answer)
        )
        return self.judged(
            _ANSWER_SCORE[verdict.verdict],
            usage,
            [ANSWER.id],
            label=verdict.verdict,
            explanation=verdict.reason,
        )
