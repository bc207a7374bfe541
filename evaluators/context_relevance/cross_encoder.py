"""``context_relevance/cross_encoder``: a reranker reads the question with each document.

Cross-encoder rerankers (``model: ms-marco-minilm-l6``, ``bge-reranker-base``,
...) score a (question, document) pair: one logit (its sigmoid is the score,
as sentence-transformers' ``CrossEncoder`` gives it) or two classes (the
softmax probability of ``relevant_label``). A document longer than the model's
window is cut into overlapping windows that each fit beside the question; a
document's relevance is its best window's.

Score: the best of the first ``top_k`` documents (is there something to answer
from?); ``details``: ``per_document`` (retrieval order), ``mean`` (mean@k over
those documents), ``best_document``. Label ``relevant`` at ``threshold`` (0.5).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from ragpulse.evaluators.models.detector import DetectorEvaluator, DetectorOptions, Label
from ragpulse.record import Document, EvalResult, RagRecord

_RELEVANT = re.compile(r"^(?:relevant|positive|yes|true|label_1|1)$", re.I)


class CrossEncoderRelevance(DetectorEvaluator):
    metric = "context_relevance"
    method = "cross_encoder"

    class Options(DetectorOptions):
        model: str = "ms-marco-minilm-l6"
        relevant_label: Label | None = Field(
            None, description="2-class rerankers: the label meaning relevant (default: guessed)"
        )
        top_k: int = Field(5, ge=1, description="documents scored, in retrieval order (mean@k)")
        threshold: float = Field(0.5, gt=0, lt=1, description="score labelled 'relevant'")

    options: Options
    _positive: list[int]

    def loaded(self) -> None:
        self._positive = self.label_indices(
            self.options.relevant_label, _RELEVANT, "relevant", "relevant_label"
        )

    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        pairs: list[tuple[int, int, str, str]] = []  # record, document, query, window
        early: dict[int, EvalResult] = {}
        plans = [r.for_relevance(self.options.top_k) for r in records]
        specials = self.classifier.specials(pair=True)
        for ri, (record, plan) in enumerate(zip(records, plans, strict=True)):
            if not plan:
                early[ri] = self.not_applicable(record.no_relevance_reason())
                continue
            if not record.question.strip():
                early[ri] = self.not_applicable("question is empty")
                continue
            if not any(d.content.strip() for _, _, d in plan):
                early[ri] = self.not_applicable("no documents with text retrieved")
                continue
            queries = {q: self.classifier.count([q])[0] for q in {q for _, q, _ in plan}}
            asked = max(queries.values())
            if asked > self.max_tokens // 2:
                early[ri] = self.not_applicable(
                    f"question of {asked} tokens: longer than half the model's window "
                    f"({self.max_tokens} tokens), so no document would fit beside it"
                )
                continue
            for di, query, doc in plan:
                if doc.content.strip():
                    budget = self.max_tokens - specials - queries[query]
                    pairs += [(ri, di, query, w) for w in self.split_long(doc.content, budget)]
        best: dict[tuple[int, int], float] = {}
        for chunk in self.batches(pairs):
            enc = self.classifier.encode([q for _, _, q, _ in chunk], [w for _, _, _, w in chunk])
            probs = self.probability(self.classifier.logits(enc.inputs), self._positive)
            for (ri, di, _, _), p in zip(chunk, probs.tolist(), strict=True):
                best[(ri, di)] = max(best.get((ri, di), 0.0), float(p))
        windows: dict[int, int] = {}
        for ri, _, _, _ in pairs:
            windows[ri] = windows.get(ri, 0) + 1
        return [
            early[ri] if ri in early else self._result(ri, record, plans[ri], best, windows[ri])
            for ri, record in enumerate(records)
        ]

    def _result(
        self,
        ri: int,
        record: RagRecord,
        plan: list[tuple[int, str, Document]],
        best: dict[tuple[int, int], float],
        windows: int,
    ) -> EvalResult:
        indices = [di for di, _, _ in plan]
        per_doc = [round(best.get((ri, di), 0.0), 6) for di in indices]
        scored = [best[(ri, di)] for di in indices if (ri, di) in best]
        top = max(range(len(per_doc)), key=per_doc.__getitem__)
        score = per_doc[top]
        extra: dict[str, Any] = (
            {"document_indices": indices} if len(plan) != len(record.documents) else {}
        )
        return self.result(
            score,
            label="relevant" if score >= self.options.threshold else "not_relevant",
            explanation=f"document {indices[top]} is the most relevant ({score:.2f}); mean@"
            f"{len(scored)} {sum(scored) / len(scored):.2f}",
            per_document=per_doc,
            mean=round(sum(scored) / len(scored), 6),
            best_document=indices[top],
            windows=windows,
            threshold=self.options.threshold,
            model=self.model_name,
            **extra,
        )
