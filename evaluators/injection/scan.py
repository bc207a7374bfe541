"""Scan one text: hidden characters, the rules that can match it, decoded payloads, memoised.

Per text: flag hidden characters on the raw text, normalise once, ask
:mod:`search` which rules to try (on a short text only those whose guard holds,
usually one or two), run those, then look for encoded payloads and floods among
the tokens and scan decoded payloads the same way. Whether a rule fires, and on
what excerpt, is always its own regex's answer.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import lru_cache

from ragpulse.evaluators.injection.engine import PatternSet
from ragpulse.evaluators.injection.normalize import _hidden_characters, _normalize, _Normalized
from ragpulse.evaluators.injection.payloads import _token_payloads
from ragpulse.evaluators.injection.rule import Rule, Space
from ragpulse.evaluators.injection.rules import _FAMILY_OF, _RULES, _WEIGHTS
from ragpulse.evaluators.injection.search import _Haystack, _rules_to_try, _search

EXCERPT_CHARS = 120
_Matcher = Callable[..., None]
_CACHE_MAX_CHARS = 8_000  # memoised by value up to this; longer texts by a digest...
_DIGEST_MAX_CHARS = 65_536  # ...up to this: beyond, documents rarely repeat (and floods never)


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


def _match_rules(norm: _Normalized, *, document: bool, hits: dict[str, str], nested: bool) -> None:
    """Fill ``hits`` (rule name -> matched text) from the regex and token rules."""
    haystacks = {
        "folded": _Haystack(norm.folded, folded=True),
        "plain": _Haystack(norm.plain, folded=False),
    }
    skip_where = "question" if document else "document"
    for rule in _rules_to_try(norm.folded):
        if rule.name in hits or rule.where == skip_where:
            continue
        if (m := _search(rule, haystacks[rule.space])) is not None:
            hits[rule.name] = m.group()
    if norm.mixed_script is not None:
        hits.setdefault("mixed_script_word", norm.mixed_script)
    if nested:
        return
    for name, excerpt, decoded in _token_payloads(norm.plain, norm.folded):
        hits.setdefault(name, excerpt)
        if decoded is not None:
            _match_rules(_normalize(decoded), document=document, hits=hits, nested=True)


class _Engine:
    """The rules of one text space on one pattern set, and which apply where."""

    def __init__(self, space: Space) -> None:
        self.rules: tuple[Rule, ...] = tuple(r for r in _RULES if r.space == space)
        self.patterns = PatternSet(f"injection-{space}", [r.pattern for r in self.rules])
        self.wanted = {
            document: tuple(
                i for i, r in enumerate(self.rules) if r.where != ("question" if document else "document")
            )
            for document in (False, True)
        }


@functools.cache
def _engines() -> tuple[_Engine, _Engine]:
    return _Engine("folded"), _Engine("plain")


def prepare() -> None:
    """Load (or compile) the rule databases now rather than during the first scan."""
    _engines()


def _match_rules_hs(
    norm: _Normalized, *, document: bool, hits: dict[str, str], nested: bool
) -> None:
    """Fill ``hits`` (rule name -> matched text) from the regex and token rules."""
    for engine, text in zip(_engines(), (norm.folded, norm.plain), strict=True):
        wanted = engine.wanted[document]
        if hits:
            wanted = tuple(i for i in wanted if engine.rules[i].name not in hits)
        for i, m in engine.patterns.first_matches(text, wanted).items():
            hits[engine.rules[i].name] = m.group()
    if norm.mixed_script is not None:
        hits.setdefault("mixed_script_word", norm.mixed_script)
    if nested:
        return
    for name, excerpt, decoded in _token_payloads(norm.plain, norm.folded):
        hits.setdefault(name, excerpt)
        if decoded is not None:
            _match_rules_hs(_normalize(decoded), document=document, hits=hits, nested=True)


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"


def _scan(text: str, document: bool, match: _Matcher | None = None) -> TextScan:
    if not text or text.isspace():
        return TextScan()
    hits: dict[str, str] = {}
    if not text.isascii():
        smuggled = _hidden_characters(text, hits)
        if smuggled.strip():
            text = text + "\n" + smuggled
    (match or _match_rules)(_normalize(text), document=document, hits=hits, nested=False)
    if not hits:
        return TextScan()
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


_scan_cached = lru_cache(maxsize=2048)(_scan)
_LONG_CACHE_SIZE = 256  # long texts' scans, keyed by a digest: the texts are not kept
_long_scans: OrderedDict[bytes, TextScan] = OrderedDict()
_long_lock = threading.Lock()


def _scan_long(text: str, document: bool) -> TextScan:
    """A long text's scan, memoised by a digest of the text (its scan costs milliseconds,
    its digest microseconds; the cache holds 16-byte keys, never the texts)."""
    key = hashlib.blake2b(
        text.encode("utf-8", "surrogatepass"), digest_size=16, person=b"doc" if document else b"q"
    ).digest()
    with _long_lock:
        found = _long_scans.get(key)
        if found is not None:
            _long_scans.move_to_end(key)
            return found
    found = _scan(text, document)
    with _long_lock:
        _long_scans[key] = found
        while len(_long_scans) > _LONG_CACHE_SIZE:
            _long_scans.popitem(last=False)
    return found


def scan_text(text: str, *, document: bool = False) -> TextScan:
    """Run every rule over one text.

    ``document=True`` adds the rules for imperatives addressed to the assistant
    (normal in a user's question, suspicious in retrieved content) and drops
    the question-only ones (asking for a password or another user's data is
    what a question does, not a document). Pure and thread-safe; texts are
    memoised because the same documents are retrieved again and again (short
    ones by value, longer ones up to 64 KiB by a digest).
    """
    if len(text) <= _CACHE_MAX_CHARS:
        return _scan_cached(text, document)
    if len(text) <= _DIGEST_MAX_CHARS:
        return _scan_long(text, document)
    return _scan(text, document)
