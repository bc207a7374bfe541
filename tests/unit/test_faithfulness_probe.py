"""faithfulness/probe with the SHIPPED weights: what users get by default with the models extra."""

from __future__ import annotations

import numpy as np
import pytest

from ragpulse.evaluators.faithfulness.probe import WEIGHTS, FaithfulnessProbe
from ragpulse.evaluators.models.faithfulness_features import FEATURE_NAMES, numbers
from ragpulse.evaluators.models.probe import LinearProbe, shipped
from ragpulse.plugin_context import PluginContext
from ragpulse.record import Document, RagRecord

pytestmark = pytest.mark.skipif(
    FaithfulnessProbe.missing() is not None, reason="models extra not installed"
)

DOCS = [
    Document(
        content="The Eiffel Tower is a wrought-iron tower in Paris. It was designed by the "
        "engineering company of Gustave Eiffel and completed in 1889 for the World's Fair. "
        "The tower is 330 metres tall."
    ),
    Document(content="Bananas are rich in potassium and are grown in tropical regions."),
]


def rec(answer: str, docs: list[Document] | None = None) -> RagRecord:
    return RagRecord(
        question="Tell me about the Eiffel Tower.",
        answer=answer,
        documents=DOCS if docs is None else docs,
    )


@pytest.fixture(scope="module")
def probe() -> FaithfulnessProbe:
    evaluator = FaithfulnessProbe()
    evaluator.load(PluginContext())
    return evaluator


def score(probe: FaithfulnessProbe, answer: str) -> float:
    result = probe.evaluate([rec(answer)])[0]
    assert result.score is not None, result
    return result.score


def test_shipped_weights_match_the_features() -> None:
    weights = LinearProbe.load(shipped(WEIGHTS))
    assert weights.feature_names == FEATURE_NAMES
    assert np.all(np.isfinite(weights.weights)) and np.all(weights.scale > 0)


def test_grounded_beats_ungrounded_over_the_same_documents(probe: FaithfulnessProbe) -> None:
    grounded = score(probe, "The Eiffel Tower in Paris was completed in 1889 for the World's Fair.")
    ungrounded = score(
        probe, "The Eiffel Tower was moved to Lyon in 1950 and painted gold by Napoleon."
    )
    assert grounded > ungrounded + 0.2
    assert grounded >= probe.threshold > ungrounded


def test_novel_numbers_and_entities_lower_the_score(probe: FaithfulnessProbe) -> None:
    base = score(probe, "The tower was completed in 1889 and is 330 metres tall.")
    assert score(probe, "The tower was completed in 1925 and is 330 metres tall.") < base
    assert score(probe, "The tower was completed in 1889 and is 480 metres tall.") < base
    named = probe.evaluate([rec("It was designed by the company of Gustave Eiffel.")])[0]
    swapped = probe.evaluate([rec("It was designed by the company of Thomas Edison.")])[0]
    assert swapped.score is not None and named.score is not None
    assert swapped.score < named.score
    assert set(swapped.details["novel_entities"]) == {"thomas", "edison"}


def test_result_shape_and_ranges(probe: FaithfulnessProbe) -> None:
    answers = [
        "The tower is 330 metres tall.",
        "Bananas are blue.",
        "Yes.",
        "It is in Paris. " * 40,
    ]
    for result in probe.evaluate([rec(a) for a in answers]):
        assert (result.metric, result.method) == ("faithfulness", "probe")
        assert result.score is not None and 0.0 <= result.score <= 1.0
        assert result.label in {"faithful", "unfaithful"}
        assert set(result.details["features"]) == set(FEATURE_NAMES)
        assert result.explanation and "weakest_match" in result.details


def test_batch_equals_single(probe: FaithfulnessProbe) -> None:
    records = [
        rec("The tower was completed in 1889."),
        rec("Bananas grow in tropical regions and are rich in potassium."),
        rec("The tower is 500 metres tall and was built in Berlin."),
    ]
    batch = [r.score for r in probe.evaluate(records)]
    single = [probe.evaluate([r])[0].score for r in records]
    assert batch == pytest.approx(single, abs=1e-5)


def test_not_applicable_without_documents_or_answer(probe: FaithfulnessProbe) -> None:
    no_docs, empty, blank_docs = probe.evaluate(
        [rec("The tower is tall.", docs=[]), rec("  "), rec("Tall.", docs=[Document(content=" ")])]
    )
    assert no_docs.label == empty.label == blank_docs.label == "not_applicable"
    assert no_docs.score is None and empty.score is None


def test_long_documents_are_chunked_not_cut(probe: FaithfulnessProbe) -> None:
    filler = "Paris has many cafes and museums along the river. " * 200
    late = Document(content=filler + "The tower was repainted brown in 2019.")
    result = probe.evaluate([rec("The tower was repainted brown in 2019.", docs=[late])])[0]
    assert result.details["novel_numbers"] == []
    assert result.details["weakest_similarity"] > 0.9


def test_numbers_are_canonical() -> None:
    assert numbers("It cost 1,000 dollars over two years, in 2019.") == {"1000", "2", "2019"}
