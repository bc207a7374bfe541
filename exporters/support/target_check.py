"""Read back a sample of the spans a sink judged: does the tool have them at all?

A tool takes an annotation or a score for a span it never gets (Phoenix queues it,
Langfuse stores it) and answers with success, so the sink counts it ``delivered`` while it
shows nowhere: the app's spans go to ragpulse and not to the tool. ``verify_after_s``
after a record's results were queued, the sink reads that record's judged spans back
through the tool's API (the client the stored-trace readers use,
:class:`~ragpulse.backend_client.BackendClient`) and counts the items whose span the tool
does not have in ``ragpulse_sink_items_total{sink,outcome="no_target"}``, with one
warning per sink that says the fix. A read-back the tool does not answer counts its items
as ``unchecked``, never as ``no_target``.

Bounded and off the export path: :meth:`TargetCheck.offer` never blocks and takes a
record only while fewer than ``verify_sample`` checks wait (so at most ``verify_sample``
records per ``verify_after_s``); one thread runs the checks, one request at a time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter
from pydantic import Field

from ragpulse.backend_client import BackendClient, BackendUrl, Credentials, Tool
from ragpulse.config import StoredTracesSettings
from ragpulse.errors import BackendError
from ragpulse.exporters.support.delivery import DeliveryOptions
from ragpulse.telemetry import CollectorMetrics

log = logging.getLogger(__name__)

DOCS_PAGE = "the how-to 'Send evaluations to your tracing tool' (docs/how-to/backends.md), \
section 'Send the app's spans to the tool too'"
"""Where the warning sends the reader."""


class TargetCheckOptions(DeliveryOptions):
    """A sink that reads back a sample of the spans it judged."""

    verify_after_s: float = Field(
        30.0,
        gt=0,
        description="How long after a record's results are queued its judged spans are read "
        "back from the tool; the items on a span the tool does not have count as no_target.",
    )
    verify_sample: int = Field(
        5,
        ge=0,
        description="Records whose spans are read back per verify_after_s, at most (the "
        "checks waiting at once); 0 turns the read-back off.",
    )


@dataclass(frozen=True)
class SpansToCheck:
    """The spans of one record that a sink's items judge, and how many items each."""

    trace_id: str
    project: str | None
    items: Tally[str]  # span id -> items on it


Lookup = Callable[[BackendClient[Any], SpansToCheck], set[str]]
"""The span ids of ``SpansToCheck.items`` that the tool has (raises BackendError when it did not
answer)."""


@dataclass
class _RequestMetrics:
    requests: Counter


@dataclass(order=True)
class _Due:
    at: float
    judged: SpansToCheck = field(compare=False)


class TargetCheck:
    """Checks a sample of records' judged spans against the tool (see the module doc).

    ``offer`` is called on the evaluation thread and never blocks or raises; the checks run
    on one thread of their own; ``close`` stops it (checks still waiting are not run).
    """

    def __init__(
        self,
        sink: str,
        tool: Tool,
        base_url: str,
        credentials: Credentials,
        options: TargetCheckOptions,
        lookup: Lookup,
        metrics: CollectorMetrics,
        *,
        fix: str,
    ) -> None:
        self.sink = sink
        self._after_s = options.verify_after_s
        self._most = options.verify_sample
        self._lookup = lookup
        self._metrics = metrics
        self._fix = fix
        self._stop = threading.Event()
        # A read-back is retried like the sink's requests, for a minute at most: it is a
        # sample, and a tool that stays down counts its items unchecked.
        reading = StoredTracesSettings(
            timeout_s=options.timeout_s,
            retry_for_s=min(options.retry_for_s, 60.0),
            backoff_s=options.backoff_s,
            max_backoff_s=options.max_backoff_s,
        )
        self._client = BackendClient(
            BackendUrl(tool, base_url.rstrip("/")),
            reading,
            credentials,
            _RequestMetrics(metrics.sink_checks),
            stop=self._stop,
        )
        self._cond = threading.Condition()
        self._due: list[_Due] = []
        self._waiting: set[str] = set()  # trace ids: a costly tier's later export is not again
        self._warned = False
        self._thread: threading.Thread | None = None

    def offer(self, trace_id: str, project: str | None, spans: Tally[str]) -> None:
        """Take these judged spans of a trace (span id -> items on it) for a check
        ``verify_after_s`` from now, when there is room."""
        if self._most == 0 or not spans:
            return
        judged = SpansToCheck(trace_id, project, spans)
        with self._cond:
            if self._stop.is_set() or len(self._due) >= self._most:
                return
            if judged.trace_id in self._waiting:
                return
            self._waiting.add(judged.trace_id)
            self._due.append(_Due(time.monotonic() + self._after_s, judged))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"ragpulse-{self.sink}-check", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while (judged := self._next()) is not None:
            self._check(judged)

    def _next(self) -> SpansToCheck | None:
        with self._cond:
            while not self._stop.is_set():
                now = time.monotonic()
                if self._due and self._due[0].at <= now:
                    due = self._due.pop(0)  # offered in time order: the first is due first
                    return due.judged
                self._cond.wait(self._due[0].at - now if self._due else None)
        return None

    def _check(self, judged: SpansToCheck) -> None:
        items = sum(judged.items.values())
        try:
            found = self._lookup(self._client, judged)
        except BackendError as exc:
            log.debug("%s sink: spans not read back: %s", self.sink, exc)
            self._count("unchecked", items)
            return
        except Exception:  # a bug in a lookup must not end the checks
            log.exception("%s sink: reading spans back failed", self.sink)
            self._count("unchecked", items)
            return
        finally:
            with self._cond:
                self._waiting.discard(judged.trace_id)
        missing = {span: n for span, n in judged.items.items() if span not in found}
        if not missing:
            return
        self._count("no_target", sum(missing.values()))
        with self._cond:
            warned, self._warned = self._warned, True
        if not warned:
            log.warning(
                "%s sink: %d of the %d spans ragpulse evaluated in trace %s are not in %s "
                "%.0fs later, so their evaluations show nowhere (counted in "
                'ragpulse_sink_items_total{outcome="no_target"}): %s. See %s '
                "(warned once)",
                self.sink,
                len(missing),
                len(judged.items),
                judged.trace_id,
                self.sink.capitalize(),
                self._after_s,
                self._fix,
                DOCS_PAGE,
            )

    def _count(self, outcome: str, items: int) -> None:
        if items:
            self._metrics.sink_items.labels(self.sink, outcome).inc(items)

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._due.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(5.0)  # an in-flight read ends within its timeout; daemon otherwise
        self._client.close()
