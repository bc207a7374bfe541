"""Scan one text: hidden characters, the rules that match it, decoded payloads.

Per text: flag hidden characters on the raw text, normalise once, scan the
normalised text once for every rule (:mod:`engine`: Hyperscan says which rules
may match, ``re`` runs those), then look for encoded payloads and floods among
the tokens and scan decoded payloads the same way. Whether a rule fires, and on
what excerpt, is always its own regex's answer.
"""

from __future__ import annotations

import functools
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from ragpulse.evaluators.injection_engine.engine import CHUNK, PatternSet, caseless_superset
from ragpulse.evaluators.injection_engine.normalize import (
    _escape_run,
    _hidden_characters,
    _normalize,
    _Normalized,
)
from ragpulse.evaluators.injection_engine.payloads import GATES, _token_payloads
from ragpulse.evaluators.injection_engine.rule import Rule, Space
from ragpulse.evaluators.injection_engine.rule_table import _FAMILY_OF, _RULES, _WEIGHTS
from ragpulse.evaluators.injection_engine.vocabulary import LazyPattern

EXCERPT_CHARS = 120


@dataclass(frozen=True)
class TextScan:
    """What the rules found in one text; model-tier code can reuse it as features."""

    rules: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    risk: float = 0.0
    excerpt: str = ""
    weights: tuple[float, ...] = field(default=(), repr=False)

    @property
    def fired(self) -> bool:
        return bool(self.rules)

    def features(self) -> dict[str, float]:
        """Rule name -> weight, for every rule that fired."""
        return dict(zip(self.rules, self.weights, strict=True))


_NOTHING = TextScan()


class _Space:
    """The rules of one text space on one pattern set.

    The casefolded space holds every rule: its own, then the payload gates, then the
    plain rules (case kept), which Hyperscan flags caselessly. On an ASCII text, whose
    casefolded form is its plain one lower-cased letter for letter, one scan of the
    casefolded text then says which rules of both spaces may match (a superset, see
    :func:`~ragpulse.evaluators.injection_engine.engine.caseless_superset`), and each plain rule
    it flags is confirmed on the plain text. Other texts (non-ASCII, or long enough to be
    taken in chunks) are scanned in each space, the plain rules over the plain text with
    the plain space's own set.
    """

    def __init__(self, space: Space) -> None:
        own = tuple(r for r in _RULES if r.space == space)
        plain = tuple(r for r in _RULES if r.space == "plain") if space == "folded" else ()
        gates = GATES if space == "folded" else {}
        self.rules: tuple[Rule | None, ...] = (*own, *(None for _ in gates), *plain)
        self.gates: dict[int, str] = {len(own) + i: name for i, name in enumerate(gates)}
        self.plain = frozenset(range(len(own) + len(gates), len(self.rules)))
        """Indices of the plain rules that the casefolded space flags caselessly."""
        unsafe = [r.name for r in plain if not caseless_superset(r.pattern.pattern)]
        if unsafe:
            raise ValueError(f"plain rules cannot be flagged caselessly: {unsafe}")
        self.patterns = PatternSet(
            f"injection-{space}",
            [r.pattern for r in own] + [LazyPattern(g) for g in gates.values()]
            + [r.pattern for r in plain],
            caseless=self.plain,
        )  # fmt: skip
        # The rules that apply to a question (False) or a document (True), and those of
        # them the text's own space confirms.
        self.wanted = {
            document: frozenset(
                i
                for i, r in enumerate(self.rules)
                if r is not None and r.where != ("question" if document else "document")
            )
            for document in (False, True)
        }
        self.own = {document: wanted - self.plain for document, wanted in self.wanted.items()}

    def name(self, i: int) -> str:
        rule = self.rules[i]
        return rule.name if rule is not None else f"gate:{self.gates[i]}"

    def open_gates(self, flagged: AbstractSet[int]) -> set[str]:
        """The names of the payload gates among the ``flagged`` patterns of a scan."""
        return {name for i, name in self.gates.items() if i in flagged}


@functools.cache
def _spaces() -> tuple[_Space, _Space]:
    """The casefolded (every rule) and the plain rules, compiled once per process."""
    return _Space("folded"), _Space("plain")


def prepare() -> None:
    """Load (or compile) the rule databases now rather than during the first scan."""
    _spaces()


def unexpressed() -> dict[str, str]:
    """Rule name -> why Hyperscan cannot take its regex (``re`` runs it on every text)."""
    return {
        space.name(i): why for space in _spaces() for i, why in space.patterns.unexpressed.items()
    }


def _wanted(space: _Space, wanted: frozenset[int], hits: dict[str, str]) -> frozenset[int]:
    """``wanted`` less the rules that already fired (found in a hidden or decoded text)."""
    if not hits:
        return wanted
    return frozenset(i for i in wanted if space.name(i) not in hits)


def _match_rules(norm: _Normalized, *, document: bool, hits: dict[str, str], nested: bool) -> None:
    """Fill ``hits`` (rule name -> matched text) from the regex and token rules."""
    folded, plain = _spaces()
    if norm.plain.isascii() and len(norm.plain) <= CHUNK:
        # One scan of the casefolded text (the plain one lower-cased) for the rules of
        # both spaces (see _Space).
        flagged = folded.patterns.possible(norm.folded)
        for i in sorted(flagged & _wanted(folded, folded.wanted[document], hits)):
            text = norm.plain if i in folded.plain else norm.folded
            m = folded.patterns.patterns[i].search(text)
            if m is not None:
                hits[folded.name(i)] = m.group()
    else:
        flagged = set()
        for space, text, own in ((folded, norm.folded, folded.own), (plain, norm.plain, plain.own)):
            wanted = _wanted(space, own[document], hits)
            found = space.patterns.first_matches(text, wanted, flagged if space.gates else None)
            for i, m in found.items():
                hits[space.name(i)] = m.group()
    if norm.mixed_script is not None:
        hits.setdefault("mixed_script_word", norm.mixed_script)
    if nested:
        return
    gates = folded.open_gates(flagged)
    for name, excerpt, decoded in _token_payloads(norm.plain, norm.folded, gates):
        hits.setdefault(name, excerpt)
        if decoded is not None:
            _match_rules(_normalize(decoded), document=document, hits=hits, nested=True)


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"


def scan_text(text: str, *, document: bool = False) -> TextScan:
    """Run every rule over one text.

    ``document=True`` adds the rules for imperatives addressed to the assistant
    (normal in a user's question, suspicious in retrieved content) and drops
    the question-only ones (asking for a password or another user's data is
    what a question does, not a document). Pure and thread-safe.
    """
    if not text or text.isspace():
        return _NOTHING
    hits: dict[str, str] = {}
    if document and (escape := _escape_run(text)) is not None:
        hits["escape_run_command"] = escape
    if not text.isascii():
        smuggled = _hidden_characters(text, hits)
        if smuggled.strip():
            text = text + "\n" + smuggled
    _match_rules(_normalize(text), document=document, hits=hits, nested=False)
    names = sorted((n for n in hits if _WEIGHTS[n] > 0), key=lambda n: (-_WEIGHTS[n], n))
    if not names:
        return _NOTHING
    weights = tuple(_WEIGHTS[n] for n in names)
    survive = 1.0
    for w in weights:
        survive *= 1.0 - w
    return TextScan(
        rules=tuple(names),
        families=tuple(dict.fromkeys(_FAMILY_OF[n] for n in names)),
        risk=round(min(1.0, max(0.0, 1.0 - survive)), 4),
        excerpt=_excerpt(hits[names[0]]),
        weights=weights,
    )


QUESTION_SCAN = "injection/scan:question"
DOCUMENT_SCAN = "injection/scan:document"
"""Keys under which a text's scans are kept with its shared analysis
(``TextView.derived``): every evaluator that scans a document finds it scanned."""


def scan_question(text: str) -> TextScan:
    return scan_text(text)


def scan_document(text: str) -> TextScan:
    return scan_text(text, document=True)
