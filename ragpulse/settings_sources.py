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

from ragpulse.settings_env import PREFIX, alias_values

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
        return (init_settings, env_settings, _AliasSource(settings_cls), _FileSource(settings_cls))

    namespace = {
        "__module__": __name__,
        "model_config": SettingsConfigDict(
            env_prefix=PREFIX, env_nested_delimiter="__", frozen=True, extra="forbid"
        ),
        "settings_customise_sources": classmethod(sources),
    }
    return cast(type[BaseSettings], type(model.__name__, (BaseSettings, model), namespace))


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
