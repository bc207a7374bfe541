"""Text normalisation, look-alike folding and hidden-character detection."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_TAG_FLAG = re.compile("\U0001f3f4[\U000e0020-\U000e007e]{1,10}\U000e007f")  # 🏴 subdivision flags
_ANY_HIDDEN = re.compile(
    "[\u200b-\u200d\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufe00-\ufe0f\ufeff"
    "\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)
_TAG_CHARS = re.compile("[\U000e0000-\U000e007f]+")
_ZERO_WIDTH = re.compile("[\u200b-\u200d\u2060-\u2064\ufeff]+")
_BIDI_OVERRIDE = re.compile("[\u202d\u202e]")
_BIDI_OTHER = re.compile("[\u202a-\u202c\u2066-\u2069]")
_VARIATION_RUN = re.compile("[\ufe00-\ufe0f\U000e0100-\U000e01ef]{4,}")
_INVISIBLE = re.compile(
    "[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\U000e0000-\U000e007f]+"
)
# Cyrillic/Greek look-alikes of Latin letters, folded only when a word mixes scripts.
_CONFUSABLES = str.maketrans(
    {
        "а": "a",
        "е": "e",
        "о": "o",
        "р": "p",
        "с": "c",
        "у": "y",
        "х": "x",
        "і": "i",
        "ѕ": "s",
        "ј": "j",
        "ԁ": "d",
        "ɡ": "g",
        "ο": "o",
        "ν": "v",
        "ι": "i",
        "α": "a",
    }
)
# Starts with the rare class so that the search skips Latin text at C speed.
_MIXED_SCRIPT = re.compile("[аеорсухіѕјԁɡονια](?:(?<=[a-z].)|(?=[a-z]))")
# ASCII whitespace that str.split() or str.splitlines() treats like " " or "\n".
_ODD_ASCII_SPACE = "\t\r\x0b\x0c\x1c\x1d\x1e\x1f"
_QUOTES = (("’", "'"), ("‘", "'"), ("“", '"'), ("”", '"'))


@dataclass(frozen=True)
class _Normalized:
    plain: str  # invisible characters stripped, NFKC, whitespace collapsed
    folded: str  # plain, casefolded (and look-alikes folded in mixed-script words)
    mixed_script: str | None  # excerpt of a mixed-script word, if any


def _collapse_whitespace(text: str) -> str:
    """One space inside lines, none at their ends, no blank lines (C-speed split/join)."""
    if (
        text.isascii()
        and not (text[:1].isspace() or text[-1:].isspace())
        and "  " not in text
        and _only_spaces_and_newlines(text)
    ):
        # Already collapsed but for blank lines, as most documents are: a few C-speed
        # scans instead of a split and join of every word.
        if "\n" not in text:
            return text
        if " \n" not in text and "\n " not in text:
            return text if "\n\n" not in text else "\n".join(filter(None, text.split("\n")))
    return "\n".join(line for line in map(" ".join, map(str.split, text.splitlines())) if line)


def _only_spaces_and_newlines(ascii_text: str) -> bool:
    """No whitespace but " " and "\\n" in an ASCII text (no tab, carriage return, ...)."""
    # Every other ASCII whitespace character is a control character: not printable.
    if ascii_text.isprintable():
        return True
    return not any(ch in ascii_text for ch in _ODD_ASCII_SPACE)


_WRITTEN_ESCAPE = re.compile(r"\\+[nrt]")
"""A line break or tab written out (``\\n``), as JSON text of a tool result shows one: a
space to the rules, so that the word after it stays a word."""


def _normalize(text: str) -> _Normalized:
    """Strip invisible characters, NFKC, collapse whitespace (escapes written out count as
    whitespace), casefold."""
    if "\\" in text:
        text = _WRITTEN_ESCAPE.sub(" ", text)
    if not text.isascii():
        text = _INVISIBLE.sub("", text)
        if not unicodedata.is_normalized("NFKC", text):
            text = unicodedata.normalize("NFKC", text)
        for fancy, ascii_quote in _QUOTES:
            text = text.replace(fancy, ascii_quote)
    plain = _collapse_whitespace(text)
    folded = plain.lower() if plain.isascii() else plain.casefold()
    mixed = None
    if not folded.isascii() and (m := _MIXED_SCRIPT.search(folded)) is not None:
        mixed = folded[max(0, m.start() - 20) : m.end() + 20]
        folded = folded.translate(_CONFUSABLES)
    return _Normalized(plain, folded, mixed)


def _visible(text: str) -> str:
    return "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in text)


def _hidden_characters(text: str, hits: dict[str, str]) -> str:
    """Flag invisible characters on the raw text; return ASCII smuggled in tag characters."""
    if _ANY_HIDDEN.search(text) is None:
        return ""
    smuggled = ""
    tags_text = _TAG_FLAG.sub("", text) if "\U0001f3f4" in text else text
    for m in _TAG_CHARS.finditer(tags_text):
        smuggled += "".join(chr(ord(c) - 0xE0000) for c in m.group()) + " "
    if smuggled.strip():
        hits["unicode_tag_chars"] = smuggled.strip()
    for zw in _ZERO_WIDTH.finditer(text):
        # Between two Latin letters: splitting a word, not joining emoji or Indic script.
        s, e = zw.start(), zw.end()
        before, after = text[s - 1 : s], text[e : e + 1]
        if before.isascii() and before.isalpha() and after.isascii() and after.isalpha():
            hits["zero_width_in_word"] = _visible(text[max(0, s - 20) : e + 20])
            break
    if (bidi := _BIDI_OVERRIDE.search(text)) is not None:
        hits["bidi_override"] = _visible(text[max(0, bidi.start() - 20) : bidi.end() + 40])
    elif (bidi := _BIDI_OTHER.search(text)) is not None:
        hits["bidi_control"] = _visible(text[max(0, bidi.start() - 20) : bidi.end() + 40])
    if (vs := _VARIATION_RUN.search(text)) is not None:
        hits["variation_selector_run"] = _visible(text[max(0, vs.start() - 10) : vs.end()])
    return smuggled


# Escape characters (Liu et al. 2024): a run of line breaks or tabs, or of their escapes
# written out, that ends the data and starts a command. Normalising collapses the run, so
# it is looked for on the raw text: each kind of run by a pattern that starts with a
# literal character (the regex engine then skips to it at C speed), and only where that
# character is in the text at all.
_ESCAPE_RUNS = (
    ("\n", re.compile(r"\n[ \t]{0,8}\r?\n[ \t]{0,8}\r?\n")),
    ("\t\t", re.compile(r"\t\t")),
    ("\\", re.compile(r"\\{1,2}[nrt]\\{1,2}[nrt]\\{1,2}[nrt]")),
)
_COMMAND_START = re.compile(
    r"[\s\"'*#>\[<(/\-]{0,6}(?:please|kindly|ignore|disregard|forget|never mind|stop|drop|you|"
    r"your|now|new|important|attention|note|system|assistant|answer|final answer|response|"
    r"summary|observation|end|task|instead|the previous|send|transfer|wire|pay|grant|delete|"
    r"forward|share|invite|update|change|execute|run|call|e-?mail|post|upload|retrieve|get|"
    r"give|make|add|remove|look up|collect|export|unlock|move|sell|buy|process|issue|refund|"
    r"approve|create|open|click|visit|reply|respond)\b",
    re.IGNORECASE,
)
_RUN_TAIL = re.compile(r"(?:[ \t]{0,8}\r?\n|\t|\\{1,2}[nrt]){0,64}")


def _escape_run(text: str) -> str | None:
    """An excerpt of the first escape run (after some data) followed by a command, else None."""
    for literal, pattern in _ESCAPE_RUNS:
        if literal not in text:
            continue
        for m in pattern.finditer(text):
            if not text[: m.start()].strip():
                continue  # leading blank lines: layout, not a break out of the data
            end = _RUN_TAIL.match(text, m.end())
            after = end.end() if end is not None else m.end()
            if _COMMAND_START.match(text, after) is not None:
                return _visible(text[max(0, m.start() - 20) : after + 40])
    return None
