"""``agent_steps/count``: the tool and model calls of an agent turn, against a budget.

The score is the share of ``max_steps`` the turn used (capped at 1, lower is better), so
a turn that loops or wanders shows in the score histogram; the details keep the counts
(tool calls, model calls, tokens, calls per tool). Cheap: read off the record.
"""

from __future__ import annotations

from collections import Counter

from pydantic import Field

from ragpulse.evaluators.base import AGENT_TURNS, Evaluator, Tier
from ragpulse.plugin_context import PluginOptions
from ragpulse.record import Direction, EvalResult, RagRecord


class AgentSteps(Evaluator):
    """Steps (tool calls + model calls) of an agent turn as a share of ``max_steps``."""

    metric = "agent_steps"
    method = "count"
    tier = Tier.CHEAP
    direction = Direction.LOWER_IS_BETTER
    applies_to = AGENT_TURNS

    class Options(PluginOptions):
        max_steps: int = Field(
            20,
            ge=1,
            description="steps (tool and model calls) a turn may take: score 1, label "
            "over_budget past it",
        )

    options: Options

    def score(self, record: RagRecord) -> EvalResult:
        tools, models = len(record.tool_calls), record.model_calls
        steps = tools + models
        budget = self.options.max_steps
        return self.result(
            min(1.0, steps / budget),
            label="over_budget" if steps > budget else "within_budget",
            explanation=f"{steps} steps ({tools} tool calls, {models} model calls) of {budget}",
            steps=steps,
            tool_calls=tools,
            model_calls=models,
            input_tokens=record.input_tokens,
            output_tokens=record.output_tokens,
            calls_per_tool=dict(Counter(c.name for c in record.tool_calls).most_common(20)),
        )
