"""``user_frustration/rules``: signs that the user is not getting what they asked for.

A turn is a frustration signal when the user asks again what they asked before (its
question shares at least ``repeat_overlap`` of its content words with an earlier
question, the Jaccard index of their word sets: a repetition or a rephrasing), or gives
negative feedback (``user_feedback``). The score is the share of follow-up turns that
are signals (lower is better); ``frustrated`` at ``frustrated_at`` or above.
"""

from __future__ import annotations

import re

from pydantic import Field

from ragpulse.evaluators.base import ConversationEvaluator, Tier
from ragpulse.evaluators.turn_results import labelled
from ragpulse.plugin_context import PluginOptions
from ragpulse.record import ConversationRecord, Direction, EvalResult

_WORD = re.compile(r"\w+")
_STOP = frozenset(
    "a an and are as at be but by can could did do does for from had has have how i if in "
    "into is it its me my no not of on or our so than that the their them then there these "
    "they this to was we were what when where which who why will with would you your please "
    "again still".split()
)


def words(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1)


def overlap(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


class UserFrustration(ConversationEvaluator):
    """Share of follow-up turns that repeat an earlier question or carry negative feedback."""

    metric = "user_frustration"
    method = "rules"
    tier = Tier.CHEAP
    direction = Direction.LOWER_IS_BETTER

    class Options(PluginOptions):
        repeat_overlap: float = Field(
            0.6, gt=0, le=1, description="word overlap (Jaccard) of a repeated question"
        )
        frustrated_at: float = Field(
            0.33, gt=0, le=1, description="share of signal turns labelled 'frustrated'"
        )

    options: Options

    def score_conversation(self, conversation: ConversationRecord) -> EvalResult:
        turns = conversation.turns
        if len(turns) < 2:
            return self.not_applicable("a single turn")
        asked: list[frozenset[str]] = []
        repeats, negative = [], []
        for turn in turns:
            mine = words(turn.question)
            if any(overlap(mine, earlier) >= self.options.repeat_overlap for earlier in asked):
                repeats.append(turn.turn)
            if labelled(turn, "user_feedback", "negative"):
                negative.append(turn.turn)
            asked.append(mine)
        signals = sorted(set(repeats) | set(negative))
        share = len(signals) / (len(turns) - 1)
        score = min(1.0, share)
        return self.result(
            score,
            label="frustrated" if score >= self.options.frustrated_at else "not_frustrated",
            explanation=f"{len(repeats)} repeated question(s), {len(negative)} negative "
            f"feedback(s) in {len(turns)} turns",
            repeated_turns=repeats,
            negative_feedback_turns=negative,
        )
