"""One queue of tokenised rows per loaded model, run in forward passes bounded by tokens.

Every evaluator that uses a model (``context.shared`` loads it once) puts its rows here:
the texts, pairs and windows of a whole batch of records, already tokenised by the
caller (a fast tokenizer's batch call, on the caller's thread). One daemon thread per
model takes what is waiting (priority requests first, then in order), sorts a window of
it by length and cuts it into passes of at most ``max_batch_tokens`` padded tokens
(rows x the longest row) and at most the smallest ``max_rows`` a request asked for, so
rows of many records and evaluators share a pass and padding stays small. Each row's
output is put back where its request expects it.

A pass that raises costs its own rows only: they carry the error, every other row is
run. A pass that runs out of device memory is split in two and retried, down to one row.

Tokens waiting are counted (:attr:`ForwardQueue.waiting_tokens`) so that the tier can
bound them; busy time is counted so that the tier can charge its budget and estimate
its capacity (:class:`ForwardQueues`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from ragpulse.evaluators.models.placement import out_of_memory

if TYPE_CHECKING:  # numpy is imported where it is used: deciding which
    import numpy as np  # evaluators run must not pay for it

log = logging.getLogger(__name__)

Forward = Callable[[dict[str, "np.ndarray"]], "np.ndarray"]
"""Model inputs (``input_ids``, ``attention_mask``[, ``token_type_ids``]) -> logits."""

WINDOW = 4
"""A window of ``WINDOW`` x ``max_batch_tokens`` waiting tokens is sorted by length at a time:
long enough that passes of one length fill, short enough that nothing waits behind many."""


class QueueClosed(RuntimeError):
    """The model's queue was closed (the collector is stopping) before the row ran."""


class Rows:
    """One request: tokenised rows and, once each has run, its output or its error.

    ``outputs[i]`` is the logits of row ``i`` (``(labels,)``, or ``(tokens, labels)`` for a
    token head, cut to the row's own tokens); ``errors[i]`` is what its pass raised.
    """

    def __init__(
        self,
        ids: list[list[int]],
        types: list[list[int]] | None,
        *,
        priority: bool = False,
        max_rows: int | None = None,
    ) -> None:
        self.ids, self.types = ids, types
        self.priority, self.max_rows = priority, max_rows
        self.outputs: list[np.ndarray | None] = [None] * len(ids)
        self.errors: list[BaseException | None] = [None] * len(ids)
        self.taken = 0  # rows handed to passes so far (the runner's cursor)
        self._left = len(ids)
        self._lock = threading.Lock()
        self._done = threading.Event()
        if not ids:
            self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every row has run (or failed); False on timeout."""
        return self._done.wait(timeout)

    def _put(self, index: int, output: np.ndarray | None, error: BaseException | None) -> None:
        self.outputs[index], self.errors[index] = output, error
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self._done.set()


class ForwardQueue:
    """Rows waiting for one model, and the thread that runs them. Thread-safe."""

    def __init__(
        self,
        forward: Forward,
        *,
        pad_id: int,
        inputs: Sequence[str],
        token_head: bool,
        max_batch_tokens: int,
        name: str,
    ) -> None:
        self._forward = forward
        self._pad_id = pad_id
        self._inputs = list(inputs)
        self._token_head = token_head
        self.max_batch_tokens = max_batch_tokens
        self.name = name
        self.gate: threading.Event | None = None
        """When set by the tier: a pass starts only while it is set (on the CPU, the cheap
        tier is idle), so a busy cheap tier waits for one pass at most."""
        self._waiting: list[Rows] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.waiting_tokens = 0
        """Tokens submitted and not yet in a pass."""
        self.busy_s = 0.0
        """Wall-clock seconds spent in passes (device time, on a GPU)."""
        self.busy_cpu_s = 0.0
        """CPU seconds of the runner thread in passes (padding, launching, waiting)."""
        self.passes = 0
        self.rows_run = 0
        self.padded_tokens = 0
        self.tokens_run = 0

    def submit(
        self,
        ids: list[list[int]],
        types: list[list[int]] | None = None,
        *,
        priority: bool = False,
        max_rows: int | None = None,
    ) -> Rows:
        """Queue tokenised rows (``types``: token type ids, for models that read them)."""
        rows = Rows(ids, types, priority=priority, max_rows=max_rows)
        if not ids:
            return rows
        with self._cond:
            if self._closed:
                for i in range(len(ids)):
                    rows._put(i, None, QueueClosed(f"{self.name}: the model's queue is closed"))
                return rows
            self._waiting.append(rows)
            self.waiting_tokens += sum(map(len, ids))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"ragpulse-model-{self.name}", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        return rows

    def close(self) -> None:
        """Stop the runner; rows not run yet fail with :class:`QueueClosed`."""
        with self._cond:
            self._closed = True
            left, self._waiting = self._waiting, []
            self._cond.notify_all()
        for rows in left:
            for i in range(rows.taken, len(rows.ids)):
                rows._put(i, None, QueueClosed(f"{self.name}: the model's queue closed"))

    # -- the runner ---------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._waiting) or self._closed)
            self._wait_gate()  # rows that come meanwhile join the window
            with self._cond:
                if self._closed:
                    return
                window = self._take_window()
            for i, part in enumerate(self._passes(window)):
                if i:
                    self._wait_gate()
                self._run_pass(part)

    def _wait_gate(self) -> None:
        gate = self.gate
        while gate is not None and not gate.wait(0.5) and not self._closed:
            gate = self.gate

    def _take_window(self) -> list[tuple[Rows, int]]:
        """(request, row) pairs, priority requests first, up to a window of tokens."""
        budget = WINDOW * self.max_batch_tokens
        taken: list[tuple[Rows, int]] = []
        tokens = 0
        for want_priority in (True, False):
            for rows in self._waiting:
                if rows.priority != want_priority:
                    continue
                while rows.taken < len(rows.ids) and (not taken or tokens < budget):
                    tokens += len(rows.ids[rows.taken])
                    taken.append((rows, rows.taken))
                    rows.taken += 1
                if tokens >= budget:
                    break
            if tokens >= budget:
                break
        self._waiting = [r for r in self._waiting if r.taken < len(r.ids)]
        self.waiting_tokens -= tokens
        return taken

    def _passes(self, window: list[tuple[Rows, int]]) -> list[list[tuple[Rows, int]]]:
        """The window sorted by length, cut where a pass would pass its bounds."""
        window.sort(key=lambda item: len(item[0].ids[item[1]]))
        passes: list[list[tuple[Rows, int]]] = []
        current: list[tuple[Rows, int]] = []
        cap: int | None = None  # the fewest rows a request in the pass allows
        for rows, i in window:
            length = len(rows.ids[i])  # the longest so far: the window is sorted
            wanted = _least(cap, rows.max_rows)
            more = len(current) + 1
            if current and (
                more * length > self.max_batch_tokens or (wanted is not None and more > wanted)
            ):
                passes.append(current)
                current, wanted = [], rows.max_rows
            current.append((rows, i))
            cap = wanted
        if current:
            passes.append(current)
        return passes

    def _run_pass(self, part: list[tuple[Rows, int]]) -> None:
        import numpy as np

        lengths = [len(rows.ids[i]) for rows, i in part]
        width = max(lengths)
        ids = np.full((len(part), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(part), width), dtype=np.int64)
        types = np.zeros((len(part), width), dtype=np.int64)
        for row, ((rows, i), n) in enumerate(zip(part, lengths, strict=True)):
            ids[row, :n] = rows.ids[i]
            mask[row, :n] = 1
            if rows.types is not None:
                types[row, :n] = rows.types[i]
        inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            out = self._forward({k: inputs[k] for k in self._inputs})
        except Exception as exc:
            self._account(wall, cpu, 0, 0, 0)
            if out_of_memory(exc) and len(part) > 1:
                log.warning(
                    "%s: out of memory on a pass of %d rows x %d tokens; running it in halves "
                    "(lower evaluation.model.max_batch_tokens to avoid this)",
                    self.name, len(part), width,
                )  # fmt: skip
                half = len(part) // 2
                self._run_pass(part[:half])
                self._run_pass(part[half:])
                return
            log.warning("%s: a forward pass of %d rows failed: %r", self.name, len(part), exc)
            for rows, i in part:
                rows._put(i, None, exc)
            return
        self._account(wall, cpu, len(part), len(part) * width, sum(lengths))
        for row, ((rows, i), n) in enumerate(zip(part, lengths, strict=True)):
            rows._put(i, out[row, :n].copy() if self._token_head else out[row], None)

    def _account(self, wall: float, cpu: float, rows: int, padded: int, tokens: int) -> None:
        with self._cond:
            self.busy_s += time.perf_counter() - wall
            self.busy_cpu_s += time.thread_time() - cpu
            self.passes += 1 if rows else 0
            self.rows_run += rows
            self.padded_tokens += padded
            self.tokens_run += tokens


class ForwardQueues:
    """Every model queue of one plug-in context: what the model tier bounds and charges."""

    def __init__(self) -> None:
        self._queues: list[ForwardQueue] = []
        self._lock = threading.Lock()

    def add(self, queue: ForwardQueue) -> None:
        with self._lock:
            if all(q is not queue for q in self._queues):
                self._queues.append(queue)

    def __iter__(self) -> Iterator[ForwardQueue]:
        with self._lock:
            return iter(list(self._queues))

    @property
    def waiting_tokens(self) -> int:
        return sum(q.waiting_tokens for q in self)

    def busy(self) -> tuple[float, float]:
        """(wall seconds, runner CPU seconds) spent in passes so far, over every model."""
        queues = list(self)
        return sum(q.busy_s for q in queues), sum(q.busy_cpu_s for q in queues)

    def set_gate(self, gate: threading.Event | None) -> None:
        for queue in self:
            queue.gate = gate

    def close(self) -> None:
        for queue in self:
            queue.close()


def _least(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


FORWARD_QUEUES = "ragpulse/forward-queues"
"""The plug-in context key of the context's :class:`ForwardQueues`."""
