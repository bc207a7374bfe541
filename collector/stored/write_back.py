"""Results back to the tool the traces came from, through that tool's sink; or, with
``--dry-run``, printed as the requests that sink would send.

The sink is set up from the source URL and the ``stored_traces`` credentials, by the
tool's own module (``sink_options``: Phoenix's ``endpoint``, MLflow's ``tracking_uri``
and ``experiment_id``, Langfuse's ``host``). A
``sinks.<tool>`` section the user wrote wins key by key (its batching, say), and
``sinks.<tool>.enabled: false`` or ``stored_traces.write_back: false`` leaves the tool
alone. Each sink writes idempotently (Phoenix and Langfuse upsert under a stable
identifier; the MLflow sink updates ragpulse's earlier assessment), so scoring a trace
twice replaces its evaluation.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any, TextIO

from ragpulse.backend_client import BackendUrl
from ragpulse.collector.stored.tool import parse_backend_url, stored_tool
from ragpulse.config import Settings
from ragpulse.errors import ConfigError
from ragpulse.exporters.base import Sink
from ragpulse.exporters.support.tool_sink import ToolSink
from ragpulse.plugin_context import PluginContext
from ragpulse.plugins import sink_class
from ragpulse.record import ExportItem, RagRecord


def with_write_back(settings: Settings, url: BackendUrl) -> Settings:
    """``settings`` with the tool's sink enabled for ``url`` (see the module doc)."""
    return stored_tool(url.tool).with_write_back(settings, url)


def stored_write_back(settings: Settings) -> Settings:
    """``settings`` with the write-back sink of ``stored_traces.url``, when one is set and
    parses (the settings check sees the sink as the run will build it)."""
    if not settings.stored_traces.url:
        return settings
    try:
        url = parse_backend_url(settings.stored_traces.url)
    except ConfigError:
        return settings  # reported where the URL is used, with the shapes it takes
    return with_write_back(settings, url)


def without_write_back(settings: Settings, url: BackendUrl) -> Settings:
    """``settings`` with the tool's sink off (``--dry-run``: nothing is written to the tool)."""
    return settings.model_copy(update={"sinks": {**settings.sinks, url.tool: {"enabled": False}}})


class DryRunSink(Sink):
    """Prints, one JSON line each, the requests the tool's sink would send; sends none."""

    name = "dry_run"

    def __init__(self, sink: ToolSink[Any, Any], out: TextIO | None = None) -> None:
        super().__init__()
        self._sink = sink
        self._out = out or sys.stdout
        self._lock = threading.Lock()
        self.requests = 0

    @classmethod
    def for_tool(cls, url: BackendUrl, settings: Settings, out: TextIO | None = None) -> DryRunSink:
        kind = sink_class(url.tool)
        own = stored_tool(url.tool).sink_options(url, settings)
        options = kind.options_from(settings.model_copy(update={"sinks": {url.tool: own}}))
        sink = kind.create(options, PluginContext(settings))
        assert isinstance(sink, ToolSink)
        return cls(sink, out)

    def export(self, item: ExportItem[RagRecord]) -> None:
        requests = self._sink.preview(item)
        with self._lock:
            for request in requests:
                line = {"sink": self._sink.name, "path": request.path, "body": request.body}
                self._out.write(json.dumps(line, default=str) + "\n")
            self._out.flush()
            self.requests += len(requests)

    def shutdown(self) -> None:
        self._sink.shutdown()
