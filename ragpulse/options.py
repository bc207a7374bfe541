"""Typed options: the base of every settings section and of every plug-in's ``Options``."""

from __future__ import annotations

import difflib
import json
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError
from pydantic.fields import FieldInfo

from ragpulse.errors import OptionsError

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
    """``raw`` as ``model``, or an :class:`~ragpulse.errors.OptionsError` that names the
    plug-in and, per problem, the key, what is wrong and the fix (the closest option for a
    misspelled one); it shows only what was written there, never the options' defaults."""
    try:
        return model.model_validate(from_environment(model, raw))
    except ValidationError as exc:
        problems = option_problems(model, exc)
        lines = [f"{'.'.join(key) or '(options)'}: {what}" + (f" ({hint})" if hint else "")
                 for key, what, hint in problems]  # fmt: skip
        raise OptionsError(f"{kind} {name}: " + "; ".join(lines), problems) from None


_SECRET_WORDS = ("key", "token", "password", "secret", "authorization")


def option_problems(
    model: type[BaseModel], exc: ValidationError
) -> list[tuple[tuple[str, ...], str, str]]:
    """(key path, what is wrong, hint) per error of ``exc``. A misspelled key names the
    closest option; a required option that a misspelled key was meant to set is not
    said again as missing."""
    found: list[tuple[tuple[str, ...], str, str]] = []
    meant: set[tuple[str, ...]] = set()
    for error in exc.errors():
        path = tuple(str(part) for part in error["loc"])
        if error["type"] != "extra_forbidden" or not path:
            continue
        known = _fields_at(model, path[:-1])
        close = difflib.get_close_matches(path[-1], known, n=1, cutoff=0.6)
        if close:
            meant.add((*path[:-1], close[0]))
            hint = f"did you mean {close[0]}?"
        else:
            hint = f"known options: {', '.join(known)}" if known else "it takes no options"
        found.append((path, "unknown option", hint))
    for error in exc.errors():
        path = tuple(str(part) for part in error["loc"])
        if error["type"] == "extra_forbidden" and path:
            continue
        if error["type"] == "missing":
            if path not in meant:
                found.append((path, "required, and not set", _description(model, path)))
            continue
        message = str(error["msg"]).removeprefix("Value error, ")
        message = message[:1].lower() + message[1:]
        secret = any(word in ".".join(path).lower() for word in _SECRET_WORDS)
        got = "" if secret or "input" not in error else f", got {_short(error['input'])}"
        found.append((path, message + got, _description(model, path)))
    return found


def _fields_at(model: type[BaseModel], path: tuple[str, ...]) -> list[str]:
    """The options of the section at ``path`` (``[]`` where that is no section)."""
    current: type[BaseModel] | None = model
    for part in path:
        field = current.model_fields.get(part) if current is not None else None
        current = _submodel(field.annotation) if field is not None else None
    return list(current.model_fields) if current is not None else []


def _description(model: type[BaseModel], path: tuple[str, ...]) -> str:
    current: type[BaseModel] | None = model
    field = None
    for part in path:
        field = current.model_fields.get(part) if current is not None else None
        if field is None:
            return ""
        current = _submodel(field.annotation)
    return field.description or "" if field is not None else ""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# -- how an option reads (``ragpulse metrics NAME`` and the settings reference) ---------

_PLAIN_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}


def type_name(
    annotation: Any, *, literal: Callable[[Any], str] = json.dumps, bar: str = " | "
) -> str:
    """An option's type as a settings file writes it (``list of string | null``): each
    ``Literal`` value shown by ``literal``, alternatives joined by ``bar`` (Markdown
    tables escape it)."""

    def name(a: Any) -> str:
        return type_name(a, literal=literal, bar=bar)

    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return bar.join(literal(a) for a in args)
    if origin in (Union, types.UnionType):
        shown = [name(a) for a in args if a is not type(None)]
        return bar.join(shown) + (f"{bar}null" if type(None) in args else "")
    if origin in (list, tuple, set, frozenset):
        return f"list of {name(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping of {name(args[1])}" if len(args) == 2 else "mapping"
    if annotation is Any:
        return "any"
    if isinstance(annotation, type):
        if issubclass(annotation, SecretStr):
            return "secret string"
        if issubclass(annotation, BaseModel):
            return annotation.__name__
        if issubclass(annotation, Path):
            return "path"
        return _PLAIN_TYPES.get(annotation.__name__, annotation.__name__)
    return str(annotation).replace("typing.", "")


def bounds(info: FieldInfo) -> str:
    """A field's ge/gt/le/lt as a short note (`` (>= 0, <= 1)``), or nothing."""
    shown = []
    for meta in info.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            bound = getattr(meta, attr, None)
            if bound is not None:
                shown.append(f"{sign} {bound}")
    return f" ({', '.join(shown)})" if shown else ""


def default_of(info: FieldInfo) -> Any:
    """A field's default (its factory's value), or ``PydanticUndefined`` when it is
    required."""
    if info.default_factory is not None:
        return info.default_factory()  # type: ignore[call-arg]
    return info.default
