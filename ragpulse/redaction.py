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

The values an evaluator names as destinations (where a hijack or an exfiltration sends
data: ``details["destinations"]``, :data:`DESTINATIONS`) keep an e-mail address's domain,
``[EMAIL]@example.org``, so that on-call can tell which outside address received the
data; the local part never leaves (``redaction.destination_domains: false`` redacts the
domain too). Links and account numbers are not personal data this module recognises:
they pass as they are (a ``patterns`` entry redacts them where they are).

Where it applies is the top-level ``redaction`` settings section
(``apply_to``: ``jsonl``, ``otel``, ``prometheus``, ``logs``, ``regression``,
``eval_output``); :meth:`Redactor.from_settings` gives the redactor of one path
(a disabled one where the section does not apply there), and
:meth:`Redactor.redact_record_dump` redacts a dumped record but its hex ids (and the
word-by-word quotes of what it redacted, :func:`scrub_words`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ragpulse.config import RedactionPath, RedactionSettings, Settings
from ragpulse.errors import ConfigError

EMAIL = "[EMAIL]"
PHONE = "[PHONE]"
CARD = "[CARD]"
REDACTED = "[REDACTED]"

DESTINATIONS = "destinations"
"""The ``details`` key under which an evaluator lists the values it names as destinations:
where a hijack or an exfiltration sends data (an e-mail address, a link, an account)."""

ID_FIELDS = ("trace_id", "span_id", "retrieval_span_ids", "generation_span_id")
"""Record fields never redacted: hex ids, which a Luhn-valid all-digit span id would
otherwise turn into [CARD] (about one id in 20,000), breaking joins with the trace."""

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
_NUMBER_RUN = re.compile(r"\d[\d ().+-]{5,}\d")
"""Seven or more characters of digits and the separators phone and card numbers use,
from digit to digit, as long as they go: every card or phone match (7 digits or more,
made of these characters only, ending in a digit) lies in one, or starts one ``+`` or
``(`` before it. Cheap to scan for: it begins with a digit, where the two patterns
above begin with a look-behind that the engine tries at every position."""

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
        # Computed once: ``redact`` runs on every string of every exported line.
        self._enabled = settings.enabled and bool(
            settings.emails or settings.phone_numbers or settings.card_numbers or self._custom
        )

    @classmethod
    def from_settings(cls, settings: Settings, path: RedactionPath) -> Redactor:
        """The redactor for one path where content leaves the process.

        Disabled where ``redaction.apply_to`` does not name ``path`` (or
        ``redaction.enabled`` is false). A sink's own ``redaction`` option, when given
        (``sinks.regression.redaction``), replaces the section for that sink: the sink
        applies it (:meth:`for_path`).
        """
        return cls.for_path(settings.redaction, path)

    @classmethod
    def for_path(cls, section: RedactionSettings, path: RedactionPath) -> Redactor:
        """``section``'s redactor where it applies to ``path``; else a disabled one."""
        if section.applies_to(path):
            return cls(section)
        return cls(section.model_copy(update={"enabled": False}))

    @property
    def enabled(self) -> bool:
        return self._enabled

    def redact(self, text: str, keep: frozenset[str] = frozenset()) -> str:
        """``text`` redacted; an e-mail address in ``keep`` (:meth:`destinations`) keeps
        its domain."""
        if not self._enabled or not text:
            return text
        return self._redact(text, None, keep)

    def destinations(self, results: Iterable[Mapping[str, Any] | None]) -> frozenset[str]:
        """The e-mail addresses (lower-cased) that results' ``details`` name as
        destinations (:data:`DESTINATIONS`): they keep their domain where redacted. Empty
        when ``destination_domains`` is off."""
        if not (self._enabled and self.settings.emails and self.settings.destination_domains):
            return frozenset()
        named = [
            value
            for details in results
            if isinstance(details, Mapping)
            for value in _listed(details.get(DESTINATIONS))
        ]
        return frozenset(v.lower() for v in named if _EMAIL.fullmatch(v))

    def _redact(
        self, text: str, found: list[str] | None, keep: frozenset[str] = frozenset()
    ) -> str:
        """``text`` redacted; each replaced value appended to ``found`` when given; an
        e-mail address in ``keep`` keeps its domain."""
        s = self.settings
        for pattern, token in self._custom:
            text = pattern.sub(_keep(token, found), text)
        if s.emails and "@" in text:
            text = _EMAIL.sub(_email(found, keep) if keep else _keep(EMAIL, found), text)
        if s.card_numbers or s.phone_numbers:
            text = self._numbers(text, found)
        return text

    def _numbers(self, text: str, found: list[str] | None) -> str:
        """Card and phone numbers replaced, looking only around each digit run.

        Both patterns begin with a look-behind, so the regex engine would try them
        at every position of the text (the phone one costs ~50 ns a character).
        Every match lies within one :data:`_NUMBER_RUN` (from its first digit, or
        the ``+``/``(`` just before it, to its last digit) and its look-arounds see
        one character either side; so each run is redacted in a window holding it
        and those two characters, which no match can take, and spliced back.
        """
        pieces: list[str] = []
        last = 0
        for run in _NUMBER_RUN.finditer(text):
            start, end = max(last, run.start() - 1), run.end()
            left, right = (1 if start > 0 else 0), (1 if end < len(text) else 0)
            window = text[start - left : end + right]
            redacted = self._numbers_in(window, found)
            if redacted is window:
                continue
            pieces += (text[last:start], redacted[left : len(redacted) - right])
            last = end
        if not pieces:
            return text
        pieces.append(text[last:])
        return "".join(pieces)

    def _numbers_in(self, window: str, found: list[str] | None) -> str:
        s = self.settings
        out = window
        if s.card_numbers:
            out = _CARD.sub(_noted(_card, found), out)
        if s.phone_numbers:
            out = _PHONE.sub(_noted(_phone, found), out)
        return window if out == window else out

    def redact_json(self, value: Any, keep: frozenset[str] = frozenset()) -> Any:
        """A copy of ``value`` with every string redacted (dict keys too); ``value``
        itself when nothing in it would change. ``keep`` as for :meth:`redact`."""
        if not self.needs_redaction(value):
            return value
        return redact_json(value, self, keep=keep)

    def needs_redaction(self, value: Any) -> bool:
        """False only when redacting the JSON value ``value`` would change nothing:
        one quick check of its serialization instead of a walk through its strings."""
        return self._enabled and self.may_match(_probe(value))

    def may_match(self, text: str) -> bool:
        """False only when redacting ``text`` would change nothing (a quick check).

        Run on a whole JSON value's serialization (:func:`_probe`), it tells a
        value with nothing to redact, the common case, without walking it string
        by string: that walk costs more than the regexes. Custom patterns may be
        written for raw text that JSON escapes, so with any, the answer is True.
        """
        if self._custom:
            return True
        s = self.settings
        if s.emails and "@" in text and _EMAIL.search(text):
            return True
        return (s.card_numbers or s.phone_numbers) and self._numbers(text, None) is not text

    def redact_record_dump(self, dump: dict[str, Any]) -> dict[str, Any]:
        """A dumped :class:`~ragpulse.record.RagRecord` (with its ``results``, or any row
        holding a record's fields) with every string redacted but the hex ids of
        :data:`ID_FIELDS`.

        Evaluators also quote a record word by word (faithfulness's
        ``unsupported_tokens``: ``["jane", "doe", "example", "com"]``), which no
        pattern recognises; so a string that is exactly one word of a value
        redacted anywhere in the row becomes ``[REDACTED]`` too. An e-mail address that
        a result names as a destination keeps its domain throughout the row.
        """
        if not self._enabled:
            return dump
        if not self.may_match(_probe(_strings_of(dump))):
            return dump
        keep = self.destinations(_details_of(dump.get("results")))
        found: list[str] = []
        out = {
            k: v if k in ID_FIELDS else redact_json(v, self, found, keep) for k, v in dump.items()
        }
        if not found:
            return out
        words = _words(found)
        return {k: v if k in ID_FIELDS else scrub_words(v, words) for k, v in out.items()}

    def words_of(self, texts: Iterable[str]) -> frozenset[str]:
        """The lower-cased words of every value redaction would replace in ``texts``
        (for :func:`scrub_words` where a record is exported in parts)."""
        if not self._enabled:
            return frozenset()
        found: list[str] = []
        for text in texts:
            if text:
                self._redact(text, found)
        return _words(found)


def _keep(token: str, found: list[str] | None) -> str | Callable[[re.Match[str]], str]:
    if found is None:
        return token  # the common path: a plain replacement, no Python call per match

    def replace(match: re.Match[str]) -> str:
        found.append(match.group())
        return token

    return replace


def _email(found: list[str] | None, keep: frozenset[str]) -> Callable[[re.Match[str]], str]:
    """An e-mail address's placeholder: ``[EMAIL]@domain`` for one of ``keep``."""

    def replace(match: re.Match[str]) -> str:
        value = match.group()
        if found is not None:
            found.append(value)
        if value.lower() in keep:
            return f"{EMAIL}@{value.rsplit('@', 1)[1]}"
        return EMAIL

    return replace


def _listed(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, str)]
    return []


def _details_of(results: Any) -> list[Mapping[str, Any] | None]:
    """The ``details`` of each result dict of a dumped row's ``results``."""
    if not isinstance(results, list):
        return []
    return [r.get("details") for r in results if isinstance(r, dict)]


def _noted(
    decide: Callable[[re.Match[str]], str], found: list[str] | None
) -> Callable[[re.Match[str]], str]:
    if found is None:
        return decide

    def replace(match: re.Match[str]) -> str:
        out = decide(match)
        if out != match.group():
            found.append(match.group())
        return out

    return replace


_WORD = re.compile(r"\w+")
_JSON_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|.)")


def _strings_of(dump: dict[str, Any]) -> dict[str, Any]:
    """``dump`` without its ids and numbers, two levels down (a record's fields, its
    documents' and results' fields), for the quick check: timestamps (19 digits) and
    unrounded floats (``0.9285714285714286``, 16 digits after the point) pass the card
    pattern's Luhn check one time in ten, and would send clean rows to the slow walk."""
    return {
        k: [_no_numbers(x) for x in v] if isinstance(v, list) else _no_numbers(v)
        for k, v in dump.items()
        if k not in ID_FIELDS and not isinstance(v, int | float)
    }


def _no_numbers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if not isinstance(v, int | float)}
    return value


def _probe(value: Any) -> str:
    """``value`` as one text for :meth:`Redactor.may_match`: its JSON serialization,
    each escape (``\\n``, ``\\"``, ``\\u0007``) turned back into a newline.

    A string redaction would change then shows a match here too: where the string
    had a quote, backslash or control character the patterns see a newline, which
    like those is neither a word character nor a separator they accept (a space
    could join a card number to the digit after it and fail its Luhn check), and
    each string's ends are quotes, which no pattern accepts either."""
    return _JSON_ESCAPE.sub("\n", json.dumps(value, ensure_ascii=False, default=str))


def _words(found: Iterable[str]) -> frozenset[str]:
    return frozenset(w for value in found for w in _WORD.findall(value.lower()))


def redact_json(
    value: Any,
    redactor: Redactor,
    found: list[str] | None = None,
    keep: frozenset[str] = frozenset(),
) -> Any:
    """Every string in a nested JSON value (dicts, lists, tuples) passed through
    ``redactor``; the values it replaced are appended to ``found`` when given; an e-mail
    address in ``keep`` keeps its domain."""
    if isinstance(value, str):
        return redactor._redact(value, found, keep) if value and redactor.enabled else value
    if isinstance(value, dict):
        return {
            (redact_json(k, redactor, found, keep) if isinstance(k, str) else k): redact_json(
                v, redactor, found, keep
            )
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_json(v, redactor, found, keep) for v in value]
    return value


def scrub_words(value: Any, words: frozenset[str]) -> Any:
    """``value`` with every string that is exactly one of ``words`` (case aside)
    replaced by ``[REDACTED]``: the word-by-word quotes of a redacted value."""
    if not words:
        return value
    if isinstance(value, str):
        return REDACTED if value.lower() in words else value
    if isinstance(value, dict):
        return {k: scrub_words(v, words) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_words(v, words) for v in value]
    return value
