"""Scores that say what they can see: one table of what each local method separates on the
dev sets, in the docs (explanation/tiers.md) and in ``make demo``, with label lines that are
the evaluators' own."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from ragpulse.cli.demo_view import signal_table
from ragpulse.evaluators.signal_guide import SIGNALS, markdown, rows
from ragpulse.plugins import evaluator_class, resolve_evaluator_names
from ragpulse.record import Document, RagRecord

TIERS_PAGE = Path(__file__).parents[2] / "docs" / "explanation" / "tiers.md"


def test_the_docs_show_the_table() -> None:
    text = TIERS_PAGE.read_text(encoding="utf-8")
    section = text[text.index("## What the scores can see") : text.index("## The cheap tier")]
    assert markdown() in section


def test_demo_prints_the_same_table() -> None:
    console = Console(width=400, record=True)
    console.print(signal_table())
    shown = console.export_text()
    for row in rows():
        for cell in row:
            assert cell.replace("`", "") in shown


def test_every_default_method_is_in_the_table_and_named_methods_exist() -> None:
    listed = {s.method for s in SIGNALS}
    cheap_defaults = {
        n for n in resolve_evaluator_names(None)
        if evaluator_class(n).tier.value == "cheap" and not n.startswith("refusal/")
    }  # fmt: skip
    assert cheap_defaults <= listed  # refusal is a behaviour, not an accuracy question
    for signal in SIGNALS:
        assert evaluator_class(signal.method).default_enabled == signal.default, signal.method


# The label lines are a RAG record's: the agent signals label by rule (how-to agents).
RAG_SIGNALS = [
    s for s in SIGNALS if "rag" in getattr(evaluator_class(s.method), "applies_to", ())
]  # a conversation metric scores no turn record: it has no applies_to


@pytest.mark.parametrize("signal", RAG_SIGNALS, ids=[s.method for s in RAG_SIGNALS])
def test_label_lines_are_the_evaluators_own(signal: object) -> None:
    from ragpulse.evaluators.signal_guide import Signal

    assert isinstance(signal, Signal)
    cls = evaluator_class(signal.method)
    if signal.method == "faithfulness/probe":
        pytest.importorskip("numpy")
        from ragpulse.evaluators.faithfulness.probe import WEIGHTS
        from ragpulse.evaluators.models.probe import LinearProbe, shipped

        assert LinearProbe.load(shipped(WEIGHTS)).threshold == signal.label_line
        return
    evaluator = cls()
    record = RagRecord(
        question="What does the Pro plan cost?",
        documents=[Document(content="The Pro plan costs 6 dollars per month.")],
        answer="The Pro plan costs 6 dollars per month.",
    )
    [result] = evaluator.evaluate([record])
    if signal.label_line is None:
        assert result.label is None  # a score only: the alerts' 0.5 line applies
    else:
        line = getattr(evaluator.options, "threshold", 0.5)
        assert line == signal.label_line
        assert line == 0.5  # the alerts' line: documented otherwise
