"""Typed options: the base of every settings section and of every plug-in's ``Options``."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ragpulse.errors import ConfigError

O = TypeVar("O", bound=BaseModel)  # noqa: E741


class PluginOptions(BaseModel):
    """Base of every plug-in's ``Options``: immutable, unknown keys refused."""

    # Built with the class, not deferred (``defer_build``): an ``Options`` pydantic cannot
    # build then fails the plug-in's import, which discovery reports and skips, instead of
    # failing a run at its first validation; deferring measured no faster at start-up.
    model_config = ConfigDict(frozen=True, extra="forbid")


def validate_options(kind: str, name: str, model: type[O], raw: Mapping[str, Any]) -> O:
    """``raw`` as ``model``, or a ConfigError that names the plug-in, the key and the fix."""
    try:
        return model.model_validate(dict(raw))
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
