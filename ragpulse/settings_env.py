"""The collector's environment variables: names, short aliases, and a check for typos.

Every setting is ``RAGPULSE_<FIELD>``, nested with ``__``
(``RAGPULSE_EVALUATION__JUDGE__BASE_URL``), as pydantic-settings reads them. A flag
of ``ragpulse serve`` / ``eval`` / ``rekey`` whose setting is nested also has a
short name made from the flag (``--judge-base-url`` -> ``RAGPULSE_JUDGE_BASE_URL``),
because that is the name people try first; both names work. pydantic-settings
silently ignores a variable that matches no field, so a misspelt name would leave
the default in force without a word: :func:`check_environment` refuses any
``RAGPULSE_*`` variable that is neither a setting, an alias, nor one of the
variables read elsewhere (the app side's ``ragpulse.configure``, the cache folder,
the benchmarks), with a "did you mean".
"""

from __future__ import annotations

import difflib
import json
import os
import types
from collections.abc import Mapping
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from ragpulse.errors import ConfigError

PREFIX = "RAGPULSE_"

ALIASES: dict[str, str] = {
    "RAGPULSE_EVALUATORS": "evaluation.evaluators",
    "RAGPULSE_JUDGE_BASE_URL": "evaluation.judge.base_url",
    "RAGPULSE_JUDGE_MODEL": "evaluation.judge.model",
    "RAGPULSE_JUDGE_API_KEY": "evaluation.judge.api_key",
    "RAGPULSE_JUDGE_RATE": "evaluation.judge.rate",
    "RAGPULSE_JUDGE_CALLS_PER_MINUTE": "evaluation.judge.calls_per_minute",
    "RAGPULSE_JUDGE_TOKENS_PER_MINUTE": "evaluation.judge.tokens_per_minute",
    "RAGPULSE_KAFKA_BOOTSTRAP": "kafka.bootstrap",
    "RAGPULSE_KAFKA_TOPIC": "kafka.topic",
    "RAGPULSE_KAFKA_GROUP": "kafka.group",
    "RAGPULSE_KAFKA_ENCODING": "kafka.encoding",
    "RAGPULSE_KAFKA_DEAD_LETTER_TOPIC": "kafka.dead_letter_topic",
    "RAGPULSE_KAFKA_INPUT_TOPIC": "kafka.rekey_input_topic",
    "RAGPULSE_SOURCE_URL": "stored_traces.url",
    "RAGPULSE_RESULTS_JSONL": "sinks.jsonl.path",
    "RAGPULSE_OTLP_EXPORT_ENDPOINT": "sinks.otel.endpoint",
}
"""Short name (the flag's) -> dotted setting path; the nested name works as well. A sink's
option that a flag sets (``--results-jsonl``) has the flag's name too."""

OTHER = frozenset({"RAGPULSE_CONFIG", "RAGPULSE_DEV_DATA", "RAGPULSE_XINJECTAGENT"})
"""Read outside the settings model: the config file's path, the dev sets of bench/ and
training/, the fetched InjecAgent cases that bench/agent_injection.py reads. The app
side's (``RAGPULSE_ENDPOINT``, ...) and the cache folder are added from the modules that
read them; a new variable read elsewhere belongs here."""


def env_name(path: str) -> str:
    """The variable a user sets for a dotted setting path: the short alias if there is one."""
    for alias, target in ALIASES.items():
        if target == path:
            return alias
    return nested_name(path)


def nested_name(path: str) -> str:
    return PREFIX + path.upper().replace(".", "__")


def submodel(annotation: Any) -> type[BaseModel] | None:
    """The settings section inside ``X`` or ``X | None``, else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType):
        models = [a for a in get_args(annotation) if a is not type(None)]
        if len(models) == 1:
            return submodel(models[0])
    return None


def _open(annotation: Any) -> bool:
    """Mappings (and Any) take keys of the user's choosing below their own name."""
    return annotation is Any or get_origin(annotation) in (dict, Mapping)


def setting_names(model: type[BaseModel], prefix: str = PREFIX) -> tuple[set[str], set[str]]:
    """Every variable name the model reads, and the prefixes below which any name goes."""
    names: set[str] = set()
    open_prefixes: set[str] = set()
    for field_name, info in model.model_fields.items():
        name = prefix + field_name.upper()
        names.add(name)
        sub = submodel(info.annotation)
        if sub is not None:
            more, more_open = setting_names(sub, name + "__")
            names |= more
            open_prefixes |= more_open
        elif _open(info.annotation):
            open_prefixes.add(name + "__")
    return names, open_prefixes


def _other_names() -> set[str]:
    from ragpulse import app_env
    from ragpulse.disk_cache import CACHE_ENV

    app = {
        value
        for key, value in vars(app_env).items()
        if key.startswith("ENV_") and isinstance(value, str) and value.startswith(PREFIX)
    }
    return {*OTHER, CACHE_ENV, *app}


def reads_settings(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` has a ``RAGPULSE_*`` variable the settings read (or should
    refuse): any but those read elsewhere."""
    names = [key.upper() for key in environ if key.upper().startswith(PREFIX)]
    return bool(names) and not set(names) <= _other_names()


def environment_problems(
    model: type[BaseModel], environ: Mapping[str, str] | None = None
) -> list[tuple[str, str, str]]:
    """(variable, what is wrong, hint) for every unknown ``RAGPULSE_*`` variable and every
    alias that disagrees with its nested name."""
    environ = os.environ if environ is None else environ
    names, open_prefixes = setting_names(model)
    known = names | set(ALIASES) | _other_names()
    # Suggest single values, not whole sections (those take JSON): a misspelt OTLP port
    # should point at the port, not at the otel_export section.
    sections = {n for n in names if any(other.startswith(n + "__") for other in names)}
    candidates = sorted(known - sections)
    problems = []
    upper = {key.upper(): value for key, value in environ.items()}
    for key in sorted(upper):
        if not key.startswith(PREFIX) or key in known or key.startswith(tuple(open_prefixes)):
            continue
        close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else "no setting has a close name"
        problems.append((key, "unknown environment variable", hint))
    for alias, path in ALIASES.items():
        nested = nested_name(path)
        if alias in upper and nested in upper and upper[alias] != upper[nested]:
            problems.append((alias, f"disagrees with {nested}", "both set: keep one"))
    return problems


ENV_RULE = (
    "settings are RAGPULSE_<FIELD>, nested with __ (RAGPULSE_ASSEMBLY__GRACE_S); "
    "`ragpulse serve --help` names each flag's variable"
)


def check_environment(model: type[BaseModel], environ: Mapping[str, str] | None = None) -> None:
    """ConfigError for an unknown ``RAGPULSE_*`` variable, or an alias that disagrees
    with its nested name; one line per problem."""
    problems = environment_problems(model, environ)
    if problems:
        lines = [f"{var}: {what} ({hint})" for var, what, hint in problems]
        raise ConfigError("; ".join(lines) + f". ({ENV_RULE})")


def _field(model: type[BaseModel], path: str) -> Any:
    """The field of a dotted path; KeyError for one below a free-form mapping (a sink's
    option: its sink's ``Options`` knows it, the settings model does not)."""
    parts = path.split(".")
    info = None
    current: type[BaseModel] | None = model
    for part in parts:
        if current is None or part not in current.model_fields:
            raise KeyError(path)
        info = current.model_fields[part]
        current = submodel(info.annotation)
    return info


def setting_default(model: type[BaseModel], path: str) -> Any:
    """The default of a dotted setting path (for help texts)."""
    return _field(model, path).get_default(call_default_factory=True)


def alias_values(model: type[BaseModel], environ: Mapping[str, str]) -> dict[str, Any]:
    """The aliases set in ``environ``, as the nested mapping the settings model takes."""
    upper = {key.upper(): value for key, value in environ.items()}
    out: dict[str, Any] = {}
    for alias, path in ALIASES.items():
        if alias not in upper:
            continue
        value: Any = upper[alias]
        try:
            annotation = _field(model, path).annotation
        except KeyError:
            annotation = str  # a sink's option: its Options read the text
        if get_origin(_submodel_or_type(annotation)) is list:
            # As pydantic-settings reads a list: JSON; a comma-separated list also works.
            text = value.strip()
            try:
                value = json.loads(text) if text.startswith("[") else _csv(text)
            except ValueError as exc:
                raise ConfigError(f"{alias}: not a JSON list ({exc}); or use a,b,c") from None
        *parents, leaf = path.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def _submodel_or_type(annotation: Any) -> Any:
    """``X`` for ``X | None``."""
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]
