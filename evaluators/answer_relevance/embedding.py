"""``answer_relevance/embedding``: cosine of the question and the answer (model tier;
:mod:`ragpulse.evaluators.models.embedding_metric`)."""

from __future__ import annotations

from collections.abc import Sequence

from ragpulse.evaluators.base import ANSWERED
from ragpulse.evaluators.models.embedding_metric import EmbeddingEvaluator
from ragpulse.record import EvalResult, RagRecord


class EmbeddingAnswerRelevance(EmbeddingEvaluator):
    """Cosine of the question and the answer."""

    metric = "answer_relevance"
    applies_to = ANSWERED
    method = "embedding"

    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        enc = self._encoder
        plans = [(enc.chunks(r.question), enc.chunks(r.answer)) for r in records]
        vectors = self._vectors([c for q, a in plans for c in [*q, *a]])
        out = []
        for question, answer in plans:
            if not question or not answer:
                out.append(self.not_applicable("question or answer is empty"))
                continue
            cosine = float(
                self._text_vector(question, vectors) @ self._text_vector(answer, vectors)
            )
            out.append(self.result(cosine, explanation=f"question/answer cosine {cosine:.2f}"))
        return out
