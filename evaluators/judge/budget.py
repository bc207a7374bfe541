"""A sliding one-minute budget of judge calls and tokens, shared by all judge metrics."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable


class Budget:
    def __init__(
        self,
        calls_per_minute: int,
        tokens_per_minute: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._calls, self._tokens = calls_per_minute, tokens_per_minute
        self._clock = clock
        self._spent: deque[tuple[float, int, int]] = deque()  # (time, calls, tokens)
        self._lock = threading.Lock()

    def _window(self) -> tuple[int, int]:
        horizon = self._clock() - 60.0
        while self._spent and self._spent[0][0] < horizon:
            self._spent.popleft()
        return sum(c for _, c, _ in self._spent), sum(t for _, _, t in self._spent)

    def reserve(self, calls: int = 1) -> str | None:
        """Reserve ``calls`` for this minute; None when granted, else the exhausted budget.

        Check and reservation are one step, so concurrent records cannot both
        take the last calls.
        """
        with self._lock:
            used_calls, used_tokens = self._window()
            if used_calls + calls > self._calls:
                return "budget_calls"
            if used_tokens >= self._tokens:
                return "budget_tokens"
            self._spent.append((self._clock(), calls, 0))
            return None

    def spend_tokens(self, tokens: int) -> None:
        with self._lock:
            self._spent.append((self._clock(), 0, tokens))
