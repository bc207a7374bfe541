"""What a judge call costs and how it fails: light types the judge metrics import.

Kept apart from the client so that importing a judge metric does not import
the ``openai`` package; the client is built only when a judge is configured.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragpulse.errors import RagpulseError


class JudgeError(RagpulseError):
    """A judge call failed; ``reason`` is a bounded label (timeout, rate_limited, ...).

    ``usage``: what the failed ask still cost when the server answered (an invalid or
    truncated reply is billed all the same), for the error result's details.
    """

    def __init__(self, reason: str, message: str, usage: Usage | None = None) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.usage = usage


@dataclass
class Usage:
    """What one record's judge calls cost, as the server's ``usage`` reports it.

    ``cached`` counts answers served by ragpulse's own judge cache (no call made);
    ``cached_prompt_tokens`` counts prompt tokens the *server* read from its prefix
    cache (OpenAI's ``prompt_tokens_details.cached_tokens``, llama.cpp's ``cache_n``):
    they are part of ``prompt_tokens``, billed cheaper and computed faster.
    """

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: int = 0
    cached_prompt_tokens: int = 0

    def add(self, other: Usage) -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached += other.cached
        self.cached_prompt_tokens += other.cached_prompt_tokens
