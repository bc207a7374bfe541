"""The public surface is declared: each public module's ``__all__`` names what it gives,
each name is there, and every plug-in kind's contract is among the modules. (The names and
their signatures are held to ``tests/snapshots/public_api.txt`` by
``tests/docs/test_snapshots.py``.)"""

from __future__ import annotations

import importlib

from ragpulse import public_api
from ragpulse.plugins import CONTRACTS


def test_every_public_module_declares_names_that_exist() -> None:
    for module, names in public_api.names().items():
        loaded = importlib.import_module(module)
        assert names, f"{module}: empty __all__"
        assert len(set(names)) == len(names), f"{module}: a name twice in __all__"
        missing = [name for name in names if not hasattr(loaded, name)]
        assert not missing, f"{module}.__all__ names what it lacks: {missing}"
        assert not [name for name in names if name.startswith("_")], module


def test_every_plugin_contract_is_public() -> None:
    modules = public_api.modules()
    for group, contracts in CONTRACTS.items():
        for contract in contracts:
            assert contract.__module__ in modules, group
            assert contract.__name__ in public_api.names()[contract.__module__], group
    assert modules[: len(public_api.CORE_MODULES)] == list(public_api.CORE_MODULES)
