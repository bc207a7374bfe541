"""``tool_loop/rules``: an agent that calls the same tool with the same arguments again.

Calls are the same when their tool and their arguments are (JSON compared as data: key
order and spacing do not matter). The score is the share of calls that repeat an earlier
one (lower is better); the label is ``loop`` when one call is made ``min_repeats`` times
or more, ``repeated`` for fewer repeats, else ``ok``. The result is about the span of the
most repeated call's last repeat.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from ragpulse.evaluators.base import AGENT_TURNS, Evaluator, Tier
from ragpulse.plugin_context import PluginOptions
from ragpulse.record import Direction, EvalResult, RagRecord, ToolCall


def call_key(call: ToolCall) -> tuple[str, str]:
    """What makes two calls the same: the tool, and the arguments as data."""
    try:
        arguments = json.dumps(json.loads(call.arguments), sort_keys=True) if call.arguments else ""
    except ValueError:
        arguments = " ".join(call.arguments.split())
    return call.name, arguments


class ToolLoop(Evaluator):
    """Share of an agent turn's tool calls that repeat an earlier identical call."""

    metric = "tool_loop"
    method = "rules"
    tier = Tier.CHEAP
    direction = Direction.LOWER_IS_BETTER
    applies_to = AGENT_TURNS

    class Options(PluginOptions):
        min_repeats: int = Field(
            3, ge=2, description="times one identical call is made that label the turn a loop"
        )

    options: Options

    def score(self, record: RagRecord) -> EvalResult:
        calls = record.tool_calls
        if not calls:
            return self.not_applicable("no tool calls")
        names = [c.name for c in calls]
        # Arguments are compared as data only among calls of a tool called more than once.
        again = {n for n in names if names.count(n) > 1} if len(set(names)) < len(names) else set()
        groups: dict[tuple[str, str], list[ToolCall]] = {}
        for call in calls:
            key = call_key(call) if call.name in again else (call.name, call.call_id or "")
            groups.setdefault(key, []).append(call)
        repeated = sorted((g for g in groups.values() if len(g) > 1), key=len, reverse=True)
        extra = sum(len(g) - 1 for g in repeated)
        details: dict[str, Any] = {
            "calls": len(calls),
            "repeated": [
                {"tool": g[0].name, "arguments": g[0].arguments[:300], "times": len(g),
                 "span_ids": [c.span_id for c in g if c.span_id][:10]}
                for g in repeated[:10]
            ],
        }  # fmt: skip
        if repeated and repeated[0][-1].span_id:
            details["target_span_id"] = repeated[0][-1].span_id
        most = len(repeated[0]) if repeated else 1
        label = "loop" if most >= self.options.min_repeats else "repeated" if repeated else "ok"
        explanation = (
            f"{repeated[0][0].name} called {most} times with the same arguments"
            if repeated
            else f"no repeated call among {len(calls)}"
        )
        return self.result(extra / len(calls), label=label, explanation=explanation, **details)
