"""A scripted Haystack chat generator (tests/support/agent_apps.py's Haystack app).

A module of its own, without postponed annotations: Haystack reads a component's types
off its signature, and the OpenInference instrumentation finds the class by its module
path, so it must be a real type at module level.
"""

from collections.abc import Callable, Mapping
from typing import Any

from haystack import component
from haystack.dataclasses import ChatMessage


@component
class ScriptedChatGenerator:
    """Named as a generator, so the instrumentation writes an LLM span for it; answers
    the question at the end of its prompt with the scripted answer."""

    def __init__(self, move: Callable[[str, int], Any], turns: Mapping[str, Any]) -> None:
        self.move, self.turns = move, turns

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage]) -> dict[str, list[ChatMessage]]:
        prompt = messages[-1].text or ""
        question = prompt.rsplit("Question: ", 1)[-1].strip()
        answer = self.move(question, len(self.turns[question].calls))
        return {"replies": [ChatMessage.from_assistant(str(answer))]}
