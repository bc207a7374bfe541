"""What every judge metric shares: settings, the shared client, budget checks, errors."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ragpulse.config import EvaluationSettings, JudgeSettings
from ragpulse.errors import ModelUnavailable
from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.evaluators.judge.client import JudgeClient, JudgeError, Usage, shared_client
from ragpulse.evaluators.models.loading import missing_extra
from ragpulse.record import EvalResult, RagRecord
from ragpulse.telemetry import CollectorMetrics


class JudgeEvaluator(Evaluator):
    """Subclasses implement :meth:`_judge` (async, one record) and set ``calls_per_record``.

    A record is judged only when the shared budget has room for its calls;
    otherwise it gets a ``skipped`` result (no score) and the skip is counted.
    A failed call becomes an error result with the reason; nothing raises.
    """

    tier = Tier.JUDGE
    default_enabled = True
    calls_per_record = 1

    def __init__(self, judge: JudgeSettings | None = None) -> None:
        self.judge = judge or JudgeSettings()
        self._registry: Any = None
        self.client: JudgeClient | None = None

    @classmethod
    def build(cls, options: dict[str, Any], settings: EvaluationSettings) -> Evaluator:
        return cls(judge=settings.judge, **options)

    @classmethod
    def unconfigured(cls, settings: EvaluationSettings) -> str | None:
        if settings.judge.configured:
            return None
        return "no LLM judge configured (--judge-base-url and --judge-model)"

    @classmethod
    def missing(cls) -> str | None:
        return missing_extra(("openai", "httpx"))

    def bind(self, metrics: CollectorMetrics) -> None:
        self._registry = metrics.registry

    def load(self) -> None:
        if not self.judge.configured:
            raise ModelUnavailable(
                "no LLM judge configured: set --judge-base-url and --judge-model "
                "(or evaluation.judge in the config file)"
            )
        if self._registry is None:
            self._registry = CollectorMetrics().registry
        self.client = shared_client(self.judge, self._registry)

    def _score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        if self.client is None:
            self.load()
        assert self.client is not None
        return self.client.run(self._judge_all(records))

    async def _judge_all(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        return list(await asyncio.gather(*(self._judge_safely(r) for r in records)))

    async def _judge_safely(self, record: RagRecord) -> EvalResult:
        assert self.client is not None
        refusal = self.client.budget.reserve(self.calls_per_record)
        if refusal:
            self.client.metrics.skipped.labels(self.metric, refusal).inc()
            return self.result(
                None,
                label="skipped",
                explanation=f"judge budget exhausted ({refusal.removeprefix('budget_')} "
                "per minute); cheap scores stand",
            )
        try:
            return await self._judge(record)
        except JudgeError as exc:
            return self.error_result(exc).model_copy(update={"label": f"error:{exc.reason}"})

    async def _judge(self, record: RagRecord) -> EvalResult:
        raise NotImplementedError

    def judged(
        self, score: float | None, usage: Usage, prompts: Sequence[str], **details: Any
    ) -> EvalResult:
        """A result stamped with the prompt versions, model and cost that produced it."""
        return self.result(
            score,
            **details,
            model=self.judge.model,
            prompts=list(prompts),
            calls=usage.calls,
            cached=usage.cached,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
        )
