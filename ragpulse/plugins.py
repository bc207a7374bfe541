"""Find evaluators and sinks through entry points, type-checked when loaded.

Third-party packages add their own under the ``ragpulse.evaluators`` and
``ragpulse.sinks`` entry-point groups; ragpulse's own are registered the same way
in pyproject.toml (one line each). A plug-in that fails to import is skipped
with a warning unless it is asked for by name, then it is a ConfigError.
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points
from typing import TypeVar

from ragpulse.config import EvaluationSettings
from ragpulse.errors import ConfigError
from ragpulse.evaluators.base import Evaluator
from ragpulse.exporters.base import Sink

log = logging.getLogger(__name__)

EVALUATOR_GROUP = "ragpulse.evaluators"
SINK_GROUP = "ragpulse.sinks"

T = TypeVar("T")


def _load_group(group: str, base: type[T]) -> tuple[dict[str, type[T]], dict[str, str]]:
    found: dict[str, type[T]] = {}
    broken: dict[str, str] = {}
    for ep in entry_points(group=group):
        try:
            cls = ep.load()
        except Exception as exc:
            broken[ep.name] = f"{ep.value} failed to import: {type(exc).__name__}: {exc}"
            log.warning("skipping %s plug-in %s", group, broken[ep.name])
            continue
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise ConfigError(f"entry point {ep.name!r} -> {ep.value} is not a {base.__name__}")
        found[ep.name] = cls
    return found, broken


def evaluator_classes() -> dict[str, type[Evaluator]]:
    """All importable evaluators by ``metric/method`` name."""
    found, _ = _load_group(EVALUATOR_GROUP, Evaluator)
    for name, cls in found.items():
        if cls.name() != name:
            raise ConfigError(f"entry point {name!r} loads {cls.name()!r}: names must agree")
    return found


def sink_classes() -> dict[str, type[Sink]]:
    return _load_group(SINK_GROUP, Sink)[0]


def resolve_evaluator_names(
    selection: list[str] | None, settings: EvaluationSettings | None = None
) -> list[str]:
    """Expand a user selection into registered ``metric/method`` names.

    Accepts full names (``faithfulness/lexical``) and bare metric names
    (``faithfulness`` = its default methods). ``None`` or empty selects the
    defaults: every evaluator that is ``default_enabled``, can run here and is
    configured (the cheap tier always; ragpulse's own models once the
    ``models`` extra is installed; the judges once a judge is configured). A
    full name is kept even if it cannot run here: the collector then disables
    it with a clear message.
    """
    settings = settings or EvaluationSettings()
    registry, broken = _load_group(EVALUATOR_GROUP, Evaluator)
    defaults = []
    for name, cls in sorted(registry.items()):
        if not cls.default_enabled or cls.missing() is not None:
            continue
        why = cls.unconfigured(settings)
        if why:
            log.info("%s is off: %s", name, why)
            continue
        defaults.append(name)
    if not selection:
        return defaults
    chosen: list[str] = []
    for item in (s.strip() for s in selection):
        if item in broken:
            raise ConfigError(f"evaluator {item!r} is registered but {broken[item]}")
        matches = [item] if item in registry else [n for n in defaults if n.split("/")[0] == item]
        if not matches:
            known = ", ".join(sorted(registry))
            raise ConfigError(f"unknown evaluator {item!r}; registered: {known}")
        chosen.extend(m for m in matches if m not in chosen)
    return chosen


def load_evaluators(
    selection: list[str] | None = None, settings: EvaluationSettings | None = None
) -> list[Evaluator]:
    """Instantiate the selection; ``settings.options[name]`` are constructor keyword arguments."""
    settings = settings or EvaluationSettings()
    registry = evaluator_classes()
    unknown = set(settings.options) - set(registry)
    if unknown:
        raise ConfigError(f"options given for unknown evaluators: {', '.join(sorted(unknown))}")
    evaluators = []
    for name in resolve_evaluator_names(selection, settings):
        try:
            evaluators.append(registry[name].build(settings.options.get(name, {}), settings))
        except TypeError as exc:
            raise ConfigError(f"bad options for evaluator {name}: {exc}") from exc
    return evaluators
