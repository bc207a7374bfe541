"""Find evaluators and sinks through entry points, type-checked when loaded.

Third-party packages add their own under the ``ragpulse.evaluators`` and
``ragpulse.sinks`` entry-point groups; ragpulse's own are registered the same way
in pyproject.toml (one line each).
"""

from __future__ import annotations

from importlib.metadata import entry_points

from ragpulse.errors import ConfigError
from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.exporters.base import Sink

EVALUATOR_GROUP = "ragpulse.evaluators"
SINK_GROUP = "ragpulse.sinks"


def evaluator_classes() -> dict[str, type[Evaluator]]:
    """All registered evaluators by ``metric/method`` name."""
    found: dict[str, type[Evaluator]] = {}
    for ep in entry_points(group=EVALUATOR_GROUP):
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, Evaluator)):
            raise ConfigError(f"entry point {ep.name!r} -> {ep.value} is not an Evaluator subclass")
        if cls.name() != ep.name:
            raise ConfigError(f"entry point {ep.name!r} loads {cls.name()!r}: names must agree")
        found[ep.name] = cls
    return found


def sink_classes() -> dict[str, type[Sink]]:
    found: dict[str, type[Sink]] = {}
    for ep in entry_points(group=SINK_GROUP):
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, Sink)):
            raise ConfigError(f"entry point {ep.name!r} -> {ep.value} is not a Sink subclass")
        found[ep.name] = cls
    return found


def resolve_evaluator_names(
    selection: list[str] | None, tiers: set[Tier] | None = None
) -> list[str]:
    """Expand a user selection into registered ``metric/method`` names.

    Accepts full names (``faithfulness/lexical``) and bare metric names
    (``faithfulness`` = every registered method of it within ``tiers``).
    ``None`` selects everything in ``tiers`` (default: the cheap tier).
    """
    registry = evaluator_classes()
    tiers = tiers or {Tier.CHEAP}
    in_tiers = [name for name, cls in sorted(registry.items()) if cls.tier in tiers]
    if not selection:
        return in_tiers
    chosen: list[str] = []
    for item in selection:
        item = item.strip()
        if item in registry:
            matches = [item]
        else:
            matches = [n for n in in_tiers if n.split("/")[0] == item]
        if not matches:
            raise ConfigError(
                f"unknown evaluator {item!r}; registered: {', '.join(sorted(registry))}"
            )
        chosen.extend(m for m in matches if m not in chosen)
    return chosen


def load_evaluators(selection: list[str] | None = None) -> list[Evaluator]:
    registry = evaluator_classes()
    return [registry[name]() for name in resolve_evaluator_names(selection)]
