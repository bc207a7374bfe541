"""Text analysis shared by the cheap evaluators: each text analysed once, each part on
first use, and the same analysis handed to every evaluator that reads the text.

A record's question, answer and documents are looked up in the plug-in context's
:class:`TextAnalyses` (``Evaluator.texts``): the lexical metrics tokenise a document
once between them, the injection rules scan it once, and a document retrieved again by
a later record is not analysed again. Nothing is kept in module globals: two
collectors (or two tests) in one process never share an analysis.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

# A standard English stop-word list (function words only, so that content
# words such as numbers, names and negations still count).
STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves also may might must
    shall us s t d ll m re ve y o let lets get got one ones whose upon yet via per etc
    """.split()
)

_TOKEN = re.compile(r"\w+", re.UNICODE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
T = TypeVar("T")

ANALYSES_KEPT = 4096
"""Views a :class:`TextAnalyses` keeps by default (texts up to ``max_chars``)."""


def normalize(text: str) -> str:
    """NFKC, lower case, apostrophes folded so "it's" and "it’s" agree."""
    return unicodedata.normalize("NFKC", text).lower().replace("’", "'")


# ASCII characters that are not word characters (``\w``), apostrophes included: a split
# after mapping them to spaces gives the same words as ``\w+``, three times faster. The
# map is applied to the text's bytes: ``bytes.translate`` is a table lookup per byte, five
# times faster than ``str.translate`` (encoding and decoding ASCII are copies).
_ASCII_NON_WORD = bytes(c if chr(c).isalnum() or c == ord("_") else ord(" ") for c in range(256))


def _words(normalized: str) -> list[str]:
    """The ``\\w+`` runs of a normalised text, apostrophes splitting words ("it's": it, s)."""
    if normalized.isascii():
        return normalized.encode("ascii").translate(_ASCII_NON_WORD).decode("ascii").split()
    return _TOKEN.findall(normalized.replace("'", " "))


def _content_tokens(normalized: str) -> tuple[str, ...]:
    stop = STOP_WORDS
    return tuple([tok for tok in _words(normalized) if tok not in stop])


def content_tokens(text: str) -> tuple[str, ...]:
    """Lower-cased word tokens with punctuation and stop words removed."""
    return _content_tokens(normalize(text))


def content_token_set(text: str) -> frozenset[str]:
    return frozenset(content_tokens(text))


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]


class TextView:
    """One text and what the cheap evaluators read off it, each computed on first use.

    Thread-safe in the way that matters: two threads may both compute a part the first
    time (the same value), never a wrong one.
    """

    __slots__ = (
        "_derived",
        "_nfkc",
        "_normalized",
        "_sentences",
        "_token_set",
        "_tokens",
        "_word_set",
        "text",
    )

    def __init__(self, text: str) -> None:
        self.text = text
        self._nfkc: str | None = None
        self._normalized: str | None = None
        self._tokens: tuple[str, ...] | None = None
        self._token_set: frozenset[str] | None = None
        self._word_set: frozenset[str] | None = None
        self._sentences: tuple[str, ...] | None = None
        self._derived: dict[Hashable, Any] | None = None

    @property
    def nfkc(self) -> str:
        """The text in Unicode normalisation form NFKC (what every normalisation starts from)."""
        if self._nfkc is None:
            text = self.text
            self._nfkc = text if text.isascii() else unicodedata.normalize("NFKC", text)
        return self._nfkc

    @property
    def normalized(self) -> str:
        """:func:`normalize` of the text."""
        if self._normalized is None:
            self._normalized = self.nfkc.lower().replace("’", "'")
        return self._normalized

    @property
    def tokens(self) -> tuple[str, ...]:
        """:func:`content_tokens` of the text."""
        if self._tokens is None:
            self._tokens = _content_tokens(self.normalized)
        return self._tokens

    @property
    def token_set(self) -> frozenset[str]:
        """The set of :attr:`tokens` (stop words left out): for a text whose tokens are read
        anyway (an answer), what a content token is looked up in without a second split."""
        if self._token_set is None:
            self._token_set = frozenset(self.tokens)
        return self._token_set

    @property
    def word_set(self) -> frozenset[str]:
        """Every distinct word of the text, stop words included: what a content token
        (:attr:`tokens` of another text) is looked up in. Keeping the stop words gives the
        same answer for such a token, one set operation cheaper per document."""
        if self._word_set is None:
            self._word_set = frozenset(_words(self.normalized))
        return self._word_set

    @property
    def sentences(self) -> tuple[str, ...]:
        """:func:`sentences` of the text (as written, not normalised)."""
        if self._sentences is None:
            self._sentences = tuple(sentences(self.text))
        return self._sentences

    def derived(self, key: Hashable, compute: Callable[[str], T]) -> T:
        """``compute(text)``, once per ``key``: what one evaluator derives from the text
        (an injection scan, a normalisation of its own), kept with the rest."""
        derived = self._derived
        if derived is None:
            derived = self._derived = {}
        try:
            return derived[key]  # type: ignore[no-any-return]
        except KeyError:
            value = derived[key] = compute(self.text)
            return value


class TextAnalyses:
    """The views of the texts seen lately, by value, so that each is analysed once.

    Texts up to ``max_chars`` characters are kept in an LRU of ``size`` views; longer
    ones up to ``max_long_chars`` in one of ``long_size`` (a long text costs more to
    analyse, and more to keep); longer still, a fresh view each time. Thread-safe.
    One per plug-in context (``Evaluator.texts``).
    """

    def __init__(
        self,
        size: int = ANALYSES_KEPT,
        max_chars: int = 8_000,
        long_size: int = 64,
        max_long_chars: int = 65_536,
    ) -> None:
        self._short = functools.lru_cache(maxsize=size)(TextView)
        self._long = functools.lru_cache(maxsize=long_size)(TextView)
        self._max_chars, self._max_long_chars = max_chars, max_long_chars

    def view(self, text: str) -> TextView:
        if len(text) <= self._max_chars:
            return self._short(text)
        if len(text) <= self._max_long_chars:
            return self._long(text)
        return TextView(text)

    def views(self, texts: Sequence[str]) -> list[TextView]:
        return [self.view(t) for t in texts]
