"""Per-partition low watermark of finished offsets, for at-least-once commits.

A Kafka message is *finished* when every trace it carried spans for has been
evaluated and exported, or deliberately dropped and counted. Messages finish
out of order (traces complete at different times), so the offset that may be
committed is the lowest offset still in flight: committing past it could lose
a message if the process died now.
"""

from __future__ import annotations

import threading
from collections import deque


class PartitionOffsets:
    """Offsets of one partition in read order; thread-safe.

    ``started`` is called by the consumer thread in increasing offset order;
    ``finished`` by whichever thread finished the message (the evaluation
    worker, or the consumer itself for poison messages).
    """

    def __init__(self) -> None:
        self._in_flight: deque[int] = deque()
        self._finished: set[int] = set()
        self._next = -1  # one past the highest offset read
        self._lock = threading.Lock()

    def started(self, offset: int) -> None:
        with self._lock:
            self._in_flight.append(offset)
            self._next = max(self._next, offset + 1)

    def finished(self, offset: int) -> None:
        with self._lock:
            self._finished.add(offset)
            while self._in_flight and self._in_flight[0] in self._finished:
                self._finished.discard(self._in_flight.popleft())

    def committable(self) -> int | None:
        """The offset to commit (next to read after a restart), or None if nothing was read."""
        with self._lock:
            if self._in_flight:
                return self._in_flight[0]
            return self._next if self._next >= 0 else None

    @property
    def read_mark(self) -> int:
        """One past the highest offset read (recorded in commit metadata)."""
        return self._next

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)
