"""Contract tests over every registered evaluator and sink (entry points)."""

from __future__ import annotations

import pytest

from ragpulse.config import load_settings
from ragpulse.errors import ConfigError
from ragpulse.evaluation import load_evaluators_safely
from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.exporters.base import Sink
from ragpulse.plugins import evaluator_classes, resolve_evaluator_names, sink_classes
from ragpulse.record import Document, EvalResult, RagRecord
from ragpulse.telemetry import CollectorMetrics

EVALUATORS = evaluator_classes()
RECORDS = [
    RagRecord(
        question="When was the tower completed?",
        documents=[Document(content="The tower was completed in 1889.")],
        answer="It was completed in 1889.",
    ),
    RagRecord(),  # everything empty
    RagRecord(question="\u200b" * 50, documents=[Document(content="")], answer="\x00\ud7ff"),
]

CHEAP = {
    "faithfulness/lexical",
    "context_relevance/lexical",
    "answer_relevance/lexical",
    "injection/rules",
    "refusal/rules",
}


def test_every_cheap_metric_is_registered() -> None:
    assert set(EVALUATORS) >= CHEAP


@pytest.mark.parametrize("name", sorted(EVALUATORS))
def test_evaluator_contract(name: str) -> None:
    cls = EVALUATORS[name]
    assert issubclass(cls, Evaluator) and isinstance(cls.tier, Tier)
    ev = cls()
    if not load_evaluators_safely([ev]):
        pytest.skip(f"{name}: its model or extra is not available here (logged)")
    results = ev.evaluate(RECORDS)
    assert len(results) == len(RECORDS)
    for r in results:
        assert isinstance(r, EvalResult)
        assert (r.metric, r.method) == (cls.metric, cls.method)
        assert r.score is None or 0.0 <= r.score <= 1.0
        assert r.error is None, r.error
    assert ev.evaluate([]) == []


@pytest.mark.parametrize("name", sorted(sink_classes()))
def test_sink_contract(name: str) -> None:
    cls = sink_classes()[name]
    assert issubclass(cls, Sink)
    # Default settings enable only what needs no configuration.
    sink = cls.from_settings(load_settings(), CollectorMetrics())
    assert sink is None or isinstance(sink, Sink)


def test_selection_by_metric_or_full_name() -> None:
    bare = resolve_evaluator_names(["faithfulness"])  # its default methods
    assert bare[0] == "faithfulness/lexical" and set(bare) <= {
        "faithfulness/lexical",
        "faithfulness/probe",
    }
    assert resolve_evaluator_names(["faithfulness/embedding"]) == ["faithfulness/embedding"]
    defaults = set(resolve_evaluator_names(None))
    assert defaults >= CHEAP  # the cheap tier always; our own probes with the models extra
    assert defaults - CHEAP <= {"faithfulness/probe", "injection/probe"}
    with pytest.raises(ConfigError, match="unknown evaluator 'nope'"):
        resolve_evaluator_names(["nope"])
