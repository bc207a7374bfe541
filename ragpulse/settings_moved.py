"""Settings keys of earlier releases: where each lives now, and how it gets there.

:data:`DEPRECATED_KEYS` is the one table (old dotted key -> new dotted key) that the
settings loader, ``ragpulse config check``, the settings reference and the snapshot test
read. An old key still reads in every source (the settings file, ``RAGPULSE_*``
variables, flags): it is moved to its new place before validation, and each one moved
gets a deprecation message naming the new key (and, for a variable, the new variable).
An old key that was a section (``prometheus``) moves key by key
(``prometheus.max_routes`` -> ``sinks.prometheus.max_routes``). When one source gives
both the old and the new key, the new one wins and the message says the old one was
ignored; between sources the usual order holds (flags > environment > file).

Pure functions of the data given; the variables' side is in :mod:`ragpulse.settings_env`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEPRECATED_KEYS: dict[str, str] = {
    # The sinks own their settings (sinks.<entry-point name>).
    "results_jsonl": "sinks.jsonl.path",
    "otlp_export_endpoint": "sinks.otel.endpoint",
    "service_name": "sinks.otel.service_name",
    "otel_export": "sinks.otel",
    "prometheus": "sinks.prometheus",
    "regression": "sinks.regression",
    # The model tier takes the judge's shape (evaluation.model like evaluation.judge).
    "evaluation.model_rate": "evaluation.model.rate",
    "evaluation.model_batch_size": "evaluation.model.batch_size",
    "evaluation.model_max_wait_s": "evaluation.model.max_wait_s",
    "evaluation.model_max_queue": "evaluation.model.max_queue",
    "evaluation.model_budget": "evaluation.model.budget",
    "evaluation.model_max_delay_s": "evaluation.model.max_delay_s",
}
"""Old dotted key -> its new place. A key whose old value is a mapping (a section) moves
key by key below the new place."""

Key = tuple[str, ...]
TABLE: list[tuple[Key, Key]] = [
    (tuple(old.split(".")), tuple(new.split("."))) for old, new in DEPRECATED_KEYS.items()
]
""":data:`DEPRECATED_KEYS` as (old, new) key tuples."""
MISSING = object()


@dataclass(frozen=True)
class Move:
    """One old key moved (or dropped, ``ignored``: the same source gave the new key)."""

    old: Key
    new: Key
    ignored: bool = False

    def below(self, key: Key) -> tuple[Key, Key]:
        """(old, new) for ``key``, a key at or below :attr:`old`."""
        return key, self.new + key[len(self.old) :]


def dotted(key: Key) -> str:
    return ".".join(key)


def new_key(old: Key) -> Key | None:
    """Where the old key ``old`` (or a key below an old section) lives now; None: not old."""
    for before, after in TABLE:
        if old[: len(before)] == before:
            return after + old[len(before) :]
    return None


def message(where: str, old: Key, new: Key, *, ignored: bool, variable: str | None = None) -> str:
    """The deprecation message of one old key given at ``where`` (a file line, a variable
    or a flag); ``variable``: the new key's variable, named when ``where`` is one."""
    use = dotted(new) + (f" ({variable})" if variable else "")
    if ignored:
        return (
            f"{where}: {dotted(old)} is deprecated and was ignored: {use} is set as well "
            "and wins; remove the old key"
        )
    return f"{where}: {dotted(old)} is deprecated: use {use}"


def _copy(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _copy(v) if isinstance(v, Mapping) else v for k, v in data.items()}


def _given(data: Mapping[str, Any], key: Key) -> bool:
    """Whether ``data`` sets ``key``, or holds a value other than a mapping above it
    (which the new key cannot go below: that value stands, and validation judges it)."""
    node: Any = data
    for part in key:
        if node is None:
            return False
        if not isinstance(node, Mapping):
            return True
        if part not in node:
            return False
        node = node[part]
    return True


def _pop(data: dict[str, Any], key: Key) -> Any:
    node: Any = data
    for part in key[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict) and key[-1] in node:
        return node.pop(key[-1])
    return MISSING


def put(data: dict[str, Any], key: Key, value: Any) -> None:
    node = data
    for part in key[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}  # absent or null: the new key's section starts here
        node = child
    node[key[-1]] = value


def has_old_keys(data: Mapping[str, Any]) -> bool:
    return any(lookup(data, old) is not MISSING for old, _ in TABLE)


def lookup(data: Mapping[str, Any], key: Key) -> Any:
    node: Any = data
    for part in key:
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def move_keys(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[Move]]:
    """``data`` (one source's nested settings) with every old key at its new place, and
    what was moved. ``data`` itself is not changed."""
    if not has_old_keys(data):
        return dict(data), []
    out = _copy(data)
    moves: list[Move] = []
    for old, new in TABLE:
        value = _pop(out, old)
        if value is MISSING:
            continue
        if isinstance(value, Mapping) and value:  # a section: key by key
            items = [((*old, str(k)), (*new, str(k)), v) for k, v in value.items()]
        else:
            items = [(old, new, value)]
        for old_key, new_key_, item in items:
            ignored = _given(data, new_key_)
            if not ignored:
                put(out, new_key_, item)
            moves.append(Move(old_key, new_key_, ignored))
    return out, moves
