"""What the lexical (token-overlap) metrics share: shares of token sets, one analysis per text.

``faithfulness/lexical``, ``context_relevance/lexical`` and ``answer_relevance/lexical``
read the same analysis of each text (:attr:`Evaluator.texts`): a document is tokenised
once for all of them, and once only while it keeps being retrieved.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

from ragpulse.evaluators.base import BatchEvaluator, Tier
from ragpulse.evaluators.text.analyses import TextAnalyses
from ragpulse.record import EvalResult, RagRecord


def share_in(unique: Sequence[str], vocabulary: frozenset[str]) -> float:
    """The share of ``unique`` (distinct content tokens) found in ``vocabulary`` (a
    :attr:`~ragpulse.evaluators.text.analyses.TextView.word_set` or ``token_set``)."""
    return len(vocabulary.intersection(unique)) / len(unique)


class LexicalEvaluator(BatchEvaluator):
    """Scores a batch with one :class:`TextAnalyses` (the context's, once loaded):
    subclasses fill :meth:`lexical`."""

    tier = Tier.CHEAP

    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        texts = self.texts
        return [self.lexical(r, texts) for r in records]

    @abstractmethod
    def lexical(self, record: RagRecord, texts: TextAnalyses) -> EvalResult:
        """One record's result, reading its texts' analyses from ``texts``."""
