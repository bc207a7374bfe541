"""The multi-pattern engine: Hyperscan decides which regexes run, ``re`` decides what
matches, and a pattern Hyperscan cannot take still runs (on every text)."""

from __future__ import annotations

import re

import pytest

from ragpulse.evaluators.injection_engine.engine import (
    CHUNK,
    PatternSet,
    Unexpressible,
    caseless_superset,
    loosen,
)
from ragpulse.evaluators.injection_engine.scan import unexpressed
from ragpulse.evaluators.injection_engine.vocabulary import LazyPattern


def _set(name: str, *sources: str, anchored: bool = True) -> PatternSet:
    return PatternSet(name, [LazyPattern(s) for s in sources], anchored=anchored)


def _first(patterns: PatternSet, text: str) -> dict[int, str]:
    found = patterns.first_matches(text, frozenset(range(len(patterns.patterns))))
    return {i: m.group() for i, m in found.items()}


def test_every_rule_is_on_hyperscan() -> None:
    # Were one not expressible, it would be listed here and run by re on every text.
    assert unexpressed() == {}


def test_a_pattern_hyperscan_cannot_take_runs_on_every_text() -> None:
    # [^\W] excludes every non-ASCII letter under Hyperscan's ASCII \W, not under re's.
    patterns = _set("test-fallback", r"x[^\W]z", r"\bhello\b")
    assert set(patterns.unexpressed) == {0}
    assert "negated class" in patterns.unexpressed[0]
    assert _first(patterns, "xéz and hello") == {0: "xéz", 1: "hello"}
    assert _first(patterns, "nothing here") == {}


def test_a_caseless_pattern_is_flagged_on_the_lower_cased_text_and_matched_as_written() -> None:
    # What lets one scan of an ASCII text's casefolded form stand for its plain form too.
    patterns = PatternSet(
        "test-caseless", [LazyPattern(r"\bSYSTEM:"), LazyPattern(r"\bSYSTEM:")], caseless={0}
    )
    assert patterns.possible("the system: reboot") == {0}
    assert patterns.patterns[0].search("the system: reboot") is None  # re keeps the case
    assert patterns.possible("the SYSTEM: reboot") == {0, 1}


@pytest.mark.parametrize(
    ("pattern", "superset"),
    [
        (r"\b(?:SYSTEM|ADMIN)[ \t]?:", True),
        (r"[A-Z]{4}\w+", True),
        (r"x[^\w.]y", True),  # escapes name no letter
        (r"x[^A]y", False),  # caseless [^A] refuses "a", which [^A] takes
        (r"x[^\x41]y", False),
    ],
)
def test_caseless_superset_refuses_a_negated_class_naming_a_letter(
    pattern: str, superset: bool
) -> None:
    assert caseless_superset(pattern) is superset


@pytest.mark.parametrize(
    ("pattern", "ascii_text", "loosened"),
    [
        (r"\bai\b", True, r"\bai\b"),
        (r"\bai\b", False, "ai"),
        (r"\w{1,30}\s", True, r"\w{1,}[\s\x1c-\x1f]"),
        (r"[\w.+-]{1,64}@", False, r"[\x{80}-\x{10FFFF}\w.+-]{1,}@"),  # not "+-\x{80}": a range
        (r"[^\w.!?]{1,10}", False, r"[^\w.!?]{1,}"),
        (r"^(?:none|n/a)[.!]?$", True, r"^(?:none|n/a)[.!]?$"),
    ],
)
def test_loosen(pattern: str, ascii_text: bool, loosened: str) -> None:
    assert loosen(pattern, ascii_text=ascii_text) == loosened


def test_loosen_without_anchors_holds_them_at_whitespace() -> None:
    assert loosen(r"^(?:none|n/a)[.!]?$", ascii_text=True, anchored=False) == (
        r"(?:^|[\s\x1c-\x1f])(?:none|n/a)[.!]?(?:[\s\x1c-\x1f]|$)"
    )
    with pytest.raises(Unexpressible):
        loosen(r"[^\W\d]", ascii_text=False)


def test_the_first_match_is_re_s_own() -> None:
    # Lookarounds, which Hyperscan drops, and lazy gaps: the answer is re's.
    source = r"(?<!not )\bignore\W{1,10}(?:\w{1,30}\W{1,10}){0,3}?rules\b(?!\s+of)"
    patterns = _set("test-first", source)
    for text in ("please ignore all the rules now", "do not ignore the rules",
                 "ignore the rules of chess", "ignoré the rules", "IGNORE rules"):  # fmt: skip
        m = re.search(source, text)
        assert _first(patterns, text) == ({0: m.group()} if m else {}), text


def test_a_match_across_a_chunk_edge_is_found() -> None:
    patterns = _set("test-chunks", r"\bsecret\s+word\b")
    for at in (CHUNK - 8, CHUNK - 3, CHUNK, CHUNK + 1, 2 * CHUNK - 5):
        text = "a " * (at // 2) + "secret word" + " b" * CHUNK
        found = patterns.first_matches(text, frozenset({0}))
        assert found[0].start() == text.index("secret"), at


def test_sentences_of_a_text_are_covered_without_anchors() -> None:
    # refusal/rules runs its regexes per sentence: "^unknown$" must be flagged in a longer
    # answer, where the anchors do not hold for the whole text.
    patterns = _set("test-unanchored", r"^(?:unknown|n/a)[.!]?$", anchored=False)
    assert patterns.possible("the date is not given. unknown.") == {0}  # casefolded
    assert patterns.possible("unknown") == {0}
    # Not a whole sentence anywhere: not flagged (the anchors hold at whitespace).
    assert patterns.possible("an unknownable banana") == set()
