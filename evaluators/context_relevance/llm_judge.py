"""``context_relevance/llm_judge``: one relevance verdict per document; the score is the
rank-weighted precision of the relevant documents (average precision: the mean of
precision@k over the ranks k that hold a relevant document), so relevant documents
ranked first count more.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from ragpulse.evaluators.faithfulness.llm_judge import Doc
from ragpulse.evaluators.judge.base import JudgeEvaluator
from ragpulse.evaluators.judge.prompts import Prompt
from ragpulse.record import EvalResult, RagRecord


class RelevanceInput(BaseModel):
    question: str
    documents: list[Doc]


class DocumentVerdict(BaseModel):
    document_index: int
    relevant: bool
    reason: str = Field(max_length=300)


class DocumentVerdicts(BaseModel):
    verdicts: list[DocumentVerdict]


CONTEXT = Prompt(
    name="context_relevance.verdicts",
    version="2",
    instruction=(
        "For each document, say whether it contains information useful to answer the "
        "question (relevant) or not. One verdict per document with its document_index and "
        "a one-sentence reason."
    ),
    input_model=RelevanceInput,
    output_model=DocumentVerdicts,
    shared=("documents",),
)


def average_precision(relevant: list[bool]) -> float:
    """Rank-weighted precision of a ranked list of relevance verdicts (0 when none is relevant)."""
    hits, total = 0, 0.0
    for rank, is_relevant in enumerate(relevant, 1):
        if is_relevant:
            hits += 1
            total += hits / rank
    return total / hits if hits else 0.0


class JudgeContextRelevance(JudgeEvaluator):
    metric = "context_relevance"
    method = "llm_judge"

    async def _judge(self, record: RagRecord) -> EvalResult:
        plan = record.for_relevance()
        if not plan:
            return self.not_applicable(record.no_relevance_reason())
        if not record.question.strip():
            return self.not_applicable("question is empty")
        assert self.client is not None
        queries = {q for _, q, _ in plan}
        # One call: the query when every document answers the same one (what an agent's
        # retrieval tool searched for), else the user's question.
        query = queries.pop() if len(queries) == 1 else record.question
        docs = [Doc(index=i, text=d.content) for i, (_, _, d) in enumerate(plan)]
        answer, usage = await self.client.ask(
            CONTEXT, RelevanceInput(question=query, documents=docs)
        )
        by_index = {v.document_index: v for v in answer.verdicts}
        verdicts = [by_index.get(i) for i in range(len(docs))]
        relevant = [bool(v and v.relevant) for v in verdicts]
        extra: dict[str, object] = {}
        if len(plan) != len(record.documents):
            extra["document_indices"] = [i for i, _, _ in plan]
        if query != record.question:
            extra["query"] = query
        return self.judged(
            average_precision(relevant),
            usage,
            [CONTEXT.id],
            explanation=f"{sum(relevant)} of {len(relevant)} documents relevant",
            per_document=[
                {"relevant": bool(v and v.relevant), "reason": v.reason if v else "no verdict"}
                for v in verdicts
            ],
            **extra,
        )
