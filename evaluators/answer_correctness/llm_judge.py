"""``answer_correctness/llm_judge``: the graded fact comparison of OpenAI evals' ``fact``
template, against a test-set row's reference answers (offline only)."""

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
class FactChoice(BaseModel):
    reason: str = Field(max_length=600)
    choice: Literal["A", "B", "C", "D", "E"]


CORRECTNESS = Prompt(
    name="answer_correctness.fact",
    version="2",
    instruction=(
        REFERENCES_INSTRUCTION
        + "Compare the factual content of the submitted answer with the reference: "
        "it may be a subset or a superset of it, or conflict with it. Choose one option:\n"
        "A: the submitted answer is a subset of the reference and fully consistent with it.\n"
        "B: the submitted answer is a superset of the reference and fully consistent with it.\n"
        "C: the submitted answer contains all the same details as the reference.\n"
        "D: there is a disagreement between the submitted answer and the reference.\n"
        "E: the answers differ, but these differences do not matter for factuality.\n"
        "Give a short reason, then the letter as choice."
    ),
    input_model=ReferenceInput,
    output_model=FactChoice,
)


# letter -> (score, what it means), as ragpulse.evaluators.judge.reference explains.
CORRECTNESS_CHOICES = {
    "A": (0.5, "subset of the reference, consistent"),
    "B": (1.0, "superset of the reference, consistent"),
    "C": (1.0, "same details as the reference"),
    "D": (0.0, "disagrees with the reference"),
    "E": (1.0, "differs in ways that do not matter for factuality"),
}


class JudgeAnswerCorrectness(ReferenceJudge):
    metric = "answer_correctness"
    method = "llm_judge"
    PROMPT = CORRECTNESS
    CHOICES = CORRECTNESS_CHOICES
