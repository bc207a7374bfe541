"""The evaluator contracts are abstract methods: a plug-in class that gives ``metric`` and
``method`` and leaves its contract's method out is refused when it is defined, with a
message that names what to implement; the scoring methods of turn records and of
conversations never mix."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ragpulse.evaluators.base import (
    BatchEvaluator,
    ConversationEvaluator,
    Evaluator,
    EvaluatorBase,
)
from ragpulse.record import ConversationRecord, EvalResult, RagRecord


def test_a_turn_evaluator_without_score_is_refused_when_defined() -> None:
    with pytest.raises(TypeError, match=r"Silent \(silent/rules\) must implement score$"):

        class Silent(Evaluator):
            metric, method = "silent", "rules"


def test_an_evaluator_that_scores_batches_is_told_its_contract() -> None:
    with pytest.raises(TypeError, match=r"must implement score \(.*subclass BatchEvaluator"):

        class Batched(Evaluator):
            metric, method = "batched", "model"

            def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
                return [self.result(1.0) for _ in records]


def test_a_batch_evaluator_without_score_batch_is_refused_when_defined() -> None:
    with pytest.raises(TypeError, match=r"must implement score_batch$"):

        class Empty(BatchEvaluator):
            metric, method = "empty", "model"


def test_a_conversation_evaluator_without_score_conversation_is_refused() -> None:
    with pytest.raises(TypeError, match=r"must implement score_conversation$"):

        class Mute(ConversationEvaluator):
            metric, method = "mute", "rules"


def test_a_named_class_must_take_one_of_the_contracts() -> None:
    with pytest.raises(TypeError, match="must subclass Evaluator, BatchEvaluator or Conv"):

        class Nothing(EvaluatorBase):
            metric, method = "nothing", "rules"


def test_a_base_for_others_may_leave_its_method_to_them() -> None:
    """No ``metric``/``method``: a base (as the judges' and the lexical metrics' are)."""

    class Base(BatchEvaluator):
        pass

    class Done(Base):
        metric, method = "done", "model"

        def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
            return [self.result(0.25) for _ in records]

    assert Done.name == "done/model"
    assert Done().score(RagRecord()).score == 0.25  # a batch of one
    assert [r.score for r in Done().evaluate([RagRecord(), RagRecord()])] == [0.25, 0.25]


def test_turn_and_conversation_scoring_do_not_mix() -> None:
    class Turns(Evaluator):
        metric, method = "turns", "rules"

        def score(self, record: RagRecord) -> EvalResult:
            return self.result(1.0)

    class Whole(ConversationEvaluator):
        metric, method = "whole", "rules"

        def score_conversation(self, conversation: ConversationRecord) -> EvalResult:
            raise RuntimeError("no verdict")

    assert not hasattr(Whole, "score_batch") and not hasattr(Whole, "evaluate")
    assert not hasattr(Turns, "evaluate_conversations")
    [failed] = Whole().evaluate_conversations([ConversationRecord(conversation_id="c")])
    assert failed.label == "error" and "no verdict" in (failed.error or "")
    assert [r.score for r in Turns().score_batch([RagRecord()])] == [1.0]
