from __future__ import annotations

import re

import pytest

from ragpulse.evaluators.answer_relevance.lexical import LexicalAnswerRelevance
from ragpulse.evaluators.context_relevance.lexical import LexicalContextRelevance
from ragpulse.evaluators.faithfulness.lexical import LexicalFaithfulness
from ragpulse.evaluators.text.analyses import STOP_WORDS, TextView, _words, content_tokens
from ragpulse.record import Document, RagRecord

DOCS = [
    Document(content="The Eiffel Tower is in Paris. It was completed in 1889."),
    Document(content="Bananas are rich in potassium."),
]


def rec(question: str = "", answer: str = "", docs: list[Document] | None = None) -> RagRecord:
    return RagRecord(question=question, answer=answer, documents=DOCS if docs is None else docs)


def test_content_tokens_drop_stop_words_and_punctuation() -> None:
    assert content_tokens("The Eiffel Tower, it's in PARIS!") == ("eiffel", "tower", "paris")


def test_ascii_words_are_the_word_runs_of_the_regex() -> None:
    """The ASCII fast path (a byte table, then a split) splits where ``\\w+`` does, on
    every ASCII character; other text goes through the regex itself."""
    every_ascii = "".join(map(chr, range(128))) * 2 + " it's a_b x1-y2 \x7f end"
    assert _words(every_ascii) == re.findall(r"\w+", every_ascii.replace("'", " "))


def test_faithfulness_grounded_beats_ungrounded() -> None:
    ev = LexicalFaithfulness()
    grounded, ungrounded = ev.evaluate(
        [
            rec(answer="The Eiffel Tower was completed in 1889."),
            rec(answer="The Eiffel Tower was built by Napoleon in 1650."),
        ]
    )
    assert grounded.score == 1.0
    assert ungrounded.score is not None and ungrounded.score < 0.6
    assert set(ungrounded.details["unsupported_tokens"]) == {"built", "napoleon", "1650"}
    assert (grounded.metric, grounded.method) == ("faithfulness", "lexical")


@pytest.mark.parametrize(
    ("record", "why"),
    [(rec(answer="x", docs=[]), "no documents"), (rec(answer="the of and"), "no content")],
)
def test_faithfulness_not_applicable(record: RagRecord, why: str) -> None:
    [r] = LexicalFaithfulness().evaluate([record])
    assert r.score is None and r.label == "not_applicable" and why in (r.explanation or "")


def test_context_relevance_max_over_documents_with_per_document_details() -> None:
    [r] = LexicalContextRelevance().evaluate([rec(question="When was the Eiffel Tower completed?")])
    assert r.score == 1.0
    assert r.details["per_document"] == [1.0, 0.0] and r.details["best_document"] == 0
    assert r.details["mean"] == 0.5


def test_answer_relevance() -> None:
    ev = LexicalAnswerRelevance()
    on, off, empty = ev.evaluate(
        [
            rec(question="Where is the Eiffel Tower?", answer="The Eiffel Tower is in Paris."),
            rec(question="Where is the Eiffel Tower?", answer="Bananas are sweet, grown warm."),
            rec(question="Where is the Eiffel Tower?", answer="  "),
        ]
    )
    assert on.score == 1.0 and off.score == 0.0 and empty.label == "empty_answer"


def test_a_concise_answer_is_too_short_to_judge_lexically() -> None:
    ev = LexicalAnswerRelevance()
    concise, repeating = ev.evaluate(
        [
            rec(question="What temperature for lasagne?", answer="180 degrees."),
            rec(question="What temperature for lasagne?", answer="Lasagne: 180 degrees."),
        ]
    )
    assert concise.label == "not_applicable" and "too short" in (concise.explanation or "")
    assert repeating.score == 0.5  # short, but it repeats the question: scored
    [scored] = LexicalAnswerRelevance(short_answer_tokens=0).evaluate(
        [rec(question="What temperature for lasagne?", answer="180 degrees.")]
    )
    assert scored.score == 0.0


def test_a_follow_up_is_judged_with_its_standalone_question() -> None:
    follow_up = rec(question="And how tall is it?", answer="The lighthouse is 40 metres tall.")
    follow_up = follow_up.model_copy(
        update={"standalone_question": "And how tall is it? (lighthouse harbour)"}
    )
    [r] = LexicalAnswerRelevance().evaluate([follow_up])
    assert r.details["question_tokens"] == 3  # tall, lighthouse, harbour


def test_giant_document_is_fine() -> None:
    big = Document(content="word " * 200_000 + "Paris")
    [r] = LexicalFaithfulness().evaluate([rec(answer="Paris word", docs=[big])])
    assert r.score == 1.0


def test_a_word_set_answers_for_content_tokens_as_the_token_set_does() -> None:
    # The lexical metrics look content tokens up in word sets (stop words kept).
    view = TextView("The Eiffel Tower, it's in PARIS! And the tower is tall.")
    assert view.token_set == view.word_set - STOP_WORDS
    assert view.token_set == frozenset(view.tokens)
    probe = TextView("towers of the tower in paris, not lyon").tokens
    assert {t for t in probe if t in view.word_set} == {t for t in probe if t in view.token_set}


def test_a_batch_of_many_documents_analyses_each_text_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every evaluator reads a text after the one before it: a batch with more texts than
    the shared analyses keep is evaluated in passes, so none is analysed twice."""
    from ragpulse.config import Settings
    from ragpulse.evaluation import PASS_TEXTS, evaluate_records, load_evaluators_safely
    from ragpulse.evaluators.injection.rules import InjectionRules
    from ragpulse.evaluators.text import analyses as text
    from ragpulse.plugin_context import PluginContext

    analysed: list[str] = []
    words = text._words
    monkeypatch.setattr(text, "_words", lambda t: analysed.append(t) or words(t))
    per_record = 20
    records = [
        RagRecord(
            question=f"What about item {i}?",
            answer=f"Item {i} is described.",
            documents=[
                Document(content=f"Document {i}-{j} about item {i}.") for j in range(per_record)
            ],
        )
        for i in range(3 * PASS_TEXTS // (per_record + 2))
    ]
    context = PluginContext(Settings())
    evaluators = load_evaluators_safely(
        [LexicalContextRelevance(), LexicalFaithfulness(), LexicalAnswerRelevance(),
         InjectionRules()],
        context,
    )  # fmt: skip
    results = evaluate_records(records, evaluators)
    assert all(len(r) == len(evaluators) for r in results)
    distinct = {t for r in records for t in (r.question, r.answer, *r.contexts)}
    assert len(distinct) > 2 * PASS_TEXTS
    # Each text's words once: the word set, and the content tokens of q and a (one more).
    assert len(analysed) <= len(distinct) + 2 * len(records)
