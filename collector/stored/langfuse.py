"""Langfuse's stored observations, read through its public API.

``GET /api/public/v2/observations`` (Langfuse's real-time read path; the older list
endpoints can lag by minutes) lists observations by start time (``fromStartTime``
inclusive, ``toStartTime`` exclusive), by trace (``traceId``) and by
``isRootObservation``, at most 1000 per page, paged by an opaque cursor, with the field
groups asked for (``fields``) and full values of the metadata keys named in
``expandMetadata`` (others are cut at 200 characters).

Langfuse's observation shape is mapped here, once, to spans the extraction reads: the
OpenTelemetry attributes Langfuse kept (``metadata.attributes``; the resource's in
``metadata.resourceAttributes``) are the span's, and what Langfuse made of them is
written back as OpenInference and GenAI attributes where the span lacks them: the
observation type (GENERATION, RETRIEVER, AGENT, TOOL, CHAIN, EMBEDDING) as
``openinference.span.kind``, ``input`` / ``output`` as ``input.value`` /
``output.value``, a retriever's output documents as ``retrieval.documents``, a
generation's messages, model and usage as GenAI attributes, level ERROR as an error
status. Langfuse's OpenTelemetry intake keeps OTel's ids, so the trace and observation
ids are the spans' and Langfuse scores land on them; observations with other ids (the
pre-OpenTelemetry SDKs' UUIDs) are counted as rejected.

Credentials: ``stored_traces.public_key`` / ``secret_key`` or ``LANGFUSE_PUBLIC_KEY`` /
``LANGFUSE_SECRET_KEY``, as HTTP Basic (public key as user name), as Langfuse's SDKs do.
Results go back as scores, through the ``langfuse`` sink at the same host.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

import httpx
from pydantic import ValidationError

from ragpulse import semconv as sc
from ragpulse.backend_client import BackendUrl, Credentials
from ragpulse.collector.extract.readers import loads
from ragpulse.collector.stored.common import (
    Page,
    Reader,
    TraceRef,
    as_dict,
    halving,
    iso,
)
from ragpulse.collector.stored.follow import StoredTraceSource
from ragpulse.config import Settings, StoredTracesSettings
from ragpulse.errors import BackendError, ConfigError
from ragpulse.exporters.langfuse import PUBLIC_KEY_ENV, SECRET_KEY_ENV
from ragpulse.record import AttributeValue, Span, SpanStatus

log = logging.getLogger(__name__)

OBSERVATIONS_PATH = "/api/public/v2/observations"
FIELDS = "core,basic,io,metadata,model,usage"
EXPANDED = "attributes,resourceAttributes"
"""Metadata keys read in full: the OpenTelemetry attributes Langfuse's intake kept."""
KINDS = {
    "GENERATION": "LLM",
    "RETRIEVER": "RETRIEVER",
    "AGENT": "AGENT",
    "TOOL": "TOOL",
    "CHAIN": "CHAIN",
    "EMBEDDING": "EMBEDDING",
    "GUARDRAIL": "GUARDRAIL",
    "EVALUATOR": "EVALUATOR",
}
"""Langfuse observation types -> OpenInference span kinds (SPAN and EVENT have none)."""


class LangfuseReader(Reader):
    tool = "langfuse"

    def roots(self, since_ns: int, until_ns: int | None) -> Iterator[list[TraceRef]]:
        window = [
            ("fromStartTime", iso(since_ns)),
            ("toStartTime", iso(until_ns) if until_ns else None),
        ]
        for items, _ in self._pages([*window, ("isRootObservation", "true"), ("fields", "core")]):
            refs = []
            for item in items:
                trace_id, start = item.get("traceId"), _ns(item.get("startTime"))
                if isinstance(trace_id, str) and _is_hex(trace_id, 32) and start is not None:
                    refs.append(TraceRef(trace_id, start))
            yield refs

    def traces(self, trace_ids: Sequence[str]) -> Iterator[Page]:
        for trace_id in trace_ids:  # the API filters by one trace at a time
            yield from self._spans([("traceId", trace_id)])

    def recent(
        self, since_ns: int, *, wanted: Callable[[str], bool], known: Callable[[Span], bool]
    ) -> Iterator[Page]:
        yield from self._spans([("fromStartTime", iso(since_ns))])

    def _spans(self, params: list[tuple[str, Any]]) -> Iterator[Page]:
        full = [*params, ("fields", FIELDS), ("expandMetadata", EXPANDED)]
        for items, size in self._pages(full):
            page = Page([], size)
            for item in items:
                span = to_span(item)
                if span is None:
                    page.rejected += 1
                else:
                    page.spans.append(span)
            self.count_rejected(page)
            yield page

    def _pages(self, params: list[tuple[str, Any]]) -> Iterator[tuple[list[dict[str, Any]], int]]:
        cursor: str | None = None
        limit = self.settings.page_spans
        while True:

            def fetch(n: int, cursor: str | None = cursor) -> tuple[Any, int]:
                return self.client.get(
                    OBSERVATIONS_PATH, [*params, ("limit", n), ("cursor", cursor)]
                )

            answer, size, limit = halving(fetch, limit, self.tool)
            data = answer.get("data") if isinstance(answer, dict) else None
            if not isinstance(data, list):
                raise BackendError(f"langfuse at {self.url.base_url}: unexpected answer shape")
            yield [d for d in data if isinstance(d, dict)], size
            meta = as_dict(answer.get("meta"))
            cursor = meta.get("cursor") or None
            if cursor is None or not data:
                return


class LangfuseSource(StoredTraceSource):
    """``langfuse``: follows the traces a Langfuse project stores (its keys name it)."""

    name = "langfuse"
    url_shape = "langfuse://HOST:PORT"
    reader_class = LangfuseReader

    @classmethod
    def credentials(cls, settings: StoredTracesSettings) -> Credentials:
        public = settings.public_key or os.environ.get(PUBLIC_KEY_ENV)
        secret = (
            settings.secret_key.get_secret_value()
            if settings.secret_key
            else os.environ.get(SECRET_KEY_ENV)
        )
        if not public or not secret:
            raise ConfigError(
                "reading from Langfuse needs its keys: stored_traces.public_key and secret_key, "
                f"or {PUBLIC_KEY_ENV} and {SECRET_KEY_ENV}"
            )
        return Credentials(auth=httpx.BasicAuth(public, secret))

    @classmethod
    def sink_options(cls, url: BackendUrl, settings: Settings) -> dict[str, Any]:
        st = settings.stored_traces
        options: dict[str, Any] = {"host": url.base_url}
        if st.public_key:
            options["public_key"] = st.public_key
        if st.secret_key:
            options["secret_key"] = st.secret_key.get_secret_value()
        return options


def _is_hex(value: str, length: int) -> bool:
    if len(value) != length:
        return False
    try:
        return int(value, 16) != 0
    except ValueError:
        return False


def _ns(value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    try:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1e9)
    except ValueError:
        return None


def to_span(item: dict[str, Any]) -> Span | None:
    """One v2 observation as a span; None when it has no OpenTelemetry ids or start."""
    trace_id, span_id = item.get("traceId"), item.get("id")
    start = _ns(item.get("startTime"))
    if not (isinstance(trace_id, str) and _is_hex(trace_id.lower(), 32)):
        return None
    if not (isinstance(span_id, str) and _is_hex(span_id.lower(), 16)) or start is None:
        return None
    parent = item.get("parentObservationId")
    metadata = as_dict(item.get("metadata"))
    kept = metadata.get("attributes")
    attributes: dict[str, AttributeValue] = dict(kept) if isinstance(kept, dict) else {}
    resource_kept = metadata.get("resourceAttributes")
    resource: dict[str, AttributeValue] = (
        dict(resource_kept) if isinstance(resource_kept, dict) else {}
    )
    attributes.update({k: v for k, v in _openinference(item).items() if k not in attributes})
    level = item.get("level")
    try:
        return Span.model_validate(
            {
                "trace_id": trace_id.lower(),
                "span_id": span_id.lower(),
                "parent_span_id": parent.lower() if isinstance(parent, str) and parent else None,
                "name": str(item.get("name") or ""),
                "start_time_ns": start,
                "end_time_ns": _ns(item.get("endTime")) or start,
                "status": SpanStatus.ERROR if level == "ERROR" else SpanStatus.UNSET,
                "status_message": item.get("statusMessage") or None,
                "attributes": attributes,
                "resource": resource,
            }
        )
    except ValidationError as exc:
        log.debug("langfuse: observation %s not usable: %s", span_id, exc)
        return None


def _openinference(item: dict[str, Any]) -> dict[str, AttributeValue]:
    """What Langfuse made of the span's attributes, as OpenInference and GenAI attributes."""
    out: dict[str, AttributeValue] = {}
    kind = KINDS.get(str(item.get("type") or "").upper())
    if kind:
        out[sc.OPENINFERENCE_SPAN_KIND] = kind
    inputs, outputs = item.get("input"), item.get("output")
    if inputs is not None:
        out[sc.INPUT_VALUE] = _text(inputs)
    if outputs is not None:
        out[sc.OUTPUT_VALUE] = _text(outputs)
    if kind == "RETRIEVER":
        docs = loads(outputs)
        docs = docs.get("documents") if isinstance(docs, dict) else docs
        if isinstance(docs, list):
            out[sc.RETRIEVAL_DOCUMENTS] = [_document(d) for d in docs]
    if kind == "LLM":
        messages = loads(inputs)
        if isinstance(messages, dict):
            messages = messages.get("messages")
        if isinstance(messages, list):
            out[sc.GEN_AI_INPUT_MESSAGES] = json.dumps(messages, default=str)
        answer = loads(outputs)
        if isinstance(answer, dict) and "role" in answer:
            out[sc.GEN_AI_OUTPUT_MESSAGES] = json.dumps([answer], default=str)
        if isinstance(item.get("model"), str):
            out[sc.GEN_AI_REQUEST_MODEL] = item["model"]
        usage = as_dict(item.get("usageDetails"))
        for key, name in (
            ("input", sc.GEN_AI_USAGE_INPUT_TOKENS),
            ("output", sc.GEN_AI_USAGE_OUTPUT_TOKENS),
        ):
            if isinstance(usage.get(key), int):
                out[name] = usage[key]
    return out


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _document(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        return {"content": value if isinstance(value, str) else json.dumps(value, default=str)}
    inner = value.get("document", value)
    doc = dict(inner) if isinstance(inner, dict) else {}
    if "page_content" in doc and "content" not in doc:
        doc["content"] = doc.pop("page_content")
    return doc
