"""The Rule type and the rule families it belongs to."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from ragpulse.evaluators.injection.vocabulary import LazyPattern

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

_UNBOUNDED = 1 << 30  # a rule whose longest match is unknown searches the whole text

Space = Literal["folded", "plain"]
Where = Literal["any", "question", "document"]


def _max_width(pattern: LazyPattern | re.Pattern[str]) -> int:
    """Longest text ``pattern`` can match, from the stdlib regex parser.

    Every rule is written with bounded repetitions, so this is finite; windows of
    this half-width around an anchor find exactly what a full search finds.
    ``_UNBOUNDED`` (search the whole text) if the parser is unavailable.
    """
    try:
        from re import _parser as parser  # type: ignore[attr-defined]

        width = int(parser.parse(pattern.pattern, pattern.flags).getwidth()[1])
    except Exception:  # pragma: no cover - private module moved or changed
        return _UNBOUNDED
    return min(width, _UNBOUNDED)


@dataclass(frozen=True)
class Rule:
    """One named pattern, gated by anchors (literals every match must contain)."""

    name: str
    family: str
    weight: float
    pattern: LazyPattern
    anchors: tuple[str, ...]
    space: Space = "folded"  # "plain": NFKC text with case kept
    where: Where = "any"
    word_anchors: bool = True  # anchors starting with a letter only count at a word start

    @cached_property
    def reach(self) -> int:
        """Longest possible match: the window half-width (parsed on first use, like the
        pattern is compiled on first use)."""
        return _max_width(self.pattern)
