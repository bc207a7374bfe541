"""Every setting is read by something: a documented knob that does nothing is a bug.

Walks the settings models and looks for a read of each field in the package: an
attribute access (``.grace_s``) or a key (``"grace_s"``, for settings handed on as
mappings). A field nothing reads fails here, with its dotted path.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from ragpulse.config import Settings

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = ("ragpulse", "collector", "evaluators", "exporters")


def _models(annotation: object) -> Iterator[type[BaseModel]]:
    """The pydantic models an annotation holds (``X``, ``X | None``, ``dict[str, X]``...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _models(arg)
    if isinstance(annotation, types.UnionType):
        for arg in annotation.__args__:
            yield from _models(arg)


def _fields(model: type[BaseModel], prefix: str, seen: set[type]) -> Iterator[tuple[str, str]]:
    """(dotted path, field name) of every field under ``model``."""
    if model in seen:
        return
    seen.add(model)
    for name, info in model.model_fields.items():
        yield f"{prefix}{name}", name
        for sub in _models(info.annotation):
            yield from _fields(sub, f"{prefix}{name}.", seen)


def _sources() -> dict[Path, str]:
    files = {}
    for folder in PACKAGE_DIRS:
        for path in (ROOT / folder).rglob("*.py"):
            files[path.resolve()] = path.read_text(encoding="utf-8")
    return files


SOURCES = _sources()
SETTINGS = sorted(set(_fields(Settings, "", set())))


@pytest.mark.parametrize(("path", "name"), SETTINGS, ids=[p for p, _ in SETTINGS])
def test_every_setting_is_read(path: str, name: str) -> None:
    # A declaration (``grace_s: float = Field(...)``) matches neither form.
    read = re.compile(rf"\.{name}\b|[\"']{name}[\"']")
    readers = [p for p, text in SOURCES.items() if read.search(text)]
    assert readers, f"setting {path} is read by nothing: wire it or remove it"


def test_the_walk_sees_nested_settings() -> None:
    paths = {p for p, _ in SETTINGS}
    assert {"assembly.grace_s", "evaluation.judge.max_delay_s", "kafka.topic"} <= paths
    assert "evaluation.sampling.priorities.below" in paths
