"""``knowledge_retention/llm_judge``: does the assistant keep what the user said earlier?

One verdict per follow-up turn (from the turn and the turns before it): ``retained`` when
the answer is consistent with what the user stated in earlier turns (their name, numbers,
constraints, preferences) where it bears on the answer, ``forgot`` when the answer
contradicts it, ignores it or asks for it again, ``not_applicable`` when nothing the user
said earlier bears on this answer. Arithmetic: score = retained / (retained + forgot);
``forgot`` when any answer forgot; a conversation where no answer depended on what the
user said earlier scores 1 (``nothing_to_retain``). A grown conversation sends only its
new turns (:mod:`ragpulse.evaluators.judge.conversation`).
"""

from __future__ import annotations

from typing import Any, Literal

from ragpulse.evaluators.judge.conversation import (
    TRANSCRIPT_RULES,
    ConversationJudge,
    TurnsInput,
    TurnVerdict,
    TurnVerdicts,
)
from ragpulse.evaluators.judge.prompts import Prompt
from ragpulse.record import EvalResult


class RetentionVerdict(TurnVerdict):
    verdict: Literal["retained", "forgot", "not_applicable"]


PROMPT = Prompt(
    name="knowledge_retention.verdicts",
    version="1",
    instruction=(
        "For each judged turn, does the assistant's answer keep what the user stated in "
        "earlier turns (facts about themselves, numbers, names, constraints, preferences)? "
        "'retained': the answer is consistent with it where it matters; 'forgot': the answer "
        "contradicts it, ignores it where it matters, or asks the user for it again; "
        "'not_applicable': nothing the user said in earlier turns bears on this answer. "
        "Name what was forgotten in the reason. " + TRANSCRIPT_RULES
    ),
    input_model=TurnsInput,
    output_model=TurnVerdicts[RetentionVerdict],
)


class JudgeKnowledgeRetention(ConversationJudge):
    """Share of the answers that depended on earlier user statements and kept them."""

    metric = "knowledge_retention"
    prompt = PROMPT
    verdict_model = RetentionVerdict
    first_turn = 2

    def aggregate(self, verdicts: dict[int, Any], numbers: dict[int, int]) -> EvalResult:
        forgot = [numbers[p] for p, v in verdicts.items() if v.verdict == "forgot"]
        retained = sum(v.verdict == "retained" for v in verdicts.values())
        if not forgot and not retained:
            return self.result(
                1.0,
                label="nothing_to_retain",
                explanation="no answer depended on what the user said earlier",
                forgot_turns=[],
            )
        judged = retained + len(forgot)
        explanation = f"{retained} of {judged} answers kept what the user said earlier"
        if forgot:
            explanation += f"; forgot in turn(s) {', '.join(map(str, forgot))}"
        return self.result(
            retained / judged,
            label="forgot" if forgot else "retained",
            explanation=explanation,
            forgot_turns=forgot,
        )
