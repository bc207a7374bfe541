"""Reading a conversation's turns for the conversation metrics: each turn's result of a
metric, from the most informed method that scored it."""

from __future__ import annotations

from ragpulse.record import EvalResult, TurnSummary

METHOD_ORDER = (
    "llm_judge",
    # models: those trained for the metric's very question, then the general ones
    "nli", "spans", "cross_encoder", "classifier", "probe", "embedding",
    "perplexity",
    # rules and arithmetic
    "agent", "token_f1", "token_recall", "ids", "content", "lexical", "rules",
)  # fmt: skip
"""Which method's result stands for a metric when several scored the turn: a judge's
verdict before a model's, a model's before a rule's. Every method of a metric that has
more than one is ranked here (a test holds the registered evaluators to it); a method of
a plug-in not listed ranks after all of them."""
_RANK = {method: i for i, method in enumerate(METHOD_ORDER)}


def result_of(turn: TurnSummary, metric: str) -> EvalResult | None:
    """The turn's scored result of ``metric`` by the most informed method, else None."""
    scored = [r for r in turn.results if r.metric == metric and r.score is not None]
    if not scored:
        return None
    return min(scored, key=lambda r: _RANK.get(r.method, len(_RANK)))


def labelled(turn: TurnSummary, metric: str, label: str) -> bool:
    """Whether any method labelled the turn's ``metric`` with ``label``."""
    return any(r.metric == metric and r.label == label for r in turn.results)
