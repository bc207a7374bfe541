"""What a trace's records were, kept between its closes so that a late span revises them.

The assembler carries one :class:`RecordVersions` with each trace, from its first close
through every reopening, and forgets it with the trace's kept spans; the evaluation reads
and writes it (under its own lock) when it builds the trace's records: a rebuilt record
takes the ``record_id`` of the version it continues and the next revision number, and the
version exported before is what the revision replaces in the sinks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ragpulse.record import EvalResult, RagRecord


@dataclass
class Version:
    """One record of the trace: its newest build and what the sinks have of it."""

    record_id: str
    revision: int
    """The newest build's revision number; work on an older build is stale."""
    spans: frozenset[str]
    """The spans the newest build read (its root, model and tool calls, retrievals): a
    rebuilt record continues the version it shares a span with."""
    built: RagRecord | None = None
    """The newest build as extracted (before its conversation's turns were joined): a
    rebuild that says the same is not a revision."""
    exported: RagRecord | None = None
    """The build the sinks have (None: none exported yet)."""
    results: list[EvalResult] = field(default_factory=list)
    """Every result exported for ``exported`` (its first export and its updates)."""


@dataclass
class RecordVersions:
    """A trace's records by ``record_id`` (see the module doc)."""

    by_id: dict[str, Version] = field(default_factory=dict)

    def match(
        self, root: str, spans: frozenset[str], taken: set[str], *, alone: bool = False
    ) -> Version | None:
        """The version a rebuilt record with root span ``root`` reading ``spans``
        continues: the one that read its root span, else the one sharing most spans with
        it, else, when both builds have one record (``alone``: the trace's rebuild gave
        only this one), that record; None for a new record. ``taken``: record ids already
        continued by this build."""
        scored = [
            (root in v.spans, len(v.spans & spans), v)
            for v in self.by_id.values()
            if v.record_id not in taken
        ]
        if alone and len(scored) == 1 == len(self.by_id):
            return scored[0][2]  # a turn first built from other spans than its rebuild read
        scored = [s for s in scored if s[0] or s[1]]
        return max(scored, key=lambda s: (s[0], s[1]))[2] if scored else None
