"""JSON with bounded nesting: the one way ragpulse reads JSON it did not write.

``json.loads`` recurses once per nesting level and fails with ``RecursionError``
(not a ``ValueError``) somewhere near 1,000 levels, so a 5,000-level body at
the receiver became a 500. :func:`loads` first measures the bracket depth
outside strings (a regular expression and ``bytes.translate``, both in C, then
one pass of ``itertools.accumulate``), refuses anything deeper than
``max_depth`` with :class:`NestingTooDeep` (a ``ValueError``), and only then
calls ``json.loads``. :func:`ragpulse.safe_yaml.load_yaml` is the same bound for YAML (the
settings file), counted as PyYAML composes nodes; TOML is checked with
:func:`check_depth` before ``tomllib`` (its basic strings are JSON strings).
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

MAX_DEPTH = 64
"""Nesting allowed by default. OTLP/JSON needs about 10 levels plus attribute values."""

# Escapes only occur inside strings; dropping each ``\\x`` pair first leaves strings
# that end at the next quote, so everything but quotes and brackets can go before
# strings are cut out (the texts scanned shrink to a fraction of the body).
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*+"')
_NOT_SYNTAX = bytes(b for b in range(256) if b not in b'"[{]}')
# Brackets to +1 (0x01) and -1 (0xff, a signed byte); a stray quote is deleted.
_SIGNS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


class NestingTooDeep(ValueError):
    """The document nests arrays/objects deeper than the limit."""

    def __init__(self, max_depth: int, what: str = "JSON") -> None:
        super().__init__(f"{what} nested deeper than {max_depth} levels")
        self.max_depth = max_depth


def nesting_depth(data: str | bytes | bytearray | memoryview) -> int:
    """The deepest bracket nesting of a JSON text, brackets inside strings not counted.

    Works on any text (unbalanced or not valid JSON at all): it is the maximum,
    over every prefix, of opening minus closing brackets outside strings.
    """
    raw = _utf8(data)
    if raw.count(b"[") + raw.count(b"{") == 0:
        return 0
    if b"\\" in raw:
        raw = _ESCAPE.sub(b"", raw)
    syntax = _STRING.sub(b"", raw.translate(None, _NOT_SYNTAX))
    signs = syntax.translate(_SIGNS, b'"')
    return max(0, max(accumulate(memoryview(signs).cast("b")), default=0))


def check_depth(
    data: str | bytes | bytearray | memoryview, max_depth: int = MAX_DEPTH, what: str = "JSON"
) -> None:
    """Raise :class:`NestingTooDeep` when ``data`` nests deeper than ``max_depth``."""
    # Cheap exit: a text with no more opening brackets than the limit cannot exceed it
    # (counted in the text itself when it is one: encoding it would copy it).
    if isinstance(data, str) and data.count("[") + data.count("{") <= max_depth:
        return
    raw = _utf8(data)
    if raw.count(b"[") + raw.count(b"{") <= max_depth:
        return
    if nesting_depth(raw) > max_depth:
        raise NestingTooDeep(max_depth, what)


def loads(data: str | bytes | bytearray, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` that refuses nesting beyond ``max_depth`` with a ``ValueError``.

    Every failure is a ``ValueError`` (``json.JSONDecodeError``,
    ``UnicodeDecodeError``, :class:`NestingTooDeep`), so callers catch one type.
    """
    check_depth(data, max_depth)
    try:
        return json.loads(data)
    except RecursionError as exc:  # a smaller interpreter stack than the limit assumes
        raise NestingTooDeep(max_depth) from exc


def _utf8(data: str | bytes | bytearray | memoryview) -> bytes:
    """The text as UTF-8 bytes (JSON may also arrive as UTF-16/32, which json.loads detects)."""
    if isinstance(data, str):
        return data.encode("utf-8", "surrogatepass")
    raw = bytes(data)
    encoding = json.detect_encoding(raw)
    if encoding in ("utf-8", "utf-8-sig"):
        return raw
    try:
        return raw.decode(encoding).encode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return raw  # json.loads will refuse it; the scan of the raw bytes is still safe
