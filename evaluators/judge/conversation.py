"""What the conversation judges share: per-turn verdicts, cached by the turns they read.

A conversation judge (``conversation_completeness``, ``knowledge_retention``,
``user_frustration``) gives one verdict per turn and turns the verdicts into the
conversation's score by arithmetic; the judge never emits the number.

Incremental by construction. A turn's verdict may read that turn and the turns before it
(at most ``context_turns`` of them), never a later one, so it is a function of that window
only: the window's texts (and where it starts) are the verdict's cache key. A conversation
that grows (its record revised when it resumes) keeps every earlier window unchanged, so
its earlier turns' verdicts come from the cache and only the new turns are sent, in one
call per conversation and metric. The same conversation replayed, or delivered again
after a crash, asks nothing.

The transcript is data: every turn's texts travel JSON-encoded in the fenced data block
(:mod:`ragpulse.evaluators.judge.prompts`), which the instruction says never to follow.
At most ``max_judged_turns`` turns are sent per record (the latest ones without a
verdict); turns left without one are listed in ``details.unjudged_turns`` and the score is
over the turns with a verdict.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, Field, ValidationError

from ragpulse.errors import ModelUnavailable
from ragpulse.evaluators.base import ConversationEvaluator
from ragpulse.evaluators.judge.base import JudgeBase
from ragpulse.evaluators.judge.cache import NO_VERDICT, cache_key
from ragpulse.evaluators.judge.prompts import Prompt
from ragpulse.evaluators.judge.usage import Usage
from ragpulse.plugin_context import PluginOptions
from ragpulse.record import ConversationRecord, EvalResult


class ChatTurn(BaseModel):
    """One turn of the transcript as the judge reads it."""

    turn: int
    user: str
    assistant: str


class TurnsInput(BaseModel):
    """The transcript (the judged turns and the turns before them) and which turns to
    judge."""

    turns: list[ChatTurn]
    judge_turns: list[int] = Field(description="The turns that need a verdict.")


class TurnVerdict(BaseModel):
    """One turn's verdict; each metric narrows ``verdict`` to its own labels."""

    turn: int
    verdict: str
    reason: str = Field("", max_length=300)


V = TypeVar("V", bound=TurnVerdict)


class TurnVerdicts(BaseModel, Generic[V]):
    verdicts: list[V]


TRANSCRIPT_RULES = (
    "Each turn is the user's message and the assistant's answer. Judge each turn listed in "
    "judge_turns using that turn and the turns before it only, never a later turn. "
    "One verdict per judged turn, each with a one-sentence reason."
)


class ConversationJudge(JudgeBase, ConversationEvaluator):
    """A judged conversation metric: subclasses set ``metric``, ``prompt``, ``verdict_model``,
    ``first_turn`` and implement :meth:`aggregate`."""

    method = "llm_judge"
    calls_per_record = 1  # one call per conversation: every turn without a verdict at once
    prompt: ClassVar[Prompt[TurnsInput, Any]]
    verdict_model: ClassVar[type[TurnVerdict]]
    first_turn: ClassVar[int] = 1
    """The first turn (1-based position) that gets a verdict: 2 for what only a follow-up
    can show (forgetting, frustration)."""

    class Options(PluginOptions):
        context_turns: int = Field(
            20, ge=0, description="earlier turns the judge reads with each judged turn"
        )
        max_judged_turns: int = Field(
            20,
            ge=1,
            description="turns sent to the judge per conversation record (the latest ones "
            "without a cached verdict); the rest stay unjudged, listed",
        )

    options: Options

    def score_conversation(self, conversation: ConversationRecord) -> EvalResult:
        [result] = self.evaluate_conversations([conversation])
        return result

    def evaluate_conversations(
        self, conversations: Sequence[ConversationRecord]
    ) -> list[EvalResult]:
        """Every conversation judged concurrently on the client's loop; never raises."""
        if self.client is None:
            error = ModelUnavailable(f"{self.name}: load() was not called")
            return [self.error_result(error) for _ in conversations]
        return self.client.run(self._judge_conversations(conversations))

    async def _judge_conversations(
        self, conversations: Sequence[ConversationRecord]
    ) -> list[EvalResult]:
        import asyncio  # loaded: this runs on the client's loop

        async def one(conversation: ConversationRecord) -> EvalResult:
            try:
                return await self._budgeted(self._judge_conversation(conversation))
            except Exception as exc:  # a bug here costs this conversation's result only
                return self.error_result(exc)

        return list(await asyncio.gather(*(one(c) for c in conversations)))

    async def _judge_conversation(self, conversation: ConversationRecord) -> EvalResult:
        assert self.client is not None
        client = self.client
        turns = [
            ChatTurn(turn=i + 1, user=t.question, assistant=t.answer)
            for i, t in enumerate(conversation.turns)
        ]
        numbers = {i + 1: t.turn for i, t in enumerate(conversation.turns)}
        if len(turns) < self.first_turn:
            return self.not_applicable(f"fewer than {self.first_turn} turns")
        keys = {p: self._key(turns, p) for p in range(self.first_turn, len(turns) + 1)}
        verdicts: dict[int, TurnVerdict] = {}
        silent: set[int] = set()  # asked before: the judge gave no verdict
        for position, key in keys.items():
            hit = client.cache.get(key)
            if hit == NO_VERDICT:
                silent.add(position)
            elif hit is not None:
                try:
                    verdicts[position] = self.verdict_model.model_validate_json(hit)
                except ValidationError:
                    pass  # an entry of another shape: judged again
        usage = Usage()
        if hits := len(verdicts) + len(silent):
            client.metrics.cache.labels("hit").inc(hits)
            usage.add(Usage(cached=hits))
        todo = [p for p in keys if p not in verdicts and p not in silent]
        unjudged = todo[: -self.options.max_judged_turns]
        todo = todo[-self.options.max_judged_turns :]
        if todo:
            start = max(0, todo[0] - 1 - self.options.context_turns)
            batch = TurnsInput(turns=turns[start : todo[-1]], judge_turns=todo)
            answer, used = await client.ask(self.prompt, batch)
            usage.add(used)
            for verdict in answer.verdicts:
                if verdict.turn in todo and verdict.turn not in verdicts:
                    verdicts[verdict.turn] = verdict
                    client.cache.put(keys[verdict.turn], verdict.model_dump_json())
            for position in set(todo) - set(verdicts):  # left out: not asked again
                client.cache.put(keys[position], NO_VERDICT)
        ordered = {p: verdicts[p] for p in sorted(verdicts)}
        result = self.aggregate(ordered, numbers)
        details = {
            **result.details,
            "verdicts": [
                {**v.model_dump(), "turn": numbers[p], "position": p} for p, v in ordered.items()
            ],
            "unjudged_turns": [numbers[p] for p in sorted([*unjudged, *silent])],
        }
        return self.judged(
            result.score,
            usage,
            [self.prompt.id],
            label=result.label,
            explanation=result.explanation,
            **details,
        )

    def _key(self, turns: list[ChatTurn], position: int) -> str:
        """The cache key of the verdict at ``position`` (1-based): the texts of its window
        (the turn and up to ``context_turns`` before it) and where the window starts."""
        assert self.client is not None
        start = max(0, position - 1 - self.options.context_turns)
        window = [[t.user, t.assistant] for t in turns[start:position]]
        inputs = {"start": start, "window": window}
        return cache_key(f"{self.prompt.id}/turn", self.client.model, inputs)

    @abstractmethod
    def aggregate(self, verdicts: dict[int, Any], numbers: dict[int, int]) -> EvalResult:
        """The conversation's result from its turns' verdicts (by position, 1-based, in
        order; ``numbers`` maps a position to the turn's number): score, label,
        explanation and details; the base adds the verdicts and the cost."""
