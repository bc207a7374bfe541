"""Reference-based judges: ``answer_correctness``, ``answer_compliance``, ``answer_completeness``.

Each compares the answer with a test-set row's reference answers in one call
(offline only: they need :attr:`RagRecord.reference`, which live records lack,
so they are never on by default and a record without reference answers gets
``not_applicable`` without a call). The judge picks a letter; the letter is the
result's label and maps to the score:

``answer_correctness/llm_judge``, the graded fact comparison of OpenAI evals'
``fact`` template:

- ``A`` subset of the reference, consistent: **0.5** (right, but partial);
- ``B`` superset of the reference, consistent: **1.0** (the reference's facts are
  all there; the extra facts are not checked against it here: that is
  ``answer_compliance``'s and faithfulness's job, so they are not charged twice);
- ``C`` the same details: **1.0**;
- ``D`` disagrees with the reference: **0.0**;
- ``E`` differs, but not in a way that matters for factuality: **1.0**.

``answer_compliance/llm_judge``, facts beyond the reference: ``A`` none **1.0**,
``B`` new but not contradictory **0.5**, ``C`` contradictory **0.0**.

``answer_completeness/llm_judge``, how much of the reference the answer covers:
``A`` all **1.0**, ``B`` most **2/3**, ``C`` some **1/3**, ``D`` none **0.0**.

Several reference answers are sent together, as alternatives that are each a
complete correct answer, and the judge compares with the one the answer agrees
with best: one call whatever their number, and an answer that matches any
accepted phrasing is not penalised for not matching the others.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from ragpulse.evaluators.judge.base import JudgeEvaluator
from ragpulse.evaluators.judge.prompts import Prompt
from ragpulse.record import EvalResult, RagRecord


class ReferenceInput(BaseModel):
    question: str
    reference_answers: list[str]
    answer: str


# ``reason`` comes before ``choice`` in every schema: a model filling the JSON in
# order reasons first and commits to a letter after, as OpenAI evals' chain of
# thought grading does.
class FactChoice(BaseModel):
    reason: str = Field(max_length=600)
    choice: Literal["A", "B", "C", "D", "E"]


class ComplianceChoice(BaseModel):
    reason: str = Field(max_length=600)
    choice: Literal["A", "B", "C"]


class CompletenessChoice(BaseModel):
    reason: str = Field(max_length=600)
    choice: Literal["A", "B", "C", "D"]


_REFERENCES = (
    "reference_answers holds one or more expert answers to the question; each is a complete, "
    "correct answer on its own. Compare the submitted answer (answer) with the reference "
    "answer it agrees with best. Ignore differences of style, grammar, punctuation and "
    "length. "
)
CORRECTNESS = Prompt(
    name="answer_correctness.fact",
    version="2",
    instruction=(
        _REFERENCES + "Compare the factual content of the submitted answer with the reference: "
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
COMPLIANCE = Prompt(
    name="answer_compliance.facts",
    version="2",
    instruction=(
        _REFERENCES + "Does the submitted answer state facts that the reference does not? "
        "Choose one option:\n"
        "A: it states no facts beyond those of the reference.\n"
        "B: it states new facts, none of which contradicts the reference.\n"
        "C: it states facts that contradict the reference.\n"
        "Give a short reason, then the letter as choice."
    ),
    input_model=ReferenceInput,
    output_model=ComplianceChoice,
)
COMPLETENESS = Prompt(
    name="answer_completeness.coverage",
    version="2",
    instruction=(
        _REFERENCES + "How much of the information in the reference does the submitted answer "
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


# letter -> (score, what it means), the mapping the module docstring justifies.
CORRECTNESS_CHOICES = {
    "A": (0.5, "subset of the reference, consistent"),
    "B": (1.0, "superset of the reference, consistent"),
    "C": (1.0, "same details as the reference"),
    "D": (0.0, "disagrees with the reference"),
    "E": (1.0, "differs in ways that do not matter for factuality"),
}
COMPLIANCE_CHOICES = {
    "A": (1.0, "no facts beyond the reference"),
    "B": (0.5, "new facts, none contradicting the reference"),
    "C": (0.0, "facts contradicting the reference"),
}
COMPLETENESS_CHOICES = {
    "A": (1.0, "covers all of the reference"),
    "B": (2 / 3, "covers most of the reference"),
    "C": (1 / 3, "covers some of the reference"),
    "D": (0.0, "covers none of the reference"),
}


class ReferenceJudge(JudgeEvaluator):
    """One call: the prompt's letter is the label, ``CHOICES`` maps it to the score."""

    requires_reference = True
    default_enabled = False  # live records carry no reference: never on in serve
    PROMPT: ClassVar[Prompt[ReferenceInput, Any]]  # output: a ``reason`` and a ``choice`` letter
    CHOICES: ClassVar[dict[str, tuple[float, str]]]

    async def _judge(self, record: RagRecord) -> EvalResult:
        given = record.reference.answers if record.reference is not None else []
        references = [a for a in given if a.strip()]
        if not references:
            return self.not_applicable("no reference answers on this record")
        if not record.answer.strip():
            return self.not_applicable("answer is empty")
        assert self.client is not None
        inputs = ReferenceInput(
            question=record.question, reference_answers=references, answer=record.answer
        )
        verdict, usage = await self.client.ask(self.PROMPT, inputs)
        score, meaning = self.CHOICES[verdict.choice]
        return self.judged(
            score,
            usage,
            [self.PROMPT.id],
            label=verdict.choice,
            explanation=f"{meaning}: {verdict.reason}",
            references=len(references),
        )


class JudgeAnswerCorrectness(ReferenceJudge):
    metric = "answer_correctness"
    method = "llm_judge"
    PROMPT = CORRECTNESS
    CHOICES = CORRECTNESS_CHOICES


class JudgeAnswerCompliance(ReferenceJudge):
    metric = "answer_compliance"
    method = "llm_judge"
    PROMPT = COMPLIANCE
    CHOICES = COMPLIANCE_CHOICES


class JudgeAnswerCompleteness(ReferenceJudge):
    metric = "answer_completeness"
    method = "llm_judge"
    PROMPT = COMPLETENESS
    CHOICES = COMPLETENESS_CHOICES
