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

from ragpulse.evaluators.injection.engine import PatternSet
from ragpulse.evaluators.injection.normalize import _hidden_characters, _normalize, _Normalized
from ragpulse.evaluators.injection.payloads import GATES, _token_payloads
from ragpulse.evaluators.injection.rule import Rule, Space
from ragpulse.evaluators.injection.rules import _FAMILY_OF, _RULES, _WEIGHTS
from ragpulse.evaluators.injection.vocabulary import LazyPattern

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
    """The rules of one text space (casefolded or plain) on one pattern set; the folded
    set also holds the payload gates (after the rules), so that one scan answers both."""

    def __init__(self, space: Space) -> None:
        self.rules: tuple[Rule, ...] = tuple(r for r in _RULES if r.space == space)
        gates = GATES if space == "folded" else {}
        n = len(self.rules)
        self.gates: dict[int, str] = {n + i: name for i, name in enumerate(gates)}
        self.patterns = PatternSet(
            f"injection-{space}",
            [r.pattern for r in self.rules] + [LazyPattern(g) for g in gates.values()],
        )
        # The rules that apply to a question (False) or a document (True).
        self.wanted = {
            document: frozenset(
                i
                for i, r in enumerate(self.rules)
                if r.where != ("question" if document else "document")
            )
            for document in (False, True)
        }

    def open_gates(self, flagged: AbstractSet[int]) -> set[str]:
        """The names of the payload gates among the ``flagged`` patterns of a scan."""
        return {name for i, name in self.gates.items() if i in flagged}


@functools.cache
def _spaces() -> tuple[_Space, _Space]:
    """The casefolded and the plain rules, compiled once per process."""
    return _Space("folded"), _Space("plain")


def prepare() -> None:
    """Load (or compile) the rule databases now rather than during the first scan."""
    _spaces()


def unexpressed() -> dict[str, str]:
    """Rule name -> why Hyperscan cannot take its regex (``re`` runs it on every text)."""
    return {
        space.rules[i].name if i < len(space.rules) else f"gate:{space.gates[i]}": why
        for space in _spaces()
        for i, why in space.patterns.unexpressed.items()
    }


def _match_rules(norm: _Normalized, *, document: bool, hits: dict[str, str], nested: bool) -> None:
    """Fill ``hits`` (rule name -> matched text) from the regex and token rules."""
    flagged: set[int] = set()
    for space, text in zip(_spaces(), (norm.folded, norm.plain), strict=True):
        wanted = space.wanted[document]
        if hits:
            wanted = frozenset(i for i in wanted if space.rules[i].name not in hits)
        found = space.patterns.first_matches(text, wanted, flagged if space.gates else None)
        for i, m in found.items():
            hits[space.rules[i].name] = m.group()
    if norm.mixed_script is not None:
        hits.setdefault("mixed_script_word", norm.mixed_script)
    if nested:
        return
    gates = _spaces()[0].open_gates(flagged)
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
    if not text.isascii():
        smuggled = _hidden_characters(text, hits)
        if smuggled.strip():
            text = text + "\n" + smuggled
    _match_rules(_normalize(text), document=document, hits=hits, nested=False)
    if not hits:
        return _NOTHING
    names = sorted(hits, key=lambda n: (-_WEIGHTS[n], n))
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
