"""What users see of ragpulse's shape, as text: ``ragpulse metrics``, every ``--help``
and every settings key. ``tests/docs/test_snapshots.py`` holds them to the files in
``tests/snapshots/``: a change to any of them is made on purpose, by running
``python tests/support/snapshots.py`` and committing the diff.

Settings keys are listed with their environment variable and default; plug-in options
under ``evaluation.options.<metric/method>.<option>`` and ``sinks.<name>.<option>``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic_core import PydanticUndefined

HERE = Path(__file__).resolve().parent
SNAPSHOTS = HERE.parent / "snapshots"


def metrics_text() -> str:
    """``ragpulse metrics`` as a user sees it on a 120-column terminal without a judge."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RAGPULSE_") and k not in ("OPENAI_API_KEY", "COLUMNS")
    }
    env.update({"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"})
    ragpulse = Path(sys.executable).with_name("ragpulse")
    done = subprocess.run(
        [str(ragpulse), "metrics"], env=env, capture_output=True, text=True, timeout=120
    )
    return done.stdout


def _parsers(
    parser: argparse.ArgumentParser, name: str
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from _parsers(child, f"{name} {sub}")


def help_texts() -> str:
    """Every parser's ``--help``, at 100 columns, one after the other."""
    from ragpulse.cli import build_parser

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse reads the width when it formats
    try:
        out = []
        for name, parser in _parsers(build_parser(), "ragpulse"):
            buffer = io.StringIO()
            with redirect_stdout(buffer):
                parser.print_help()
            out.append(f"=== {name} --help\n{buffer.getvalue()}")
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return "\n".join(out)


def _default(info: Any) -> str:
    if info.default_factory is not None:
        value = info.default_factory()
    elif info.default is PydanticUndefined:
        return "required"
    else:
        value = info.default
    if isinstance(value, BaseModel):
        return "{section}"
    if isinstance(value, SecretStr):
        return "secret"
    try:
        return json.dumps(value, default=lambda v: v.model_dump(mode="json"), sort_keys=True)
    except TypeError:
        return repr(value)


def _keys(model: type[BaseModel], prefix: str, env: bool) -> Iterator[str]:
    from ragpulse.settings_env import env_name, submodel

    for name, info in model.model_fields.items():
        path = prefix + name
        sub = submodel(info.annotation)
        if sub is not None:
            yield from _keys(sub, path + ".", env)
            continue
        variable = f"  {env_name(path)}" if env else ""
        yield f"{path}  = {_default(info)}{variable}"


def settings_keys() -> str:
    """Every settings key: the sections, then each plug-in's options."""
    from ragpulse import plugins
    from ragpulse.config import Settings

    lines = list(_keys(Settings, "", env=True))
    for name, cls in sorted(plugins.evaluator_classes().items()):
        lines += _keys(cls.Options, f"evaluation.options.{name}.", env=False)
    for name, sink in sorted(plugins.sink_classes().items()):
        lines += _keys(sink.Options, f"sinks.{name}.", env=False)
    return "\n".join(lines) + "\n"


SNAPSHOT_FILES = {
    "metrics.txt": metrics_text,
    "help.txt": help_texts,
    "settings_keys.txt": settings_keys,
}


if __name__ == "__main__":
    SNAPSHOTS.mkdir(exist_ok=True)
    for file, make in SNAPSHOT_FILES.items():
        (SNAPSHOTS / file).write_text(make())
        print(f"wrote {SNAPSHOTS / file}")
