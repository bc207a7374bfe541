"""Search: which rules to try on a text, and each rule's regex run only where it can match.

A short text (up to ``_SMALL_TEXT`` characters, nearly every question and
retrieved chunk) is searched whole, one C-speed regex pass per rule, but only
for the rules the prefilter lets through (:mod:`prefilter`): one pass over the
text's words tells which rules' guards hold, and a rule whose guard fails cannot
match, so a typical document leaves one or two of the 79 to search. Those still
check their anchors (literals the pattern cannot match without) with ``in``
before the regex runs.

On a longer text every rule runs, but only near its anchors: a window as wide as
the longest text the pattern can match, on each side of every anchor, gives the
same answer as a full search (a regex pass per rule over megabytes is what makes
Python slow). On large texts every anchor is located in one pass of a
prefix-tree regex instead of one ``str.find`` scan per anchor, and texts flooded
with one anchor search one of each run of identical windows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ragpulse.evaluators.injection.prefilter import candidate_rules
from ragpulse.evaluators.injection.rule import Rule
from ragpulse.evaluators.injection.rules import _RULES

_LARGE_TEXT = 20_000  # above this, all anchors are located in one pass of a regex trie
_MANY_ANCHOR_HITS = 2_000  # above this, look for floods of one repeated anchor context
# Below this, a whole-text regex search (C speed) beats building windows (Python speed).
_SMALL_TEXT = 8_000


def _trie(words: Iterable[str]) -> str:
    """A regex alternation of ``words`` as a prefix tree: one branch per first letter.

    The regex engine then tries a handful of branches per position instead of
    every word, and skips positions whose character starts no word.
    """
    heads: dict[str, list[str]] = {}
    for word in words:
        heads.setdefault(word[0], []).append(word[1:])
    alternatives = []
    for head, tails in sorted(heads.items()):
        rest = [t for t in tails if t]
        if not rest:
            alternatives.append(re.escape(head))
        else:
            optional = "?" if len(rest) < len(tails) else ""
            alternatives.append(f"{re.escape(head)}(?:{_trie(rest)}){optional}")
    return "|".join(alternatives)


_FOLDED_ASCII_ANCHORS: frozenset[str] = frozenset(
    a for rule in _RULES if rule.space == "folded" for a in rule.anchors if a.isascii()
)
_ANCHOR_TRIE = re.compile(f"(?:{_trie(sorted(_FOLDED_ASCII_ANCHORS))})")
# The anchors that start where a longer one matched ("your answer" -> "your answer", "your").
_ANCHOR_PREFIXES: dict[str, tuple[str, ...]] = {
    a: tuple(b for b in _FOLDED_ASCII_ANCHORS if a.startswith(b)) for a in _FOLDED_ASCII_ANCHORS
}
# Anchors that count anywhere, not only at a word start.
_LOOSE_ANCHORS = frozenset(
    a
    for rule in _RULES
    if rule.space == "folded"
    for a in rule.anchors
    if a.isascii() and not (a[0].isalpha() and rule.word_anchors)
)


_ALL_HEADS = frozenset(a[:i] for a in _FOLDED_ASCII_ANCHORS for i in range(1, len(a) + 1))
_LOOSE_HEADS = frozenset(a[:i] for a in _LOOSE_ANCHORS for i in range(1, len(a) + 1))


def _inner_offsets(anchor: str) -> tuple[int, ...]:
    """Offsets inside ``anchor`` where another anchor may start ("the user" -> 4 for "user").

    An anchor that must start a word can only start after a non-letter; a loose
    one can start anywhere.
    """
    offsets = []
    for k in range(1, len(anchor)):
        tail = anchor[k:]
        at_word_start = not (anchor[k - 1].isascii() and anchor[k - 1].isalpha())
        pool, heads = (
            (_FOLDED_ASCII_ANCHORS, _ALL_HEADS) if at_word_start else (_LOOSE_ANCHORS, _LOOSE_HEADS)
        )
        # Another anchor continues past this one's end, or lies within it.
        if tail in heads or any(tail[:i] in pool for i in range(1, len(tail) + 1)):
            offsets.append(k)
    return tuple(offsets)


# Non-overlapping matches hide anchors that start inside a match: look there explicitly.
_ANCHOR_INNER: dict[str, tuple[int, ...]] = {a: _inner_offsets(a) for a in _FOLDED_ASCII_ANCHORS}
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


class _Haystack:
    """One normalised text plus per-scan caches, so rules that share anchors share work."""

    __slots__ = ("_all_ascii", "_non_ascii", "_positions", "_windows", "text", "use_trie")

    def __init__(self, text: str, *, folded: bool) -> None:
        self.text = text
        # On a large text one pass of the anchor trie beats one find() per anchor.
        self.use_trie = folded and len(text) > _LARGE_TEXT
        self._positions: dict[tuple[str, bool], list[int]] = {}
        self._all_ascii: dict[str, list[int]] | None = None
        self._non_ascii: frozenset[str] | None = None
        self._windows: dict[tuple[tuple[str, ...], bool, int], list[tuple[int, int]]] = {}

    def _raw_positions(self, anchor: str) -> list[int]:
        if self.use_trie and anchor in _FOLDED_ASCII_ANCHORS:
            if self._all_ascii is None:
                self._all_ascii = self._locate_ascii_anchors()
            return self._all_ascii.get(anchor, [])
        if not anchor.isascii():
            # Skip the scan when the text lacks the anchor's script entirely.
            if self._non_ascii is None:
                self._non_ascii = frozenset(_NON_ASCII.findall(self.text))
            if self._non_ascii.isdisjoint(anchor):
                return []
        found: list[int] = []
        find, i = self.text.find, self.text.find(anchor)
        while i != -1:
            found.append(i)
            i = find(anchor, i + 1)
        return found

    def _locate_ascii_anchors(self) -> dict[str, list[int]]:
        """Offsets of every ASCII anchor, from one C-speed pass of the anchor trie."""
        found: dict[str, list[int]] = {}
        text, match = self.text, _ANCHOR_TRIE.match
        for m in _ANCHOR_TRIE.finditer(text):
            at, anchor = m.start(), m.group()
            for a in _ANCHOR_PREFIXES[anchor]:
                found.setdefault(a, []).append(at)
            for k in _ANCHOR_INNER[anchor]:
                if (inner := match(text, at + k)) is not None:
                    for a in _ANCHOR_PREFIXES[inner.group()]:
                        found.setdefault(a, []).append(at + k)
        for offsets in found.values():
            offsets.sort()
        return found

    def positions(self, anchor: str, *, word_start: bool) -> list[int]:
        """Offsets of ``anchor``; with ``word_start``, not right after an ASCII letter."""
        word_start = word_start and anchor[:1].isascii() and anchor[:1].isalpha()
        key = (anchor, word_start)
        found = self._positions.get(key)
        if found is None:
            found = self._raw_positions(anchor)
            if word_start:
                text = self.text
                found = [
                    i for i in found if not (i and text[i - 1].isascii() and text[i - 1].isalpha())
                ]
            self._positions[key] = found
        return found

    def windows(self, rule: Rule) -> list[tuple[int, int]]:
        """Merged spans around the rule's anchors (cached: rules share anchor sets)."""
        key = (rule.anchors, rule.word_anchors, rule.reach)
        cached = self._windows.get(key)
        if cached is None:
            positions = sorted(
                {p for a in rule.anchors for p in self.positions(a, word_start=rule.word_anchors)}
            )
            if len(positions) > _MANY_ANCHOR_HITS:
                positions = self._drop_periodic(positions, rule.reach)
            cached = []
            n = len(self.text)
            for p in positions:
                a, b = max(0, p - rule.reach), min(n, p + rule.reach)
                if cached and a <= cached[-1][1]:
                    cached[-1] = (cached[-1][0], b)
                else:
                    cached.append((a, b))
            self._windows[key] = cached
        return cached

    def _drop_periodic(self, positions: list[int], reach: int) -> list[int]:
        """Keep one anchor per run of equally spaced anchors over periodic text.

        A text flooded with an anchor ("ignore the ignore the ...") has thousands of
        windows with the same content; one search stands for all of them, which
        bounds the work an attacker can cause. Windows clipped by the text's ends
        differ from the rest and are kept.
        """
        text, n = self.text, len(self.text)
        kept: list[int] = []
        i, count = 0, len(positions)
        while i < count:
            j = i
            if i + 1 < count:
                step = positions[i + 1] - positions[i]
                j = i + 1
                while j + 1 < count and positions[j + 1] - positions[j] == step:
                    j += 1
            if j - i < 8:
                kept.extend(positions[i : j + 1])
            else:
                start, end = max(0, positions[i] - reach), min(n, positions[j] + reach)
                if text[start + step : end] == text[start : end - step]:
                    kept.extend(
                        p
                        for k, p in enumerate(positions[i : j + 1])
                        if k == 0 or p - reach < 0 or p + reach > n
                    )
                else:
                    kept.extend(positions[i : j + 1])
            i = j + 1
        return kept


def _rules_to_try(folded: str) -> Sequence[Rule]:
    """The rules worth searching for in a text (its casefolded form), in table order.

    A short text is searched whole (see ``_search``), so a rule whose guard fails
    on it cannot match; a long one is searched in windows, which the guards do not
    describe, so every rule is tried.
    """
    rules: Sequence[Rule] = candidate_rules(folded) if len(folded) <= _SMALL_TEXT else _RULES
    return rules


def _search(rule: Rule, hay: _Haystack) -> re.Match[str] | None:
    """Search only around the rule's anchors; the same answer as a full search."""
    text = hay.text
    if len(text) <= max(2 * rule.reach, _SMALL_TEXT):
        if any(a in text for a in rule.anchors):
            return rule.pattern.search(text)
        return None
    for a, b in hay.windows(rule):
        if (m := rule.pattern.search(text, a, b)) is not None:
            return m
    return None
