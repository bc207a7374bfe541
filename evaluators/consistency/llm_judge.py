"""``consistency/llm_judge``: does the answer contradict an earlier answer of the
conversation?

One call per turn record that has earlier assistant answers in its history: the judge
gives one verdict per earlier answer (``consistent``, or ``contradicts`` when the new
answer states something incompatible with it about the same thing; a correction the
answer owns up to is still a contradiction), each with a reason. Arithmetic: 0 when any
earlier answer is contradicted, else 1. Earlier answers and the new one travel in the
fenced data block, never as instructions. The judged content is the earlier answers (the
shared block: the next turn of the same conversation starts with the same bytes) and the
turn's question and answer.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ragpulse.evaluators.base import ANSWERED
from ragpulse.evaluators.judge.base import JudgeEvaluator
from ragpulse.evaluators.judge.prompts import Prompt
from ragpulse.record import EvalResult, RagRecord


class EarlierAnswer(BaseModel):
    index: int
    turn: int | None
    text: str


class ConsistencyInput(BaseModel):
    earlier_answers: list[EarlierAnswer]
    question: str
    answer: str


class PairVerdict(BaseModel):
    index: int
    verdict: Literal["consistent", "contradicts"]
    reason: str = Field(max_length=300)


class ConsistencyVerdicts(BaseModel):
    verdicts: list[PairVerdict]


PROMPT = Prompt(
    name="consistency.verdicts",
    version="1",
    instruction=(
        "For each earlier answer of the assistant, does the new answer contradict it? "
        "'contradicts': the new answer states something incompatible with the earlier one "
        "about the same thing (another number, date, name or fact), a correction included; "
        "'consistent': it agrees, or speaks of other things. Judge the answers against each "
        "other only, not against your own knowledge. One verdict per earlier answer "
        "(by its index), each with a one-sentence reason."
    ),
    input_model=ConsistencyInput,
    output_model=ConsistencyVerdicts,
    shared=("earlier_answers",),
)
MAX_EARLIER = 10
"""Earlier answers judged against (the latest ones)."""


class JudgeConsistency(JudgeEvaluator):
    metric = "consistency"
    method = "llm_judge"
    applies_to = ANSWERED

    async def _judge(self, record: RagRecord) -> EvalResult:
        earlier = [m for m in record.history if m.role == "assistant" and m.content]
        if not earlier:
            return self.not_applicable("no earlier answer in the conversation")
        if not record.answer.strip():
            return self.not_applicable("answer is empty")
        assert self.client is not None
        answers = [
            EarlierAnswer(index=i, turn=m.turn, text=m.content)
            for i, m in enumerate(earlier[-MAX_EARLIER:])
        ]
        output, usage = await self.client.ask(
            PROMPT,
            ConsistencyInput(earlier_answers=answers, question=record.question,
                             answer=record.answer),
        )  # fmt: skip
        by_index = {a.index: a for a in answers}
        contradicted = [
            {"turn": by_index[v.index].turn, "reason": v.reason}
            for v in output.verdicts
            if v.verdict == "contradicts" and v.index in by_index
        ]
        if contradicted:
            first = contradicted[0]
            return self.judged(
                0.0, usage, [PROMPT.id], label="contradiction",
                explanation=str(first["reason"]), contradictions=contradicted,
            )  # fmt: skip
        return self.judged(
            1.0, usage, [PROMPT.id], label="consistent",
            explanation=f"agrees with {len(answers)} earlier answer(s)",
        )  # fmt: skip
