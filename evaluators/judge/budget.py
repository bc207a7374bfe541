"""A sliding one-minute budget of judge calls and tokens, shared by all judge metrics.

Online (``serve``) a record over budget is skipped; offline (``ragpulse eval``)
the judge waits for the window to make room (``seconds_until_room``), so every
row is judged at the budget's pace.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextvars import ContextVar

#: The current record's reservation, set by the judge evaluator for each record's task.
#: The client awaits it on a cache miss, right before a real call: a record answered
#: wholly from the cache never takes (nor waits for) budget.
record_reservation: ContextVar[Callable[[], Awaitable[None]] | None] = ContextVar(
    "ragpulse_judge_record_reservation", default=None
)


class OverBudget(Exception):
    """The budget refused the record's calls; ``refusal`` is ``budget_calls``/``budget_tokens``."""

    def __init__(self, refusal: str) -> None:
        super().__init__(refusal)
        self.refusal = refusal


async def before_call() -> None:
    """Reserve the current record's calls (once per record) before a real judge call."""
    reserve = record_reservation.get()
    if reserve is not None:
        await reserve()


class Budget:
    def __init__(
        self,
        calls_per_minute: int,
        tokens_per_minute: int,
        clock: Callable[[], float] = time.monotonic,
        window_s: float = 60.0,
    ) -> None:
        self._calls, self._tokens = calls_per_minute, tokens_per_minute
        self._clock = clock
        self._window_s = window_s  # a minute; tests shorten it
        self._spent: deque[tuple[float, int, int]] = deque()  # (time, calls, tokens)
        self._lock = threading.Lock()

    def _window(self) -> tuple[int, int]:
        horizon = self._clock() - self._window_s
        while self._spent and self._spent[0][0] < horizon:
            self._spent.popleft()
        return sum(c for _, c, _ in self._spent), sum(t for _, _, t in self._spent)

    def reserve(self, calls: int = 1) -> str | None:
        """Reserve ``calls`` for this minute; None when granted, else the exhausted budget.

        Check and reservation are one step, so concurrent records cannot both
        take the last calls.
        """
        with self._lock:
            refusal = self._refusal(*self._window(), calls)
            if refusal is None:
                self._spent.append((self._clock(), calls, 0))
            return refusal

    def _refusal(self, used_calls: int, used_tokens: int, calls: int) -> str | None:
        """Which budget ``calls`` more would exceed after ``used_*`` this window, if any."""
        if used_calls + calls > self._calls:
            return "budget_calls"
        if used_tokens >= self._tokens:
            return "budget_tokens"
        return None

    def seconds_until_room(self, calls: int = 1) -> float | None:
        """How long until ``reserve(calls)`` can succeed; None when it never can."""
        if calls > self._calls:
            return None
        with self._lock:
            used_calls, used_tokens = self._window()
            now, wait = self._clock(), 0.0
            for at, spent_calls, spent_tokens in self._spent:  # oldest first
                if self._refusal(used_calls, used_tokens, calls) is None:
                    break
                used_calls -= spent_calls
                used_tokens -= spent_tokens
                wait = at + self._window_s - now
            return max(0.0, wait)

    def spend_tokens(self, tokens: int) -> None:
        with self._lock:
            self._spent.append((self._clock(), 0, tokens))
