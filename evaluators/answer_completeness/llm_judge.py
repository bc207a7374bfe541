"""``answer_completeness/llm_judge``: how much of the reference answers the answer covers
(offline only)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ragpulse.evaluators.judge.prompts import Prompt
from ragpulse.evaluators.judge.reference import (
    REFERENCES_INSTRUCTION,
    ReferenceInput,
    ReferenceJudge,
)


# ``reason`` comes before ``choice`` in every schema: a model filling the JSON in
# order reasons first and commits to a letter after, as OpenAI evals' chain of
# thought grading does.
class CompletenessChoice(BaseModel):
    reason: str = Field(max_length=600)
    choice: Literal["A", "B", "C", "D"]


COMPLETENESS = Prompt(
    name="answer_completeness.coverage",
    version="2",
    instruction=(
        REFERENCES_INSTRUCTION
        + "How much of the information in the reference does the submitted answer "
        "contain? Choose one option:\n"
        "A: all of it.\n"
        "B: most of it.\n"
        "C: some of it.\n"
        "D: none of it.\n"
        "Give a short reason, then the letter as choice."
    ),
    input_model=ReferenceInput,
    output_model=CompletenessChoice,
)


# letter -> (score, what it means), as ragpulse.evaluators.judge.reference explains.
COMPLETENESS_CHOICES = {
    "A": (1.0, "covers all of the reference"),
    "B": (2 / 3, "covers most of the reference"),
    "C": (1 / 3, "covers some of the reference"),
    "D": (0.0, "covers none of the reference"),
}


class JudgeAnswerCompleteness(ReferenceJudge):
    metric = "answer_completeness"
    method = "llm_judge"
    PROMPT = COMPLETENESS
    CHOICES = COMPLETENESS_CHOICES
