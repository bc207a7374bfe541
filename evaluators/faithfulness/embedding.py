"""``faithfulness/embedding``: the share of answer sentences whose closest document sentence
clears a cosine threshold (model tier; :mod:`ragpulse.evaluators.models.embedding_metric`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from ragpulse.evaluators.base import ANSWERED
from ragpulse.evaluators.models.embedding_metric import EmbeddingEvaluator, EmbeddingOptions
from ragpulse.evaluators.text.analyses import sentences
from ragpulse.record import EvalResult, RagRecord


class EmbeddingFaithfulness(EmbeddingEvaluator):
    """Share of answer sentences whose best-matching document sentence clears ``threshold``."""

    metric = "faithfulness"
    applies_to = ANSWERED
    method = "embedding"

    class Options(EmbeddingOptions):
        threshold: float = Field(
            0.6, ge=-1, le=1, description="cosine at which an answer sentence counts as supported"
        )

    options: Options

    def _units(self, text: str) -> list[str]:
        return [c for s in sentences(text) for c in self._encoder.chunks(s)]

    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        import numpy as np

        plans = [
            (
                self._units(r.answer),
                [(i, u) for i, d in enumerate(r.documents) for u in self._units(d.content)],
            )
            for r in records
        ]
        vectors = self._vectors([u for a, docs in plans for u in [*a, *(t for _, t in docs)]])
        out = []
        for answer, doc_units in plans:
            if not doc_units:
                out.append(self.not_applicable("no documents with text retrieved"))
                continue
            if not answer:
                out.append(self.not_applicable("answer is empty"))
                continue
            doc_matrix = np.stack([vectors[t] for _, t in doc_units])
            matches: list[dict[str, Any]] = []
            for sentence in answer:
                sims = doc_matrix @ vectors[sentence]
                j = int(np.argmax(sims))
                matches.append(
                    {
                        "sentence": sentence[:300],
                        "document": doc_units[j][0],
                        "match": doc_units[j][1][:300],
                        "similarity": round(float(sims[j]), 4),
                        "supported": bool(sims[j] >= self.options.threshold),
                    }
                )
            supported = sum(m["supported"] for m in matches)
            out.append(
                self.result(
                    supported / len(matches),
                    explanation=f"{supported} of {len(matches)} answer sentences have a document "
                    f"sentence with cosine >= {self.options.threshold}",
                    threshold=self.options.threshold,
                    matches=matches[:20],
                    min_similarity=min(m["similarity"] for m in matches),
                )
            )
        return out
