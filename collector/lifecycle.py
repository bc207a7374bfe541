"""The one owner of the collector's threads: its parts started in order, stopped in reverse.

:mod:`~ragpulse.collector.service` builds every part once (the sinks, the conversation
stage, the pipeline's workers, the assembly ticker, the source, the metrics endpoint) and
hands them to a :class:`Lifecycle` in the order a trace walks backwards: what receives
work starts after what it hands work to, so nothing is handed to a part that is not
running. A stop runs the same list the other way round, in two passes: ``stop`` (take no
more work, finish what is queued by the deadline, hand it on), then ``close`` (release
what is left: a source's final acknowledgements, a client's event loop), so a source
acknowledges only after every stage drained.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Deadline:
    """When a stop must be done, as ``time.monotonic()`` values: ``drain`` for the stages
    (evaluation, conversations), ``end`` for the sinks' last word after them (None: as long
    as they take)."""

    drain: float
    end: float | None = None

    @classmethod
    def within(cls, timeout_s: float, reserve_s: float = 0.0) -> Deadline:
        """``timeout_s`` from now, the last ``reserve_s`` of it kept for the sinks."""
        end = time.monotonic() + timeout_s
        return cls(end - reserve_s, end)

    def left(self, most: float | None = None) -> float:
        """Seconds until ``drain`` (never negative), at most ``most``."""
        left = max(0.0, self.drain - time.monotonic())
        return left if most is None else min(most, left)


class Part(Protocol):
    """A part of the running collector. ``start`` may raise (a port in use): the parts
    started before it are stopped and closed again. ``stop`` and ``close`` never raise for
    a part's own trouble: they log it."""

    @property
    def name(self) -> str: ...

    def start(self) -> None: ...

    def stop(self, deadline: Deadline) -> None: ...

    def close(self) -> None: ...


class Lifecycle:
    """Starts ``parts`` in order, stops and then closes them in reverse; each at most once."""

    def __init__(self, parts: Sequence[Part]) -> None:
        self.parts = list(parts)
        self._started: list[Part] = []

    def start(self) -> None:
        """Start every part; when one raises, what started is stopped and closed, and the
        error goes to the caller with nothing left running."""
        for part in self.parts:
            try:
                part.start()
            except BaseException:
                self.stop(Deadline.within(1.0))
                raise
            self._started.append(part)

    def stop(self, deadline: Deadline) -> None:
        started, self._started = self._started, []
        for part in reversed(started):
            try:
                part.stop(deadline)
            except Exception:  # the next parts still stop
                log.exception("stopping %s failed", part.name)
        for part in reversed(started):
            try:
                part.close()
            except Exception:
                log.exception("closing %s failed", part.name)

    @property
    def running(self) -> bool:
        return bool(self._started)
