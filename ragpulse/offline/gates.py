"""``--max-drop``: the one grammar of a gate, and its one parser.

One item per ``--max-drop``::

    METRIC[/METHOD][@SLICE]=DROP     relative: fails when the metric got worse than before
                                     by more than DROP (direction-aware)
    METRIC[/METHOD][@SLICE]>=MIN     absolute: fails when the current mean is below MIN
    METRIC[/METHOD][@SLICE]<=MAX     absolute: fails when the current mean is above MAX

``METRIC`` may end in ``@k`` (``recall@5``); without ``/METHOD`` every method of the
metric is gated. ``SLICE`` is ``all`` (the overall slice only) or ``KEY=VALUE[,KEY=VALUE]``
(``question_type=multi-hop,condition=gold_removed``), as the harness report names its
slices; without ``@SLICE`` every slice is gated. DROP is a number >= 0 (``inf`` reports
the change and never fails); MIN and MAX are finite numbers. Spaces around the parts are
ignored.

The harness (``eval --generator``) takes every form. ``eval --replay`` compares a mean
before and after on the same rows, with no slices: it takes ``METRIC[/METHOD]=DROP``
(:func:`drop_limits`), and refuses the other forms saying so.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

GateKind = Literal["max_drop", "min", "max"]


class GateSpec(BaseModel):
    """One parsed ``--max-drop`` item."""

    model_config = ConfigDict(frozen=True)

    text: str
    metric: str
    method: str | None = None
    # None: every slice; {}: the overall slice ("all").
    where: dict[str, str] | None = None
    kind: GateKind
    value: float

    @property
    def name(self) -> str:
        """``metric`` or ``metric/method``, as evaluators are named."""
        return self.metric if self.method is None else f"{self.metric}/{self.method}"

    def matches_slice(self, constraints: Mapping[str, str]) -> bool:
        return self.where is None or dict(constraints) == self.where

    def matches_metric(self, metric: str, method: str) -> bool:
        return metric == self.metric and (self.method is None or method == self.method)


# METRIC (a name, possibly ending in @k), then /METHOD, then @SLICE; none holds a space.
_LHS = re.compile(
    r"^(?P<metric>[^\s/@=<>]+?(?:@\d+)?)(?:/(?P<method>[^\s@=<>]+))?(?:@(?P<slice>.+))?$"
)
_EXPECTED = (
    "expected METRIC[/METHOD][@KEY=VALUE[,KEY=VALUE]]=DROP, or >=MIN / <=MAX instead of "
    "=DROP; e.g. mrr@question_type=multi-hop=0.05"
)


def parse_gate(item: str) -> GateSpec:
    """Parse one gate; ValueError naming the item and what is wrong with it."""
    text = item.strip()

    def bad(why: str) -> ValueError:
        return ValueError(f"bad gate {item!r}: {why} ({_EXPECTED})")

    kind: GateKind
    if ">=" in text:
        lhs, _, number = text.rpartition(">=")
        kind = "min"
    elif "<=" in text:
        lhs, _, number = text.rpartition("<=")
        kind = "max"
    elif "=" in text:
        lhs, _, number = text.rpartition("=")
        kind = "max_drop"
    else:
        raise bad("no '=DROP', '>=MIN' or '<=MAX'")
    try:
        value = float(number)
    except ValueError:
        raise bad(f"{number.strip()!r} is not a number") from None
    if math.isnan(value) or (kind != "max_drop" and math.isinf(value)):
        raise bad("the threshold must be finite")  # a DROP of inf: report, never fail
    if kind == "max_drop" and value < 0:
        raise bad("a drop must be >= 0")
    match = _LHS.match(lhs.strip())
    if match is None:
        raise bad(f"cannot read the metric part {lhs.strip()!r}")
    where = _parse_where(match["slice"], bad) if match["slice"] is not None else None
    return GateSpec(
        text=text, metric=match["metric"], method=match["method"], where=where, kind=kind,
        value=value,
    )  # fmt: skip


def _parse_where(text: str, bad: Callable[[str], ValueError]) -> dict[str, str]:
    if text.strip() == "all":
        return {}
    where: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise bad(f"slice part {part.strip()!r} is not KEY=VALUE")
        if key in where:
            raise bad(f"slice key {key!r} given twice")
        where[key] = value
    return where


def parse_gates(items: Iterable[str]) -> list[GateSpec]:
    """Every non-blank item parsed, in order (:func:`parse_gate`)."""
    return [parse_gate(i) for i in items if i.strip()]


def drop_limits(gates: Sequence[GateSpec]) -> dict[str, float]:
    """``{METRIC[/METHOD]: DROP}`` for a command that gates a mean's drop only (``eval
    --replay``); a name given twice keeps its last limit. ValueError for a gate with a
    slice or an absolute limit, naming the form it takes."""
    limits: dict[str, float] = {}
    for gate in gates:
        if gate.kind != "max_drop" or gate.where is not None:
            form = "a slice (@...)" if gate.where is not None else "an absolute limit (>=, <=)"
            raise ValueError(
                f"--max-drop {gate.text}: eval --replay compares a mean before and after, so "
                f"it takes METRIC[/METHOD]=DROP; {form} is for the harness (--generator)"
            )
        limits[gate.name] = gate.value
    return limits
