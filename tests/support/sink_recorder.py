"""A stand-in for Phoenix's and MLflow's write APIs in the sink unit tests (the real servers
run in tests/live/): it keeps what the sinks post, and the sinks built to post there."""

from __future__ import annotations

import json
from typing import Any

from ragpulse.config import Settings
from ragpulse.exporters.mlflow import MlflowSink
from ragpulse.exporters.phoenix import PhoenixSink
from ragpulse.exporters.support.tool_sink import ToolSink
from ragpulse.plugin_context import PluginContext
from support.helpers import LocalServer, Reply


class Recorder(LocalServer):
    """Keeps each POST's path and JSON body; answers 200 ``{}``. A GET is the MLflow sink
    reading the trace's earlier assessments (to update rather than add): it has none."""

    def __init__(self) -> None:
        super().__init__()
        self.posts: list[tuple[str, Any]] = []

    def respond(self, path: str, headers: Any, body: bytes) -> Reply:
        self.posts.append((path.split("?")[0], json.loads(body)))
        return 200, {"Content-Type": "application/json"}, b"{}"

    def respond_get(self, path: str, headers: Any) -> Reply:
        trace = {"trace": {"trace_info": {"assessments": []}}}
        return 200, {"Content-Type": "application/json"}, json.dumps(trace).encode()


def sink_posting_to(sink_name: str, url: str) -> tuple[ToolSink[Any, Any], PluginContext]:
    """The Phoenix or MLflow sink as serve builds it, sending at once to ``url``."""
    options = {"endpoint": url} if sink_name == "phoenix" else {"tracking_uri": url}
    settings = Settings(sinks={sink_name: {**options, "max_wait_s": 0}})
    context = PluginContext(settings)
    cls = PhoenixSink if sink_name == "phoenix" else MlflowSink
    sink = cls.from_settings(settings, context)
    assert isinstance(sink, ToolSink)
    return sink, context


def delivered(context: PluginContext, sink_name: str) -> float | None:
    return context.metrics.registry.get_sample_value(
        "ragpulse_sink_items_total", {"sink": sink_name, "outcome": "delivered"}
    )
