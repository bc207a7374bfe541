"""Content-addressed cache of judge outputs: in-process LRU, or Redis.

Keys hash the prompt version, the model and the normalised inputs, so a
repeated answer or a repeated (claim, documents) pair is never judged twice,
and a new prompt version never reads an old verdict.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any, Protocol


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


class JudgeCache(Protocol):
    def get(self, key: str) -> str | None: ...
    def put(self, key: str, value: str) -> None: ...


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


class RedisCache:
    """Shared by every collector replica; entries expire after ``ttl_s``."""

    def __init__(
        self, url: str, ttl_s: int = 7 * 24 * 3600, prefix: str = "ragpulse:judge:"
    ) -> None:
        import redis

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


def make_cache(spec: str, size: int) -> JudgeCache:
    if spec.startswith(("redis://", "rediss://", "unix://")):
        return RedisCache(spec)
    return MemoryCache(size)
