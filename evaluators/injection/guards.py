"""Guards: text that every match of a rule's regex contains, read off the regex.

A guard is an OR of conjunctions of clauses. A clause is a set of keys, one of
which every match contains, so a text that satisfies no conjunction has no
match and the rule can be skipped without changing a result. A key is

* a *phrase*: consecutive whole words, a word being a maximal run of ``a``-``z``
  (a non-letter or a word boundary on each side), checked against the text's
  own letter runs: "ignore" does not hold in "ignored", "the user" holds in
  "the, user"; or
* a *substring*, for evidence without a whole word ("<|", "a.i.").

Each lead (:mod:`leads`) from a position of the pattern gives that position's
clause one key, the least likely to be in an ordinary text by rough odds; a
branch also gives the union of its alternatives' best clauses. A lead is spelled
out until it has a couple of words, one of them uncommon: a longer lead would
only cost time to derive. The odds (a list of common words, word lengths) only
choose and order keys, so they decide how fast a text is cleared, never whether
a rule fires: every key is implied by the regex.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from ragpulse.disk_cache import digest
from ragpulse.evaluators.injection.leads import (
    BRANCH,
    SPLIT,
    TEXT,
    UNKNOWN,
    Node,
    ends_split,
    is_letter,
    leads,
    parse,
)
from ragpulse.evaluators.injection.vocabulary import LazyPattern, PatternSource

_LEAD_WORDS = 2  # a lead with this many whole words, one of them uncommon, ends
_NEXT_WORD_ODDS = 0.15  # how much rarer a phrase gets per word (words are not independent)
_MAX_DEPTH = 2  # branches inside branches inside branches yield no clause of their own
# Words in most documents: worth little as evidence on their own.
_COMMON = frozenset(
    "about after all also am an and any are as at be because been before being between both "
    "but by can could did didn do does doesn don during each even every few first for from "
    "get go had has have he her here him his how if in into is isn it its just last let like "
    "ll made make many may me might more most much must my new no not now of off on once one "
    "only or other our out over own part put re really said same say see she should so some "
    "such take than that the their them then there these they this those through to too two "
    "under up us use used using ve very was way we well were what when where which while who "
    "why will with without won would year years you your".split()
) | frozenset("abcdefghijklmnopqrstuvwxyz")  # "i", "a", and the "s" of "it's", "t" of "don't"
_WORD = re.compile("(?<=[^a-z])[a-z]+(?=[^a-z])")  # a run with a non-letter on both sides
_LOWERCASE = re.compile("[a-z]+")
_WORDY = re.compile("[a-z' ]+")
_COMMON_PUNCTUATION = frozenset(".,:;'\"()-")


class Clause(NamedTuple):
    """Keys one of which every match contains: phrases (words joined by spaces), substrings."""

    phrases: frozenset[str]
    substrings: tuple[str, ...]


Guard = tuple[tuple[Clause, ...], ...]  # a match satisfies every clause of some conjunction


@functools.cache
def _has_enough_words(lead: str) -> bool:
    """Whether ``lead`` has enough whole words, one of them uncommon, to end it."""
    words = _WORD.findall(lead)
    return len(words) >= _LEAD_WORDS and not _COMMON.issuperset(words)


@functools.cache
def _key(lead: str) -> tuple[str, bool] | None:
    """The evidence one lead gives: (phrase, True) of its whole words, or (substring, False).

    The least likely to be in a text wins, but a phrase of common words only ("if you
    are a i") costs a look at every place its words are, so a substring ("a.i.") beats it.
    """
    keys: list[tuple[int, float, int, str, bool]] = []  # (class, odds, preference, key, phrase)
    if words := _WORD.findall(lead):
        common = _COMMON.issuperset(words)
        keys.append((int(common), _words_odds(words), 0, " ".join(words), True))
    for piece in lead.split(SPLIT):
        # Text that words miss: "<|", "a.i.", or without a whole word, a cut-off one ("ignor").
        # Words and spaces are better checked as a phrase, through the rarest word.
        if (
            piece.strip()
            and (not words or not _WORDY.fullmatch(piece))
            and (len(piece) > 1 or not piece.isalnum())
        ):
            odds = substring_odds(piece)
            keys.append((2 if odds >= 0.5 else 0, odds, 1, piece, False))
    return min(keys)[3:] if keys else None


def _clause(nodes: list[Node], *, after_split: bool) -> Clause | None:
    phrases: set[str] = set()
    substrings: set[str] = set()
    for lead in leads(nodes, after_split=after_split, done=_has_enough_words):
        if (key := _key(lead)) is None:
            return None  # some match has no evidence here
        (phrases if key[1] else substrings).add(key[0])
    # A substring that contains another is implied by it: keep the shorter one only.
    kept = [s for s in substrings if not any(t != s and t in s for t in substrings)]
    return Clause(frozenset(phrases), tuple(sorted(kept)))


@functools.cache
def word_odds(word: str) -> float:
    """A rough chance that an ordinary document contains ``word``."""
    return 1.0 if word in _COMMON else min(0.2, (2.5 / len(word)) ** 4)


@functools.cache
def clause_odds(clause: Clause) -> float:
    """A rough chance that an ordinary document satisfies ``clause`` (lower: more selective)."""
    none = 1.0  # the chance that the text has none of the keys
    for phrase in clause.phrases:
        none *= 1.0 - _words_odds(phrase.split())
    for s in clause.substrings:
        none *= 1.0 - substring_odds(s)
    return 1.0 - none


def substring_odds(s: str) -> float:
    """A rough chance that an ordinary document contains ``s``."""
    if s.strip() in _COMMON_PUNCTUATION:
        return 1.0
    if _WORDY.fullmatch(s):  # "to be", "you're now": as rare as its words, one after another
        return _words_odds(_LOWERCASE.findall(s))
    return min(0.5, 1.0 / len(s) ** 2)


def _words_odds(words: list[str]) -> float:
    """A rough chance that an ordinary document has ``words`` one after another."""
    return math.prod(map(word_odds, words)) * _NEXT_WORD_ODDS ** (len(words) - 1)


def _literal(branch: Node) -> bool:
    """Whether every alternative of a branch is plain text: nothing inside to look into."""
    return all(n[0] == TEXT for a in branch[1] for n in a)


def _clauses(nodes: list[Node], positions: range, depth: int) -> list[Clause]:
    """The clauses of ``nodes`` (a whole sequence, for context) at ``positions``.

    A branch also yields the union of its alternatives' best clauses: "your
    developer|the system" needs "developer" or "system" even where no position
    of the sequence says so.
    """
    clauses: list[Clause] = []
    for i in positions:
        after_split = ends_split(nodes[:i])
        kind = nodes[i][0]
        # Keys start where a word can (the match's start, after a non-letter) or at a symbol.
        symbol = kind == TEXT and not is_letter(nodes[i][1][0])
        if kind == UNKNOWN or (i and not after_split and not symbol):
            continue
        if (clause := _clause(nodes[i:], after_split=after_split)) is not None:
            clauses.append(clause)
        if kind == BRANCH and depth < _MAX_DEPTH and not _literal(nodes[i]):
            phrases: set[str] = set()
            substrings: set[str] = set()
            for alternative in nodes[i][1]:
                inner = [*nodes[:i], *alternative, *nodes[i + 1 :]]
                found = _clauses(inner, range(i, i + len(alternative)), depth + 1)
                if not found:
                    break
                best = min(found, key=clause_odds)
                phrases.update(best.phrases)
                substrings.update(best.substrings)
            else:
                clauses.append(Clause(frozenset(phrases), tuple(sorted(substrings))))
    return clauses


def _order(clause: Clause) -> tuple[bool, float, list[str], tuple[str, ...]]:
    """Cheap and selective clauses first: a phrase of common words only ("i am your") is
    checked at every place its words are, so its clause goes last."""
    costly = any(_COMMON.issuperset(p.split()) for p in clause.phrases)
    return costly, clause_odds(clause), sorted(clause.phrases), clause.substrings


def _conjunction(nodes: list[Node]) -> tuple[Clause, ...]:
    """Clauses that every match of a sequence satisfies, cheap and selective first."""
    return tuple(sorted(set(_clauses(nodes, range(len(nodes)), 0)), key=_order))


def table_key(patterns: Iterable[PatternSource | None], *deriving: Path) -> str:
    """The on-disk cache key of a table built from the guards of ``patterns``.

    It covers the pattern texts (and flags given to ``re.compile``: a lazy pattern's
    are inline, in its text, so it is not compiled for this), the code that derives
    guards (this module and :mod:`leads`) and the modules in ``deriving`` that build
    the table from them: an edited rule or algorithm never reads a stale table.
    """
    here = Path(__file__).parent
    sources = (here / "guards.py", here / "leads.py", *deriving)
    return digest(
        [
            *(
                "-" if p is None else p.pattern if isinstance(p, LazyPattern)
                else f"{p.pattern}\0{p.flags}"
                for p in patterns
            ),
            *(path.read_bytes() for path in sources),
        ]
    )  # fmt: skip


def guard(pattern: PatternSource) -> Guard | None:
    """The guard of ``pattern``, or None when nothing is known (the rule always runs)."""
    try:
        if (nodes := parse(pattern)) is None:
            return None
        if len(nodes) == 1 and nodes[0][0] == BRANCH:  # a|b|c: a guard per alternative
            alternatives = tuple(_conjunction(list(a)) for a in nodes[0][1])
            if all(alternatives):
                return alternatives
        conjunction = _conjunction(nodes)
    except Exception:  # pragma: no cover - private parser changed: no guard
        return None
    return (conjunction,) if conjunction else None


def derive(patterns: Sequence[PatternSource | None]) -> list[Guard | None]:
    """The guards of ``patterns`` (None: no guard), forgetting the memos built on the way."""
    try:
        return [None if p is None else guard(p) for p in patterns]
    finally:
        for memo in (_key, word_odds, _has_enough_words, clause_odds):
            memo.cache_clear()
