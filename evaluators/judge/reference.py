"""What the reference-based judges share: ``answer_correctness``, ``answer_compliance`` and
``answer_completeness`` (each metric's prompt and letter mapping is beside it).

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

from typing import Any, ClassVar

from pydantic import BaseModel

from ragpulse.evaluators.base import ANSWERED
from ragpulse.evaluators.judge.base import JudgeEvaluator
from ragpulse.evaluators.judge.prompts import Prompt
from ragpulse.record import EvalResult, RagRecord


class ReferenceInput(BaseModel):
    question: str
    reference_answers: list[str]
    answer: str


REFERENCES_INSTRUCTION = (
    "reference_answers holds one or more expert answers to the question; each is a complete, "
    "correct answer on its own. Compare the submitted answer (answer) with the reference "
    "answer it agrees with best. Ignore differences of style, grammar, punctuation and "
    "length. "
)


class ReferenceJudge(JudgeEvaluator):
    """One call: the prompt's letter is the label, ``CHOICES`` maps it to the score."""

    requires_reference = True
    applies_to = ANSWERED
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
