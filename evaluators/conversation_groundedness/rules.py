"""``conversation_groundedness/rules``: the share of a conversation's turns that were
grounded (faithfulness at or above ``threshold``, read from the most informed method
that scored each turn), with the weakest turn named. Turns no faithfulness method scored
(a greeting, a retrieval alone) do not count."""

from __future__ import annotations

from pydantic import Field

from ragpulse.evaluators.base import ConversationEvaluator, Tier
from ragpulse.evaluators.turn_results import result_of
from ragpulse.plugin_context import PluginOptions
from ragpulse.record import ConversationRecord, EvalResult


class ConversationGroundedness(ConversationEvaluator):
    """Share of scored turns whose faithfulness is at least ``threshold``."""

    metric = "conversation_groundedness"
    method = "rules"
    tier = Tier.CHEAP

    class Options(PluginOptions):
        threshold: float = Field(0.5, ge=0, le=1, description="faithfulness of a grounded turn")

    options: Options

    def score_conversation(self, conversation: ConversationRecord) -> EvalResult:
        scored = [(t.turn, r) for t in conversation.turns if (r := result_of(t, "faithfulness"))]
        if not scored:
            return self.not_applicable("no turn has a faithfulness score")
        grounded = [turn for turn, r in scored if (r.score or 0.0) >= self.options.threshold]
        weakest_turn, weakest = min(scored, key=lambda x: x[1].score or 0.0)
        share = len(grounded) / len(scored)
        return self.result(
            share,
            explanation=f"{len(grounded)} of {len(scored)} turns grounded; weakest turn "
            f"{weakest_turn} ({weakest.method} {weakest.score:.2f})",
            grounded_turns=grounded,
            scored_turns=len(scored),
            weakest_turn=weakest_turn,
            weakest_faithfulness=weakest.score,
            threshold=self.options.threshold,
        )
