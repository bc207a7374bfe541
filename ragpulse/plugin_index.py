"""The installed plug-ins' entry points, read once and kept on disk while ``sys.path`` is
unchanged.

Listing entry points reads the metadata of every installed distribution: 20-30 ms in an
environment of a few hundred, on every ``ragpulse`` command. The listing of ragpulse's
groups is kept under ``$RAGPULSE_CACHE_DIR`` (:mod:`ragpulse.disk_cache`) with the
modification time of every ``sys.path`` folder, as stevedore keeps its entry-point cache:
installing or removing a distribution adds or removes a folder in one of them, so the next
command reads the metadata again. A distribution's metadata edited in place (not through
an installer) is seen once the cache folder is cleared.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from functools import cache
from importlib.metadata import EntryPoint, PackageNotFoundError, distribution, entry_points

from ragpulse.disk_cache import cached, digest

log = logging.getLogger(__name__)

EVALUATOR_GROUP = "ragpulse.evaluators"
SINK_GROUP = "ragpulse.sinks"
SOURCE_GROUP = "ragpulse.sources"
GROUPS = (EVALUATOR_GROUP, SINK_GROUP, SOURCE_GROUP)

Listing = dict[str, dict[str, str]]
"""group -> entry-point name -> value (``module:attribute``); under ``OWN``, ragpulse's own
evaluators (their name -> value, as its distribution declares them)."""
OWN = "own"


def _read() -> Listing:
    installed = entry_points()  # one entry per distribution name, the first on sys.path
    listing: Listing = {
        group: {ep.name: ep.value for ep in installed.select(group=group)} for group in GROUPS
    }
    try:
        # From ragpulse's own entry_points.txt: asking each entry point for its
        # distribution's name parses that distribution's METADATA once per entry point.
        declared = distribution("ragpulse").entry_points.select(group=EVALUATOR_GROUP)
        listing[OWN] = {ep.name: ep.value for ep in declared}
    except PackageNotFoundError:
        listing[OWN] = {}
    return listing


def _folders() -> tuple[tuple[str, int], ...]:
    """Every ``sys.path`` folder with its modification time (-1 when it does not exist)."""
    folders = []
    for folder in sys.path:
        try:
            folders.append((folder, os.stat(folder or ".").st_mtime_ns))
        except OSError:
            folders.append((folder, -1))
    return tuple(folders)


@cache
def _listing() -> Listing:
    # One file per sys.path, replaced when a folder's time differs from the one it was
    # read at (not one file per state, which would pile up with every installation).
    folders = _folders()
    key = digest([*GROUPS, *(folder for folder, _ in folders)])
    stored = cached(
        "listing",
        key,
        lambda: (folders, _read()),
        tuple,
        fresh=lambda s: s[0] == folders,
        folder="entry-points",
    )
    listing: Listing = stored[1]
    return listing


def group(name: str) -> dict[str, EntryPoint]:
    """The entry points of one of :data:`GROUPS`, by name."""
    return {n: EntryPoint(n, value, name) for n, value in _listing().get(name, {}).items()}


def own_evaluators() -> dict[str, str]:
    """ragpulse's own evaluator entry points (name -> ``module:attribute``)."""
    return dict(_listing().get(OWN, {}))


def own(name: str, value: str) -> bool:
    """Whether ragpulse's own distribution declares this evaluator entry point."""
    return _listing().get(OWN, {}).get(name) == value


def _stamp(module: str) -> str:
    """``module``'s file and modification time, found without importing it (its parent
    packages are imported: keep a source's package ``__init__`` light)."""
    try:
        spec = importlib.util.find_spec(module)
        origin = spec.origin if spec is not None else None
        return f"{origin}@{os.stat(origin).st_mtime_ns}" if origin else "missing"
    except Exception:  # a package that fails to import: its source fails when used
        return "missing"


def _read_source_urls() -> dict[str, str]:
    found = {}
    for name, ep in sorted(group(SOURCE_GROUP).items()):
        try:
            shape = getattr(ep.load(), "url_shape", None)
        except Exception as exc:  # said when the source is asked for by name
            log.debug("source %s does not load: %r", name, exc)
            continue
        if isinstance(shape, str):
            found[name] = shape
    return found


@cache
def source_urls() -> dict[str, str]:
    """Registered sources that read a URL (a tracing tool's stored traces), each with the
    URL's shape (``phoenix`` -> ``phoenix://HOST:PORT/PROJECT``), by name: what the help
    texts list. Read from the classes (importing every source, ~1 s) once,
    then kept on disk while the entry points and their modules are unchanged."""
    entries = group(SOURCE_GROUP)
    stamps = [f"{name}={ep.value}:{_stamp(ep.module)}" for name, ep in entries.items()]
    return cached("source-urls", digest(stamps), _read_source_urls, dict)
