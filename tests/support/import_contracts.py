"""An import-linter contract whose lowest layer is *the rest*: the core, never listed by hand.

``layers_over_core`` is import-linter's ``layers`` contract over one container (``ragpulse``)
with the named layers from the top down; every module of the container that no layer
names becomes the core, a layer below all of them (its modules may import each other).
A sub-package that no layer names is an error, not part of the core: a new package must
be given its place in the contract (``make test`` runs it; tests/unit/test_layout.py
proves it catches both mistakes).
"""

from __future__ import annotations

import importlib.util
from typing import Any, cast

import grimp
from importlinter.contracts.layers import Layer, LayersContract, ModuleTail
from importlinter.domain.contract import ContractCheck
from importlinter.domain.helpers import module_expressions_to_modules


def _is_package(name: str) -> bool:
    spec = importlib.util.find_spec(name)  # imports the container, not the module itself
    return spec is not None and spec.submodule_search_locations is not None


class LayersOverCoreContract(LayersContract):
    type_name = "layers_over_core"

    def core(self, graph: grimp.ImportGraph) -> tuple[set[str], set[str]]:
        """(the core's module tails, the sub-packages that no layer names)."""
        layers = cast(list[Layer], self.layers)
        named = {tail.name for layer in layers for tail in layer.module_tails}
        core, homeless = set(), set()
        containers = module_expressions_to_modules(graph, cast(list[Any], self.containers))
        for container in containers:
            for child in graph.find_children(container.name):
                tail = child.rpartition(".")[2]
                if tail in named:
                    continue
                (homeless if _is_package(child) else core).add(tail)
        return core, homeless

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        core, homeless = self.core(graph)
        layers = cast(list[Layer], self.layers)
        bottom = Layer({ModuleTail(name) for name in core}, is_independent=False)
        self.layers = [*layers, bottom]  # type: ignore[assignment]
        self.exhaustive = True  # type: ignore[assignment]  # the homeless packages break it
        try:
            check = super().check(graph, verbose)
        finally:
            self.layers = layers  # type: ignore[assignment]
        check.metadata["core"] = sorted(core)
        check.metadata["homeless"] = sorted(homeless)
        return check
