"""Tokenising shared by the lexical evaluators."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

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


def normalize(text: str) -> str:
    """NFKC, lower case, apostrophes folded so "it's" and "it’s" agree."""
    return unicodedata.normalize("NFKC", text).lower().replace("’", "'")


@lru_cache(maxsize=4096)
def content_tokens(text: str) -> tuple[str, ...]:
    """Lower-cased word tokens with punctuation and stop words removed.

    Cached because production traffic re-retrieves the same documents all the time.
    """
    return tuple(
        tok for tok in _TOKEN.findall(normalize(text).replace("'", " ")) if tok not in STOP_WORDS
    )


def content_token_set(text: str) -> frozenset[str]:
    return frozenset(content_tokens(text))


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]
