"""What users see of ragpulse's shape, as text: ``ragpulse metrics``, every ``--help``,
every settings key and the public Python names. ``tests/docs/test_snapshots.py`` holds
them to the files in ``tests/snapshots/``: a change to any of them is made on purpose, by
running ``python tests/support/snapshots.py`` and committing the diff.

Settings keys are listed with their environment variable and default; plug-in options
under ``evaluation.options.<metric/method>.<option>`` and ``sinks.<name>.<option>``. The
public Python names are read from the ``__all__`` of each public module
(:mod:`ragpulse.public_api`), each with its signature: a function's, a class's bases,
constructor and public methods (as defined in ragpulse), a model's fields, an enum's
members.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import importlib
import inspect
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


def _shown(value: Any) -> str:
    """A value as the snapshot writes it: the same text in every process (a set sorted,
    a class or function by name)."""
    if isinstance(value, frozenset | set):
        return "{" + ", ".join(sorted(map(repr, value))) + "}"
    if isinstance(value, type) or inspect.isroutine(value):
        return str(value.__qualname__)
    return repr(value)


class _Text(str):
    """An annotation as written (``from __future__ import annotations`` keeps them as
    text): shown without the quotes ``inspect`` puts around a string."""

    def __repr__(self) -> str:
        return str(self)


def _signature(obj: Any) -> str:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"

    def text(annotation: Any) -> Any:
        return _Text(annotation) if isinstance(annotation, str) else annotation

    parameters = [p.replace(annotation=text(p.annotation)) for p in signature.parameters.values()]
    return str(
        signature.replace(
            parameters=parameters, return_annotation=text(signature.return_annotation)
        )
    )


def _written(cls: type, name: str) -> str:
    """The annotation of ``name`` as its class wrote it."""
    for base in cls.__mro__:
        annotation = vars(base).get("__annotations__", {}).get(name)
        if annotation is not None:
            return str(annotation)
    return "?"


def _fields(cls: type) -> Iterator[str]:
    """A model's or a dataclass's fields: name, annotation as written, default."""
    if issubclass(cls, BaseModel):
        for name, info in cls.model_fields.items():
            default = "factory" if info.default_factory else _shown(info.default)
            if info.is_required():
                default = "required"
            yield f"  {name}: {_written(cls, name)} = {default}"
    elif dataclasses.is_dataclass(cls):
        for field in dataclasses.fields(cls):
            default = "factory" if field.default is dataclasses.MISSING else _shown(field.default)
            yield f"  {field.name}: {_written(cls, field.name)} = {default}"


def _members(cls: type, public: set[str]) -> Iterator[str]:
    """A class's surface, one line each: what it and its bases that are not public
    themselves (those are listed on their own) define, as ragpulse defines it."""
    if issubclass(cls, enum.Enum):
        yield from (f"  {m.name} = {m.value!r}" for m in cls)
        return
    yield from _fields(cls)
    data = issubclass(cls, BaseModel) or dataclasses.is_dataclass(cls)
    own = [
        base
        for base in cls.__mro__
        if base.__module__.split(".")[0] == "ragpulse"
        and (base is cls or f"{base.__module__}.{base.__name__}" not in public)
    ]
    seen: set[str] = set()
    for base in own:
        for name, value in vars(base).items():
            if name in seen or (name.startswith("_") and name != "__init__"):
                continue
            seen.add(name)
            if data and (name == "__init__" or name.startswith("model_")):
                continue  # the fields say it
            if data and name in {f.split(":")[0].strip() for f in _fields(cls)}:
                continue
            abstract = " [abstract]" if getattr(value, "__isabstractmethod__", False) else ""
            if isinstance(value, classmethod | staticmethod):
                kind = "classmethod" if isinstance(value, classmethod) else "staticmethod"
                yield f"  {kind} {name}{_signature(getattr(cls, name))}{abstract}"
            elif isinstance(value, property):
                yield f"  property {name}{abstract}"
            elif isinstance(value, type):
                yield f"  class {name}({', '.join(b.__name__ for b in value.__bases__)})"
            elif inspect.isfunction(value):
                yield f"  def {name}{_signature(value)}{abstract}"
            else:
                yield f"  {name} = {_shown(value)}"
        for name, annotation in vars(base).get("__annotations__", {}).items():
            if name not in seen and not name.startswith("_") and not data:
                seen.add(name)  # declared without a value: each subclass sets it
                yield f"  {name}: {annotation}"


def _described(module: str, name: str, public: set[str]) -> Iterator[str]:
    obj = getattr(importlib.import_module(module), name)
    path = f"{module}.{name}"
    home = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__name__', '')}"
    if home != path and home in public:
        yield f"{path} = {home}"  # described where it is defined
    elif isinstance(obj, type):
        yield f"class {path}({', '.join(base.__name__ for base in obj.__bases__)})"
        yield from _members(obj, public)
    elif inspect.isfunction(obj):
        yield f"def {path}{_signature(obj)}"
    else:
        yield f"{path} = {_shown(obj)}"


def public_api() -> str:
    """Every public name of every public module (its ``__all__``), with its signature; the
    plug-in kinds' entry-point groups with their contracts first."""
    from ragpulse import public_api as surface
    from ragpulse.plugins import CONTRACTS

    lines = [
        f"entry points {group}: {', '.join(f'{c.__module__}.{c.__name__}' for c in contracts)}"
        for group, contracts in CONTRACTS.items()
    ]
    modules = surface.names()
    public = {f"{module}.{name}" for module, names in modules.items() for name in names}
    for module, names in modules.items():
        lines.append(f"\nmodule {module}")
        for name in sorted(names):
            lines.extend(_described(module, name, public))
    return "\n".join(lines) + "\n"


SNAPSHOT_FILES = {
    "metrics.txt": metrics_text,
    "help.txt": help_texts,
    "settings_keys.txt": settings_keys,
    "public_api.txt": public_api,
}


if __name__ == "__main__":
    SNAPSHOTS.mkdir(exist_ok=True)
    for file, make in SNAPSHOT_FILES.items():
        (SNAPSHOTS / file).write_text(make())
        print(f"wrote {SNAPSHOTS / file}")
