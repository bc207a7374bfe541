"""Results back to the tool the traces came from, through that tool's sink; or, with
``--dry-run``, printed as the requests that sink would send.

The sink is set up from the source URL and the ``stored_traces`` credentials: Phoenix's
``endpoint``, MLflow's ``tracking_uri`` and ``experiment_id``, Langfuse's ``host``. A
``sinks.<tool>`` section the user wrote wins key by key (its batching, say), and
``sinks.<tool>.enabled: false`` or ``stored_traces.write_back: false`` leaves the tool
alone. Each sink writes idempotently (Phoenix and Langfuse upsert under a stable
identifier; the MLflow sink updates ragpulse's earlier assessment), so scoring a trace
twice replaces its evaluation.
"""

from __future__ import annotations

import base64
import json
import sys
import threading
from typing import Any, TextIO

from ragpulse.backend_client import BackendUrl
from ragpulse.collector.stored.common import parse_backend_url
from ragpulse.config import Settings
from ragpulse.errors import ConfigError
from ragpulse.exporters.base import Sink
from ragpulse.exporters.support.tool_sink import ToolSink
from ragpulse.plugin_context import PluginContext
from ragpulse.plugins import sink_class
from ragpulse.record import ExportItem, RagRecord


def sink_options(url: BackendUrl, settings: Settings) -> dict[str, Any]:
    """Options of the tool's sink for results on the traces read from ``url``."""
    st = settings.stored_traces
    if url.tool == "phoenix":
        options: dict[str, Any] = {"endpoint": url.base_url}
        if st.api_key:
            options["api_key"] = st.api_key.get_secret_value()
        return options
    if url.tool == "mlflow":
        options = {"tracking_uri": url.base_url, "experiment_id": url.target}
        if st.api_key:
            options["headers"] = {"Authorization": f"Bearer {st.api_key.get_secret_value()}"}
        elif st.username and st.password:
            pair = f"{st.username}:{st.password.get_secret_value()}".encode()
            options["headers"] = {"Authorization": f"Basic {base64.b64encode(pair).decode()}"}
        return options
    options = {"host": url.base_url}
    if st.public_key:
        options["public_key"] = st.public_key
    if st.secret_key:
        options["secret_key"] = st.secret_key.get_secret_value()
    return options


def with_write_back(settings: Settings, url: BackendUrl) -> Settings:
    """``settings`` with the tool's sink enabled for ``url`` (see the module doc)."""
    named = settings.sinks.get(url.tool)
    if not settings.stored_traces.write_back or (
        named is not None and named.get("enabled") is False
    ):
        return settings
    merged = {**sink_options(url, settings), **(named or {})}
    return settings.model_copy(update={"sinks": {**settings.sinks, url.tool: merged}})


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
        options = kind.options_from(
            settings.model_copy(update={"sinks": {url.tool: sink_options(url, settings)}})
        )
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
