"""Derived tables kept on disk between processes, so a short run does not rebuild them.

The injection scanner's guard table is a pure function of the rules (about 0.3 s
to derive): ``ragpulse eval`` over a small file would spend a third of its time
on it. It is stored as a pickle under ``$RAGPULSE_CACHE_DIR`` (default
``~/.cache/ragpulse``), named by a hash of everything it is derived from, so an
edited rule or algorithm never reads a stale table. A pickle runs code when
loaded, so only a file that this user owns and that nobody else can write is
read; anything else, and any failure, just rebuilds the table in memory.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

log = logging.getLogger(__name__)
CACHE_ENV = "RAGPULSE_CACHE_DIR"
T = TypeVar("T")


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "ragpulse")


def digest(parts: Iterable[str | bytes]) -> str:
    h = hashlib.sha256(sys.version.encode())
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()[:24]


def _trusted(path: Path) -> bool:
    info = path.stat()
    writable_by_others = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    return info.st_uid == os.getuid() and not writable_by_others


def cached(
    name: str,
    key: str,
    build: Callable[[], T],
    kind: type[T],
    fresh: Callable[[T], bool] = lambda _: True,
    folder: str = "tables",
) -> T:
    """``build()``, or its result from an earlier process with the same ``key`` that
    ``fresh`` accepts (a stale one is replaced), kept in ``folder`` of the cache."""
    path = cache_root() / folder / f"{name}-{key}.pickle"
    try:
        if path.is_file() and _trusted(path):
            with path.open("rb") as f:
                value = pickle.load(f)
            if isinstance(value, kind) and fresh(value):
                return value
    except Exception as exc:  # a torn or foreign file: rebuild
        log.debug("ignoring cached %s: %r", path, exc)
    value = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)  # atomic: concurrent processes never read half a file
    except OSError as exc:  # read-only home, full disk: fine, just slower next time
        log.debug("cannot cache %s: %r", path, exc)
    return value
