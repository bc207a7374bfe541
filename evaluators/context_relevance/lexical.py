"""``context_relevance/lexical``: per document, the share of the question's content tokens
it contains; the record's score is the best document's."""

from __future__ import annotations

from ragpulse.evaluators.text.analyses import TextAnalyses
from ragpulse.evaluators.text.overlap import LexicalEvaluator, share_in
from ragpulse.record import EvalResult, RagRecord


class LexicalContextRelevance(LexicalEvaluator):
    """Per document, the share of the question's content tokens it contains; max over documents."""

    metric = "context_relevance"
    method = "lexical"

    def lexical(self, record: RagRecord, texts: TextAnalyses) -> EvalResult:
        if not record.documents:
            return self.not_applicable("no documents retrieved")
        question = texts.view(record.question).tokens
        if not question:
            return self.not_applicable("question has no content words")
        unique = tuple(dict.fromkeys(question))
        view = texts.view
        per_doc = [round(share_in(unique, view(d.content).word_set), 4) for d in record.documents]
        best = max(range(len(per_doc)), key=per_doc.__getitem__)
        return self.result(
            per_doc[best],
            explanation=f"document {best} has {per_doc[best]:.0%} of the question's content words",
            per_document=per_doc,
            mean=round(sum(per_doc) / len(per_doc), 4),
            best_document=best,
        )
