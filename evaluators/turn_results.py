"""Reading a conversation's turns for the conversation metrics: each turn's result of a
metric, from the most informed method that scored it."""

from __future__ import annotations

from ragpulse.record import EvalResult, TurnSummary

METHOD_ORDER = ("llm_judge", "nli", "spans", "probe", "embedding", "lexical", "rules")
"""Which method's result stands for a metric when several scored the turn: a judge's
verdict before a model's, a model's before a rule's."""


def result_of(turn: TurnSummary, metric: str) -> EvalResult | None:
    """The turn's scored result of ``metric`` by the most informed method, else None."""
    scored = [r for r in turn.results if r.metric == metric and r.score is not None]
    if not scored:
        return None
    rank = {m: i for i, m in enumerate(METHOD_ORDER)}
    return min(scored, key=lambda r: rank.get(r.method, len(rank)))


def labelled(turn: TurnSummary, metric: str, label: str) -> bool:
    """Whether any method labelled the turn's ``metric`` with ``label``."""
    return any(r.metric == metric and r.label == label for r in turn.results)
