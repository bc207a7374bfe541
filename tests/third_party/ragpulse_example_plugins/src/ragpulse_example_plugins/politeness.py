"""``politeness/keywords``: the share of configured courtesy words the answer uses."""

from __future__ import annotations

from pydantic import Field

from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.plugin_context import PluginOptions
from ragpulse.record import EvalResult, RagRecord


class PolitenessKeywords(Evaluator):
    metric = "politeness"
    method = "keywords"
    tier = Tier.CHEAP
    default_enabled = False  # a user names it in evaluation.evaluators

    class Options(PluginOptions):
        words: list[str] = Field(
            default_factory=lambda: ["please", "thank"],
            min_length=1,
            description="courtesy words, matched case-insensitively",
        )
        polite_at: float = Field(0.5, ge=0, le=1, description="score labelled 'polite'")

    options: Options

    def score(self, record: RagRecord) -> EvalResult:
        if not record.answer.strip():
            return self.not_applicable("the answer is empty")
        answer = record.answer.lower()
        hits = [w for w in self.options.words if w.lower() in answer]
        score = len(hits) / len(self.options.words)
        label = "polite" if score >= self.options.polite_at else "curt"
        return self.result(score, label=label, explanation=f"uses {hits or 'none'}", hits=hits)
