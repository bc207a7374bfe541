"""Arize Phoenix's stored spans, read through its REST API in OTLP shape.

``GET /v1/projects/{project}/spans/otlpv1`` serves a project's spans as OTLP/JSON spans
(hex ids, attributes flattened to dotted keys, no kind beyond INTERNAL, no resource),
filtered by span start time (``start_time`` inclusive, ``end_time`` exclusive), by trace
id and by parent (``parent_id=null``: root spans), newest row first, paged by an opaque
cursor (``limit`` at most 1000). The spans are decoded by the OTLP receiver's decoder
(:mod:`ragpulse.collector.intake.otlp`); the project stands in for the resource Phoenix does
not keep, as ``service.name`` and ``openinference.project.name``.

Rows come newest first in the order Phoenix inserted them, so follow mode stops paging
at a page whose spans it read before: everything older was read by an earlier poll.
Credentials: ``stored_traces.api_key`` or ``PHOENIX_API_KEY``, as a Bearer token.
Results go back as span annotations, through the ``phoenix`` sink at the same endpoint.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import quote

from ragpulse import semconv as sc
from ragpulse.backend_client import BackendClient, BackendUrl, Credentials
from ragpulse.collector.intake import otlp
from ragpulse.collector.stored.common import (
    Page,
    Reader,
    SourceMetrics,
    TraceRef,
    chunks,
    halving,
    iso,
)
from ragpulse.collector.stored.follow import StoredTraceSource
from ragpulse.config import Settings, StoredTracesSettings
from ragpulse.errors import BackendError, DecodeError
from ragpulse.exporters.phoenix import API_KEY_ENV
from ragpulse.record import Span

log = logging.getLogger(__name__)


class PhoenixReader(Reader):
    tool = "phoenix"

    def __init__(self, client: BackendClient[SourceMetrics]) -> None:
        super().__init__(client)
        project = client.url.target or "default"
        self.project = project
        self._path = f"/v1/projects/{quote(project, safe='')}/spans/otlpv1"
        self._resource = {
            "attributes": [
                {"key": sc.SERVICE_NAME, "value": {"stringValue": project}},
                {"key": sc.OPENINFERENCE_PROJECT_NAME, "value": {"stringValue": project}},
            ]
        }

    def roots(self, since_ns: int, until_ns: int | None) -> Iterator[list[TraceRef]]:
        window = [("start_time", iso(since_ns)), ("end_time", iso(until_ns) if until_ns else None)]
        for page, _ in self._pages([*window, ("parent_id", "null")]):
            yield [TraceRef(s.trace_id, s.start_time_ns) for s in page.spans]

    def traces(self, trace_ids: Sequence[str]) -> Iterator[Page]:
        for ids in chunks(trace_ids, self.settings.traces_per_request):
            for page, _ in self._pages([("trace_id", t) for t in ids]):
                yield page

    def recent(
        self, since_ns: int, *, wanted: Callable[[str], bool], known: Callable[[Span], bool]
    ) -> Iterator[Page]:
        for page, _ in self._pages([("start_time", iso(since_ns))]):
            everything_known = bool(page.spans) and all(known(s) for s in page.spans)
            yield page
            if everything_known:
                return  # newest first: what is older was read before

    def _pages(self, params: list[tuple[str, Any]]) -> Iterator[tuple[Page, str | None]]:
        cursor: str | None = None
        limit = self.settings.page_spans
        while True:

            def fetch(n: int, cursor: str | None = cursor) -> tuple[Any, int]:
                return self.client.get(self._path, [*params, ("limit", n), ("cursor", cursor)])

            answer, size, limit = halving(fetch, limit, self.tool)
            if not isinstance(answer, dict) or not isinstance(answer.get("data"), list):
                raise BackendError(f"phoenix at {self.url.base_url}: unexpected answer shape")
            page = self._decode(answer["data"], size)
            self.count_rejected(page)
            cursor = answer.get("next_cursor") or None
            yield page, cursor
            if cursor is None:
                return

    def _decode(self, data: list[Any], nbytes: int) -> Page:
        """Spans of one page through the OTLP decoder; a span the decoder cannot take is
        counted as rejected and the others kept."""
        try:
            decoded = otlp.decode_request(otlp.request_from_json(self._payload(data)))
            return Page(decoded.spans, nbytes, decoded.rejected)
        except DecodeError:
            pass
        spans: list[Span] = []
        rejected = 0
        for item in data:
            try:
                one = otlp.decode_request(otlp.request_from_json(self._payload([item])))
            except DecodeError as exc:
                rejected += 1
                log.debug("phoenix: span not decodable: %s", exc)
                continue
            spans.extend(one.spans)
            rejected += one.rejected
        return Page(spans, nbytes, rejected)

    def _payload(self, data: list[Any]) -> dict[str, Any]:
        return {"resourceSpans": [{"resource": self._resource, "scopeSpans": [{"spans": data}]}]}


class PhoenixSource(StoredTraceSource):
    """``phoenix``: follows the traces an Arize Phoenix project stores."""

    name = "phoenix"
    url_shape = "phoenix://HOST:PORT/PROJECT"
    target = "the project name"
    reader_class = PhoenixReader

    @classmethod
    def credentials(cls, settings: StoredTracesSettings) -> Credentials:
        api_key = settings.api_key
        key = api_key.get_secret_value() if api_key else os.environ.get(API_KEY_ENV)
        return Credentials({"Authorization": f"Bearer {key}"} if key else {})

    @classmethod
    def sink_options(cls, url: BackendUrl, settings: Settings) -> dict[str, Any]:
        options: dict[str, Any] = {"endpoint": url.base_url}
        if settings.stored_traces.api_key:
            options["api_key"] = settings.stored_traces.api_key.get_secret_value()
        return options
