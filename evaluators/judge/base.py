"""What every judge metric shares: settings, the shared client, budget checks, errors."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from ragpulse.config import EvaluationSettings, JudgeSettings
from ragpulse.errors import ModelUnavailable
from ragpulse.evaluators.base import BatchEvaluator, EvaluatorBase, Tier
from ragpulse.evaluators.judge.budget import OverBudget, record_reservation
from ragpulse.evaluators.judge.usage import JudgeError, Usage
from ragpulse.evaluators.models.loading import missing_extra
from ragpulse.plugin_context import PluginContext
from ragpulse.record import EvalResult, RagRecord

if TYPE_CHECKING:
    from ragpulse.evaluators.judge.client import JudgeClient


def shared_client(context: PluginContext, judge: JudgeSettings) -> JudgeClient:
    """The context's one client (event loop, cache, budget) per endpoint and model."""
    # Here, not at the top: choosing a run's evaluators imports this module to ask whether
    # a judge is configured, and needs neither the client nor the cache (nor sqlite3).
    from ragpulse.evaluators.judge.cache import cache_for
    from ragpulse.evaluators.judge.client import JudgeClient

    def make() -> JudgeClient:
        # cache "auto": on disk offline (a second `ragpulse eval` calls nothing), memory online
        cache = cache_for(judge, offline=context.offline)
        client = JudgeClient(judge, context.metrics.judge, cache=cache)
        client.probe()  # one warning naming the URL now if it cannot be reached; no wait
        return client

    key = ("judge-client", str(judge.base_url), str(judge.model))
    return context.shared(key, make)


class JudgeBase(EvaluatorBase):
    """What every judge shares, of turn records (:class:`JudgeEvaluator`) or of
    conversations (:class:`~ragpulse.evaluators.judge.conversation.ConversationJudge`).

    The judge's endpoint, model and budget come from ``evaluation.judge`` in
    the context's settings. A record is judged only when the shared budget has
    room for its calls; otherwise, online, it gets a ``skipped`` result (no
    score, counted), and offline the judge waits for the budget's window and
    says so through ``context.notify``. The budget is taken at the record's
    first call that the cache cannot answer: a record answered wholly from the
    cache neither spends nor waits for budget. A failed call becomes an error
    result with the reason; nothing raises.
    """

    tier = Tier.JUDGE
    default_enabled = True
    calls_per_record = 1
    judge: JudgeSettings = JudgeSettings()
    client: JudgeClient | None = None
    _wait = False

    @classmethod
    def unconfigured(cls, settings: EvaluationSettings) -> str | None:
        if settings.judge.configured:
            return None
        return (
            "no LLM judge configured (--judge-base-url and --judge-model, or "
            "RAGPULSE_JUDGE_BASE_URL and RAGPULSE_JUDGE_MODEL)"
        )

    @classmethod
    def missing(cls) -> str | None:
        return missing_extra(("openai",))

    def load(self, context: PluginContext) -> None:
        super().load(context)
        self.judge = context.settings.evaluation.judge
        if not self.judge.configured:
            raise ModelUnavailable(
                "no LLM judge configured: set --judge-base-url and --judge-model "
                "(or evaluation.judge in the config file)"
            )
        policy = self.judge.over_budget
        self._wait = policy == "wait" or (policy == "auto" and context.offline)
        self.client = shared_client(context, self.judge)

    async def _reserve(self) -> str | None:
        """None once the budget granted this record's calls, else why it was refused."""
        assert self.client is not None and self.context is not None
        budget = self.client.budget
        while True:
            refusal = budget.reserve(self.calls_per_record)
            if refusal is None or not self._wait:
                return refusal
            wait = budget.seconds_until_room(self.calls_per_record)
            if wait is None:  # more calls per record than the whole minute allows
                return refusal
            self.context.notify(
                f"judge budget: {refusal.removeprefix('budget_')} per minute spent, "
                f"waiting {wait:.0f}s for the window"
            )
            import asyncio  # loaded: this runs on the client's loop

            await asyncio.sleep(max(wait, 0.05))

    async def _budgeted(self, judging: Coroutine[Any, Any, EvalResult]) -> EvalResult:
        """``judging`` (one record's or one conversation's verdicts) under the budget: the
        calls are reserved at its first cache miss; over budget it is a ``skipped``
        result, a failed call an error result. Runs in its own task (``gather``), so the
        reservation set here is this one's."""
        assert self.client is not None
        reserved = False

        async def reserve() -> None:  # at the record's first cache miss, once
            nonlocal reserved
            if not reserved:
                refusal = await self._reserve()
                if refusal:
                    raise OverBudget(refusal)
                reserved = True

        token = record_reservation.set(reserve)
        try:
            return await judging
        except OverBudget as over:
            self.client.metrics.skipped.labels(self.metric, over.refusal).inc()
            return self.result(
                None,
                label="skipped",
                explanation=f"judge budget exhausted ({over.refusal.removeprefix('budget_')} "
                "per minute); cheap scores stand",
            )
        except JudgeError as exc:
            failed = self.error_result(exc).model_copy(update={"label": f"error:{exc.reason}"})
            if exc.usage is not None:  # the server answered (off-format): what that cost
                u = exc.usage
                failed.details.update(
                    calls=u.calls, prompt_tokens=u.prompt_tokens,
                    completion_tokens=u.completion_tokens,
                    cached_prompt_tokens=u.cached_prompt_tokens,
                )  # fmt: skip
            return failed
        finally:
            record_reservation.reset(token)

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
            cached_prompt_tokens=usage.cached_prompt_tokens,
            completion_tokens=usage.completion_tokens,
        )


class JudgeEvaluator(JudgeBase, BatchEvaluator):
    """A judged metric of turn records: subclasses implement :meth:`_judge` (async, one
    record) and set ``calls_per_record``; the records of a batch are judged concurrently."""

    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        if self.client is None:
            raise ModelUnavailable(f"{self.name}: load() was not called")
        return self.client.run(self._judge_all(records))

    async def _judge_all(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        # asyncio is imported where a judge runs (its loop has it loaded by then), not with
        # this module: choosing the defaults imports it to ask whether a judge is configured.
        import asyncio

        return list(await asyncio.gather(*(self._judge_safely(r) for r in records)))

    async def _judge_safely(self, record: RagRecord) -> EvalResult:
        """Runs in its own task (``gather``), so the reservation set here is this record's."""
        return await self._budgeted(self._judge(record))

    @abstractmethod
    async def _judge(self, record: RagRecord) -> EvalResult:
        """One record's result from the judge's verdicts (:meth:`judged`)."""
