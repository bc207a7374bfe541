"""Many regexes, one scan: a pattern set compiled once into Hyperscan, confirmed by ``re``.

Every pattern is compiled into a Hyperscan database in *prefilter* mode
(``HS_FLAG_PREFILTER``): Hyperscan then matches a superset of what the pattern
matches (lookarounds, which it cannot run, are left out). One scan of a text reports
every pattern that may match it, at C speed; Python's ``re`` then runs only those,
and its match is the answer. Findings are therefore exactly the regexes' own, and
Hyperscan only spares the regexes that cannot match.

Hyperscan's ``\\w``, ``\\d``, ``\\s`` and ``\\b`` are ASCII; Python's are Unicode. So
that the superset still holds, the pattern Hyperscan gets is loosened (:func:`loosen`):
``{m,n}`` becomes ``{m,}`` (the same matches and more, and a database that compiles
in about a second rather than minutes) and ``\\s`` also takes ``\\x1c``-``\\x1f``
(Python counts them as spaces); a database for texts with non-ASCII characters also
lets ``\\w``, ``\\d`` and ``\\s`` take any non-ASCII character and drops ``\\b``. A
pattern that still cannot be expressed (Hyperscan refuses it, or the ``hyperscan``
package cannot load on this platform) is run by ``re`` on every text instead: it is
logged once and listed in :attr:`PatternSet.unexpressed`.

A text longer than :data:`CHUNK` characters is taken in chunks, so that ``re`` runs
only near what Hyperscan flagged: chunk ``k`` is scanned over its own characters plus
the longest match any pattern can have (``reach``), and a flagged pattern is searched
from the chunk's start over its own reach plus :data:`LOOKAROUND` characters (what a
lookahead may read past a match). A match starting in the chunk is then the one a
search of the whole text finds; one starting later belongs to a later chunk.

The compiled databases are kept on disk between processes (``ragpulse.disk_cache``,
keyed by the patterns, this module and the Hyperscan version): compiling costs about a
second, loading a few milliseconds.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any, Protocol

from ragpulse.disk_cache import cached, digest

log = logging.getLogger(__name__)

CHUNK = 8_192
"""Characters per chunk of a long text (see the module docstring)."""
LOOKAROUND = 256
"""Characters a lookahead may read past the end of a match (the rules' are under 60)."""
_UNBOUNDED = 1 << 30

hs: Any  # the hyperscan module, or None where it cannot load
try:
    import hyperscan
except ImportError as exc:  # pragma: no cover - no wheel for this platform
    hs = None
    _NO_HYPERSCAN = f"hyperscan unavailable ({exc}); every pattern runs on every text"
else:
    hs = hyperscan
    _NO_HYPERSCAN = ""


class Pattern(Protocol):
    """A compiled ``re.Pattern``, or anything that searches like one (a lazy pattern)."""

    @property
    def pattern(self) -> str: ...

    def search(self, string: str, pos: int = ..., endpos: int = ...) -> re.Match[str] | None: ...


class Unexpressible(ValueError):
    """A pattern construct the loosening cannot make a Hyperscan superset of."""


_NON_ASCII = r"\x{80}-\x{10FFFF}"
_ODD_SPACES = r"\x1c-\x1f"  # str.isspace() and re's \s take these; Hyperscan's \s does not
# Escapes, character classes, counted repeats, any other character.
_TOKEN = re.compile(r"\\.|\[\^?\]?(?:\\.|[^\]\\])*\]|\{\d*,\d*\}|.", re.DOTALL)
_REPEAT = re.compile(r"\{(\d*),(\d*)\}")


def loosen(pattern: str, *, ascii_text: bool, anchored: bool = True) -> str:
    """``pattern`` as Hyperscan gets it: it matches wherever ``pattern`` does under ``re``
    (on ASCII text only when ``ascii_text``), and maybe elsewhere. Without ``anchored``
    it also matches wherever ``pattern`` matches a line or sentence of the text (one that
    whitespace separates from the rest): ``^`` and ``\\A`` also hold after whitespace,
    ``$`` and ``\\Z`` before it."""
    out = []
    for token in _TOKEN.findall(pattern):
        if token[0] == "[" and len(token) > 1:
            out.append(_loosen_class(token, ascii_text))
        elif not anchored and token in ("^", r"\A"):
            out.append(f"(?:^|{_loosen_escape('s', ascii_text)})")
        elif not anchored and token in ("$", r"\Z"):
            out.append(f"(?:{_loosen_escape('s', ascii_text)}|$)")
        elif token[0] == "\\" and len(token) == 2:
            out.append(_loosen_escape(token[1], ascii_text))
        elif (repeat := _REPEAT.fullmatch(token)) is not None:
            out.append(f"{{{repeat.group(1) or 0},}}")
        else:
            out.append(token)
    return "".join(out)


def _loosen_escape(char: str, ascii_text: bool) -> str:
    if char == "s":
        return rf"[\s{_ODD_SPACES}]" if ascii_text else rf"[\s{_ODD_SPACES}{_NON_ASCII}]"
    if ascii_text:
        return "\\" + char
    if char in "wd":
        return rf"[\{char}{_NON_ASCII}]"
    if char in "bB":
        return ""  # a boundary next to a non-ASCII letter is not Hyperscan's to judge
    return "\\" + char  # \W \S \D: Hyperscan's already take every non-ASCII character


def _loosen_class(token: str, ascii_text: bool) -> str:
    negated = token.startswith("[^")
    body = token[2:-1] if negated else token[1:-1]
    escapes = set(re.findall(r"\\(.)", body))
    if negated:
        # [^\w.] excludes fewer characters under Hyperscan (ASCII \w): a superset already;
        # [^\W] would exclude every non-ASCII character, which re does not.
        if escapes & set("WSD") and not ascii_text:
            raise Unexpressible(f"negated class with a negated class escape: {token}")
        return token
    extra = _ODD_SPACES if "s" in escapes else ""
    if not ascii_text and escapes & set("wds"):
        extra += _NON_ASCII
    # First (after a literal "]" that opens the class): at the end, "[+-" + extra would
    # read as a range from "+".
    head = "]" if body.startswith("]") else ""
    return f"[{head}{extra}{body[len(head) :]}]"


def _on_match(pattern_id: int, start: int, end: int, flags: int, found: set[int]) -> None:
    found.add(pattern_id)


_FLAGS = 0
if hs is not None:
    _FLAGS = hs.HS_FLAG_UTF8 | hs.HS_FLAG_PREFILTER | hs.HS_FLAG_SINGLEMATCH | hs.HS_FLAG_ALLOWEMPTY


def _compile(
    patterns: dict[int, str], caseless: AbstractSet[int]
) -> tuple[bytes | None, dict[int, str]]:
    """A serialised database of ``patterns`` (id -> expression; the ``caseless`` ones
    matched ignoring ASCII case), and the ids Hyperscan refused (id -> its message); those
    are left out of the database."""
    refused: dict[int, str] = {}

    def build(ids: Sequence[int]) -> Any:
        db = hs.Database(mode=hs.HS_MODE_BLOCK)
        flags = [_FLAGS | (hs.HS_FLAG_CASELESS if i in caseless else 0) for i in ids]
        db.compile(expressions=[patterns[i].encode() for i in ids], ids=list(ids), flags=flags)
        return db

    try:
        db = build(list(patterns)) if patterns else None
    except hs.error:  # find which: each alone, then the others together
        for i in patterns:
            try:
                build([i])
            except hs.error as exc:
                refused[i] = str(exc)
        kept = [i for i in patterns if i not in refused]
        db = build(kept) if kept else None
    return (hs.dumpb(db) if db is not None else None), refused


def _build(
    sources: tuple[str, ...], anchored: bool, caseless: AbstractSet[int]
) -> tuple[tuple[bytes | None, bytes | None], dict[int, str]]:
    """(database for ASCII text, database for any text), and why each pattern left out is."""
    unexpressed: dict[int, str] = {}
    databases = []
    for ascii_text in (True, False):
        loosened = {}
        for i, source in enumerate(sources):
            try:
                loosened[i] = loosen(source, ascii_text=ascii_text, anchored=anchored)
            except Unexpressible as exc:
                unexpressed[i] = str(exc)
        kept = {i: p for i, p in loosened.items() if i not in unexpressed}
        blob, refused = _compile(kept, caseless)
        unexpressed.update(refused)
        databases.append(blob)
    return (databases[0], databases[1]), unexpressed


def _load(blobs: tuple[bytes | None, bytes | None]) -> tuple[Any, Any]:
    ascii_db, any_db = (
        hs.loadb(blob, hs.HS_MODE_BLOCK) if blob is not None else None for blob in blobs
    )
    return ascii_db, any_db


class PatternSet:
    """Patterns compiled once; which may match a text, and where the first match is.

    Thread-safe: each thread scans with its own Hyperscan scratch space.
    """

    def __init__(
        self,
        name: str,
        patterns: Sequence[Pattern],
        *,
        anchored: bool = True,
        caseless: AbstractSet[int] = frozenset(),
    ) -> None:
        """``anchored=False``: :meth:`possible` answers for each line or sentence of a text
        too (``^`` and ``$`` are not held to the text's ends). ``caseless``: indices of
        patterns that Hyperscan flags ignoring ASCII case (``re`` still decides, with the
        pattern's own case): what lets one scan of a lower-cased text stand for a scan of
        the text as written (:func:`caseless_superset` says which patterns can)."""
        self.name = name
        self.patterns = tuple(patterns)
        self._sources = sources = tuple(p.pattern for p in self.patterns)
        caseless = frozenset(caseless)
        version = hs.__version__ if hs is not None else "-"
        self._key = key = digest(
            [version, Path(__file__).read_bytes(), str(anchored), str(sorted(caseless)), *sources]
        )
        self.unexpressed: dict[int, str] = {}
        """Index -> why Hyperscan cannot take the pattern: ``re`` runs it on every text."""
        self._databases: tuple[Any, Any] = (None, None)
        if hs is None:
            self.unexpressed = dict.fromkeys(range(len(sources)), _NO_HYPERSCAN)
        else:
            blobs, self.unexpressed = cached(
                f"hyperscan-{name}", key, lambda: _build(sources, anchored, caseless), tuple
            )
            try:
                self._databases = _load(blobs)
            except hs.error as exc:  # stored by a machine of another CPU kind: build anew
                log.info("%s: rebuilding the stored pattern databases (%s)", name, exc)
                blobs, self.unexpressed = _build(sources, anchored, caseless)
                self._databases = _load(blobs)
        for i, why in sorted(self.unexpressed.items()):
            log.info("%s: pattern %d runs on every text (%s)", name, i, why)
        self._always = frozenset(self.unexpressed)
        self._local = threading.local()
        self._reach: tuple[int, ...] | None = None  # parsed on the first long text

    @property
    def reach(self) -> tuple[int, ...]:
        """The longest text each pattern can match: parsed on first use, and kept on disk
        with the databases (parsing them all costs ~0.1 s, a short run's share)."""
        if self._reach is None:
            sources = self._sources
            self._reach = cached(
                f"pattern-widths-{self.name}", self._key, lambda: tuple(map(max_width, sources)),
                tuple,
            )  # fmt: skip
        return self._reach

    def _scan(self, data: str, ascii_text: bool) -> set[int]:
        found = set(self._always)
        variant = 0 if ascii_text else 1
        db = self._databases[variant]
        if db is None:
            return found
        try:
            scratch = self._local.scratch
        except AttributeError:  # this thread's first scan
            scratch = self._local.scratch = tuple(
                hs.Scratch(d) if d is not None else None for d in self._databases
            )
        db.scan(
            data.encode("utf-8", "replace"),  # lone surrogates: "?", a non-word character too
            match_event_handler=_on_match,
            context=found,
            scratch=scratch[variant],
        )
        return found

    def possible(self, text: str) -> set[int]:
        """Indices of the patterns that may match somewhere in ``text`` (one scan)."""
        return self._scan(text, text.isascii())

    def first_matches(
        self, text: str, wanted: AbstractSet[int], flagged_out: set[int] | None = None
    ) -> dict[int, re.Match[str]]:
        """The first match (as ``pattern.search(text)`` finds it) of each wanted pattern
        that matches ``text``; Hyperscan decides which to search, and in which chunks.

        ``flagged_out`` receives the patterns that may match ``text`` (the wanted ones and
        the others, which are not searched): what :meth:`possible` says, from the same
        scan. A text taken in chunks reports every pattern (the scan stops early)."""
        n, ascii_text = len(text), text.isascii()
        if n <= CHUNK:
            flagged = self._scan(text, ascii_text)
            if flagged_out is not None:
                flagged_out.update(flagged)
            if not flagged:
                return {}
            found = {i: self.patterns[i].search(text) for i in sorted(flagged & wanted)}
            return {i: m for i, m in found.items() if m is not None}
        if flagged_out is not None:
            flagged_out.update(range(len(self.patterns)))
        pending = set(wanted)
        matches: dict[int, re.Match[str]] = {}
        reach = self.reach
        overlap = max(reach, default=0)
        start = 0
        while pending and start < n:
            stop = start + CHUNK
            # One character more on each side: \b at the chunk's edges sees its neighbour.
            chunk = text[max(0, start - 1) : stop + overlap + 1]
            for i in sorted(self._scan(chunk, ascii_text).intersection(pending)):
                end = min(n, stop + reach[i] + LOOKAROUND)
                m = self.patterns[i].search(text, start, end)
                if m is not None and (m.start() < stop or end == n):
                    matches[i] = m
                    pending.discard(i)
                elif m is None and end == n:
                    pending.discard(i)  # searched to the end of the text: no match at all
            start = stop
        return matches


def caseless_superset(pattern: str) -> bool:
    """Whether ``pattern``, flagged caselessly on ``text.lower()``, is flagged wherever it
    matches an ASCII ``text``. Lower-casing keeps every position and what ``\\w``, ``\\d``,
    ``\\s`` and ``\\b`` see there, and a caseless literal or class takes both cases; a
    negated class naming a letter does not: caseless ``[^A]`` refuses the "a" that ``[^A]``
    takes."""
    for token in _TOKEN.findall(pattern):
        if token.startswith("[^"):
            body = re.sub(r"\\[wWsSdDtnrfv]", "", token[2:-1])  # escapes that name no letter
            if re.search(r"[A-Za-z]", body):
                return False
    return True


def max_width(pattern: str) -> int:
    """Longest text ``pattern`` can match, from the stdlib regex parser (lookarounds not
    included: :data:`LOOKAROUND` covers them); unbounded if the parser is unavailable."""
    try:
        from re import _parser as parser  # type: ignore[attr-defined]

        width = int(parser.parse(pattern).getwidth()[1])
    except Exception:  # pragma: no cover - private module moved or changed
        return _UNBOUNDED
    return min(width, _UNBOUNDED)
