"""``context_relevance/embedding``: cosine of the question and each document's best chunk
(model tier; :mod:`ragpulse.evaluators.models.embedding_metric`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from ragpulse.evaluators.models.embedding_metric import EmbeddingEvaluator, EmbeddingOptions
from ragpulse.record import EvalResult, RagRecord


class EmbeddingContextRelevance(EmbeddingEvaluator):
    """Cosine of each document (its best chunk) and its query (the question, or what an
    agent's retrieval tool searched for); max and mean over the top k."""

    metric = "context_relevance"
    method = "embedding"

    class Options(EmbeddingOptions):
        top_k: int = Field(5, ge=1, description="documents scored, in retrieval order")

    options: Options

    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        import numpy as np

        enc, top_k = self._encoder, self.options.top_k
        plans = [
            [(i, enc.chunks(q), enc.chunks(d.content)) for i, q, d in r.for_relevance(top_k)]
            for r in records
        ]
        vectors = self._vectors([c for plan in plans for _, q, d in plan for c in [*q, *d]])
        out = []
        for record, plan in zip(records, plans, strict=True):
            if not plan:
                out.append(self.not_applicable(record.no_relevance_reason()))
                continue
            if not any(q for _, q, _ in plan):
                out.append(self.not_applicable("question is empty"))
                continue
            if not any(d for _, _, d in plan):
                out.append(self.not_applicable("no documents with text retrieved"))
                continue
            per_doc = [
                round(float(max(vectors[c] @ self._text_vector(q, vectors) for c in d)), 4)
                if d and q
                else 0.0
                for _, q, d in plan
            ]
            best = int(np.argmax(per_doc))
            indices = [i for i, _, _ in plan]
            extra: dict[str, Any] = (
                {"document_indices": indices} if len(plan) != len(record.documents) else {}
            )
            out.append(
                self.result(
                    max(per_doc),
                    explanation=f"document {indices[best]} is the closest to its query "
                    f"(cosine {per_doc[best]:.2f})",
                    per_document=per_doc,
                    mean_at_k=round(float(np.mean(per_doc)), 4),
                    k=len(per_doc),
                    best_document=indices[best],
                    chunks=[len(d) for _, _, d in plan],
                    **extra,
                )
            )
        return out
