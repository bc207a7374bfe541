"""The Rule type and the rule families it belongs to."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from ragpulse.evaluators.injection_engine.engine import max_width
from ragpulse.evaluators.injection_engine.vocabulary import LazyPattern

OVERRIDE = "instruction_override"
HIJACK = "role_hijack"
EXTRACTION = "prompt_extraction"
DELIMITER = "delimiter_tokens"
HIDDEN = "hidden_characters"
ENCODED = "encoded_payload"
EXFIL = "exfiltration_link"
TOOL = "tool_call_bait"
DOC_COMMAND = "document_command"

FAMILIES: tuple[str, ...] = (
    OVERRIDE,
    HIJACK,
    EXTRACTION,
    DELIMITER,
    HIDDEN,
    ENCODED,
    EXFIL,
    TOOL,
    DOC_COMMAND,
)

Space = Literal["folded", "plain"]
Where = Literal["any", "question", "document"]


@dataclass(frozen=True)
class Rule:
    """One named pattern: where it applies, and what it weighs when it fires."""

    name: str
    family: str
    weight: float
    pattern: LazyPattern
    space: Space = "folded"  # "plain": NFKC text with case kept
    where: Where = "any"

    @cached_property
    def reach(self) -> int:
        """Longest possible match (parsed on first use, like the pattern is compiled on
        first use): how far a match may run past the chunk of a long text it starts in."""
        return max_width(self.pattern.pattern)
