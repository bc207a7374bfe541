"""``context_relevance/embedding``: cosine of the question and each document's best chunk
(model tier; :mod:`ragpulse.evaluators.models.embedding_metric`)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from ragpulse.evaluators.models.embedding_metric import EmbeddingEvaluator, EmbeddingOptions
from ragpulse.record import EvalResult, RagRecord


class EmbeddingContextRelevance(EmbeddingEvaluator):
    """Cosine of the question and each document (its best chunk); max and mean over the top k."""

    metric = "context_relevance"
    method = "embedding"

    class Options(EmbeddingOptions):
        top_k: int = Field(5, ge=1, description="documents scored, in retrieval order")

    options: Options

    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        import numpy as np

        enc, top_k = self._encoder, self.options.top_k
        plans = [
            (enc.chunks(r.question), [enc.chunks(d.content) for d in r.documents[:top_k]])
            for r in records
        ]
        vectors = self._vectors(
            [c for q, docs in plans for c in [*q, *(x for d in docs for x in d)]]
        )
        out = []
        for question, docs in plans:
            if not question:
                out.append(self.not_applicable("question is empty"))
                continue
            if not any(docs):
                out.append(self.not_applicable("no documents with text retrieved"))
                continue
            q = self._text_vector(question, vectors)
            per_doc = [
                round(float(max(vectors[c] @ q for c in chunks)), 4) if chunks else 0.0
                for chunks in docs
            ]
            best = int(np.argmax(per_doc))
            out.append(
                self.result(
                    max(per_doc),
                    explanation=f"document {best} is the closest to the question "
                    f"(cosine {per_doc[best]:.2f})",
                    per_document=per_doc,
                    mean_at_k=round(float(np.mean(per_doc)), 4),
                    k=len(per_doc),
                    best_document=best,
                    chunks=[len(c) for c in docs],
                )
            )
        return out
