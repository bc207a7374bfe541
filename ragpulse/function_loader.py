"""``module:function``: how users name a function of their own, and the one loader.

The app's retriever, generator and pipeline (``ragpulse eval --generator``,
``--retriever``, ``--replay``, ``--control``) and ``@ragpulse.evaluator`` functions
(``evaluation.evaluators``, ``--metrics``) are all named this way:
``package.module:function`` or ``module:Class.method`` (a dotted path after the colon).
The current directory is importable, so a module beside the settings file or the test set
is found as ``python -m`` would find it.

Every error is one line that starts with where the name was given and the name as
written, then what is wrong: ``--generator myapp:llm: module myapp has no attribute
'llm' (did you mean llm_call?)``.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ragpulse.errors import ConfigError
from ragpulse.suggestions import did_you_mean

SEPARATOR = ":"
"""Between the module and the function; never in a registered ``metric/method`` name."""


def is_spec(name: str) -> bool:
    """Whether ``name`` names a function (``module:function``) rather than a registered
    plug-in (``metric/method``). Whether it is well formed is :func:`spec_problem`'s to say."""
    return SEPARATOR in name


@dataclass(frozen=True)
class FunctionSpec:
    """A parsed ``module:function``: the module to import, the attributes to follow."""

    module: str
    path: tuple[str, ...]


def spec_problem(spec: str, flag: str) -> str | None:
    """One line when ``spec`` is not ``module:function`` (``flag`` says where it was
    given: ``--generator``, ``evaluator``), else None. Nothing is imported."""
    module, sep, attr = spec.partition(SEPARATOR)
    if sep and module and attr and all(attr.split(".")):
        return None
    return f"{flag} takes module:function, got {spec!r}"


def parse_spec(spec: str, flag: str) -> FunctionSpec:
    """``spec`` parsed; ConfigError (:func:`spec_problem`'s line) when it is malformed."""
    problem = spec_problem(spec, flag)
    if problem is not None:
        raise ConfigError(problem)
    module, _, attr = spec.partition(SEPARATOR)
    return FunctionSpec(module, tuple(attr.split(".")))


def resolve(
    spec: str,
    flag: str,
    candidates: Callable[[Any], list[str]] | None = None,
    listed_as: str = "its functions",
) -> Any:
    """The object ``spec`` names: its module imported (the current directory importable),
    then each attribute followed. ConfigError naming ``flag`` and ``spec`` when the module
    does not import or an attribute is missing: with the closest of the names it has, or
    of ``candidates(module)`` when given (then listed, as ``listed_as``, when none is
    close: the functions that could be meant, e.g. a module's evaluators)."""
    parsed = parse_spec(spec, flag)
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    importlib.invalidate_caches()  # a module written since the last import is found
    try:
        obj: Any = importlib.import_module(parsed.module)
    except Exception as exc:
        raise ConfigError(
            f"{flag} {spec}: cannot import module {parsed.module}: {type(exc).__name__}: {exc}"
        ) from exc
    owner = f"module {parsed.module}"
    for depth, part in enumerate(parsed.path):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            if candidates is not None and depth == 0:
                names = candidates(obj)
                listed = f" ({listed_as}: {', '.join(sorted(names))})" if names else ""
            else:
                names, listed = [n for n in dir(obj) if not n.startswith("_")], ""
            hint = did_you_mean(part, names) or listed
            raise ConfigError(f"{flag} {spec}: {owner} has no attribute {part!r}{hint}") from None
        owner = f"{parsed.module}{SEPARATOR}{'.'.join(parsed.path[: depth + 1])}"
    return obj


def load_function(spec: str, flag: str) -> Callable[..., Any]:
    """The callable ``spec`` names (:func:`resolve`); ConfigError when it is not callable."""
    obj = resolve(spec, flag)
    if not callable(obj):
        raise ConfigError(f"{flag} {spec}: a {type(obj).__name__}, not a function")
    return obj  # type: ignore[no-any-return]
