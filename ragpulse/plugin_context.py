"""What every plug-in (evaluator or sink) gets from ragpulse: typed options and one context.

Options are a pydantic model declared on the plug-in class (``class Options``);
``evaluation.options.<name>`` and ``sinks.<name>`` in the settings file are
validated against it when the settings load, so a typo fails at start with a
message naming the plug-in, the key and the fix.

The context carries what is expensive or process-wide: the settings, the
metrics registry, and shared objects (loaded models, judge clients, caches)
created once per context through :meth:`PluginContext.shared`. Nothing of that
lives in module-level caches, so two collectors (or two tests) in one process
never see each other's models, clients or counters.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ragpulse.config import Settings
from ragpulse.options import PluginOptions, validate_options

if TYPE_CHECKING:
    from ragpulse.telemetry import CollectorMetrics

__all__ = ["PluginContext", "PluginOptions", "validate_options"]

log = logging.getLogger(__name__)
T = TypeVar("T")


def unimplemented(cls: type) -> list[str]:
    """The abstract methods ``cls`` leaves abstract, for a plug-in contract's (evaluator,
    sink, source) ``__init_subclass__`` to refuse a plug-in class when it is defined
    (Python's own check waits for the first instance; ``__abstractmethods__`` is set only
    after ``__init_subclass__`` has run, so the methods are read here)."""
    declared = {name for base in cls.__mro__ for name in getattr(base, "__abstractmethods__", ())}
    declared |= {name for name, value in vars(cls).items() if _abstract(value)}
    return sorted(name for name in declared if _abstract(getattr(cls, name, None)))


def _abstract(value: object) -> bool:
    return bool(getattr(value, "__isabstractmethod__", False))


class PluginContext:
    """Settings, metrics and shared objects for the plug-ins of one collector or one run.

    Thread-safe. ``shared(key, factory)`` builds an object once per context; a
    slow build of one key never blocks another. ``close()`` closes whatever
    shared object has a ``close`` method (judge clients' event loops, say).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        metrics: CollectorMetrics | None = None,
        *,
        offline: bool = False,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings if settings is not None else Settings()
        self._metrics = metrics
        self.offline = offline
        """True for ``ragpulse eval``: judges wait for budget instead of skipping."""
        self._notify = notify
        self._objects: dict[Hashable, Any] = {}
        self._key_locks: dict[Hashable, threading.Lock] = {}
        self._lock = threading.Lock()

    @property
    def metrics(self) -> CollectorMetrics:
        """The registry's metrics; a context given none builds its own on first use (an
        offline run may never use it, and prometheus_client costs a short run ~20 ms)."""
        if self._metrics is None:
            from ragpulse.telemetry import CollectorMetrics

            with self._lock:
                if self._metrics is None:
                    self._metrics = CollectorMetrics()
        return self._metrics

    def shared(self, key: Hashable, factory: Callable[[], T]) -> T:
        """The object stored under ``key``, built by ``factory`` the first time."""
        with self._lock:
            if key in self._objects:
                return cast(T, self._objects[key])
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                if key in self._objects:
                    return cast(T, self._objects[key])
            value = factory()  # outside the context lock: loads can take seconds
            with self._lock:
                self._objects[key] = value
            return value

    def notify(self, message: str) -> None:
        """A status line for whoever runs the plug-ins (the CLI's progress bar); else logged."""
        if self._notify is not None:
            self._notify(message)
        else:
            log.info("%s", message)

    def close(self) -> None:
        with self._lock:
            objects, self._objects = list(self._objects.values()), {}
        for obj in objects:
            close = getattr(obj, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:
                    log.exception("closing %s failed", type(obj).__name__)
