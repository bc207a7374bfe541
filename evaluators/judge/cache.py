"""Content-addressed cache of judge outputs: in-process LRU, Redis, or SQLite on disk.

Keys hash the prompt version, the model and the normalised inputs, so a
repeated answer or a repeated (claim, documents) pair is never judged twice,
and a new prompt version never reads an old verdict. Every backend stores the
same key (Redis adds a prefix), so a verdict means the same wherever it lives.

The disk backend is for offline runs: a second ``ragpulse eval`` over the same
file with the same judge makes no judge call at all. It is one SQLite file
(default ``$RAGPULSE_CACHE_DIR/judge-cache.sqlite3``), in WAL mode with a busy
timeout, so concurrent processes read and write it safely. A file that cannot
be opened or read (corrupt, not SQLite, foreign-owned, read-only disk) costs a
single warning and the run goes on with the in-memory cache only. It is bounded:
entries older than ``max_age_s`` and, past ``max_bytes``, the oldest entries are
deleted when it opens and every :data:`PRUNE_EVERY` writes; closing it checkpoints
the write-ahead log into the file, so no ``-wal`` file is left behind.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import stat
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Protocol

from ragpulse import extras
from ragpulse.config import JudgeSettings

log = logging.getLogger(__name__)
DISK_FILE = "judge-cache.sqlite3"
_BUSY_TIMEOUT_S = 30.0  # another process's write transaction: wait, never fail the run


def cache_key(prompt_id: str, model: str, inputs: dict[str, Any]) -> str:
    canonical = json.dumps(_normalise(inputs), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(f"{prompt_id}\\0{model}\\0{canonical}".encode()).hexdigest()


def _normalise(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


NO_VERDICT = "null"
"""Cached for what a judge was asked and left out of its answer: asking again would
cost a call per run for the same silence."""
PRUNE_EVERY = 1_000  # disk cache writes between two prunes


class JudgeCache(Protocol):
    def get(self, key: str) -> str | None: ...
    def put(self, key: str, value: str) -> None: ...
    def close(self) -> None: ...


class MemoryCache:
    def __init__(self, size: int = 10_000) -> None:
        self._size = size
        self._data: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: str, value: str) -> None:
        if not self._size:
            return
        with self._lock:
            self._data[key] = value
            while len(self._data) > self._size:
                self._data.popitem(last=False)

    def close(self) -> None:
        pass


class RedisCache:
    """Shared by every collector replica; entries expire after ``ttl_s``."""

    def __init__(
        self, url: str, ttl_s: int = 7 * 24 * 3600, prefix: str = "ragpulse:judge:"
    ) -> None:
        try:
            import redis
        except ModuleNotFoundError as exc:
            what = "a redis:// judge cache (evaluation.judge.cache)"
            raise extras.MissingExtra(extras.needs("redis", what, [str(exc.name)])) from exc

        self._redis = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self._ttl, self._prefix = ttl_s, prefix

    def get(self, key: str) -> str | None:
        try:
            value = self._redis.get(self._prefix + key)
        except Exception:  # a cache outage costs calls, not results
            return None
        return value.decode() if isinstance(value, bytes) else None

    def put(self, key: str, value: str) -> None:
        try:
            self._redis.set(self._prefix + key, value, ex=self._ttl)
        except Exception:
            pass

    def close(self) -> None:
        self._redis.close()


class DiskCache:
    """An in-memory LRU in front of a SQLite file that outlives the process.

    The file is opened lazily (the first get or put), so a process that never
    calls the judge never touches it. Any SQLite or OS error disables the disk
    part for the rest of the process after one warning; the memory part goes on.
    """

    def __init__(
        self,
        path: Path,
        size: int = 10_000,
        max_bytes: int = 512 * 1024 * 1024,
        max_age_s: float = 30 * 24 * 3600.0,
    ) -> None:
        self.path = path
        self._memory = MemoryCache(size)
        self._max_bytes, self._max_age_s = max_bytes, max_age_s
        self._writes = 0
        self._db: sqlite3.Connection | None = None
        self._broken = False
        self._lock = threading.Lock()  # one connection, used from any thread, one at a time

    @property
    def usable(self) -> bool:
        """Whether the disk part works (opens it now if it was not opened yet)."""
        with self._lock:
            return self._connection() is not None

    def get(self, key: str) -> str | None:
        value = self._memory.get(key)
        if value is not None:
            return value
        with self._lock:
            db = self._connection()
            if db is None:
                return None
            try:
                row = db.execute("SELECT value FROM judge WHERE key = ?", (key,)).fetchone()
            except sqlite3.Error as exc:
                self._disable(f"cannot read it: {exc}")
                return None
        if row is None or not isinstance(row[0], str):
            return None
        self._memory.put(key, row[0])
        return row[0]

    def put(self, key: str, value: str) -> None:
        self._memory.put(key, value)
        with self._lock:
            db = self._connection()
            if db is None:
                return
            try:
                with db:  # one short transaction per verdict: a crash loses at most one
                    db.execute(
                        "INSERT OR REPLACE INTO judge (key, value, created) VALUES (?, ?, ?)",
                        (key, value, time.time()),
                    )
                self._writes += 1
                if self._writes % PRUNE_EVERY == 0:
                    self._prune(db)
            except sqlite3.Error as exc:
                self._disable(f"cannot write it: {exc}")

    def close(self) -> None:
        """Checkpoint the write-ahead log into the file and close it (no -wal file stays)."""
        with self._lock:
            if self._db is not None:
                try:
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.Error as exc:  # another process reads it: it checkpoints later
                    log.debug("judge cache checkpoint: %s", exc)
                self._db.close()
                self._db = None

    def prune(self) -> None:
        """Apply the age and size bounds now (they are applied on open and every
        :data:`PRUNE_EVERY` writes)."""
        with self._lock:
            db = self._connection()
            if db is None:
                return
            try:
                self._prune(db)
            except sqlite3.Error as exc:
                self._disable(f"cannot prune it: {exc}")

    def _prune(self, db: sqlite3.Connection) -> None:
        """Delete entries past the age bound, then the oldest past the size bound."""
        with db:
            db.execute("DELETE FROM judge WHERE created < ?", (time.time() - self._max_age_s,))
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
        used = (pages - free) * page_size
        if used > self._max_bytes:
            rows = db.execute("SELECT count(*) FROM judge").fetchone()[0]
            # Down to 90% of the bound, so that the next prune is not due at once.
            excess = int(rows * (1 - 0.9 * self._max_bytes / used)) + 1
            with db:
                db.execute(
                    "DELETE FROM judge WHERE key IN "
                    "(SELECT key FROM judge ORDER BY created LIMIT ?)",
                    (excess,),
                )
        db.execute("PRAGMA incremental_vacuum")  # give freed pages back (new files only)

    def _connection(self) -> sqlite3.Connection | None:
        if self._db is not None or self._broken:
            return self._db
        try:
            self._db = self._open()
        except (sqlite3.Error, OSError) as exc:
            self._disable(f"cannot open it: {exc}")
        return self._db

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.path.exists():
            _check_owner(self.path)
        else:  # created private: verdicts quote the evaluated content
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        db = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S, check_same_thread=False)
        try:
            db.execute("PRAGMA auto_vacuum=INCREMENTAL")  # takes effect in a new file only
            db.execute("PRAGMA journal_mode=WAL")  # readers never block the writer
            db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable enough for a cache
            with db:
                db.execute(
                    "CREATE TABLE IF NOT EXISTS judge "
                    "(key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL)"
                )
                db.execute("CREATE INDEX IF NOT EXISTS judge_created ON judge (created)")
            db.execute("SELECT count(*) FROM judge WHERE key = ''").fetchone()  # readable?
            self._prune(db)
        except sqlite3.Error:
            db.close()
            raise
        return db

    def _disable(self, why: str) -> None:
        """Called under the lock: warn once, close, and go on with memory only."""
        if not self._broken:
            log.warning(
                "judge cache %s is not usable (%s); going on without a persistent cache "
                "(delete the file, or set evaluation.judge.cache: memory)",
                self.path, why,
            )  # fmt: skip
        self._broken = True
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
            self._db = None


def _check_owner(path: Path) -> None:
    """Cached verdicts become scores: refuse a file another user owns or may write."""
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        raise OSError(f"{path} is not a regular file")
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise OSError(f"{path} is owned or writable by another user")


def disk_path(spec: str) -> Path:
    """The SQLite file of a ``disk`` or ``disk:PATH`` setting."""
    from ragpulse.disk_cache import cache_root

    _, _, given = spec.partition(":")
    return Path(given).expanduser() if given else cache_root() / DISK_FILE


def resolve(spec: str, offline: bool) -> str:
    """``auto``: the disk cache offline (``ragpulse eval``), memory online (``serve``)."""
    if spec == "auto":
        return "disk" if offline else "memory"
    return spec


def cache_for(settings: JudgeSettings, offline: bool = False) -> JudgeCache:
    """The cache the judge settings ask for (``cache``, ``cache_size`` and the disk bounds)."""
    return make_cache(
        settings.cache,
        settings.cache_size,
        offline,
        max_bytes=settings.cache_max_mb * 1024 * 1024,
        max_age_s=settings.cache_max_age_days * 24 * 3600.0,
    )


def make_cache(
    spec: str,
    size: int,
    offline: bool = False,
    max_bytes: int = 512 * 1024 * 1024,
    max_age_s: float = 30 * 24 * 3600.0,
) -> JudgeCache:
    spec = resolve(spec, offline)
    if spec.startswith(("redis://", "rediss://", "unix://")):
        return RedisCache(spec)
    if spec == "disk" or spec.startswith("disk:"):
        return DiskCache(disk_path(spec), size, max_bytes, max_age_s)
    return MemoryCache(size)
