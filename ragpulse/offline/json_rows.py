"""Rows from a JSON document: a top-level array of row objects, or an object that holds
that array under one of the names other tools save datasets with (:data:`WRAPPERS`).

DeepEval, pandas (``orient="records"``) and many tools save a dataset as one JSON
document rather than JSON Lines. Such a file is read as a stream, one row at a time,
within the same bounds as a JSONL line (a row over the limit is kept as an error row and
read past), so a large file never has to fit in memory. A row's ``line`` is its position
in the array (1-based). Any other JSON document is refused with a message that says what
was expected and how to convert the file in one line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple, TextIO

from ragpulse.offline.score import ParsedLine, parse_line
from ragpulse.offline.testset import ALIASES, RECORD_KEYS, REFERENCE_KEYS

WRAPPERS = ("data", "rows", "examples", "test_cases", "goldens")
"""Keys under which a JSON object may hold its rows (Hugging Face, DeepEval, ...)."""

EXPECTED = (
    "ragpulse reads JSON Lines (one JSON object a line), a JSON array of objects, or an "
    f"object holding that array under {', '.join(WRAPPERS[:-1])} or {WRAPPERS[-1]}"
)

_ROW_KEYS = frozenset({*RECORD_KEYS, *REFERENCE_KEYS, *ALIASES, "documents"})
_CHUNK = 1 << 20
_OUTSIDE = re.compile(r'[][{}"]')  # what changes the nesting outside a string
_INSIDE = re.compile(r'["\\]')  # what ends a string, or escapes its next character
_SCALAR_END = re.compile(r"[\s,\]}]")
_NOT_SPACE = re.compile(r"\S")


class Layout(NamedTuple):
    """How the rows lie in a file: one a line, in a top-level array, or in an object's
    array under ``key``."""

    kind: Literal["jsonl", "array", "object"]
    key: str | None = None


JSONL = Layout("jsonl")


@dataclass
class _Value:
    """One JSON value as scanned: its first ``keep`` characters, its length, whether it
    spans lines, and whether it ended before the file did."""

    keep: int
    pieces: list[str] = field(default_factory=list)
    size: int = 0
    multiline: bool = False
    complete: bool = False

    def add(self, piece: str) -> None:
        if self.size < self.keep:
            self.pieces.append(piece[: self.keep - self.size])
        self.size += len(piece)
        self.multiline = self.multiline or "\n" in piece

    @property
    def text(self) -> str:
        return "".join(self.pieces)


class _Scanner:
    """Finds where JSON values begin and end in a text stream, 1 MiB at a time, without
    parsing them: strings and nesting only, so that a row with a mistake in it is one bad
    row, not the end of the file."""

    def __init__(self, f: TextIO) -> None:
        self._f = f
        self._buf = ""
        self._i = 0
        self.skipped_newline = False
        """A line break was skipped between values (the document spans lines)."""

    def _read(self) -> bool:
        data = self._f.read(_CHUNK)
        if not data:
            return False
        self._buf = self._buf[self._i :] + data
        self._i = 0
        return True

    def peek(self) -> str:
        """The next character that is not white space ('' at the end), not consumed."""
        while True:
            found = _NOT_SPACE.search(self._buf, self._i)
            end = found.start() if found else len(self._buf)
            self.skipped_newline = self.skipped_newline or "\n" in self._buf[self._i : end]
            self._i = end
            if found:
                return self._buf[end]
            if not self._read():
                return ""

    def take(self) -> None:
        self._i += 1

    def value(self, keep: int) -> _Value:
        """The next value (object, array, string or scalar), consumed."""
        out = _Value(keep)
        if not self.peek():
            return out
        buf, start = self._buf, self._i
        i, depth = start, 0
        in_string = escaped = False
        scalar = buf[start] not in '{["'
        while True:
            end = None
            while i < len(buf):
                if escaped:
                    i, escaped = i + 1, False
                    continue
                if scalar:
                    found = _SCALAR_END.search(buf, i)
                    end = found.start() if found else None
                    i = len(buf)
                    break
                found = (_INSIDE if in_string else _OUTSIDE).search(buf, i)
                if found is None:
                    i = len(buf)
                    break
                char, i = found.group(), found.end()
                if in_string:
                    escaped = char == "\\"
                    in_string = escaped
                    if not in_string and depth == 0:
                        end = i  # a value that is a string ended
                        break
                elif char == '"':
                    in_string = True
                elif char in "[{":
                    depth += 1
                else:
                    depth -= 1
                    if depth <= 0:
                        end = i
                        break
            if end is not None:
                out.add(buf[start:end])
                out.complete = True
                self._i = end
                return out
            out.add(buf[start:])
            self._buf, self._i = "", 0
            if not self._read():
                return out
            buf, start, i = self._buf, 0, 0


def layout_of(f: TextIO, path: Path) -> Layout | str:
    """How the rows lie in ``f`` (the file ``path``, opened at its start), or one line
    saying why they cannot be read (what was expected, and the one-line conversion). A
    file that does not start like a JSON document is JSON Lines, as ever (a bad line is an
    error row)."""
    scan = _Scanner(f)
    first = scan.peek()
    if first == "[":
        scan.take()
        inner = scan.peek()
        if inner in ("{", "]"):
            return Layout("array")
        if inner == "":
            return f"{path} is a JSON array that never closes: {EXPECTED}"
        what = {'"': "strings", "[": "arrays"}.get(inner, "numbers, booleans or nulls")
        hint = " (convert: jq -c '.[] | {question: .}' " if inner == '"' else ""
        hint = f"{hint}{path} > rows.jsonl)" if hint else ""
        return f"{path} is a JSON array of {what}, not of row objects: {EXPECTED}{hint}"
    if first != "{":
        return JSONL
    keys, multiline = _object_keys(scan)
    more = scan.peek() != ""
    if not multiline:
        if more:
            return JSONL
        wrapper = _wrapper(keys)
        return Layout("object", wrapper) if wrapper else JSONL  # a one-row file otherwise
    if more:
        return (
            f"{path} holds JSON objects written over several lines each: {EXPECTED}. "
            f"Convert it with: jq -c . {path} > rows.jsonl"
        )
    wrapper = _wrapper(keys)
    if wrapper:
        return Layout("object", wrapper)
    if _ROW_KEYS & keys.keys():
        return (
            f"{path} is one row written over several lines: {EXPECTED}. "
            f"Convert it with: jq -c . {path} > rows.jsonl"
        )
    arrays = [k for k, starts in keys.items() if starts == "["]
    shown = ", ".join(list(keys)[:8]) + (", ..." if len(keys) > 8 else "")
    key = arrays[0] if len(arrays) == 1 else "KEY"
    select = f".{key}[]" if re.fullmatch(r"[A-Za-z_]\w*", key) else f'.["{key}"][]'
    return (
        f"{path} is one JSON object (keys: {shown}), not rows: {EXPECTED}. "
        f"Convert it with: jq -c '{select}' {path} > rows.jsonl"
    )


def _object_keys(scan: _Scanner) -> tuple[dict[str, str], bool]:
    """The keys of the object ``scan`` is at, each with the first character of its value,
    and whether the object spans lines. Stops early at anything that is not JSON."""
    keys: dict[str, str] = {}
    scan.skipped_newline = False
    scan.take()
    multiline = False
    while scan.peek() == '"':
        key = scan.value(10_000)
        name = _key(key.text)
        if name is None:
            break
        if scan.peek() != ":":
            break
        scan.take()
        starts = scan.peek()
        value = scan.value(0)
        multiline = multiline or key.multiline or value.multiline
        keys.setdefault(name, starts)
        if scan.peek() != ",":
            break
        scan.take()
    if scan.peek() == "}":
        scan.take()
    return keys, multiline or scan.skipped_newline


def _wrapper(keys: dict[str, str]) -> str | None:
    """The key holding the rows: a wrapper key whose value is an array, in an object that
    is not itself a row."""
    if _ROW_KEYS & keys.keys():
        return None
    return next((k for k in keys if k in WRAPPERS and keys[k] == "["), None)


def json_rows(
    f: TextIO, layout: Layout, max_row_chars: int, keep_text: bool = False, first: int = 1
) -> Iterator[ParsedLine]:
    """The rows of a JSON document laid out as ``layout`` says, one at a time; row numbers
    start at ``first``. ``keep_text``: a row written on one line keeps its text
    (:func:`~ragpulse.offline.score.parse_line`)."""
    scan = _Scanner(f)
    if layout.kind == "object":
        if scan.peek() != "{":
            return
        scan.take()
        while scan.peek() == '"':
            name = scan.value(10_000).text
            if scan.peek() != ":":
                return
            scan.take()
            if _key(name) == layout.key and scan.peek() == "[":
                yield from _array(scan, max_row_chars, keep_text, first)
                return
            scan.value(0)
            if scan.peek() != ",":
                return
            scan.take()
        return
    if scan.peek() == "[":
        n, closed = yield from _array(scan, max_row_chars, keep_text, first)
        if closed and scan.peek():
            yield ParsedLine(n, None, "content after the end of the array", "", size=0)


def _key(text: str) -> str | None:
    try:
        name = json.loads(text)
    except ValueError:
        return None
    return name if isinstance(name, str) else None


def _array(
    scan: _Scanner, limit: int, keep_text: bool, first: int
) -> Generator[ParsedLine, None, tuple[int, bool]]:
    """The rows of the array ``scan`` is at; returns the next free row number and whether
    the array closed."""
    scan.take()
    n = first
    while True:
        if scan.peek() == "]" and n == first:
            scan.take()
            return n, True
        value = scan.value(limit + 1)
        if not value.size and not value.complete:
            error = f"the array is not closed: the file ends after row {n - first}"
            yield ParsedLine(n, None, error, "", size=0)
            return n + 1, False
        yield _row(n, value, limit, keep_text)
        n += 1
        following = scan.peek()
        if following == ",":
            scan.take()
            continue
        if following == "]":
            scan.take()
            return n, True
        if value.complete:
            what = "the file ends" if not following else f"{following!r} follows"
            error = f"the array is not closed: {what} after row {n - first}"
            yield ParsedLine(n, None, error, "", size=0)
            n += 1
        return n, False


def _row(n: int, value: _Value, limit: int, keep_text: bool) -> ParsedLine:
    if value.size > limit:
        head = value.text[:1000]
        error = f"row is {value.size} characters long, over the {limit} limit"
        return ParsedLine(n, None, error, head, size=len(head))
    text = value.text
    parsed = parse_line(n, text, keep_text=keep_text and not value.multiline)
    return parsed or ParsedLine(n, None, "invalid JSON: an empty row", "", size=0)


def count_rows(f: TextIO, layout: Layout) -> int:
    """Rows of a JSON document (for the progress bar's total): one scan, nothing parsed."""
    return sum(1 for _ in json_rows(f, layout, max_row_chars=0))
