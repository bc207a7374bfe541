"""Redact personal data from text before it is written anywhere.

A :class:`Redactor` is built from :class:`ragpulse.config.RedactionSettings`
and replaces, in this order: custom ``name -> regex`` patterns (``[NAME]``,
the name upper-cased), e-mail addresses (``[EMAIL]``), card numbers
(``[CARD]``: 13-19 digits, optionally grouped by spaces or dashes, that pass
the Luhn check, so ordinary long numbers stay), and phone numbers
(``[PHONE]``: 7-15 digits written the way phone numbers are, with a ``+``
country code, an area code in parentheses, or at least three groups; dates,
IP addresses and thousands-grouped numbers are left alone).

:meth:`Redactor.redact_json` applies it to every string of a nested JSON value
(keys included), so any sink can redact a whole line before writing it.
Redaction is idempotent: the placeholders never match again.
"""

from __future__ import annotations

import re
from typing import Any

from ragpulse.config import RedactionSettings
from ragpulse.errors import ConfigError

EMAIL = "[EMAIL]"
PHONE = "[PHONE]"
CARD = "[CARD]"

_EMAIL = re.compile(r"(?<![\w.+-])[\w.+%-]+@[\w-]+(?:\.[\w-]+)*\.[A-Za-z]{2,}(?![\w-])")
_CARD = re.compile(r"(?<![\w-])\d(?:[ -]?\d){12,18}(?![\w-])")
_PHONE = re.compile(
    r"""
    (?<![\w+])
    (?:
        \+\d{1,3}(?:[ .-]?\(\d{1,4}\))?(?:[ .-]?\d{1,4}){1,6} # +1 (555) 123-4567, +33 1 23 45 67 89
      | \(\d{2,4}\)[ .-]?\d{2,4}(?:[ .-]\d{2,4}){1,3}         # (555) 123-4567
      | \d{2,4}(?:[ .-]\d{2,4}){2,4}                          # 555-123-4567, 020 7946 0958
    )
    (?![\w])
    """,
    re.VERBOSE,
)
# Shapes that have phone-like digits but are not phone numbers.
_NOT_PHONE = (
    re.compile(r"\d{4}[.-]\d{1,2}[.-]\d{1,2}"),  # 2024-01-15
    re.compile(r"\d{1,2}[.-]\d{1,2}[.-]\d{2,4}"),  # 15.01.2024
    re.compile(r"\d{1,3}(?:\.\d{1,3}){3}"),  # 192.168.10.10
    re.compile(r"\d{1,3}(?: \d{3})+"),  # 12 345 678 (thousands)
)


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum every payment card number satisfies."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = ord(ch) - 48
        if i % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def _card(match: re.Match[str]) -> str:
    digits = re.sub(r"[ -]", "", match.group())
    return CARD if 13 <= len(digits) <= 19 and luhn_valid(digits) else match.group()


def _phone(match: re.Match[str]) -> str:
    text = match.group()
    digits = sum(c.isdigit() for c in text)
    if not 7 <= digits <= 15:
        return text
    if not text.startswith(("+", "(")) and any(p.fullmatch(text) for p in _NOT_PHONE):
        return text
    return PHONE


class Redactor:
    """Thread-safe (compiled patterns only); ``redact`` never raises on a str."""

    def __init__(self, settings: RedactionSettings | None = None) -> None:
        self.settings = settings = settings or RedactionSettings()
        self._custom: list[tuple[re.Pattern[str], str]] = []
        for name, pattern in settings.patterns.items():
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ConfigError(
                    f"redaction pattern {name!r} is not a valid regex: {exc}"
                ) from exc
            self._custom.append((compiled, f"[{name.upper()}]"))

    @property
    def enabled(self) -> bool:
        s = self.settings
        return s.enabled and bool(s.emails or s.phone_numbers or s.card_numbers or self._custom)

    def redact(self, text: str) -> str:
        if not self.enabled or not text:
            return text
        s = self.settings
        for pattern, token in self._custom:
            text = pattern.sub(token, text)
        if s.emails and "@" in text:
            text = _EMAIL.sub(EMAIL, text)
        if s.card_numbers:
            text = _CARD.sub(_card, text)
        if s.phone_numbers:
            text = _PHONE.sub(_phone, text)
        return text

    def redact_json(self, value: Any) -> Any:
        """A copy of ``value`` with every string redacted (dict keys too)."""
        if not self.enabled:
            return value
        return redact_json(value, self)


def redact_json(value: Any, redactor: Redactor) -> Any:
    """Every string in a nested JSON value (dicts, lists, tuples) passed through ``redactor``."""
    if isinstance(value, str):
        return redactor.redact(value)
    if isinstance(value, dict):
        return {
            (redactor.redact(k) if isinstance(k, str) else k): redact_json(v, redactor)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_json(v, redactor) for v in value]
    return value
