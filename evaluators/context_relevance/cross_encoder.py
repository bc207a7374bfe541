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
from typing import Any

from pydantic import Field

from ragpulse.evaluators.models.detector import (
    DetectorEvaluator,
    DetectorOptions,
    Input,
    Label,
    Outputs,
)
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

    def plan(self, record: RagRecord) -> tuple[list[Input], Any] | EvalResult:
        plan = record.for_relevance(self.options.top_k)
        if not plan:
            return self.not_applicable(record.no_relevance_reason())
        if not record.question.strip():
            return self.not_applicable("question is empty")
        if not any(d.content.strip() for _, _, d in plan):
            return self.not_applicable("no documents with text retrieved")
        queries = sorted({q for _, q, _ in plan})
        asked = dict(zip(queries, self.classifier.count(queries), strict=True))
        longest = max(asked.values())
        if longest > self.max_tokens // 2:
            return self.not_applicable(
                f"question of {longest} tokens: longer than half the model's window "
                f"({self.max_tokens} tokens), so no document would fit beside it"
            )
        specials = self.classifier.specials(pair=True)
        inputs: list[Input] = []
        owners: list[int] = []  # the document of each input
        for di, query, doc in plan:
            if doc.content.strip():
                budget = self.max_tokens - specials - asked[query]
                for window in self.split_long(doc.content, budget):
                    inputs.append((query, window))
                    owners.append(di)
        return inputs, (plan, owners)

    def finish(self, record: RagRecord, state: Any, outputs: Outputs) -> EvalResult:
        import numpy as np

        plan, owners = state
        probs = self.probability(np.stack(outputs.logits), self._positive).tolist()
        best: dict[int, float] = {}
        for di, p in zip(owners, probs, strict=True):
            best[di] = max(best.get(di, 0.0), float(p))
        return self._result(record, plan, best, len(owners))

    def _result(
        self,
        record: RagRecord,
        plan: list[tuple[int, str, Document]],
        best: dict[int, float],
        windows: int,
    ) -> EvalResult:
        indices = [di for di, _, _ in plan]
        per_doc = [round(best.get(di, 0.0), 6) for di in indices]
        scored = [best[di] for di in indices if di in best]
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
