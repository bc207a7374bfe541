"""The file side of ``ragpulse eval``: checks before anything loads, streaming reads,
bounded batches, and signals that stop a run cleanly.

Everything here is cheap and runs before (or between) evaluator batches: a bad
path or a gzip file is refused in milliseconds instead of after the models load,
and an interrupted run leaves whole lines only. The harness and replay stream too
(:class:`Feed`, :class:`StreamedOutput`): rows are written as they are scored.
"""

from __future__ import annotations

import os
import queue
import signal
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType, TracebackType
from typing import Generic, TextIO, TypeVar

from ragpulse.offline.json_rows import Layout, count_rows, json_rows, layout_of
from ragpulse.offline.score import ParsedLine, parse_line

T = TypeVar("T")

MAX_LINE_CHARS = 256 * 1024 * 1024
"""A longer line is not parsed: it is kept as an error row (its first 1,000 characters),
read past in 1 MiB pieces, so one runaway line cannot take the machine's memory."""

BATCH_CHARS = 32 * 1024 * 1024
"""A batch ends once its rows hold this many characters, whatever ``--batch-size`` says."""

_SNIFF_BYTES = 8192
_MAGIC = (
    (b"\x1f\x8b", "gzip-compressed", "gunzip -k"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed", "zstd -d"),
    (b"\xfd7zXZ\x00", "xz-compressed", "xz -dk"),
    (b"BZh", "bzip2-compressed", "bunzip2 -k"),
    (b"PK\x03\x04", "a zip archive", "unzip"),
)


def path_problem(source: Path, output: Path, folder_ok: bool = False) -> str | None:
    """Why ``source`` cannot be read or ``output`` cannot be written; None when both can.

    ``folder_ok``: ``source`` may be a folder of ``*.jsonl`` files (``eval --replay``).
    """
    if not source.exists():
        return f"no such input file: {source}"
    if source.is_dir():
        if not folder_ok:
            return f"input is a folder, not a file: {source}"
        if not os.access(source, os.R_OK | os.X_OK):
            return f"cannot read input folder {source}: permission denied"
    elif not source.is_file():
        return f"input is not a regular file: {source}"
    else:
        try:
            with source.open("rb"):
                pass
        except OSError as exc:
            return f"cannot read input file {source}: {exc.strerror or exc}"
    if output.is_dir():
        return f"output is a folder, not a file: {output}"
    if output.exists():
        if source.is_file() and os.path.samefile(source, output):
            return f"output is the input file: {output} (it would be overwritten)"
        if not os.access(output, os.W_OK):
            return f"cannot write output file {output}: permission denied"
        return None
    folder = output.parent
    while not folder.exists():  # the first folder that exists decides whether mkdir can work
        folder = folder.parent
    if not folder.is_dir():
        return f"cannot create the output's folder: {folder} is a file"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot write the output into {folder}: permission denied"
    return None


def not_text(path: Path) -> str | None:
    """Why ``path`` is evidently not JSONL text (empty, compressed, binary); else None."""
    with path.open("rb") as f:
        head = f.read(_SNIFF_BYTES)
    if not head:
        return f"no rows: {path} is empty"
    for magic, what, command in _MAGIC:
        if head.startswith(magic):
            return f"{path} is {what}, not JSONL text: decompress it first ({command} {path})"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return f"{path} is UTF-16 text; ragpulse reads UTF-8 JSONL (iconv -f UTF-16 -t UTF-8)"
    if b"\x00" in head:
        return f"{path} is binary (NUL bytes in its first {len(head)} bytes), not JSONL text"
    return None


def count_lines(path: Path) -> int:
    """Lines in ``path``, counted in 1 MiB binary pieces (for the progress bar's total)."""
    lines, last = 0, b"\n"
    with path.open("rb") as f:
        while piece := f.read(1 << 20):
            lines += piece.count(b"\n")
            last = piece[-1:]
    return lines + (last != b"\n")


def open_text(path: Path) -> TextIO:
    """UTF-8 (a leading byte-order mark dropped); undecodable bytes become U+FFFD.

    Lines end at ``\\n`` only, so line numbers agree with ``wc -l`` and editors.
    """
    return path.open(encoding="utf-8-sig", errors="replace", newline="\n")


def read_rows(
    f: TextIO, max_line_chars: int = MAX_LINE_CHARS, keep_text: bool = True
) -> Iterator[ParsedLine]:
    """Parse ``f`` one line at a time; never holds more than one line of it. ``keep_text``:
    a row keeps its line (:func:`~ragpulse.offline.score.parse_line`)."""
    n = 0
    while raw := f.readline(max_line_chars + 1):
        n += 1
        if len(raw) > max_line_chars and not raw.endswith("\n"):
            total, head = len(raw), raw[:1000]
            del raw
            while piece := f.readline(1 << 20):  # the rest of the line, dropped as read
                total += len(piece)
                if piece.endswith("\n"):
                    break
            error = f"line is {total} characters long, over the {max_line_chars} limit"
            yield ParsedLine(n, None, error, head, size=len(head))
            continue
        parsed = parse_line(n, raw, keep_text=keep_text)
        del raw  # the parsed row (and the line, if short) is all that is kept for the batch
        if parsed is not None:
            yield parsed


def input_rows(
    f: TextIO, layout: Layout, max_line_chars: int = MAX_LINE_CHARS, keep_text: bool = True
) -> Iterator[ParsedLine]:
    """The rows of ``f`` as :func:`~ragpulse.offline.json_rows.layout_of` found them laid
    out: JSON Lines, or a JSON document's array (a row bounded as a line is)."""
    if layout.kind == "jsonl":
        return read_rows(f, max_line_chars, keep_text)
    return json_rows(f, layout, max_line_chars, keep_text=keep_text)


def input_layout(path: Path) -> Layout | str:
    """How the rows lie in ``path`` (JSON Lines, or a JSON document's array), or one line
    saying why it cannot be read: evidently not text (:func:`not_text`), or a JSON
    document of another shape (:func:`~ragpulse.offline.json_rows.layout_of`)."""
    problem = not_text(path)
    if problem:
        return problem
    with open_text(path) as f:
        return layout_of(f, path)


def row_count(path: Path, layout: Layout) -> int:
    """Rows (lines, for JSON Lines) in ``path``, for the progress bar's total."""
    if layout.kind == "jsonl":
        return count_lines(path)
    with open_text(path) as f:
        return count_rows(f, layout)


def batches(
    rows: Iterable[ParsedLine], max_rows: int, max_chars: int = BATCH_CHARS
) -> Iterator[list[ParsedLine]]:
    """Consecutive rows, at most ``max_rows`` and about ``max_chars`` (one row past it) each."""
    batch: list[ParsedLine] = []
    chars = 0
    for row in rows:
        batch.append(row)
        chars += row.size
        if len(batch) >= max(1, max_rows) or chars >= max_chars:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


class Interrupted(BaseException):
    """SIGINT or SIGTERM during an offline run (a BaseException, like KeyboardInterrupt,
    so that no evaluator's ``except Exception`` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


class SignalStop:
    """Turns SIGINT and SIGTERM into :class:`Interrupted`, at once, except inside
    :meth:`writing`: a signal there is raised when the write is done, so the output
    ends on a whole line. Outside the main thread (no signals there) it does nothing."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._writing = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> SignalStop:
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        except ValueError:  # not the main thread
            pass
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)  # type: ignore[arg-type]

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum
        if not self._writing:
            raise Interrupted(signum)

    @contextmanager
    def writing(self) -> Iterator[None]:
        self._writing = True
        try:
            yield
        finally:
            self._writing = False
        if self.signum is not None:
            raise Interrupted(self.signum)


# --- Streaming runs (harness, replay) ------------------------------------------------------


class _End:
    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class Feed(Generic[T]):
    """Work finished on other threads (calls to the user's functions), handed to the main
    thread in batches: the main thread scores and writes while the calls go on.

    ``put`` and ``close`` may be called from any thread; ``batches`` and ``drain`` from
    one consumer. Waiting in ``batches`` is interruptible by a signal (SIGINT, SIGTERM).
    """

    def __init__(self) -> None:
        self._queue: queue.Queue[T | _End] = queue.Queue()

    def put(self, item: T) -> None:
        self._queue.put(item)

    def close(self, error: BaseException | None = None) -> None:
        """No more items; ``error``: why the producer stopped early (raised by ``batches``)."""
        self._queue.put(_End(error))

    def batches(self, max_items: int) -> Iterator[list[T]]:
        """Blocks for one item, then takes what else is ready, up to ``max_items``: small
        batches while the calls are slow, full ones once they outrun the scoring."""
        while True:
            batch: list[T] = []
            item = self._queue.get()
            while not isinstance(item, _End):
                batch.append(item)
                if len(batch) >= max(1, max_items):
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch:
                yield batch
            if isinstance(item, _End):
                if item.error is not None:
                    raise item.error
                return

    def drain(self) -> list[T]:
        """Everything ready now, without waiting (after an interrupt)."""
        out: list[T] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return out
            if not isinstance(item, _End):
                out.append(item)


class StreamedOutput:
    """An offline run's output, one JSON line per finished row, flushed as it goes.

    Lines are written in the order rows finish (each carries its input ``line``), a
    signal never cuts one (:meth:`SignalStop.writing`), and :meth:`finish` rewrites the
    file in key order once the run is complete, so a finished run is reproducible.
    """

    def __init__(self, path: Path, stop: SignalStop) -> None:
        self.path = path
        self.stop = stop
        self.written = 0
        self._lines: dict[tuple[int, ...], str] = {}
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO | None = path.open("w", encoding="utf-8")

    def write(self, lines: Iterable[tuple[tuple[int, ...], str]]) -> None:
        if self._file is None:
            raise ValueError("output already finished")
        with self.stop.writing():
            for key, text in lines:
                self._file.write(text + "\n")
                self._lines[key] = text
                self.written += 1
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def finish(self) -> None:
        """Close, then put the lines in key order (written aside, then moved over)."""
        self.close()
        aside = self.path.with_name(f".{self.path.name}.sorting")
        with aside.open("w", encoding="utf-8") as f:
            for key in sorted(self._lines):
                f.write(self._lines[key] + "\n")
        os.replace(aside, self.path)

    def lines(self) -> dict[tuple[int, ...], str]:
        return self._lines
