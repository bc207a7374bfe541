"""Lexical answer correctness: Unitxt's token recall and SQuAD's token F1, worked by hand."""

from __future__ import annotations

import pytest

from ragpulse.evaluators.answer_correctness.token_overlap import (
    TokenF1,
    TokenRecall,
    normalize_answer,
    token_overlap,
)
from ragpulse.record import RagRecord, Reference


def rec(answer: str, *references: str) -> RagRecord:
    return RagRecord(question="q", answer=answer, reference=Reference(answers=list(references)))


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        # SQuAD's normalize_answer: lower, drop punctuation, drop a/an/the, collapse whitespace.
        ("The Eiffel Tower", "eiffel tower"),
        ("  an apple, a day! ", "apple day"),
        ("Theatre and the anthem", "theatre and anthem"),  # articles are whole words only
        ("U.S.A.", "usa"),  # punctuation removed, not turned into spaces
        ("1,889 m", "1889 m"),
        ("rock'n'roll", "rocknroll"),
        ("THE", ""),
    ],
)
def test_squad_normalization(text: str, normalized: str) -> None:
    assert normalize_answer(text) == normalized


def test_token_overlap_counts_multisets() -> None:
    # answer tokens: paris paris france (3); reference: paris (1): overlap 1
    precision, recall, f1 = token_overlap("Paris, Paris, France", "Paris")
    assert (precision, recall) == (pytest.approx(1 / 3), 1.0)
    assert f1 == pytest.approx(2 * (1 / 3) / (1 / 3 + 1))
    assert token_overlap("nothing shared", "Paris") == (0.0, 0.0, 0.0)


def test_worked_example_max_over_references() -> None:
    record = rec(
        "It was completed in 1889.",  # it was completed in 1889
        "1889",  # recall 1, precision 1/5 -> f1 1/3
        "The tower was completed in March 1889",  # tower was completed in march 1889: 4/6
    )
    [recall] = TokenRecall().evaluate([record])
    assert recall.score == 1.0 and recall.details["best_reference"] == 0
    assert (recall.metric, recall.method) == ("answer_correctness", "token_recall")
    [f1] = TokenF1().evaluate([record])
    # reference 1: overlap 4 (was completed in 1889), P = 4/5, R = 4/6
    expected = 2 * (4 / 5) * (4 / 6) / (4 / 5 + 4 / 6)
    assert f1.score == pytest.approx(expected) and f1.details["best_reference"] == 1
    assert f1.details["per_reference"] == [round(1 / 3, 4), round(expected, 4)]


def test_empty_answer_scores_zero_and_missing_references_do_not_apply() -> None:
    [r] = TokenF1().evaluate([rec("", "Paris")])
    assert r.score == 0.0
    for record, why in [
        (RagRecord(answer="Paris"), "no reference answers"),
        (rec("Paris"), "no reference answers"),
        (rec("Paris", "  "), "no reference answers"),
        (rec("Paris", "The", "a."), "have no tokens"),
    ]:
        for cls in (TokenRecall, TokenF1):
            [r] = cls().evaluate([record])
            assert r.label == "not_applicable" and why in (r.explanation or ""), why


def test_reference_only_and_off_by_default() -> None:
    for cls in (TokenRecall, TokenF1):
        assert cls.requires_reference and not cls.default_enabled
