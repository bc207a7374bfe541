"""``abandonment/rules``: the user left right after an answer that was not supported.

1 (lower is better) when the conversation closed for being idle and its last turn's
answer was unsupported: faithfulness below ``threshold`` (the most informed method that
scored it), or ``unsupported_answer`` said so; 0 when the last answer was supported or
the conversation ended otherwise; not applicable when nothing scored the last turn."""

from __future__ import annotations

from pydantic import Field

from ragpulse.evaluators.base import ConversationEvaluator, Tier
from ragpulse.evaluators.turn_results import labelled, result_of
from ragpulse.plugin_context import PluginOptions
from ragpulse.record import ConversationRecord, Direction, EvalResult


class Abandonment(ConversationEvaluator):
    """1 when the conversation went idle right after an unsupported answer."""

    metric = "abandonment"
    method = "rules"
    tier = Tier.CHEAP
    direction = Direction.LOWER_IS_BETTER

    class Options(PluginOptions):
        threshold: float = Field(
            0.5, ge=0, le=1, description="faithfulness below which an answer is unsupported"
        )

    options: Options

    def score_conversation(self, conversation: ConversationRecord) -> EvalResult:
        last = conversation.turns[-1]
        faithfulness = result_of(last, "faithfulness")
        unsupported = labelled(last, "unsupported_answer", "unsupported")
        if faithfulness is None and not unsupported:
            return self.not_applicable("nothing scored the last turn's answer")
        weak = unsupported or (
            faithfulness is not None and (faithfulness.score or 0.0) < self.options.threshold
        )
        left = conversation.closed_by == "idle"
        if weak and left:
            return self.result(
                1.0,
                label="abandoned",
                explanation=f"the user left after turn {last.turn}, whose answer was unsupported",
                turn=last.turn,
            )
        return self.result(
            0.0,
            label="not_abandoned",
            explanation="the last answer was supported"
            if not weak
            else f"the conversation ended by {conversation.closed_by}, not by the user leaving",
        )
