"""Leads: the literal text that every match of a regex spells out from one position on.

The stdlib parse tree is reduced to a few node kinds (literal text, a choice of a
few characters, a branch, a repeat, unknown) and walked through alternations,
optional parts and small character classes. ``SPLIT`` stands for a non-letter of
unknown value (``\\W{1,10}``, ``\\s``, ``[.\\-_*|/]``) or a zero-width boundary
(``\\b``, ``^``, ``$``): a place where a run of ``a``-``z`` cannot go on. A lead
ends at anything else (``\\w{1,30}``, ``.``, a negated set), when a caller's
``done`` says it has enough, or at a size cap: a lead is always a prefix of what
some match spells, and every match starts with one of the leads found.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ragpulse.evaluators.injection.vocabulary import PatternSource

try:
    from re import _constants as sre  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]

    _SPLIT_ATS = frozenset(
        {
            sre.AT_BEGINNING,
            sre.AT_BEGINNING_LINE,
            sre.AT_BEGINNING_STRING,
            sre.AT_BOUNDARY,
            sre.AT_END,
            sre.AT_END_LINE,
            sre.AT_END_STRING,
        }
    )
    _NO_LETTER_CATEGORIES = frozenset(
        {sre.CATEGORY_SPACE, sre.CATEGORY_DIGIT, sre.CATEGORY_NOT_WORD, sre.CATEGORY_LINEBREAK}
    )
    _REPEATS = frozenset({sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", None)})
except (ImportError, AttributeError):  # pragma: no cover - private modules changed: no leads
    sre = None

SPLIT = "\x00"  # a non-letter of unknown value, or a zero-width word boundary
_SPLITS = re.compile(SPLIT + "+")
_MAX_LEADS = 300  # per position; past this, leads end where they are
_MAX_LEAD_CHARS = 40

Node = tuple[Any, ...]  # (kind, ...): TEXT str | CHOICE str | BRANCH alts | REPEAT lo hi body
TEXT, CHOICE, BRANCH, REPEAT, UNKNOWN = range(5)


def is_letter(ch: str) -> bool:
    return "a" <= ch <= "z"


def _chars(op: Any, av: Any) -> str | None:
    """What a one-character item matches: its few characters, SPLIT (no letter), or None."""
    if op is sre.LITERAL:
        return chr(av)
    chars: set[str] = set()
    no_letter_classes = False
    for kind, value in av:
        if kind is sre.LITERAL:
            chars.add(chr(value))
        elif kind is sre.RANGE and value[1] - value[0] < 4:
            chars.update(map(chr, range(value[0], value[1] + 1)))
        elif (kind is sre.RANGE and (value[0] > ord("z") or value[1] < ord("a"))) or (
            kind is sre.CATEGORY and value in _NO_LETTER_CATEGORIES
        ):
            no_letter_classes = True
        else:  # a negated set, \w, a wide range: may be a letter, or anything
            return None
    if not any(map(is_letter, chars)):
        return SPLIT  # [ \t], [.\-_*|/], \s: enumerating them would only multiply leads
    return None if no_letter_classes or len(chars) > 4 else "".join(sorted(chars))


def _flat(items: Any) -> Iterator[tuple[Any, Any]]:
    """Parse-tree items with groups (those without inline flags) opened up."""
    for op, av in items:
        if op is sre.SUBPATTERN and not (av[1] or av[2]):
            yield from _flat(av[3])
        else:
            yield op, av


def _simplify(items: Any) -> list[Node]:
    nodes: list[Node] = []
    text = ""
    for op, av in _flat(items):
        if op is sre.AT or op is sre.ASSERT or op is sre.ASSERT_NOT:
            text += SPLIT if op is sre.AT and av in _SPLIT_ATS else ""  # zero-width
            continue
        if op is sre.LITERAL or op is sre.IN:
            if (chars := _chars(op, av)) is not None and len(chars) == 1:
                text += chars
                continue
            node: Node = (UNKNOWN,) if chars is None else (CHOICE, chars)
        elif op is sre.BRANCH:
            node = (BRANCH, tuple(tuple(_simplify(a)) for a in av[1]))
        elif op in _REPEATS:
            node = (REPEAT, av[0], av[1], tuple(_simplify(av[2])))
        else:
            node = (UNKNOWN,)
        if text:
            nodes.append((TEXT, _SPLITS.sub(SPLIT, text)))
            text = ""
        nodes.append(node)
    if text:
        nodes.append((TEXT, _SPLITS.sub(SPLIT, text)))
    return nodes


def parse(pattern: PatternSource) -> list[Node] | None:
    """``pattern`` as nodes, or None when its literals are not what they spell (flags)."""
    if sre is None or pattern.flags & ~re.UNICODE:
        return None
    return _simplify(sre_parse.parse(pattern.pattern, pattern.flags))


# What a lead goes on with after a sequence ends: (sequence, index, what follows that), or None.
_Then = tuple[Any, int, Any] | None


class _Walk:
    def __init__(self, done: Callable[[str], bool]) -> None:
        self.done = done
        self.found: set[str] = set()

    def walk(self, seq: Sequence[Node], i: int, lead: str, then: _Then) -> None:
        """Spell out ``seq[i:]``, then what ``then`` continues with, from ``lead`` on."""
        found = self.found
        while True:
            while i < len(seq):
                if len(lead) >= _MAX_LEAD_CHARS or len(found) >= _MAX_LEADS:
                    found.add(lead)
                    return
                node, i = seq[i], i + 1
                kind = node[0]
                if kind == TEXT:
                    text = node[1]
                    lead += text[1:] if text[0] == SPLIT and lead.endswith(SPLIT) else text
                    if not text.isalpha() and self.done(lead):  # letters alone end no word
                        found.add(lead)
                        return
                elif kind == CHOICE:
                    for ch in node[1]:
                        self.walk(((TEXT, ch),), 0, lead, (seq, i, then))
                    return
                elif kind == BRANCH:
                    for alternative in node[1]:
                        self.walk(alternative, 0, lead, (seq, i, then))
                    return
                elif kind == REPEAT:
                    low, high, body = node[1], node[2], node[3]
                    if low == 0:
                        self.walk(seq, i, lead, then)
                    if high == 0:
                        return
                    if high == 1 or body == ((TEXT, SPLIT),):  # non-letters: one SPLIT
                        self.walk(body, 0, lead, (seq, i, then))
                    else:
                        self.walk(body, 0, lead, None)  # one repetition, then unknown
                    return
                else:  # UNKNOWN: the lead ends here
                    found.add(lead)
                    return
            if then is None:
                found.add(lead)
                return
            seq, i, then = then


def leads(nodes: Sequence[Node], *, after_split: bool, done: Callable[[str], bool]) -> set[str]:
    """How every match of ``nodes`` starts; ``after_split``: a non-letter comes before."""
    walk = _Walk(done)
    walk.walk(nodes, 0, SPLIT if after_split else "", None)
    return walk.found


def ends_split(nodes: Sequence[Node]) -> bool:
    """Whether whatever ``nodes`` match surely ends in a non-letter or a boundary."""
    for i in range(len(nodes) - 1, -1, -1):
        kind = nodes[i][0]
        if kind == TEXT:
            return not is_letter(nodes[i][1][-1])
        if kind == CHOICE:
            return not any(map(is_letter, nodes[i][1]))
        if kind == BRANCH:
            return all(ends_split([*nodes[:i], *alternative]) for alternative in nodes[i][1])
        if kind == REPEAT:
            if nodes[i][2] == 0:
                continue
            return ends_split(nodes[i][3]) and (nodes[i][1] > 0 or ends_split(nodes[:i]))
        return False
    return False  # the start of the match: the character before it is unknown
