"""``ragpulse config check FILE`` and ``ragpulse config show``."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from rich.console import Console
from rich.table import Table

from ragpulse.cli.common import load_settings
from ragpulse.config import CONFIG_ENV, Settings, read_config_file
from ragpulse.settings_report import Origins, leaves


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    config = sub.add_parser(
        "config",
        parents=[common],
        help="check a settings file, or show the effective settings",
        description="Settings come from defaults < the config file < RAGPULSE_* variables < "
        "flags. `check` reports every problem at once; `show` lists each setting with where "
        "its value came from.",
    )
    config_sub = config.add_subparsers(dest="config_command", required=True)
    check = config_sub.add_parser(
        "check", parents=[common], help="validate a settings file (and the environment)"
    )
    check.add_argument("file", type=Path, help="YAML or TOML settings file")
    show = config_sub.add_parser(
        "show", parents=[common], help="every effective setting and where it came from"
    )
    show.add_argument("--config", type=Path, help=f"settings file (env {CONFIG_ENV})")


def config_command(args: argparse.Namespace, out: Console) -> int:
    """Raises ConfigError (exit 2, every problem listed) when the settings are invalid."""
    if args.config_command == "check":
        load_settings(args.file)
        out.print(f"{args.file}: ok")
        return 0
    path = args.config or os.environ.get(CONFIG_ENV)
    file = Path(path) if path else None
    settings = load_settings(file)
    origins = Origins.gather({}, file, read_config_file(file) if file else {})
    title = "effective settings" + (f" (file: {file})" if file else "")
    table = Table("setting", "value", "from", title=title)
    for key, value in [*leaves(settings), *_sink_options(settings)]:
        if key == ("sinks",):
            continue  # each sink's options follow, one row each
        where = origins.of(key)
        if file is not None and where.startswith(str(file)):
            where = file.name + where[len(str(file)) :]  # the title names the whole path
        if value is not None and any(s in key[-1].lower() for s in _SECRET_NAMES):
            value = SecretStr(str(value))  # a third-party sink's key that is a plain str
        table.add_row(".".join(key), _shown(value), "default" if where == "settings" else where)
    out.print(table)
    return 0


def _sink_options(settings: Settings) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every option of each sink a run builds (on by default or named, not turned off), as
    its Options read them; ``redaction`` only where the sink's own replaces the top-level
    section (whose rows say the rest)."""
    from ragpulse.plugins import sink_classes

    for name, cls in sink_classes().items():
        named = settings.sinks.get(name)
        if (named is None and not cls.default_enabled) or (named or {}).get("enabled") is False:
            continue
        options = cls.options_from(settings)
        for key, value in leaves(options, ("sinks", name)):
            if key[2] == "redaction" and "redaction" not in (named or {}):
                continue
            yield key, value


_SECRET_NAMES = ("key", "secret", "token", "password", "authorization")
"""Entries of free-form mappings (``sinks.<name>``, headers) shown masked: a sink's
``api_key`` or ``secret_key`` is a SecretStr only once its own Options read it."""


def _masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: "********" if any(s in str(k).lower() for s in _SECRET_NAMES) else _masked(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def _shown(value: Any) -> str:
    if isinstance(value, SecretStr):
        return "********"
    if isinstance(value, dict | list):
        return json.dumps(_masked(value), default=str)
    return "" if value is None else str(value)
