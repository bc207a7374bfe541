"""Which rules can match a text: every rule's guard checked against the text's words at once.

The text's letter runs come from C-speed bytes operations (each byte that is not
``a``-``z`` becomes a space, then ``split``), and one set intersection keeps the
words that some guard (:mod:`guards`) mentions. Every guard clause is a bit: a
word sets the bits of the clauses it satisfies on its own (*sure*) and of those
with a longer phrase whose rarest word it is (*maybe*); the rarest character of
a substring key, found with ``in``, sets *maybe* bits too. A conjunction with a
clause in neither set cannot hold. The open clauses of the others are looked at
(a phrase among the text's runs, a substring in the text), a few phrases per
clause at most: past that the rule is let through, its regex being cheaper than
looking on. A rule none of whose conjunctions can hold cannot match, so its
regex never runs: a typical document leaves a rule or two of 79 to search.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import NamedTuple, TypeVar

from ragpulse.disk_cache import cached
from ragpulse.evaluators.injection.guards import Clause, Guard, derive, table_key, word_odds
from ragpulse.evaluators.injection.rule import Rule
from ragpulse.evaluators.injection.rules import _RULES

_NON_LETTERS_TO_SPACE = bytes(b if 97 <= b <= 122 else 32 for b in range(256))
# Roughly most to least frequent in English text: a substring is probed by its character
# that comes last here.
_CHAR_ORDER = " etaoinsrhldcumfpgwybvk.,'-\"x()j:qz;0123456789"
_ALWAYS_THERE = _CHAR_ORDER.index("x")  # chars before this are in nearly every document
_K = TypeVar("_K", str, bytes)
_MAX_LOOKS = 6  # phrases looked for per clause, at most (see _Text.holds)


class _Phrase(NamedTuple):
    """A phrase of two or more words, compiled for looking it up in a text's runs."""

    words: frozenset[bytes]
    padded: bytes  # " w1 w2 w3 ": as it appears among the runs
    head: bytes | None  # " w1 w2 ": a quick first look for a phrase of three words or more


class _Clause(NamedTuple):
    """The part of a guard clause that needs a look at the text: phrases and substrings."""

    rarest: frozenset[bytes]  # the rarest word of each phrase of two or more words
    phrases: dict[bytes, tuple[_Phrase, ...]]  # rarest word -> its phrases
    substrings: tuple[str, ...]


def _rarest_word(phrase: str) -> str:
    return min(phrase.split(), key=lambda w: (word_odds(w), w))


def _rarest_char(s: str) -> str:
    def rank(ch: str) -> int:
        at = _CHAR_ORDER.find(ch)
        return len(_CHAR_ORDER) if at < 0 else at

    return max(s, key=lambda ch: (rank(ch), ch))


def _add(table: dict[_K, int], key: _K, bit: int) -> None:
    table[key] = table.get(key, 0) | bit


class _Table:
    """Every guard clause as a bit, and what sets it: the compiled guards of all rules."""

    def __init__(self, guards: list[Guard | None]) -> None:
        self.clauses: list[_Clause] = []
        self.sure: dict[bytes, int] = {}  # word -> clauses it satisfies alone
        self.maybe: dict[bytes, int] = {}  # word -> clauses with a phrase it is the rarest of
        self.probes: dict[str, int] = {}  # rare character -> clauses with a substring of it
        self.wide_probes: dict[str, int] = {}  # the same, non-ASCII: absent from ASCII text
        self.always_maybe = 0  # clauses with a substring of common characters only
        self.unguarded = frozenset(i for i, g in enumerate(guards) if g is None)
        self.by_first: dict[int, list[tuple[int, int]]] = {}  # first clause -> (rule, mask)
        for i, g in enumerate(guards):
            for mask in map(self._conjunction, g or ()):
                self.by_first.setdefault(mask & -mask, []).append((i, mask))
        self.first_bits = sum(self.by_first)
        self.by_word = {  # word -> (clauses it satisfies, clauses with a phrase it is rarest in)
            w: (self.sure.get(w, 0), self.maybe.get(w, 0)) for w in {*self.sure, *self.maybe}
        }
        self.words = frozenset(self.sure).union(  # every word of every phrase
            *(phrase.words for c in self.clauses for p in c.phrases.values() for phrase in p)
        )

    def _conjunction(self, conj: tuple[Clause, ...]) -> int:
        mask = 0
        for clause in conj:
            bit = 1 << len(self.clauses)
            mask |= bit
            # A phrase is checked through its rarest word: it holds only where that word is.
            by_word: dict[bytes, list[_Phrase]] = {}
            for phrase in sorted(clause.phrases):
                rarest = _rarest_word(phrase).encode()
                if " " not in phrase:
                    _add(self.sure, rarest, bit)
                    continue
                words = phrase.split()
                padded = f" {phrase} ".encode()
                head = f" {words[0]} {words[1]} ".encode() if len(words) > 2 else None
                compiled = _Phrase(frozenset(padded.split()), padded, head)
                by_word.setdefault(rarest, []).append(compiled)
                _add(self.maybe, rarest, bit)
            for s in clause.substrings:
                probe = _rarest_char(s)
                if _CHAR_ORDER.find(probe) in range(_ALWAYS_THERE):
                    self.always_maybe |= bit  # nearly every text has it: no use probing
                else:
                    _add(self.probes if probe.isascii() else self.wide_probes, probe, bit)
            phrases = {w: tuple(p) for w, p in by_word.items()}
            self.clauses.append(_Clause(frozenset(phrases), phrases, clause.substrings))
        return mask


@functools.cache
def _table() -> _Table:
    """Built on first use (about 0.3 s), or read from the on-disk cache of an earlier process
    (keyed by the rules and by the code that derives the table), so that importing the
    package stays cheap and a short ``ragpulse eval`` does not pay for it every time."""
    patterns = [r.pattern if r.space == "folded" else None for r in _RULES]
    key = table_key(patterns, Path(__file__))
    return cached("injection-guards", key, lambda: _Table(derive(patterns)), _Table)


def prepare() -> None:
    """Build the guard table now rather than during the first scan."""
    _table()


class _Text:
    """One text's evidence: its guard words, and on demand its runs and substrings."""

    __slots__ = ("_found", "_runs", "_split", "text", "words")

    def __init__(self, folded: str, table: _Table) -> None:
        self.text = folded
        self._split = folded.encode("ascii", "replace").translate(_NON_LETTERS_TO_SPACE).split()
        self.words = table.words.intersection(self._split)
        self._runs = b""
        self._found: dict[str | bytes, bool] = {}  # substrings of the text, phrases of its runs

    def _in_runs(self, words: bytes) -> bool:
        """Whether ``words`` (" w1 w2 ") follow each other in the text (cached)."""
        found = self._found.get(words)
        if found is None:
            if not self._runs:
                self._runs = b" " + b" ".join(self._split) + b" "
            found = self._found[words] = words in self._runs
        return found

    def _contains(self, s: str) -> bool:
        """Whether the text has substring ``s`` (cached: clauses share substrings)."""
        found = self._found.get(s)
        if found is None:
            found = self._found[s] = s in self.text
        return found

    def holds(self, clause: _Clause) -> bool:
        """Whether the text satisfies a clause that the quick check left open.

        Past ``_MAX_LOOKS`` phrases whose words are all there, it gives up and says
        yes: the rule's regex, which decides anyway, is then cheaper than looking on.
        """
        looks = _MAX_LOOKS
        for w in clause.rarest.intersection(self.words):
            for phrase in clause.phrases[w]:
                if phrase.words <= self.words:
                    if not looks:
                        return True
                    looks -= 1
                    # The first two words first: shared by many phrases, so often cached.
                    if (phrase.head is None or self._in_runs(phrase.head)) and self._in_runs(
                        phrase.padded
                    ):
                        return True
        return any(map(self._contains, clause.substrings))


def candidate_rules(folded: str) -> list[Rule]:
    """The rules that may match ``folded`` (a casefolded text), in table order.

    Plain-space rules and rules without a guard are always included, and so is
    every rule whose guard holds: a rule left out cannot match. (A rule whose
    guard would take too long to settle is included too.)
    """
    table = _table()
    text = _Text(folded, table)
    sure, maybe = 0, table.always_maybe
    for w in text.words:
        if (sure_maybe := table.by_word.get(w)) is not None:
            sure |= sure_maybe[0]
            maybe |= sure_maybe[1]
    for ch, bits in table.probes.items():
        if ch in folded:
            maybe |= bits
    if not folded.isascii():
        for ch, bits in table.wide_probes.items():
            if ch in folded:
                maybe |= bits
    possible = sure | maybe
    found = set(table.unguarded)
    # Only a conjunction whose first (most selective) clause is possible can hold.
    firsts = possible & table.first_bits
    while firsts:
        first = firsts & -firsts
        firsts ^= first
        for rule, mask in table.by_first[first]:
            if rule in found or mask & ~possible:
                continue
            pending = mask & ~sure  # the clauses left open, most selective first
            while pending:
                bit = pending & -pending
                if not text.holds(table.clauses[bit.bit_length() - 1]):
                    break
                pending ^= bit
            else:
                found.add(rule)
    return [_RULES[i] for i in sorted(found)]
