"""What a judge call costs and how it fails: light types the judge metrics import.

Kept apart from the client so that importing a judge metric does not import
the ``openai`` package; the client is built only when a judge is configured.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragpulse.errors import RagpulseError


class JudgeError(RagpulseError):
    """A judge call failed; ``reason`` is a bounded label (timeout, rate_limited, ...)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


@dataclass
class Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: int = 0

    def add(self, other: Usage) -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached += other.cached
