"""Process-wide settings for the commands that score many records (`serve`, `eval`).

Garbage collection: CPython runs a collection every 700 new container objects by
default, and a full one whenever objects that outlived two collections grow by a
quarter. A collector makes a few hundred containers per trace (spans, documents,
results) and keeps the latest records for late feedback, so with the defaults the
collections cost as much as the evaluation itself (measured in-process on the bench
workload: 983 traces per CPU-second with the defaults, 1,928 with the settings below).
Everything built at start-up (modules, settings, compiled rules) lives as long as the
process: :func:`gc.freeze` moves it out of every later collection.

A young collection runs every 100,000 new containers instead of 700. Each one walks
every young object still alive, and until the late-feedback memory is full (10,000
records, about 20 containers each) nearly all of them are: every 10,000, the first
12,000 traces of the bench took 29 collections, 32 us of garbage collection per trace;
every 100,000, two, 8.5 us per trace, each pause under 60 ms. Reference cycles (rare:
most garbage goes with its last reference) wait for at most those 100,000 allocations.
"""

from __future__ import annotations

import gc

YOUNG_COLLECTION_EVERY = 100_000
"""New container objects between two young collections (CPython's default: 700)."""


def tune_for_throughput() -> None:
    """Call once start-up is done: freeze what it built, collect young objects less often."""
    # No collection first: start-up leaves a few dozen unreachable objects (the automatic
    # collections during imports found the rest), not worth the ~20 ms a full one takes.
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, middle, old)
