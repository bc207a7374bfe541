"""``answer_compliance/llm_judge``: does the answer state facts beyond the reference answers
(offline only)?"""

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
class ComplianceChoice(BaseModel):
    reason: str = Field(max_length=600)
    choice: Literal["A", "B", "C"]


COMPLIANCE = Prompt(
    name="answer_compliance.facts",
    version="2",
    instruction=(
        REFERENCES_INSTRUCTION
        + "Does the submitted answer state facts that the reference does not? "
        "Choose one option:\n"
        "A: it states no facts beyond those of the reference.\n"
        "B: it states new facts, none of which contradicts the reference.\n"
        "C: it states facts that contradict the reference.\n"
        "Give a short reason, then the letter as choice."
    ),
    input_model=ReferenceInput,
    output_model=ComplianceChoice,
)


# letter -> (score, what it means), as ragpulse.evaluators.judge.reference explains.
COMPLIANCE_CHOICES = {
    "A": (1.0, "no facts beyond the reference"),
    "B": (0.5, "new facts, none contradicting the reference"),
    "C": (0.0, "facts contradicting the reference"),
}


class JudgeAnswerCompliance(ReferenceJudge):
    metric = "answer_compliance"
    method = "llm_judge"
    PROMPT = COMPLIANCE
    CHOICES = COMPLIANCE_CHOICES
