"""Settings read from the config file and ``RAGPULSE_*`` variables, by pydantic-settings.

:func:`ragpulse.config.load_settings` comes here only when there is a file or a
variable to read. Without either, the settings are the defaults and the flags, and
building them needs no pydantic-settings: importing it (and asyncio, which it imports)
costs a short command such as ``ragpulse eval`` ~35 ms of a ~0.5 s run.
"""

from __future__ import annotations

import functools
import os
from contextvars import ContextVar
from typing import Any, TypeVar, cast

from pydantic import BaseModel
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from ragpulse.settings_env import PREFIX, alias_values, old_variables
from ragpulse.settings_moved import move_keys

M = TypeVar("M", bound=BaseModel)
_config_data: ContextVar[dict[str, Any] | None] = ContextVar("ragpulse_config_data", default=None)
"""The config file's contents while settings are built from it (read once, by load_settings)."""


def settings_from_sources(model: type[M], file_data: dict[str, Any], flags: dict[str, Any]) -> M:
    """A ``model`` (:class:`ragpulse.config.Settings`) of the flags over ``RAGPULSE_*`` over
    the file's ``file_data`` over the defaults; raises pydantic's ValidationError."""
    token = _config_data.set(file_data)
    try:
        loaded = _reading_sources(model)(**flags)
    finally:
        _config_data.reset(token)
    # A plain model (it compares equal to one built from the same values), not revalidated.
    return model.model_construct(loaded.model_fields_set, **dict(loaded))


@functools.cache
def _reading_sources(model: type[BaseModel]) -> type[BaseSettings]:
    """``model`` as a pydantic-settings class (made here, so that the model's own module
    need not import pydantic-settings)."""

    def sources(
        cls: type[BaseSettings],
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Flags, then RAGPULSE_* (nested names, then the flags' short names), then the file.
        # The flags and the file come with their old keys moved (config.load_settings).
        env = _MovedEnvironmentSource(settings_cls, env_settings)
        return (init_settings, env, _AliasSource(settings_cls), _FileSource(settings_cls))

    namespace = {
        "__module__": __name__,
        "model_config": SettingsConfigDict(
            env_prefix=PREFIX, env_nested_delimiter="__", frozen=True, extra="forbid"
        ),
        "settings_customise_sources": classmethod(sources),
    }
    return cast(type[BaseSettings], type(model.__name__, (BaseSettings, model), namespace))


class _MovedEnvironmentSource(PydanticBaseSettingsSource):
    """``RAGPULSE_*`` by their nested names, with the variables of earlier releases' keys
    (:mod:`ragpulse.settings_moved`) at their new places: the new key wins where both
    are set. pydantic-settings reads none of those below a section that left the
    settings model (``RAGPULSE_PROMETHEUS__MAX_ROUTES``): they are read here."""

    def __init__(
        self, settings_cls: type[BaseSettings], nested: PydanticBaseSettingsSource
    ) -> None:
        super().__init__(settings_cls)
        self._nested = nested

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ returns every variable at once

    def __call__(self) -> dict[str, Any]:
        return move_keys(_merged(old_variables(os.environ), self._nested()))[0]


def _merged(low: dict[str, Any], high: dict[str, Any]) -> dict[str, Any]:
    """``high`` over ``low``, mappings merged key by key."""
    out = dict(low)
    for key, value in high.items():
        below = out.get(key)
        both = isinstance(below, dict) and isinstance(value, dict)
        out[key] = _merged(below, value) if both else value  # type: ignore[arg-type]
    return out


class _AliasSource(PydanticBaseSettingsSource):
    """The short names, below the nested ones and above the config file."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ returns every alias at once

    def __call__(self) -> dict[str, Any]:
        return alias_values(self.settings_cls, os.environ)


class _FileSource(PydanticBaseSettingsSource):
    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ returns the whole file

    def __call__(self) -> dict[str, Any]:
        return _config_data.get() or {}
