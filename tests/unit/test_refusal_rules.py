"""refusal/rules: declines and "don't know" answers, without flagging content that says "cannot"."""

from __future__ import annotations

import pytest

from ragpulse.evaluators.refusal.rules import RefusalRules
from ragpulse.record import RagRecord


def _score(answer: str) -> tuple[str | None, float | None, object]:
    result = RefusalRules().evaluate([RagRecord(question="q", answer=answer)])[0]
    assert result.metric == "refusal" and result.method == "rules"
    return result.label, result.score, result.details.get("kind")


@pytest.mark.parametrize(
    "answer",
    [
        "I can't help with that.",
        "I'm sorry, but I cannot provide that information.",
        "I’m unable to assist with this request.",  # curly apostrophe
        "As an AI language model, I cannot browse the internet.",
        "I must respectfully decline this request.",
        "I apologize, but I'm not able to help with that request.",
        "I'm sorry. I can't help with that.",
        "Sorry, that's not something I can do.",
        "This request goes against my guidelines.",
        "Lo siento, pero no puedo ayudar con eso.",
    ],
)
def test_declines(answer: str) -> None:
    assert _score(answer) == ("refusal", 1.0, "decline")


@pytest.mark.parametrize(
    "answer",
    [
        "I don't know.",
        "I do not know the answer to that question.",
        "The provided context does not contain information about the CEO.",
        "The documents don't mention when the bridge opened.",
        "Unfortunately, the given passages do not specify the date.",
        "There is not enough information to answer this question.",
        "I don't have enough information to answer that.",
        "Based on the provided context, it is not possible to determine the answer.",
        "The answer is not mentioned in the provided documents.",
        "I couldn't find anything about that in the knowledge base.",
        "I'm sorry, but I cannot answer that based on the provided context.",
        "Unknown.",
        "Je ne sais pas.",
    ],
)
def test_dont_know(answer: str) -> None:
    assert _score(answer) == ("refusal", 1.0, "dont_know")


@pytest.mark.parametrize(
    "answer",
    [
        "Penguins cannot fly.",
        "You cannot fly with a cat unless it is in a carrier.",
        "The engine can't start below -40 degrees.",
        "I cannot help but notice how similar the two designs are.",
        "I can't stress enough how important backups are: run them daily.",
        'The song "I Don\'t Know" was released by Ozzy Osbourne in 1980.',
        "There is no evidence that vaccines cause autism.",
        "It is unknown who built it, but researchers think the Romans did.",
        "I'm not sure, but I think it opened in 1990.",
        "Paris is the capital of France.",
        "Users who don't know their password can reset it from the login page.",
    ],
)
def test_answers_are_not_refusals(answer: str) -> None:
    label, score, kind = _score(answer)
    assert (label, score, kind) == ("answered", 0.0, None)


def test_hedge_after_a_substantive_answer_stays_answered() -> None:
    answer = (
        "Paris is the capital of France and lies on the Seine. It has about two million "
        "inhabitants. The context does not mention its founding date."
    )
    result = RefusalRules().evaluate([RagRecord(answer=answer)])[0]
    assert result.label == "answered"
    assert result.score == 0.0
    assert result.details["hedge"]["kind"] == "dont_know"
    assert result.details["hedge"]["sentence_index"] == 2


def test_refusal_details_name_the_phrase() -> None:
    result = RefusalRules().evaluate([RagRecord(answer="I can't help with that request.")])[0]
    assert result.details["phrase"] == "i can't help"
    assert result.details["sentence_index"] == 0
    assert result.explanation is not None and "declines" in result.explanation


@pytest.mark.parametrize("answer", ["", "   ", "\n\t"])
def test_empty_answer_is_not_applicable(answer: str) -> None:
    result = RefusalRules().evaluate([RagRecord(answer=answer)])[0]
    assert result.label == "not_applicable"
    assert result.score is None


def test_batch_keeps_order() -> None:
    answers = ["I don't know.", "Paris.", "I cannot help with that."]
    results = RefusalRules().evaluate([RagRecord(answer=a) for a in answers])
    assert [r.label for r in results] == ["refusal", "answered", "refusal"]
