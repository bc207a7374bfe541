"""``tool_error/rules``: the tool calls of an agent turn that failed.

A call failed when its span ended with an error status, or its output is an error: a
text that opens as one (``Error:``, ``Exception``, a Python traceback, ``HTTP 5xx``) or a
JSON object whose ``error`` is set or whose ``status`` says it failed. A call the model
made and no result came back for (``no_result``) is counted apart, not as an error. The
score is the share of calls that failed (lower is better); the result is about the first
failed call's span.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ragpulse.evaluators.base import AGENT_TURNS, Evaluator, Tier
from ragpulse.record import Direction, EvalResult, RagRecord, ToolCall

_ERROR_TEXT = re.compile(
    r"^\s*(?:error\b|exception\b|traceback \(most recent call last\)|fatal\b|failed\b|"
    r"http(?:/\d(?:\.\d)?)? 5\d\d\b|\w+(?:error|exception):)",
    re.I,
)
_FAILED = frozenset({"error", "failed", "failure", "fail"})


def error_output(result: str | None) -> str | None:
    """Why a tool's output reads as an error, else None."""
    if not result:
        return None
    head = result[:2000]
    if _ERROR_TEXT.match(head):
        return head.strip().splitlines()[0][:200]
    if head.lstrip().startswith("{"):
        try:
            data: Any = json.loads(result)
        except ValueError:
            return None
        if isinstance(data, dict):
            if data.get("error") not in (None, False, "", {}, []):
                return f"error: {str(data['error'])[:200]}"
            status = data.get("status")
            if isinstance(status, str) and status.lower() in _FAILED:
                return f"status: {status}"
    return None


def failure(call: ToolCall) -> str | None:
    if call.status == "error":
        return call.error or "span status error"
    return error_output(call.result)


class ToolError(Evaluator):
    """Share of an agent turn's tool calls that failed; each named in the details."""

    metric = "tool_error"
    method = "rules"
    tier = Tier.CHEAP
    direction = Direction.LOWER_IS_BETTER
    applies_to = AGENT_TURNS

    def score(self, record: RagRecord) -> EvalResult:
        calls = record.tool_calls
        if not calls:
            return self.not_applicable("no tool calls")
        failed = []
        for call in calls:
            why = failure(call)
            if why is not None:
                failed.append(
                    {"tool": call.name, "call_id": call.call_id, "span_id": call.span_id,
                     "reason": why}
                )  # fmt: skip
        unanswered = [c.name for c in calls if c.status == "no_result"]
        details: dict[str, Any] = {"calls": len(calls), "failed": failed[:20]}
        if unanswered:
            details["no_result"] = unanswered[:20]
        first = next((f["span_id"] for f in failed if f["span_id"]), None)
        if first:
            details["target_span_id"] = first
        score = len(failed) / len(calls)
        explanation = (
            f"{len(failed)} of {len(calls)} tool calls failed; first: {failed[0]['tool']} "
            f"({failed[0]['reason']})"
            if failed
            else f"none of {len(calls)} tool calls failed"
        )
        return self.result(
            score, label="tool_error" if failed else "ok", explanation=explanation, **details
        )
