"""``conversation_tool_errors/rules``: the share of a conversation's agent turns whose tool
calls failed (``tool_error/rules``), lower is better; not applicable without agent turns."""

from __future__ import annotations

from ragpulse.evaluators.base import ConversationEvaluator, Tier
from ragpulse.evaluators.turn_results import labelled
from ragpulse.record import ConversationRecord, Direction, EvalResult


class ConversationToolErrors(ConversationEvaluator):
    """Share of turns with a failed tool call."""

    metric = "conversation_tool_errors"
    method = "rules"
    tier = Tier.CHEAP
    direction = Direction.LOWER_IS_BETTER

    def score_conversation(self, conversation: ConversationRecord) -> EvalResult:
        agent = [t for t in conversation.turns if t.tool_calls]
        if not agent:
            return self.not_applicable("no turn called a tool")
        failed = [t.turn for t in agent if labelled(t, "tool_error", "tool_error")]
        return self.result(
            len(failed) / len(agent),
            label="tool_error" if failed else "ok",
            explanation=f"{len(failed)} of {len(agent)} agent turns had a failed tool call",
            turns=failed,
        )
