"""The Rule type and the rule families it belongs to."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

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


def _max_width(pattern: re.Pattern[str]) -> int:
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
    pattern: re.Pattern[str]
    anchors: tuple[str, ...]
    space: Space = "folded"  # "plain": NFKC text with case kept
    where: Where = "any"
    word_anchors: bool = True  # anchors starting with a letter only count at a word start
    reach: int = field(init=False)  # longest possible match: the window half-width

    def __post_init__(self) -> None:
        object.__setattr__(self, "reach", _max_width(self.pattern))
