"""``conversation_completeness/llm_judge``: were the user's requests met by the end?

One verdict per turn (from the turn and the turns before it): ``met``, ``partly`` or
``unmet`` for the request the user made in it, ``no_request`` for a turn that asks nothing
(thanks, a greeting), and ``same_request_as`` when the turn asks again, or clarifies, a
request of an earlier turn. Arithmetic: turns joined by ``same_request_as`` are one
request, whose outcome is its latest turn's verdict (a request unmet at first and met after
a rephrasing is met); the score is the mean outcome over requests (met 1, partly 0.5,
unmet 0); ``complete`` when every request was met. A grown conversation sends only its
new turns (:mod:`ragpulse.evaluators.judge.conversation`).
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
from ragpulse.record import EvalResult


class CompletenessVerdict(TurnVerdict):
    verdict: Literal["met", "partly", "unmet", "no_request"]
    same_request_as: int | None = Field(
        None, description="An earlier turn whose request this turn asks again or continues."
    )


PROMPT = Prompt(
    name="conversation_completeness.verdicts",
    version="1",
    instruction=(
        "For each judged turn, did the assistant's answer in that turn meet what the user "
        "asked for in that turn? 'met': fully; 'partly': in part; 'unmet': not at all, a "
        "refusal or an evasion; 'no_request': the user's message asks for nothing (thanks, "
        "a greeting, an acknowledgement). Set same_request_as to the earlier turn when the "
        "user repeats, rephrases or clarifies a request of that turn, else null. "
        + TRANSCRIPT_RULES
    ),
    input_model=TurnsInput,
    output_model=TurnVerdicts[CompletenessVerdict],
)
_OUTCOME = {"met": 1.0, "partly": 0.5, "unmet": 0.0}


class JudgeConversationCompleteness(ConversationJudge):
    """Share of the user's requests the conversation met (by their latest attempt)."""

    metric = "conversation_completeness"
    prompt = PROMPT
    verdict_model = CompletenessVerdict

    def aggregate(self, verdicts: dict[int, Any], numbers: dict[int, int]) -> EvalResult:
        request_of: dict[int, int] = {}  # position -> the position that opened its request
        latest: dict[int, str] = {}  # opening position -> the latest verdict of the request
        for position, v in verdicts.items():
            if v.verdict == "no_request":
                continue
            earlier = v.same_request_as
            opening = (
                request_of[earlier]
                if earlier is not None and earlier < position and earlier in request_of
                else position
            )
            request_of[position] = opening
            latest[opening] = v.verdict
        if not latest:
            return self.not_applicable("no turn made a request")
        score = sum(_OUTCOME[v] for v in latest.values()) / len(latest)
        unmet = [numbers[p] for p, v in latest.items() if v != "met"]
        requests = [
            {
                "turns": [numbers[p] for p, o in request_of.items() if o == opening],
                "outcome": outcome,
            }
            for opening, outcome in latest.items()
        ]
        return self.result(
            score,
            label="complete" if not unmet else "incomplete",
            explanation=f"{len(latest) - len(unmet)} of {len(latest)} requests met"
            + (f"; not met: turn(s) {', '.join(map(str, unmet))}" if unmet else ""),
            requests=requests,
        )
