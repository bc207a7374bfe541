"""The public surface: what a user or a plug-in author imports, declared in one place.

An app imports :mod:`ragpulse` (instrumentation, feedback, plain-function evaluators) and
the record shapes of :mod:`ragpulse.record`; a plug-in author the contract of each kind of
plug-in (found from the entry-point groups, :data:`ragpulse.plugins.CONTRACTS`, so a new
kind brings its contract along), the plug-in context and the errors a plug-in raises.
Each of those modules names its public names in ``__all__``. The command line and the
settings keys are the rest of the surface. Everything else may move without notice.

``tests/snapshots/public_api.txt`` holds the names and their signatures
(``tests/docs/test_snapshots.py``), and the reference's *Public surface* page lists them
(``docs/_gen/reference.py``).
"""

from __future__ import annotations

import importlib

CORE_MODULES = ("ragpulse", "ragpulse.record", "ragpulse.plugin_context", "ragpulse.errors")
"""The public modules besides the plug-in contracts'."""


def modules() -> list[str]:
    """Every public module: the core ones, then each plug-in contract's."""
    from ragpulse.plugins import CONTRACTS

    contracts = {cls.__module__ for group in CONTRACTS.values() for cls in group}
    return [*CORE_MODULES, *sorted(contracts - set(CORE_MODULES))]


def names() -> dict[str, list[str]]:
    """Each public module's ``__all__``, in order."""
    return {module: list(importlib.import_module(module).__all__) for module in modules()}
