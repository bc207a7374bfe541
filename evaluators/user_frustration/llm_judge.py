"""``user_frustration/llm_judge``: does the user show frustration with the answers?

One verdict per follow-up turn, on the user's message read after the turns before it:
``frustrated`` (complains, says the answer is wrong or useless, repeats or insists on
what they asked, shows annoyance) or ``not_frustrated``. Arithmetic, as
``user_frustration/rules``: score = share of judged follow-ups that are frustrated (lower
is better), ``frustrated`` at ``frustrated_at`` or above; ``details.resolved`` says whether
the last judged follow-up was calm again after a frustrated one. A grown conversation
sends only its new turns (:mod:`ragpulse.evaluators.judge.conversation`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ragpulse.evaluators.judge.conversation import (
    TRANSCRIPT_RULES,
    ConversationJudge,
    TurnsInput,
    TurnVerdict,
    TurnVerdicts,
)
from ragpulse.evaluators.judge.prompts import Prompt
from ragpulse.record import Direction, EvalResult


class FrustrationVerdict(TurnVerdict):
    verdict: Literal["frustrated", "not_frustrated"]


PROMPT = Prompt(
    name="user_frustration.verdicts",
    version="1",
    instruction=(
        "For each judged turn, does the user's message in that turn show frustration with "
        "the assistant's earlier answers? 'frustrated': the user complains, says an answer "
        "was wrong, useless or not what they asked, repeats or insists on an earlier "
        "request, or shows annoyance; 'not_frustrated': otherwise (a new question, a "
        "follow-up, thanks). Judge the user's message only. " + TRANSCRIPT_RULES
    ),
    input_model=TurnsInput,
    output_model=TurnVerdicts[FrustrationVerdict],
)


class JudgeUserFrustration(ConversationJudge):
    """Share of the follow-up turns whose user message shows frustration."""

    metric = "user_frustration"
    prompt = PROMPT
    verdict_model = FrustrationVerdict
    first_turn = 2
    direction = Direction.LOWER_IS_BETTER

    class Options(ConversationJudge.Options):
        frustrated_at: float = Field(
            0.33, gt=0, le=1, description="share of frustrated follow-ups labelled 'frustrated'"
        )

    options: Options

    def aggregate(self, verdicts: dict[int, Any], numbers: dict[int, int]) -> EvalResult:
        if not verdicts:
            return self.not_applicable("no follow-up turn was judged")
        frustrated = [numbers[p] for p, v in verdicts.items() if v.verdict == "frustrated"]
        score = len(frustrated) / len(verdicts)
        last = verdicts[max(verdicts)]
        return self.result(
            score,
            label="frustrated" if score >= self.options.frustrated_at else "not_frustrated",
            explanation=f"{len(frustrated)} of {len(verdicts)} follow-ups show frustration",
            frustrated_turns=frustrated,
            resolved=bool(frustrated) and last.verdict != "frustrated",
        )
