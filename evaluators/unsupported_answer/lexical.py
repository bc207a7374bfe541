"""``unsupported_answer/lexical``: tools were called, yet no tool result supports the answer.

For each tool result (each document of an agent turn) the share of the answer's content
tokens it contains; the best share is the answer's support. Unsupported when it is below
``min_support``: the agent answered past its tools (from memory, or invented it). The
score is 1 - support (lower is better). Where ``faithfulness/lexical`` asks how much of
the answer all results together cover, this asks whether any result grounds it at all.
"""

from __future__ import annotations

from pydantic import Field

from ragpulse.evaluators.base import AGENT_TURNS
from ragpulse.evaluators.text.analyses import TextAnalyses
from ragpulse.evaluators.text.overlap import LexicalEvaluator, share_in
from ragpulse.plugin_context import PluginOptions
from ragpulse.record import Direction, EvalResult, RagRecord


class UnsupportedAnswer(LexicalEvaluator):
    """1 - the best share of the answer's content tokens found in one tool result."""

    metric = "unsupported_answer"
    method = "lexical"
    direction = Direction.LOWER_IS_BETTER
    applies_to = AGENT_TURNS

    class Options(PluginOptions):
        min_support: float = Field(
            0.3, ge=0, le=1, description="best single-result support below which it is unsupported"
        )

    options: Options

    def lexical(self, record: RagRecord, texts: TextAnalyses) -> EvalResult:
        if not record.tool_calls:
            return self.not_applicable("no tool calls")
        if not record.documents:
            return self.not_applicable("no tool returned a result")
        answer = tuple(dict.fromkeys(texts.view(record.answer).tokens))
        if not answer:
            return self.not_applicable("answer has no content words")
        support = [share_in(answer, texts.view(d.content).word_set) for d in record.documents]
        best = max(range(len(support)), key=support.__getitem__)
        source = record.documents[best].source
        where = source.label if source is not None else f"document {best}"
        unsupported = support[best] < self.options.min_support
        return self.result(
            1.0 - support[best],
            label="unsupported" if unsupported else "supported",
            explanation=f"the best-supporting result ({where}) holds {support[best]:.0%} of the "
            "answer's content words",
            support=round(support[best], 4),
            best_document=best,
            min_support=self.options.min_support,
        )
