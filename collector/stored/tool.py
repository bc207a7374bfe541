"""Which tracing tool a stored-trace URL names: its scheme is a registered source's name.

``ragpulse eval --from URL`` and the write-back find the tool here, through the source
registry (``ragpulse.sources``): a new tool is its own module, never an edit here.
"""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

import httpx

from ragpulse import plugin_index
from ragpulse.backend_client import BackendUrl
from ragpulse.collector.stored.common import Reader, SourceMetrics
from ragpulse.collector.stored.follow import StoredTraceSource, url_shapes
from ragpulse.config import StoredTracesSettings
from ragpulse.errors import ConfigError
from ragpulse.plugins import source_class


def stored_tool(name: str) -> type[StoredTraceSource]:
    """The registered tool ``name`` (a URL's scheme); ConfigError for any other name."""
    if name not in plugin_index.source_urls():
        raise ConfigError(f"unsupported source URL scheme {name!r}: use {url_shapes()}")
    found = source_class(name)
    if not issubclass(found, StoredTraceSource):
        raise ConfigError(f"source {name!r} does not read stored traces: use {url_shapes()}")
    return found


def parse_backend_url(url: str) -> BackendUrl:
    """``url`` as a :class:`BackendUrl` of the tool its scheme names; a ConfigError says
    what is wrong and the shapes (:meth:`StoredTraceSource.parse_url`)."""
    scheme = urlsplit(url.strip()).scheme.lower().partition("+")[0]
    return stored_tool(scheme).parse_url(url)


def open_reader(
    url: BackendUrl,
    settings: StoredTracesSettings,
    metrics: SourceMetrics,
    *,
    transport: httpx.BaseTransport | None = None,
    stop: threading.Event | None = None,
) -> Reader:
    """The reader for ``url``'s tool (ConfigError when its credentials are incomplete)."""
    return stored_tool(url.tool).open_reader(url, settings, metrics, transport=transport, stop=stop)
