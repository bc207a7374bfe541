"""YAML with bounded nesting, as :mod:`ragpulse.safe_json` is for JSON (the settings file).

Its own module so that a run without a YAML file never imports PyYAML.
"""

from __future__ import annotations

from typing import Any

import yaml

from ragpulse.safe_json import MAX_DEPTH, NestingTooDeep


def load_yaml(text: str, max_depth: int = MAX_DEPTH) -> Any:
    """``yaml.safe_load`` that refuses nesting beyond ``max_depth`` (flow or block style).

    PyYAML composes nodes recursively and fails with ``RecursionError`` near
    1,000 levels; the bound is checked as each node is composed, so it is exact.
    Raises :class:`NestingTooDeep` or ``yaml.YAMLError``.
    """
    loader = _BoundedSafeLoader(text, max_depth)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


class _BoundedSafeLoader(yaml.SafeLoader):
    def __init__(self, stream: str, max_depth: int) -> None:
        super().__init__(stream)
        self._max_depth = max_depth
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        # Collections count, as brackets do in JSON; scalars are leaves.
        nested = bool(self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent))
        self._depth += nested
        try:
            if self._depth > self._max_depth:
                raise NestingTooDeep(self._max_depth, "YAML")
            return super().compose_node(parent, index)
        finally:
            self._depth -= nested
