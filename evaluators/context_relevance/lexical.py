"""``context_relevance/lexical``: per document, the share of its query's content tokens it
contains (the question, or what an agent's retrieval tool searched for); the record's
score is the best document's."""

from __future__ import annotations

from typing import Any

from ragpulse.evaluators.text.analyses import TextAnalyses
from ragpulse.evaluators.text.overlap import LexicalEvaluator, share_in
from ragpulse.record import EvalResult, RagRecord


class LexicalContextRelevance(LexicalEvaluator):
    """Per document, the share of its query's content tokens it contains; max over documents.

    An agent turn's documents are scored against the query of the tool call that found
    them (``DocumentSource.query``); only retrieval documents count (``agents.retrieval_tools``).
    """

    metric = "context_relevance"
    method = "lexical"

    def lexical(self, record: RagRecord, texts: TextAnalyses) -> EvalResult:
        scored = record.for_relevance()
        if not scored:
            return self.not_applicable(record.no_relevance_reason())
        view = texts.view
        question = tuple(dict.fromkeys(view(record.question).tokens))
        unique: dict[str, tuple[str, ...]] = {}  # query -> its distinct content tokens
        per_doc = []
        for _, query, doc in scored:
            tokens = unique.get(query)
            if tokens is None:
                tokens = unique[query] = tuple(dict.fromkeys(view(query).tokens)) or question
            per_doc.append(
                round(share_in(tokens, view(doc.content).word_set), 4) if tokens else None
            )
        if all(s is None for s in per_doc):
            return self.not_applicable("question has no content words")
        values = [s or 0.0 for s in per_doc]
        best = max(range(len(values)), key=values.__getitem__)
        indices = [i for i, _, _ in scored]
        details: dict[str, Any] = {}
        if len(scored) != len(record.documents):
            details["document_indices"] = indices
        if any(q != record.question for _, q, _ in scored):
            details["queries"] = [q for _, q, _ in scored]
        return self.result(
            values[best],
            explanation=f"document {indices[best]} has {values[best]:.0%} of its query's content "
            "words",
            per_document=values,
            mean=round(sum(values) / len(values), 4),
            best_document=indices[best],
            **details,
        )
