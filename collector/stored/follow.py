"""A tracing tool as a source: ``ragpulse serve --source <tool>`` scores new traces as the
tool stores them (follow mode).

:class:`StoredTraceSource` is what each tool's module subclasses (:mod:`.phoenix`,
:mod:`.mlflow`, :mod:`.langfuse`), registered under ``ragpulse.sources`` by the tool's
name, which is also its URL's scheme: the shape of its URL, its reader, its credentials,
and the options of its own sink that results are written back through. Its options are
the ``stored_traces`` section. ``ragpulse eval --from URL`` reads a window once with the
same reader (:mod:`.backfill`).

Every ``poll_s`` the source reads what the tool holds from ``overlap_s`` before its
position (the *watermark*) onwards: spans reach a tool after they start (the app's
export delay, the trace's own duration), and Phoenix pages the newest rows first, so a
window that only moved forward would miss a trace's root. Spans read before are dropped
by span id; spans of a trace already evaluated are dropped too (counted as ``late``
when new, as the assembler counts a straggler). The rest go to the collector trace by
trace, oldest first (the earliest span start read of each; a poll that reads more than
``page_bytes`` of new spans, a catch-up after a long stop, hands them over in parts of
about that size), so that a conversation's turns are evaluated in the order they were
taken whatever order the tool serves them in. Each trace goes with an acknowledgement:
the assembler decides when a trace is complete (its root ended, then
``assembly.grace_s`` of quiet), and the acknowledgement fires once it was evaluated and
handed to every sink.

The position is a low watermark kept on disk (``stored_traces.state_file``), written
after each poll: the earliest start of a trace not yet settled, else the newest span
start read; with it, the ids of the traces settled in the overlap window. A trace is
*settled* once its results were delivered (every sink flushed after it finished), so a
restart, even after SIGKILL, neither skips a trace (one not settled is read again) nor
repeats one (a settled one is dropped); a trace killed between its delivery and the
next write is scored again, and the tool's upsert replaces its earlier evaluation.

An unreachable or refusing tool fails the poll (``ragpulse_source_polls_total
{outcome="failed"}``, a warning at most every 30 s); the next poll tries again.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote, urlsplit

import httpx

from ragpulse import plugin_index
from ragpulse.backend_client import BackendClient, BackendUrl, Credentials
from ragpulse.collector.stored.common import Reader, SourceMetrics
from ragpulse.config import Settings, StoredTracesSettings
from ragpulse.disk_cache import cache_root, digest
from ragpulse.errors import BackendError, CollectorFull, ConfigError
from ragpulse.options import PluginOptions
from ragpulse.record import Span
from ragpulse.source import Ack, Source, SourceContext
from ragpulse.telemetry import DROP_LATE_SPAN

log = logging.getLogger(__name__)

FULL_WAIT_S = 0.1  # the collector had no room: offered again this often
STOP_JOIN_S = 2.0  # how long stop() waits for a poll in progress, twice at most
WARN_EVERY_S = 30.0
STATE_VERSION = 1


def default_state_file(url: BackendUrl) -> Path:
    return cache_root() / "sources" / f"{url.tool}-{digest([str(url)])[:16]}.json"


@dataclass
class _Trace:
    """A trace handed to the collector and not settled yet."""

    min_start: int
    max_start: int
    span_ids: set[str] = field(default_factory=set)

    def add(self, span: Span) -> None:
        self.min_start = min(self.min_start, span.start_time_ns)
        self.max_start = max(self.max_start, span.start_time_ns)
        self.span_ids.add(span.span_id)


@dataclass
class _Fresh:
    """New spans of a poll, by trace, not handed over yet, and about the bytes they came in."""

    spans: dict[str, list[Span]] = field(default_factory=dict)
    nbytes: int = 0


class FollowState:
    """The watermark and the settled traces of the overlap window, on disk.

    Written whole to a temporary file that then replaces the old one, so a kill leaves
    the previous state or the new one, never half of one.
    """

    def __init__(self, path: Path, url: BackendUrl) -> None:
        self.path = path
        self.url = url
        self.watermark_ns: int | None = None
        self.settled: dict[str, int] = {}  # trace id -> its newest span start

    def load(self) -> FollowState:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return self
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"follow-mode state {self.path} is unreadable ({exc}); remove it to start "
                "again from now (traces of the overlap window are scored again)"
            ) from exc
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise ConfigError(f"follow-mode state {self.path} is not a version-1 state file")
        if data.get("url") != str(self.url):
            raise ConfigError(
                f"follow-mode state {self.path} belongs to {data.get('url')}, not {self.url}: "
                "set stored_traces.state_file to a file of its own"
            )
        watermark = data.get("watermark_ns")
        self.watermark_ns = int(watermark) if isinstance(watermark, int) else None
        settled = data.get("settled")
        if isinstance(settled, dict):
            self.settled = {str(k): int(v) for k, v in settled.items() if isinstance(v, int)}
        return self

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "version": STATE_VERSION,
            "url": str(self.url),
            "watermark_ns": self.watermark_ns,
            "settled": self.settled,
        }
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def url_shapes() -> str:
    """Every registered tool's URL shape, as an error message lists them."""
    shapes = list(plugin_index.source_urls().values())
    if len(shapes) < 2:
        return "".join(shapes) or "no registered tool"
    return f"{', '.join(shapes[:-1])} or {shapes[-1]}"


class StoredTraceSource(Source):
    """A tracing tool whose stored traces ragpulse reads, and follows (this source).

    A tool is one subclass in its own module plus one entry-point line under
    ``ragpulse.sources`` named as its URL's scheme: ``url_shape`` (``phoenix://HOST:PORT/
    PROJECT``), ``target`` (what the URL's last path segment names, if it names one),
    ``reader_class``, :meth:`credentials` and :meth:`sink_options` (the options of the
    tool's own sink, ``sinks.<tool>``, that results go back to the tool through).

    Following polls ``stored_traces.url`` into the collector (see the module doc);
    ``context.intake.settle(timeout_s)`` says when every sink delivered what it was handed.
    """

    url_shape: ClassVar[str]
    target: ClassVar[str | None] = None
    """What the URL's last path segment names (``the project name``); None: none."""
    reader_class: ClassVar[type[Reader]]
    Options = StoredTracesSettings
    options: StoredTracesSettings

    # -- the tool -----------------------------------------------------------------------

    @classmethod
    @abstractmethod
    def credentials(cls, settings: StoredTracesSettings) -> Credentials:
        """The tool's credentials from ``stored_traces`` or its own environment variables
        (ConfigError when they are incomplete)."""

    @classmethod
    @abstractmethod
    def sink_options(cls, url: BackendUrl, settings: Settings) -> dict[str, Any]:
        """Options of the tool's sink for results on the traces read from ``url``."""

    @classmethod
    def check_target(cls, target: str) -> None:
        """Raise ConfigError when ``target`` cannot be one (an MLflow experiment id is a
        number)."""

    @classmethod
    def parse_url(cls, url: str) -> BackendUrl:
        """``url`` as a :class:`BackendUrl` of this tool; a ConfigError says what is wrong
        and the shape.

        ``<tool>://`` is plain HTTP, ``<tool>+https://`` TLS (``<tool>+http://`` is plain
        too); no port means the scheme's (80 or 443). The last path segment is the
        ``target`` (percent-encoded if it has spaces) where the tool has one; what comes
        before it is a path prefix (a proxy's). User names, passwords, queries and
        fragments are refused: credentials belong in settings or the environment, not in
        a URL that shows up in process lists and logs.
        """
        parts = urlsplit(url.strip())
        tool, _, transport = parts.scheme.lower().partition("+")
        if tool != cls.name or transport not in ("", "http", "https"):
            if transport in ("", "http", "https") and tool in plugin_index.source_urls():
                raise ConfigError(f"source: {cls.name} but stored_traces.url is a {tool} URL")
            raise ConfigError(f"unsupported source URL scheme {parts.scheme!r}: use {url_shapes()}")
        if parts.username is not None or parts.password is not None:
            raise ConfigError(
                "credentials do not go in the source URL (it shows in process lists and logs): "
                "set them in stored_traces (api_key, username/password, public_key/secret_key) "
                "or the tool's own environment variables"
            )
        if parts.query or parts.fragment:
            raise ConfigError(f"the source URL takes no query or fragment: use {url_shapes()}")
        if not parts.hostname:
            raise ConfigError(f"the source URL names no host: use {url_shapes()}")
        try:
            port = parts.port
        except ValueError as exc:
            raise ConfigError(f"the source URL has an invalid port: {exc}") from exc
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        netloc = f"{host}:{port}" if port is not None else host
        segments = [unquote(s) for s in parts.path.split("/") if s]
        target: str | None = None
        if cls.target is not None:
            if not segments:
                raise ConfigError(f"a {tool} source URL ends with {cls.target} ({cls.url_shape})")
            target = segments.pop()
            cls.check_target(target)
        prefix = "".join(f"/{s}" for s in segments)
        return BackendUrl(tool, f"{transport or 'http'}://{netloc}{prefix}", target)

    @classmethod
    def open_reader(
        cls,
        url: BackendUrl,
        settings: StoredTracesSettings,
        metrics: SourceMetrics,
        *,
        transport: httpx.BaseTransport | None = None,
        stop: threading.Event | None = None,
    ) -> Reader:
        """The tool's reader for ``url`` (ConfigError when its credentials are incomplete)."""
        client = BackendClient(
            url, settings, cls.credentials(settings), metrics, transport=transport, stop=stop
        )
        return cls.reader_class(client)

    @classmethod
    def with_write_back(cls, settings: Settings, url: BackendUrl) -> Settings:
        """``settings`` with the tool's sink enabled for ``url``: set up from the URL and
        the ``stored_traces`` credentials (:meth:`sink_options`); a ``sinks.<tool>``
        section the user wrote wins key by key, and ``sinks.<tool>.enabled: false`` or
        ``stored_traces.write_back: false`` leaves the tool alone."""
        named = settings.sinks.get(url.tool)
        if not settings.stored_traces.write_back or (
            named is not None and named.get("enabled") is False
        ):
            return settings
        merged = {**cls.sink_options(url, settings), **(named or {})}
        return settings.model_copy(update={"sinks": {**settings.sinks, url.tool: merged}})

    # -- the source ---------------------------------------------------------------------

    @classmethod
    def options_from(cls, settings: Settings) -> StoredTracesSettings:
        return settings.stored_traces

    @classmethod
    def run_settings(cls, settings: Settings) -> Settings:
        """Results go back to the tool (unless told otherwise: :meth:`with_write_back`)."""
        url = settings.stored_traces.url
        return cls.with_write_back(settings, cls.parse_url(url)) if url else settings

    def __init__(
        self,
        options: PluginOptions,
        context: SourceContext,
        *,
        reader: Reader | None = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        super().__init__(options, context)
        st = self.options
        if not st.url:
            raise ConfigError(
                f"source: {self.name} reads stored traces: set stored_traces.url "
                f"(--source-url or RAGPULSE_SOURCE_URL), e.g. {self.url_shape}"
            )
        self.url = self.parse_url(st.url)
        self._settings = st
        self._intake = context.intake
        self._metrics = context.metrics
        self._stop = threading.Event()
        self.source_metrics = SourceMetrics(context.metrics.registry)
        self.reader = reader or self.open_reader(self.url, st, self.source_metrics, stop=self._stop)
        self._settle = context.intake.settle
        self._clock = clock
        self.state = FollowState(st.state_file or default_state_file(self.url), self.url).load()
        self._lock = threading.Lock()
        self._open: dict[str, _Trace] = {}  # handed to the collector, not finished
        self._finished: dict[str, _Trace] = {}  # finished, results not known delivered
        self._settled_here: dict[str, _Trace] = {}  # settled by this process (span ids known)
        self._newest = 0  # the newest span start read
        self._full_read = True  # the first poll after a start reads the whole window
        self._thread: threading.Thread | None = None
        self._last_warning = -WARN_EVERY_S
        self.polls = 0  # polls done, failed ones included (tests wait on it)
        self._polled = threading.Condition()

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        if self.state.watermark_ns is None:
            self.state.watermark_ns = self._clock()  # a first start: from now (less overlap)
        self.source_metrics.watermark.labels(self.url.tool).set(self.state.watermark_ns / 1e9)
        self._thread = threading.Thread(target=self._run, name="ragpulse-follow", daemon=True)
        self._thread.start()
        log.info(
            "following %s every %gs (position %s, state %s)",
            self.url, self._settings.poll_s, _when(self.state.watermark_ns), self.state.path,
        )  # fmt: skip

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(STOP_JOIN_S)
            if self._thread.is_alive():  # a request in flight: cut it short
                self.reader.close()
                self._thread.join(STOP_JOIN_S)
        try:  # the sinks are still up: what finished and was delivered is settled now
            self.checkpoint()
        except Exception:
            log.exception("follow mode: cannot write its state at stop")

    def close(self) -> None:
        # Traces drained at shutdown are not settled here: the sinks stopped, so whether
        # their results went through is unknown; a restart scores them again.
        self.reader.close()

    def wait_polls(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` polls were done (tests)."""
        with self._polled:
            return self._polled.wait_for(lambda: self.polls >= count, timeout)

    # -- polling ------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
                self.source_metrics.polls.labels(self.url.tool, "ok").inc()
            except BackendError as exc:
                self.source_metrics.polls.labels(self.url.tool, "failed").inc()
                self._warn(str(exc))
            except Exception:  # the poller must survive anything
                self.source_metrics.polls.labels(self.url.tool, "failed").inc()
                log.exception("follow mode: poll failed")
            try:
                self.checkpoint()
            except Exception:
                log.exception("follow mode: cannot write its state %s", self.state.path)
            with self._polled:
                self.polls += 1
                self._polled.notify_all()
            self._stop.wait(self._settings.poll_s)

    def poll(self) -> int:
        """Read the window once; returns how many spans went to the collector."""
        assert self.state.watermark_ns is not None
        since = self.state.watermark_ns - int(self._settings.overlap_s * 1e9)
        known = self._known if not self._full_read else _nothing_known
        ingested = 0
        fresh = _Fresh()
        # Stopping at a page of known spans is right only after a poll that read to the
        # end: a poll cut short (a failure, a stop) is followed by a whole read.
        self._full_read = True
        try:
            for page in self.reader.recent(since, wanted=self._wanted, known=known):
                self._take(page.spans, page.nbytes, fresh)
                if fresh.nbytes >= self._settings.page_bytes:
                    ingested += self._hand_over(fresh)
                if self._stop.is_set():
                    break
            else:
                self._full_read = False
        finally:
            # A poll that fails half-way hands over what it read too: those spans count
            # as read, and a later poll drops them.
            ingested += self._hand_over(fresh)
        return ingested

    def _wanted(self, trace_id: str) -> bool:
        with self._lock:
            return not self._is_done(trace_id)

    def _known(self, span: Span) -> bool:
        with self._lock:
            trace = self._open.get(span.trace_id)
            return self._is_done(span.trace_id) or (
                trace is not None and span.span_id in trace.span_ids
            )

    def _is_done(self, trace_id: str) -> bool:
        return (
            trace_id in self._finished
            or trace_id in self._settled_here
            or trace_id in self.state.settled
        )

    def _take(self, spans: list[Span], nbytes: int, fresh: _Fresh) -> None:
        """Keep in ``fresh`` the spans of ``spans`` not read before (counting the others)."""
        tool = self.url.tool
        duplicate = late = 0
        with self._lock:
            for span in spans:
                self._newest = max(self._newest, span.start_time_ns)
                trace = self._open.get(span.trace_id)
                if trace is not None and span.span_id in trace.span_ids:
                    duplicate += 1
                    continue
                done = self._finished.get(span.trace_id) or self._settled_here.get(span.trace_id)
                if done is not None or span.trace_id in self.state.settled:
                    if done is not None and span.span_id not in done.span_ids:
                        late += 1  # new, but its trace was evaluated already
                        done.span_ids.add(span.span_id)
                    else:
                        duplicate += 1
                    continue
                if trace is None:
                    trace = self._open[span.trace_id] = _Trace(
                        span.start_time_ns, span.start_time_ns
                    )
                trace.add(span)
                fresh.spans.setdefault(span.trace_id, []).append(span)
        if duplicate:
            self.source_metrics.spans.labels(tool, "duplicate").inc(duplicate)
        if late:
            self.source_metrics.spans.labels(tool, "late").inc(late)
            self._metrics.dropped.labels(DROP_LATE_SPAN).inc(late)
        fresh.nbytes += nbytes * (len(spans) - duplicate - late) // max(1, len(spans))

    def _hand_over(self, fresh: _Fresh) -> int:
        """Hand the traces in ``fresh`` to the collector, oldest first, and empty it;
        returns how many spans went."""
        tool = self.url.tool
        with self._lock:
            started = {t: self._open[t].min_start if t in self._open else 0 for t in fresh.spans}
        share = fresh.nbytes // max(1, sum(map(len, fresh.spans.values())))
        taken = 0
        for trace_id in sorted(fresh.spans, key=started.__getitem__):
            trace_spans = fresh.spans[trace_id]
            ack = Ack(on_done=partial(self._finish, trace_id))
            if not self._ingest(trace_spans, ack, share * len(trace_spans)):
                break  # stopping: the trace stays open, so it is read again after a restart
            taken += len(trace_spans)
            self.source_metrics.traces.labels(tool).inc()
        fresh.spans.clear()
        fresh.nbytes = 0
        if taken:
            self.source_metrics.spans.labels(tool, "ingested").inc(taken)
        return taken

    def _ingest(self, spans: list[Span], ack: Ack, nbytes: int) -> bool:
        """Hand one trace's spans over, waiting while the collector is full; False when
        stopping first."""
        while True:
            try:
                self._intake.ingest(spans, ack, nbytes=nbytes, admit=True)
                return True
            except CollectorFull:
                if self._stop.wait(FULL_WAIT_S):
                    return False

    def _finish(self, trace_id: str) -> None:
        """The collector finished the trace (evaluated and handed to every sink, or skipped)."""
        with self._lock:
            trace = self._open.pop(trace_id, None)
            if trace is not None:
                self._finished[trace_id] = trace

    # -- the position -------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Settle what finished (once the sinks delivered it), move the watermark, write."""
        with self._lock:
            finishing = dict(self._finished)
        if finishing and self._settle(self._settings.timeout_s):
            with self._lock:
                for trace_id, trace in finishing.items():
                    self._finished.pop(trace_id, None)
                    self._settled_here[trace_id] = trace
                    self.state.settled[trace_id] = trace.max_start
        with self._lock:
            starts = [t.min_start for t in (*self._open.values(), *self._finished.values())]
            assert self.state.watermark_ns is not None
            watermark = min(starts) if starts else max(self._newest, self.state.watermark_ns)
            self.state.watermark_ns = watermark
            oldest = watermark - int(self._settings.overlap_s * 1e9)
            gone = [t for t, newest in self.state.settled.items() if newest < oldest]
            for trace_id in gone:
                del self.state.settled[trace_id]
                self._settled_here.pop(trace_id, None)
            self.state.save()
        self.source_metrics.watermark.labels(self.url.tool).set(watermark / 1e9)

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_warning >= WARN_EVERY_S:
            self._last_warning = now
            log.warning("follow mode: %s; polling again every %gs", message, self._settings.poll_s)


def _nothing_known(span: Span) -> bool:
    return False


def _when(ns: int | None) -> str:
    if ns is None:
        return "now"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ns / 1e9))
