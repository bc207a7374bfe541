"""Evaluation results as Arize Phoenix annotations on the spans they judge.

Configured as ``sinks: {phoenix: {endpoint: "http://HOST:6006", api_key: ...}}``
(``api_key`` falls back to ``PHOENIX_API_KEY``, as Phoenix's own clients do). Each
result becomes a span annotation (``POST /v1/span_annotations``) on the span it is
about (:mod:`ragpulse.exporters.support.targets`): named after the metric, identifier
``ragpulse.<method>.<record key>`` (the key: 16 hex digits of a hash of the record's
``record_id``; Phoenix upserts on name, span and identifier, so two methods of one
metric stand side by side and a re-sent result replaces itself), annotator kind LLM for
judges and CODE otherwise, label, score and (redacted) explanation, and the method,
direction, error, details and the record's ``record_id`` and ``revision`` as metadata. A
failed evaluation carries the label ``error``. A revision of the record whose result
judges another span than the earlier build's (a record first built without its root
span) deletes the earlier annotation first (``DELETE
/v1/projects/{project}/span_annotations`` by name and that identifier, which only this
record's result has), so the record shows one annotation per metric and method.

A context-relevance result that scored each document also becomes one document
annotation per scored document (``POST /v1/document_annotations``, named
``context_relevance/<method>``: Phoenix allows no identifier there), where the
position is unambiguous: the record's documents all came from one retriever or
reranker span (``ragpulse.documents.span_id``), and the result scored each of them or
says which (``details.document_indices``). In an agent turn that span must be a
retriever's (a tool's span lists no documents in Phoenix, which drops annotations
beyond a span's documents), and the position is the document's among that retriever's
(``Document.source.index``). A revision re-scores the same documents in place (a
document annotation is keyed by its span and position); Phoenix's API deletes none, so
one of an earlier build on a retriever the revision no longer scores stays.

A closed conversation's results (conversation metrics: ``user_frustration``, ...) become
session annotations (``POST /v1/session_annotations``) on the session whose id is the
conversation id (the app's spans carry it as ``session.id``; ragpulse's decorators set
it), named and identified as span annotations are: a revised conversation, a judge's
update and a repeated export replace their annotation, one per metric and method.

Requests go with ``sync=false``: Phoenix queues them and retries for spans (and
sessions) that have not arrived yet, so a result may reach Phoenix before the app's own
spans do. Phoenix also takes annotations for spans it never gets, so ``verify_after_s``
later a sample of the judged spans is read back
(``GET /v1/projects/{project}/spans/otlpv1`` by trace and span id, in the evaluated
trace's ``openinference.project.name`` or ``default``) and the annotations on spans
Phoenix does not have are counted as ``no_target``
(:mod:`ragpulse.exporters.support.target_check`).
The sink composes its transport (:class:`PhoenixApi`) with a delivery
(:mod:`ragpulse.exporters.support.tool_sink`): batching, retries and counting are
:mod:`ragpulse.exporters.support.delivery`'s.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

import httpx
from pydantic import Field, SecretStr

from ragpulse import semconv as sc
from ragpulse.backend_client import BackendClient, Credentials
from ragpulse.errors import BackendRefused
from ragpulse.exporters.support.delivery import ApiRequest
from ragpulse.exporters.support.http_api import Endpoint, HttpTransport
from ragpulse.exporters.support.results import annotator_kind, error_label, result_metadata
from ragpulse.exporters.support.target_check import SpansToCheck, TargetCheck, TargetCheckOptions
from ragpulse.exporters.support.targets import is_span_id
from ragpulse.exporters.support.tool_sink import Judged, ToolSink
from ragpulse.plugin_context import PluginContext
from ragpulse.record import ConversationRecord, EvalResult, RagRecord
from ragpulse.telemetry import CollectorMetrics

API_KEY_ENV = "PHOENIX_API_KEY"
PER_DOCUMENT_METRICS = frozenset({"context_relevance"})
"""Metrics whose ``details.per_document`` scores each retrieved document."""

FIX = (
    "the app's spans reach ragpulse but not Phoenix; send them to Phoenix too (a second "
    "exporter to http://PHOENIX:6006/v1/traces, or an OpenTelemetry Collector that sends "
    "them to both), in the project the app names with openinference.project.name"
)

_Kind = Literal["span", "document", "session"]
_PATHS: dict[_Kind, str] = {
    "span": "/v1/span_annotations",
    "document": "/v1/document_annotations",
    "session": "/v1/session_annotations",
}


@dataclass(frozen=True)
class Annotation:
    kind: _Kind
    body: dict[str, Any]
    clear_in: str | None = None
    """A span annotation whose record's earlier one is on another span: deleted first (by
    name and identifier) in this project."""


def record_key(record: RagRecord) -> str:
    """16 hex digits standing for the record (its ``record_id``) in an identifier."""
    return hashlib.sha256(record.record_id.encode()).hexdigest()[:16]


def project_of(record: RagRecord) -> str:
    """The Phoenix project the record's spans went to (``default`` unless they said)."""
    project = record.attributes.get(sc.OPENINFERENCE_PROJECT_NAME)
    return project if isinstance(project, str) and project else "default"


def _result(result: EvalResult) -> dict[str, Any]:
    explanation = result.explanation or result.error or None
    return {"label": error_label(result), "score": result.score, "explanation": explanation}


def _per_document(entry: object) -> dict[str, Any] | None:
    """One ``per_document`` entry as an annotation result: a number is a score; a judge's
    verdict ``{"relevant": bool, "reason": str}`` a label, score and explanation."""
    if isinstance(entry, int | float) and not isinstance(entry, bool):
        return {"score": float(entry)}
    if isinstance(entry, dict) and isinstance(entry.get("relevant"), bool):
        relevant: bool = entry["relevant"]
        reason = entry.get("reason")
        return {
            "label": "relevant" if relevant else "irrelevant",
            "score": 1.0 if relevant else 0.0,
            "explanation": reason if isinstance(reason, str) else None,
        }
    return None


def phoenix_endpoint(options: PhoenixSink.Options) -> Endpoint:
    key = options.api_key.get_secret_value() if options.api_key else os.environ.get(API_KEY_ENV)
    return Endpoint(options.endpoint, {"Authorization": f"Bearer {key}"} if key else {})


class PhoenixApi(HttpTransport[Annotation]):
    """Phoenix's annotation API: one request per kind of annotation in a batch."""

    def requests(self, batch: Sequence[Annotation]) -> list[ApiRequest]:
        out = [
            ApiRequest(
                f"/v1/projects/{quote(a.clear_in, safe='')}/span_annotations",
                {"data": [a.body]},
                1,
                {"name": a.body["name"], "identifier": a.body["identifier"], "delete_all": "true"},
            )
            for a in batch
            if a.clear_in is not None
        ]
        for kind, path in _PATHS.items():
            data = [a.body for a in batch if a.kind == kind and a.clear_in is None]
            if data:
                # sync=false: Phoenix queues them and retries for spans not arrived yet.
                out.append(ApiRequest(path, {"data": data}, len(data), {"sync": "false"}))
        return out

    def exchange(self, request: ApiRequest) -> httpx.Response:
        """A request to a project's span annotations deletes the record's earlier
        annotation of that name and identifier, then files the new one (in this order, in
        one request: another worker never runs between them); the rest are a POST."""
        if not request.path.startswith("/v1/projects/"):
            return super().exchange(request)
        gone = self.client.delete(request.path, params=request.params)
        # 404: no such project (nothing to delete); 405: a Phoenix without the route.
        if gone.status_code not in (200, 204, 404, 405):
            return gone
        return self.client.post(_PATHS["span"], params={"sync": "false"}, json=request.body)


class PhoenixSink(ToolSink[Annotation, "PhoenixSink.Options"]):
    name = "phoenix"

    class Options(TargetCheckOptions):
        endpoint: str = Field(description="Phoenix's base URL, e.g. http://127.0.0.1:6006")
        api_key: SecretStr | None = Field(
            None, description=f"Sent as a Bearer token; falls back to {API_KEY_ENV}."
        )

    def __init__(
        self,
        options: PhoenixSink.Options,
        *,
        metrics: CollectorMetrics | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        endpoint = phoenix_endpoint(options)
        metrics = metrics if metrics is not None else CollectorMetrics()
        credentials = Credentials({**options.headers, **endpoint.headers})
        check = TargetCheck(
            self.name, "phoenix", endpoint.base_url, credentials, options, spans_in_phoenix,
            metrics, fix=FIX,
        )  # fmt: skip
        api = PhoenixApi(endpoint, options, transport)
        super().__init__(options, api, metrics=metrics, check=check)

    @classmethod
    def create(cls, options: PhoenixSink.Options, context: PluginContext) -> PhoenixSink:
        return cls(options, metrics=context.metrics)

    def item_span(self, item: Annotation) -> str | None:
        span_id = item.body.get("span_id")
        return span_id if isinstance(span_id, str) else None

    def items(self, record: RagRecord, judged: Sequence[Judged]) -> list[Annotation]:
        out = []
        key = record_key(record)
        for j in judged:
            r = j.result
            meta = {**result_metadata(r), "record_id": record.record_id}
            meta["revision"] = record.revision
            out.append(
                Annotation(
                    "span",
                    {
                        "span_id": j.target.span_id,
                        "name": r.metric,
                        "annotator_kind": annotator_kind(r.method),
                        "identifier": f"ragpulse.{r.method}.{key}",
                        "result": _result(r),
                        "metadata": meta,
                    },
                    project_of(record) if j.moved_from is not None else None,
                )
            )
            out.extend(self._documents(record, r))
        return out

    def conversation_items(
        self, conversation: ConversationRecord, results: Sequence[EvalResult]
    ) -> list[Annotation]:
        """One session annotation per result: the session is the conversation id (what
        the app's spans carry in ``session.id``), identifier ``ragpulse.<method>``, so a
        revision or a repeat replaces the annotation instead of adding one."""
        return [
            Annotation(
                "session",
                {
                    "session_id": conversation.conversation_id,
                    "name": r.metric,
                    "annotator_kind": annotator_kind(r.method),
                    "identifier": f"ragpulse.{r.method}",
                    "result": _result(r),
                    "metadata": {
                        **result_metadata(r),
                        "conversation_revision": conversation.revision,
                        "turns": len(conversation.turns),
                    },
                },
            )
            for r in results
        ]

    def _documents(self, record: RagRecord, result: EvalResult) -> list[Annotation]:
        scores = result.details.get("per_document")
        span_id = record.attributes.get(sc.RAGPULSE_DOCUMENTS_SPAN_ID)
        if (
            result.metric not in PER_DOCUMENT_METRICS
            or not isinstance(scores, list)
            or not isinstance(span_id, str)
            or not is_span_id(span_id)
        ):
            return []
        positions = document_positions(record, result.details, span_id)
        if positions is None or len(positions) != len(scores):  # cut or skipped: ambiguous
            return []
        annotations = [_per_document(entry) for entry in scores]
        if any(a is None for a in annotations):
            return []
        kind = annotator_kind(result.method)
        meta = {"evaluator": "ragpulse", "method": result.method}
        return [
            Annotation(
                "document",
                {
                    "span_id": span_id,
                    "document_position": position,
                    "name": result.name,
                    "annotator_kind": kind,
                    "result": annotation,
                    "metadata": meta,
                },
            )
            for position, annotation in zip(positions, annotations, strict=True)
        ]


def document_positions(
    record: RagRecord, details: dict[str, Any], span_id: str
) -> list[int] | None:
    """Each scored document's position among the documents of ``span_id`` (the one span
    the record's documents came from), in the order of ``details.per_document``; None
    where that is not certain.

    The scored documents are ``details.document_indices`` (indices into the record's
    documents) when the result names them, else all of them. A retriever's document of
    a RAG record is at its index; an agent turn's at ``source.index`` of a retriever
    span that returned it. A tool's or a model call's span lists no documents: None.
    """
    indices = details.get("document_indices")
    if indices is None:
        indices = list(range(len(record.documents)))
    if not isinstance(indices, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(record.documents)
        for i in indices
    ):
        return None
    positions = []
    for i in indices:
        source = record.documents[i].source
        if source is None:
            positions.append(i)
        elif source.kind == "retriever" and source.span_id == span_id:
            positions.append(source.index)
        else:
            return None
    return positions if len(set(positions)) == len(positions) else None


def spans_in_phoenix(client: BackendClient[Any], judged: SpansToCheck) -> set[str]:
    """The judged spans Phoenix has, read from the trace's project (``default`` where the
    trace names none); a project Phoenix does not know has none of them."""
    project = quote(judged.project or "default", safe="")
    params = [("trace_id", judged.trace_id), *(("span_id", s) for s in judged.items)]
    try:
        answer, _ = client.get(
            f"/v1/projects/{project}/spans/otlpv1", [*params, ("limit", len(judged.items))]
        )
    except BackendRefused as exc:
        if exc.status == 404:
            return set()  # no such project: nothing of the app's reached Phoenix there
        raise
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list):
        raise BackendRefused("phoenix: unexpected answer shape", 200)
    return {d["span_id"] for d in data if isinstance(d, dict) and isinstance(d.get("span_id"), str)}
