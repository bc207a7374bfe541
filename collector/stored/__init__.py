"""Stored traces: what teams already keep in a tracing tool, read back and scored.

``ragpulse eval --from phoenix://HOST:PORT/PROJECT`` (or ``mlflow://HOST:PORT/ID``,
``langfuse://HOST:PORT``) reads the traces of a time window once
(:mod:`~ragpulse.collector.stored.backfill`); ``ragpulse serve --source phoenix``
follows new ones (:mod:`~ragpulse.collector.stored.follow`). One module per tool maps
its API and span shape to ragpulse spans (:mod:`.phoenix`, :mod:`.mlflow`,
:mod:`.langfuse`); :mod:`.common` holds what they share. From there on a stored trace
takes the live path: assembly, extraction, sampling, evaluation and every sink, the
tool's own among them, so results land next to the traces they judge.
"""

from __future__ import annotations

import threading

import httpx

from ragpulse.backend_client import BackendClient, BackendUrl, Credentials
from ragpulse.collector.stored.common import (
    Reader,
    SourceMetrics,
    parse_backend_url,
)
from ragpulse.config import StoredTracesSettings

__all__ = [
    "BackendUrl",
    "Reader",
    "SourceMetrics",
    "credentials",
    "open_reader",
    "parse_backend_url",
]


def credentials(url: BackendUrl, settings: StoredTracesSettings) -> Credentials:
    """The tool's credentials from ``stored_traces`` or its own environment variables."""
    if url.tool == "phoenix":
        from ragpulse.collector.stored import phoenix

        return phoenix.credentials(settings)
    if url.tool == "mlflow":
        from ragpulse.collector.stored import mlflow

        return mlflow.credentials(settings)
    from ragpulse.collector.stored import langfuse

    return langfuse.credentials(settings)


def open_reader(
    url: BackendUrl,
    settings: StoredTracesSettings,
    metrics: SourceMetrics,
    *,
    transport: httpx.BaseTransport | None = None,
    stop: threading.Event | None = None,
) -> Reader:
    """The reader for ``url``'s tool (ConfigError when its credentials are incomplete)."""
    client = BackendClient(
        url, settings, credentials(url, settings), metrics, transport=transport, stop=stop
    )
    if url.tool == "phoenix":
        from ragpulse.collector.stored.phoenix import PhoenixReader

        return PhoenixReader(client)
    if url.tool == "mlflow":
        from ragpulse.collector.stored.mlflow import MlflowReader

        return MlflowReader(client)
    from ragpulse.collector.stored.langfuse import LangfuseReader

    return LangfuseReader(client)
