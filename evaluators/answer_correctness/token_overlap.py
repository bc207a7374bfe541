"""Lexical answer correctness against a test-set row's reference answers.

Both methods are Unitxt's ``answer_correctness`` token metrics (its ``TokenOverlap``):
SQuAD's answer normalization (lower case, ASCII punctuation removed, the articles a / an /
the removed, whitespace collapsed), then the multiset overlap of whitespace tokens.

- ``token_recall``: overlap / reference tokens, the maximum over the reference answers;
- ``token_f1``: SQuAD's F1 (harmonic mean of overlap / answer tokens and overlap / reference
  tokens), the maximum over the reference answers.

An empty answer, or one with no token in common, scores 0 (Unitxt's convention; SQuAD's
"both empty = 1" cannot arise because references that normalize to nothing are left out).
Not applicable when the row has no reference answer with a token in it (e.g. a question
whose expected behaviour is to refuse).
"""

from __future__ import annotations

import re
import string
from collections import Counter

from ragpulse.evaluators.base import ANSWERED, Evaluator, Tier
from ragpulse.record import EvalResult, RagRecord

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's ``normalize_answer``, step for step: lower, punctuation, articles, whitespace."""
    lowered = text.lower()
    no_punct = "".join(ch for ch in lowered if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", no_punct).split())


def token_overlap(answer: str, reference: str) -> tuple[float, float, float]:
    """(precision, recall, f1) of the answer's tokens against one reference's."""
    pred, gold = normalize_answer(answer).split(), normalize_answer(reference).split()
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0, 0.0, 0.0
    precision, recall = same / len(pred), same / len(gold)
    return precision, recall, 2 * precision * recall / (precision + recall)


class _TokenCorrectness(Evaluator):
    metric = "answer_correctness"
    applies_to = ANSWERED
    tier = Tier.CHEAP
    requires_reference = True
    default_enabled = False
    _index = 1  # position in token_overlap's tuple

    def score(self, record: RagRecord) -> EvalResult:
        refs = [a for a in (record.reference.answers if record.reference else []) if a.strip()]
        usable = [a for a in refs if normalize_answer(a)]
        if not usable:
            why = "reference answers have no tokens" if refs else "no reference answers"
            return self.not_applicable(why)
        scores = [token_overlap(record.answer, a)[self._index] for a in usable]
        best = max(range(len(scores)), key=scores.__getitem__)
        return self.result(
            scores[best],
            explanation=f"{scores[best]:.0%} against reference answer {best}",
            best_reference=best,
            per_reference=[round(s, 4) for s in scores],
            answer_tokens=len(normalize_answer(record.answer).split()),
        )


class TokenRecall(_TokenCorrectness):
    """Share of a reference answer's tokens the answer contains; max over references."""

    method = "token_recall"
    _index = 1


class TokenF1(_TokenCorrectness):
    """SQuAD token F1; max over references."""

    method = "token_f1"
    _index = 2
