"""A follow-up's answer that contradicts an earlier answer of its conversation: the cheap
numeric/name check (``consistency/rules``, precision first) and its judge counterpart
(``consistency/llm_judge``, against the judge test double: machinery, not quality)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.judge_server import JudgeServer

from ragpulse.config import EvaluationSettings, JudgeSettings, Settings
from ragpulse.evaluation import load_evaluators_safely
from ragpulse.evaluators.consistency.llm_judge import JudgeConsistency
from ragpulse.evaluators.consistency.rules import Consistency
from ragpulse.plugin_context import PluginContext
from ragpulse.record import EvalResult, HistoryMessage, RagRecord


def follow_up(earlier: str, answer: str, question: str = "And?") -> RagRecord:
    history = [
        HistoryMessage(role="user", content="Tell me about it.", turn=1),
        HistoryMessage(role="assistant", content=earlier, turn=1),
    ]
    return RagRecord(trace_id="1" * 32, question=question, answer=answer, history=history, turn=2)


def check(earlier: str, answer: str) -> EvalResult:
    [result] = Consistency().evaluate([follow_up(earlier, answer)])
    return result


@pytest.mark.parametrize(
    ("earlier", "answer"),
    [
        ("The Harbour lighthouse was built in 1857.", "The Harbour lighthouse was built in 1860."),
        ("The lighthouse was built in 1857.", "Sorry, actually the lighthouse was built in 1860."),
        ("The lighthouse was built in 1857.", "In 1860 the lighthouse was built."),
        ("The town has 5,000 residents.", "The town has 6,200 residents."),
        ("The capital of Australia is Canberra.", "The capital of Australia is Sydney."),
        ("The ferry leaves at 8 from pier 3.", "The ferry leaves at 8 from pier 4."),
    ],
)
def test_the_same_statement_with_another_value_is_flagged(earlier: str, answer: str) -> None:
    result = check(earlier, answer)
    assert (result.score, result.label) == (0.0, "contradiction")
    [found] = result.details["contradictions"]
    assert found["turn"] == 1 and found["earlier"] == earlier


@pytest.mark.parametrize(
    ("earlier", "answer"),
    [
        ("The lighthouse was built in 1857.", "The lighthouse was built in 1857."),
        ("The town has 5,000 residents.", "The town has 5000 residents."),
        ("The lighthouse was built in 1857.", "The keeper's house was built in 1860."),
        ("The lighthouse was built in 1857.", "The lighthouse was renovated in 1990."),
        ("The tower is 330 metres tall.", "The tower is 1,083 feet tall."),
        ("The tower was designed by Gustave Eiffel.", "The tower was designed by Eiffel."),
        ("The capital of France is Paris.", "The capital of Germany is Berlin."),
        ("It was built in 1857.", "It was built in 1860."),  # too little to tell
        ("The lighthouse was built in 1857.", "The lighthouse was built in 1857, not 1860."),
    ],
)
def test_what_is_not_the_same_statement_is_not_flagged(earlier: str, answer: str) -> None:
    result = check(earlier, answer)
    assert (result.score, result.label) == (1.0, "consistent")


def test_a_question_about_something_new_is_not_a_contradiction() -> None:
    earlier, answer = "The lighthouse was built in 1857.", "The lighthouse was built in 1860."
    [other] = Consistency().evaluate([follow_up(earlier, answer, "And the one in Bergen?")])
    assert other.label == "consistent"
    # The user pressing with a value is no new subject: the answer flipped.
    [pressed] = Consistency().evaluate([follow_up(earlier, answer, "Sure? I read 1860.")])
    assert pressed.label == "contradiction"


def test_two_values_that_differ_are_another_thing() -> None:
    result = check(
        "The Royal Gardens is 201 metres tall.", "The Victoria Bridge is 229 metres tall."
    )
    assert result.label == "consistent"


def test_only_records_with_an_earlier_answer() -> None:
    first = RagRecord(trace_id="1" * 32, question="When?", answer="In 1857.")
    [result] = Consistency().evaluate([first])
    assert result.label == "not_applicable" and result.score is None


@pytest.fixture
def server() -> Iterator[JudgeServer]:
    with JudgeServer() as s:
        yield s


def test_the_judge_counterpart(server: JudgeServer) -> None:
    judge = JudgeSettings(base_url=server.base_url, model="judge-test", api_key="k")
    context = PluginContext(Settings(evaluation=EvaluationSettings(judge=judge)))
    [evaluator] = load_evaluators_safely([JudgeConsistency()], context)
    bad, good, first = evaluator.evaluate(
        [
            follow_up("The lighthouse was built in 1857.", "It was built in 1860."),
            follow_up("The lighthouse was built in 1857.", "It is 40 metres tall."),
            RagRecord(trace_id="2" * 32, question="When?", answer="In 1857."),
        ]
    )
    assert (bad.score, bad.label) == (0.0, "contradiction")
    assert bad.details["contradictions"][0]["turn"] == 1
    assert (good.score, good.label) == (1.0, "consistent")
    assert first.label == "not_applicable" and len(server.seen.requests) == 2
    assert server.seen.prompts() == ["consistency.verdicts"] * 2
