"""Settings problems a person can act on, and where each effective setting came from.

Every problem of a configuration is reported at once, one line each, naming where
the value came from (``ragpulse.yaml:12``, ``RAGPULSE_METRICS_PORT``,
``--metrics-port``), the setting, what is wrong and, for a mistyped name, the
closest real one. Nothing of the validation library leaks through (no error
codes, no URLs), and a secret's value is never repeated.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr, ValidationError
from pydantic_core import ErrorDetails

from ragpulse.errors import ConfigError
from ragpulse.settings_env import ALIASES, nested_name, submodel

Path_ = tuple[str, ...]


@dataclass(frozen=True)
class Problem:
    where: str  # the file and line, the variable or the flag; "settings" when unknown
    key: str  # the dotted setting
    what: str
    hint: str = ""

    def order(self) -> tuple[str, int, str]:
        """Sort key: by source, a file's problems by line."""
        source, _, line = self.where.rpartition(":")
        if line.isdigit():
            return source, int(line), self.key
        return self.where, 0, self.key

    def __str__(self) -> str:
        hint = f" ({self.hint})" if self.hint else ""
        key = f"{self.key}: " if self.key else ""
        return f"{self.where}: {key}{self.what}{hint}"


class SettingsProblems(ConfigError):
    """Every problem found in the settings, one line each."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        n = len(problems)
        head = "1 problem in the settings" if n == 1 else f"{n} problems in the settings"
        super().__init__(head + ":\n  " + "\n  ".join(map(str, problems)))


@dataclass(frozen=True)
class Origins:
    """Where values can come from, highest precedence first: flags, environment, file."""

    flags: Mapping[str, Any]
    environ: Mapping[str, str]
    file: Path | None
    file_data: Mapping[str, Any]
    file_lines: Mapping[Path_, int]

    @classmethod
    def gather(
        cls, flags: Mapping[str, Any], file: Path | None, file_data: Mapping[str, Any]
    ) -> Origins:
        """The origins of ``flags``, ``file_data`` and the ``RAGPULSE_*`` variables set now."""
        upper = {k.upper(): v for k, v in os.environ.items() if k.upper().startswith("RAGPULSE_")}
        lines: Mapping[Path_, int] = _LazyLines(file) if file else {}
        return cls(flags, upper, file, file_data, lines)

    def of(self, path: Path_) -> str:
        """Where the value at ``path`` (or the section above it) was set."""
        if _lookup(self.flags, path) is not _MISSING:
            return flag_name(path)
        variable = self._from_environment(path)
        if variable:
            return variable
        if self.file is not None and _lookup(self.file_data, path) is not _MISSING:
            return self._file_at(path)
        return "settings"

    def _from_environment(self, path: Path_) -> str | None:
        for depth in range(len(path), 0, -1):
            for name in env_names(path[:depth]):
                if name in self.environ:
                    return name
        return None

    def _file_at(self, path: Path_) -> str:
        """The file and the line of ``path`` as written in the file (or the section above)."""
        assert self.file is not None
        for depth in range(len(path), 0, -1):
            line = self.file_lines.get(path[:depth])
            if line is not None:
                return f"{self.file}:{line}"
        return str(self.file)


_MISSING = object()


def _lookup(data: Mapping[str, Any], path: Path_) -> Any:
    node: Any = data
    for part in path:
        if not isinstance(node, Mapping) or part not in node or node[part] is None:
            return _MISSING
        node = node[part]
    return node


def env_names(path: Path_) -> list[str]:
    """The variables that set ``path``: its nested name, and its short alias if it has one."""
    dotted = ".".join(path)
    return [nested_name(dotted), *(a for a, p in ALIASES.items() if p == dotted)]


def flag_name(path: Path_) -> str:
    """The flag that sets ``path``: a nested setting's flag is its alias's name."""
    dotted = ".".join(path)
    for alias, target in ALIASES.items():
        if target == dotted:
            return "--" + alias.removeprefix("RAGPULSE_").lower().replace("_", "-")
    return "--" + path[-1].replace("_", "-")


def key_lines(path: Path) -> dict[Path_, int]:
    """The line (1-based) of every mapping key in a settings file (YAML or TOML), by its
    key path; {} for a file that does not parse (its own error says so)."""
    if path.suffix == ".toml":
        try:
            return toml_lines(path.read_text())
        except OSError:
            return {}
    return yaml_lines(path)


MAX_TOML_LINES = 500
"""A TOML file's key lines are found by parsing each prefix (below), when a line is asked
for (a problem to report, ``config show``): past this many lines that would take seconds,
and its problems name the file without a line."""


class _LazyLines(Mapping[Path_, int]):
    """A file's key lines, found the first time one is asked for."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lines: dict[Path_, int] | None = None

    def _found(self) -> dict[Path_, int]:
        if self._lines is None:
            self._lines = key_lines(self._path)
        return self._lines

    def __getitem__(self, key: Path_) -> int:
        return self._found()[key]

    def __iter__(self) -> Iterator[Path_]:
        return iter(self._found())

    def __len__(self) -> int:
        return len(self._found())


def toml_lines(text: str) -> dict[Path_, int]:
    """The line of every table and key of a TOML text, by key path. tomllib gives no
    positions, so it is asked about each prefix of the text: the keys that a prefix adds
    were written by the statement that ends there, which starts at the first line that
    is not blank or a comment after the last prefix that parsed (a multi-line array or
    string is one statement)."""
    lines = text.splitlines(keepends=True)
    if len(lines) > MAX_TOML_LINES:
        return {}
    found: dict[Path_, int] = {}
    start: int | None = None
    for number in range(1, len(lines) + 1):
        stripped = lines[number - 1].strip()
        if start is None and stripped and not stripped.startswith("#"):
            start = number
        if start is None:
            continue
        try:
            data = tomllib.loads("".join(lines[:number]))
        except tomllib.TOMLDecodeError:
            continue  # the statement goes on
        for key in _mapping_keys(data, ()):
            found.setdefault(key, start)
        start = None
    return found


def _mapping_keys(data: Mapping[str, Any], prefix: Path_) -> Iterator[Path_]:
    for key, value in data.items():
        yield (*prefix, key)
        if isinstance(value, Mapping):
            yield from _mapping_keys(value, (*prefix, key))


def parse_problem(path: Path, exc: Exception) -> SettingsProblems:
    """A settings file that does not parse, as one problem at its file and line: ``bad.yaml:3:
    does not parse: expected ',' or ']', but got '<stream end>' (column 1; in a flow
    sequence that starts at line 2, column 15)``."""
    import yaml

    line: int | None = None
    if isinstance(exc, yaml.MarkedYAMLError):
        what = str(exc.problem or exc.context or "not YAML")
        details = []
        if exc.problem_mark is not None:
            line = exc.problem_mark.line + 1
            details.append(f"column {exc.problem_mark.column + 1}")
        if exc.context and exc.problem and exc.context_mark is not None:
            mark = exc.context_mark
            context = exc.context.removeprefix("while parsing ").removeprefix("while scanning ")
            details.append(
                f"in {context} that starts at line {mark.line + 1}, column {mark.column + 1}"
            )
        if details:
            what += f" ({'; '.join(details)})"
    else:
        what = str(exc)
        at = re.search(r" \(at line (\d+), column (\d+)\)$", what)
        if at:
            line = int(at.group(1))
            what = what[: at.start()] + f" (column {at.group(2)})"
        what = what.removesuffix(" (at end of document)")
    where = f"{path}:{line}" if line is not None else str(path)
    return SettingsProblems([Problem(where, "", f"does not parse: {what}")])


def yaml_lines(path: Path) -> dict[Path_, int]:
    """The line (1-based) of every mapping key in a YAML file, by its key path; {} for a
    file that does not parse (its own error says so)."""
    import yaml  # here: only a run with a YAML file pays for the import

    try:
        root = yaml.compose(path.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    lines: dict[Path_, int] = {}

    def walk(node: yaml.Node, prefix: Path_) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    here = (*prefix, str(key.value))
                    lines[here] = key.start_mark.line + 1
                    walk(value, here)

    if root is not None:
        walk(root, ())
    return lines


def problems_of(exc: ValidationError, model: type[BaseModel], origins: Origins) -> list[Problem]:
    """One :class:`Problem` per validation error."""
    return [_problem(error, model, origins) for error in exc.errors()]


def _problem(error: ErrorDetails, model: type[BaseModel], origins: Origins) -> Problem:
    path = tuple(str(part) for part in error["loc"])
    key = ".".join(path) or "(top level)"
    where = origins.of(path)
    if error["type"] == "extra_forbidden":
        siblings = _fields_at(model, path[:-1])
        close = difflib.get_close_matches(path[-1], siblings, n=1, cutoff=0.6)
        hint = f"did you mean {'.'.join((*path[:-1], close[0]))}?" if close else ""
        if not hint and siblings:
            hint = "known: " + ", ".join(siblings[:12]) + (", ..." if len(siblings) > 12 else "")
        return Problem(where, key, "unknown setting", hint)
    if error["type"] == "missing":
        return Problem(where, key, "required, and not set")
    message = str(error["msg"]).removeprefix("Value error, ")
    message = message[:1].lower() + message[1:]
    secret = _is_secret(model, path) or any(s in key for s in ("key", "token", "password"))
    got = "" if secret or "input" not in error else f", got {_short(error['input'])}"
    return Problem(where, key, message + got)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _fields_at(model: type[BaseModel], path: Path_) -> list[str]:
    current: type[BaseModel] | None = model
    for part in path:
        if current is None or part not in current.model_fields:
            return []
        current = submodel(current.model_fields[part].annotation)
    return sorted(current.model_fields) if current is not None else []


def _is_secret(model: type[BaseModel], path: Path_) -> bool:
    current: type[BaseModel] | None = model
    for part in path:
        if current is None or part not in current.model_fields:
            return False
        annotation = current.model_fields[part].annotation
        if annotation is SecretStr or "SecretStr" in str(annotation):
            return True
        current = submodel(annotation)
    return False


def without(data: Mapping[str, Any], paths: list[Path_]) -> dict[str, Any]:
    """``data`` with the values at ``paths`` left out (to check the rest of a file)."""
    out: dict[str, Any] = {k: dict(v) if isinstance(v, Mapping) else v for k, v in data.items()}
    for path in paths:
        node: Any = out
        for part in path[:-1]:
            child = node.get(part) if isinstance(node, dict) else None
            if not isinstance(child, Mapping):
                node = None
                break
            node[part] = node = dict(child)
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return out


def leaves(model: BaseModel, prefix: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    """Every leaf setting of ``model`` with its value (sections walked into)."""
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            yield from leaves(value, (*prefix, name))
        else:
            yield (*prefix, name), value
