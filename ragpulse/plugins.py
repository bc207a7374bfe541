"""Find evaluators, sinks and trace sources through entry points; import only what a run uses.

Third-party packages add their own under the ``ragpulse.evaluators``, ``ragpulse.sinks``
and ``ragpulse.sources`` entry-point groups; ragpulse's own are registered the same way
in pyproject.toml (one line each). Entry points are listed without importing
them: a run that names ``faithfulness/lexical`` imports that module only, so a
short ``ragpulse eval`` does not pay for the judge client or the model stack.
A plug-in that fails to import is skipped with a warning unless it is asked
for by name, then it is a ConfigError.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache, partial
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import cast

from ragpulse import function_evaluator, plugin_index
from ragpulse.config import EvaluationSettings, Settings
from ragpulse.disk_cache import cached, digest
from ragpulse.errors import ConfigError, OptionsError
from ragpulse.evaluators.base import AnyEvaluator, ConversationEvaluator, Evaluator
from ragpulse.exporters.base import Sink
from ragpulse.function_loader import is_spec
from ragpulse.plugin_context import PluginContext
from ragpulse.plugin_index import EVALUATOR_GROUP, SINK_GROUP, SOURCE_GROUP
from ragpulse.source import Source, SourceContext
from ragpulse.suggestions import did_you_mean

log = logging.getLogger(__name__)


@cache
def _entry_points(group: str) -> dict[str, EntryPoint]:
    return plugin_index.group(group)


class _Broken(Exception):
    pass


CONTRACTS: dict[str, tuple[type, ...]] = {
    EVALUATOR_GROUP: (Evaluator, ConversationEvaluator),
    SINK_GROUP: (Sink,),
    SOURCE_GROUP: (Source,),
}
"""Entry-point group -> the contracts its plug-ins implement (checked when one loads)."""


@cache
def _load(group: str, name: str) -> type:
    """Import one entry point and check its type; _Broken says why it cannot be used."""
    ep, contracts = _entry_points(group)[name], CONTRACTS[group]
    try:
        cls = ep.load()
    except Exception as exc:
        raise _Broken(f"{ep.value} failed to import: {type(exc).__name__}: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, contracts)):
        wanted = " or ".join(contract.__name__ for contract in contracts)
        raise ConfigError(f"entry point {name!r} -> {ep.value} is not a {wanted}")
    if issubclass(cls, Evaluator | ConversationEvaluator) and cls.name != name:
        raise ConfigError(f"entry point {name!r} loads {cls.name!r}: names must agree")
    if issubclass(cls, Sink | Source) and cls.name != name:
        kind = "sink" if issubclass(cls, Sink) else "source"
        raise ConfigError(
            f"entry point {name!r} loads a {kind} named {cls.name!r}: names must agree"
        )
    return cls


def _classes(group: str, names: Iterable[str]) -> dict[str, type]:
    """The importable ones among ``names`` (broken ones logged and left out)."""
    found: dict[str, type] = {}
    for name in names:
        try:
            found[name] = _load(group, name)
        except _Broken as exc:
            log.warning("skipping %s plug-in %s: %s", group, name, exc)
    return found


def _one(group: str, name: str, kind: str) -> type:
    """One plug-in by name: unknown or broken is a ConfigError that lists the registered ones."""
    if name not in _entry_points(group):
        known = sorted(_entry_points(group))
        hint = did_you_mean(
            name, known if "/" in name or group != EVALUATOR_GROUP else metric_names()
        )
        if group == EVALUATOR_GROUP:  # 50-odd names: the closest, and where to see them all
            listed = f"`ragpulse metrics` lists the {len(known)} registered ones"
        else:
            listed = f"registered: {', '.join(known) or 'none'}"
        raise ConfigError(f"unknown {kind} {name!r}{hint}; {listed}")
    try:
        return _load(group, name)
    except _Broken as exc:
        raise ConfigError(f"{kind} {name!r} is registered but {exc}") from None


def evaluator_names() -> list[str]:
    """Every registered ``metric/method`` name (nothing imported)."""
    return sorted(_entry_points(EVALUATOR_GROUP))


def evaluator_class(name: str) -> type[AnyEvaluator]:
    """A registered ``metric/method``, or a ``module:function`` under ``@ragpulse.evaluator``."""
    if is_spec(name):
        return function_evaluator.load(name)
    return cast(type[AnyEvaluator], _one(EVALUATOR_GROUP, name, "evaluator"))


def evaluator_classes() -> dict[str, type[AnyEvaluator]]:
    """All importable evaluators by ``metric/method`` name (imports every one)."""
    return cast(dict[str, type[AnyEvaluator]], _classes(EVALUATOR_GROUP, evaluator_names()))


def sink_class(name: str) -> type[Sink]:
    return cast(type[Sink], _one(SINK_GROUP, name, "sink"))


def sink_classes() -> dict[str, type[Sink]]:
    return cast(dict[str, type[Sink]], _classes(SINK_GROUP, sorted(_entry_points(SINK_GROUP))))


def source_names() -> list[str]:
    """Every registered source (nothing imported): what ``--source`` and the ``source``
    setting take."""
    return sorted(_entry_points(SOURCE_GROUP))


def source_class(name: str) -> type[Source]:
    return cast(type[Source], _one(SOURCE_GROUP, name, "source"))


def source_classes() -> dict[str, type[Source]]:
    return cast(dict[str, type[Source]], _classes(SOURCE_GROUP, source_names()))


def _own(name: str) -> bool:
    return plugin_index.own(name, _entry_points(EVALUATOR_GROUP)[name].value)


@dataclass(frozen=True)
class OwnDefault:
    """What choosing the defaults needs of one of ragpulse's own evaluators, read from its
    class: whether it is ``default_enabled``, and whether it is a judge whose availability
    and configuration :class:`JudgeBase` decides (for all of them at once)."""

    enabled: bool
    judge: bool


def _read_own_defaults() -> dict[str, OwnDefault]:
    from ragpulse.evaluators.judge.base import JudgeBase

    def judge(cls: type[AnyEvaluator]) -> bool:
        return (
            issubclass(cls, JudgeBase)
            and cls.missing.__func__ is JudgeBase.missing.__func__  # type: ignore[attr-defined]
            and cls.unconfigured.__func__ is JudgeBase.unconfigured.__func__  # type: ignore[attr-defined]
        )

    found = {}
    for name, cls in _classes(EVALUATOR_GROUP, [n for n in evaluator_names() if _own(n)]).items():
        evaluator = cast(type[AnyEvaluator], cls)
        found[name] = OwnDefault(evaluator.default_enabled, judge(evaluator))
    return found


@cache
def own_defaults() -> dict[str, OwnDefault]:
    """:class:`OwnDefault` of each of ragpulse's own evaluators, by name.

    Read from the classes, which imports all of them (~0.1 s); the answer is kept on disk
    (:mod:`ragpulse.disk_cache`) while the entry points and every source file of
    ``ragpulse.evaluators`` are unchanged, so that a run which uses three evaluators
    imports those three and the judges' base only."""
    import ragpulse.evaluators

    folder = Path(ragpulse.evaluators.__file__).parent
    stamps = sorted(
        f"{path.relative_to(folder)}@{path.stat().st_mtime_ns}" for path in folder.rglob("*.py")
    )
    own = sorted(f"{n}={v}" for n, v in plugin_index.own_evaluators().items())
    return cached("own-defaults", digest([*own, *stamps]), _read_own_defaults, dict)


Off = dict[str, list[str]]
"""Why default evaluators are off -> which: said in one log line per reason."""


def _defaults(names: Iterable[str], settings: EvaluationSettings, off: Off) -> list[str]:
    """The default evaluators among ``names``; those that are off go into ``off``."""
    chosen = []
    own = own_defaults()
    candidates = [n for n in names if not _own(n) or (n in own and own[n].enabled)]
    judges = [n for n in candidates if _own(n) and n in own and own[n].judge]
    if judges:  # decided for all of them by their base class, none of them imported
        from ragpulse.evaluators.judge.base import JudgeBase

        if JudgeBase.missing() is not None:  # no openai client: left out, as below
            candidates = [n for n in candidates if n not in judges]
        elif why := JudgeBase.unconfigured(settings):
            off.setdefault(why, []).extend(judges)
            candidates = [n for n in candidates if n not in judges]
    classes = cast(dict[str, type[AnyEvaluator]], _classes(EVALUATOR_GROUP, candidates))
    for name, cls in classes.items():
        if not cls.default_enabled or cls.missing() is not None:
            continue
        why = cls.unconfigured(settings)
        if why:
            off.setdefault(why, []).append(name)
            continue
        chosen.append(name)
    return sorted(chosen)


_said: set[str] = set()
"""The "is off" lines logged so far: each once per process (the settings check and the
run resolve the same selection)."""


def _say_off(off: Off) -> None:
    for why, which in off.items():
        names = sorted(set(which))
        line = f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} off: {why}"
        if line not in _said:
            _said.add(line)
            log.info("%s", line)


def metric_names() -> list[str]:
    """Every registered metric (the part of ``metric/method`` before the slash)."""
    return sorted({n.split("/")[0] for n in evaluator_names()})


def _runnable(names: Iterable[str], settings: EvaluationSettings) -> tuple[list[str], list[str]]:
    """(the names that can run here and are configured, why each other one cannot)."""
    ready, why = [], []
    for name, cls in cast(dict[str, type[AnyEvaluator]], _classes(EVALUATOR_GROUP, names)).items():
        reason = cls.missing() or cls.unconfigured(settings)
        if reason:
            why.append(f"{name}: {reason}")
        else:
            ready.append(name)
    return sorted(ready), why


def resolve_evaluator_names(
    selection: list[str] | None,
    settings: EvaluationSettings | None = None,
    *,
    say_off: bool = True,
) -> list[str]:
    """Expand a user selection into registered ``metric/method`` names.

    Accepts full names (``faithfulness/lexical``: only that one is imported),
    plain-function evaluators (``module:function``, see :mod:`ragpulse.function_evaluator`)
    and bare metric names (``faithfulness`` = its default methods; ``mrr``, none of
    whose methods is on by default, = every method of it that can run here). ``None`` or
    empty selects the defaults: every evaluator that is ``default_enabled``,
    can run here and is configured (the cheap tier always; model methods
    whose dev figures earn them a default once the ``models`` extra is
    installed; the judges once a judge is configured). A full name is kept
    even if it cannot run here: loading then disables it with a clear message.
    Default methods that are off (a judge not configured) are logged, one line per
    reason and each line once per process, unless ``say_off`` is false (a settings check).
    """
    settings = settings or EvaluationSettings()
    off: Off = {}
    chosen = _resolve(selection, settings, off)
    if say_off:
        _say_off(off)
    return chosen


def _resolve(selection: list[str] | None, settings: EvaluationSettings, off: Off) -> list[str]:
    registered = evaluator_names()
    if not selection:
        return _defaults(registered, settings, off)
    chosen: list[str] = []
    for item in (s.strip() for s in selection):
        if item in registered or is_spec(item):
            evaluator_class(item)  # unknown or broken: a ConfigError now, not at load
            matches = [item]
        else:
            same_metric = [n for n in registered if n.split("/")[0] == item]
            matches = _defaults(same_metric, settings, off)
            if not matches and same_metric:
                matches, why = _runnable(same_metric, settings)
                if not matches:
                    raise ConfigError(f"no method of {item!r} can run here: {'; '.join(why)}")
            if not matches:
                hint = did_you_mean(item, registered if "/" in item else metric_names())
                raise ConfigError(
                    f"unknown evaluator {item!r}{hint or ''}; `ragpulse metrics` lists the "
                    f"{len(registered)} registered ones"
                )
        chosen.extend(m for m in matches if m not in chosen)
    return chosen


def load_evaluators(
    selection: list[str] | None = None,
    settings: EvaluationSettings | None = None,
    *,
    say_off: bool = True,
) -> list[AnyEvaluator]:
    """Instantiate the selection with ``settings.options[name]`` (validated ``Options``);
    ``say_off``: as :func:`resolve_evaluator_names` (false where the caller says it)."""
    settings = settings or EvaluationSettings()
    for name in settings.options:
        evaluator_class(name)
    return [
        evaluator_class(name)(settings.options.get(name, {}))
        for name in resolve_evaluator_names(selection, settings, say_off=say_off)
    ]


def build_sinks(context: PluginContext) -> list[Sink]:
    """Every sink that is named under ``sinks`` or on by default, unless ``enabled: false``."""
    settings = context.settings
    sinks = []
    for name, cls in sink_classes().items():
        named = settings.sinks.get(name)
        if named is not None and named.get("enabled", True) is False:
            continue
        if named is None and not cls.default_enabled:
            continue
        sink = cls.create(cls.options_from(settings), context)
        if sink is not None:
            sinks.append(sink)
    for name in settings.sinks:
        sink_class(name)  # named but not registered: an error, not a silent no-op
    return sinks


def build_source(context: SourceContext) -> Source:
    """The source ``context.settings.source`` names, built with its validated options."""
    cls = source_class(context.settings.source)
    return cls.create(cls.options_from(context.settings), context)


def plugin_problems(settings: Settings) -> list[tuple[tuple[str, ...], str, str]]:
    """(setting path, what is wrong, hint) for every plug-in option, sink and evaluator
    name in ``settings`` that cannot work; imports only the plug-ins named there."""
    problems: list[tuple[tuple[str, ...], str, str]] = []

    def check(path: tuple[str, ...], run: Callable[[], object]) -> None:
        try:
            run()
        except OptionsError as exc:  # each at its own key, where it was written
            problems.extend(((*path, *key), what, hint) for key, what, hint in exc.problems)
        except ConfigError as exc:
            # The path names the plug-in already: "evaluator faithfulness/lexical: " goes.
            what = re.sub(r"^(evaluator|sink|source) \S+: ", "", str(exc))
            problems.append((path, what, ""))

    for name, raw in settings.evaluation.options.items():
        check(
            ("evaluation", "options", name),
            partial(lambda n, r: evaluator_class(n).validate_options(r), name, raw),
        )
    for name, raw in settings.sinks.items():
        if not isinstance(raw.get("enabled", True), bool):
            problems.append((("sinks", name, "enabled"), "must be true or false", ""))
            continue
        check(("sinks", name), partial(lambda n: sink_class(n).options_from(settings), name))
    for name in settings.sources:
        check(("sources", name), partial(lambda n: source_class(n).options_from(settings), name))
    if settings.source not in settings.sources:  # a built-in source's own keys, or none
        check(
            ("sources", settings.source),
            lambda: source_class(settings.source).options_from(settings),
        )
    for item in settings.evaluation.evaluators or ():
        check(
            ("evaluation", "evaluators"),
            partial(resolve_evaluator_names, [item], settings.evaluation, say_off=False),
        )
    return problems
