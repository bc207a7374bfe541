"""``context_relevance/perplexity``: how likely is the question, given a document?

A seq2seq model (flan-t5 family) reads "Generate a question based on the given
content: <document>" and is teacher-forced on the real question's tokens; the
geometric mean of their probabilities says how naturally the document leads to
that question. Reported: the max over documents, and every document's value.
Documents longer than the encoder's window are split into overlapping windows
(the best window counts), not cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from ragpulse.evaluators.models.transformers_base import TransformersEvaluator, TransformersOptions
from ragpulse.record import EvalResult, RagRecord

PROMPT = "Generate a question based on the given content: "


class QuestionLikelihood(TransformersEvaluator):
    metric = "context_relevance"
    method = "perplexity"
    model_kind = "seq2seq"

    class Options(TransformersOptions):
        model: str = "google/flan-t5-small"
        top_k: int = Field(5, ge=1, description="documents scored, in retrieval order")

    options: Options

    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        top_k = self.options.top_k
        plans = [r.for_relevance(top_k) for r in records]
        pairs = [
            (ri, di, PROMPT + d.content, query)
            for ri, plan in enumerate(plans)
            for di, query, d in plan
            if query.strip() and d.content.strip()
        ]
        best: dict[tuple[int, int], float] = {}
        for chunk in self.batches(pairs):
            for (ri, di, _, _), value in zip(chunk, self._likelihoods(chunk), strict=True):
                best[(ri, di)] = value
        out = []
        for ri, (record, plan) in enumerate(zip(records, plans, strict=True)):
            if not plan:
                out.append(self.not_applicable(record.no_relevance_reason()))
                continue
            if not record.question.strip():
                out.append(self.not_applicable("question is empty"))
                continue
            scored = [(di, round(best[(ri, di)], 6)) for di, _, _ in plan if (ri, di) in best]
            if not scored:
                out.append(self.not_applicable("no documents with text retrieved"))
                continue
            per_doc = [value for _, value in scored]
            top = max(range(len(per_doc)), key=per_doc.__getitem__)
            extra: dict[str, Any] = (
                {"document_indices": [di for di, _ in scored]}
                if len(scored) != len(record.documents)
                else {}
            )
            out.append(
                self.result(
                    per_doc[top],
                    explanation=f"the question is most likely given document {scored[top][0]} "
                    f"(mean token probability {per_doc[top]:.3f})",
                    per_document=per_doc,
                    best_document=scored[top][0],
                    model=self.options.model,
                    **extra,
                )
            )
        return out

    def _likelihoods(self, pairs: Sequence[tuple[int, int, str, str]]) -> list[float]:
        """Geometric-mean token probability of each question, best window of its document."""
        import torch

        tok = self._tokenizer
        enc, owner = self.windows([p[2] for p in pairs])
        labels = tok([pairs[i][3] for i in owner], padding=True, return_tensors="pt").input_ids
        labels[labels == tok.pad_token_id] = -100
        enc, labels = self.on_device(enc), self.on_device(labels)
        with torch.inference_mode():
            logits = self._model(
                input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], labels=labels
            ).logits
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        mask = labels != -100
        picked = logprobs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1) * mask
        per_window = torch.exp(picked.sum(-1) / mask.sum(-1).clamp(min=1)).tolist()
        return self.best_window(owner, per_window, len(pairs))
