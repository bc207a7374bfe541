"""Typed options: the base of every settings section and of every plug-in's ``Options``."""

from __future__ import annotations

import difflib
import json
import types
from collections.abc import Mapping
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError

from ragpulse.errors import ConfigError

O = TypeVar("O", bound=BaseModel)  # noqa: E741


class PluginOptions(BaseModel):
    """Base of every plug-in's ``Options``: immutable, unknown keys refused."""

    # Built with the class, not deferred (``defer_build``): an ``Options`` pydantic cannot
    # build then fails the plug-in's import, which discovery reports and skips, instead of
    # failing a run at its first validation; deferring measured no faster at start-up.
    model_config = ConfigDict(frozen=True, extra="forbid")


def _complex(annotation: Any) -> bool:
    """A list, mapping or section that takes no plain string (``X | None`` included)."""
    if annotation is str:
        return False
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return bool(args) and all(_complex(a) for a in args)
    return origin in (list, dict, set, tuple, frozenset)


def from_environment(model: type[BaseModel], raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` with the text given for a list, mapping or section read as JSON, as
    pydantic-settings reads such a setting from a variable: options come from
    ``RAGPULSE_SINKS__<NAME>__<OPTION>`` as text (text that is not JSON stays as it is,
    and validation says what it should be)."""
    out = dict(raw)
    for key, value in raw.items():
        field = model.model_fields.get(key)
        if field is None:
            continue
        if isinstance(value, str) and _complex(field.annotation):
            try:
                out[key] = json.loads(value)
            except ValueError:
                pass
        elif isinstance(value, Mapping):
            sub = _submodel(field.annotation)
            if sub is not None:
                out[key] = from_environment(sub, value)
    return out


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The section inside ``X`` or ``X | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) not in (Union, types.UnionType):
        return None
    models = [a for a in get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
    return models[0] if len(models) == 1 else None


def validate_options(kind: str, name: str, model: type[O], raw: Mapping[str, Any]) -> O:
    """``raw`` as ``model``, or a ConfigError that names the plug-in, the key and the fix."""
    try:
        return model.model_validate(from_environment(model, raw))
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            key = ".".join(str(part) for part in error["loc"]) or "(options)"
            if error["type"] == "extra_forbidden":
                close = difflib.get_close_matches(key, list(model.model_fields), n=1, cutoff=0.6)
                known = ", ".join(model.model_fields) or "none"
                hint = f"did you mean {close[0]!r}?" if close else f"known options: {known}"
                problems.append(f"unknown option {key!r} ({hint})")
            else:
                field = model.model_fields.get(str(error["loc"][0])) if error["loc"] else None
                hint = f" ({field.description})" if field is not None and field.description else ""
                message = error["msg"][:1].lower() + error["msg"][1:]
                problems.append(f"option {key!r}: {message}, got {error.get('input')!r}{hint}")
        raise ConfigError(f"{kind} {name}: " + "; ".join(problems)) from None
