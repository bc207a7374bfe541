"""Evaluation results as MLflow 3 assessments on the spans they judge.

Configured as ``sinks: {mlflow: {tracking_uri: "http://HOST:5000", experiment_id: "1"}}``
(``tracking_uri`` and ``experiment_id`` fall back to ``MLFLOW_TRACKING_URI`` and
``MLFLOW_EXPERIMENT_ID``). Authentication as MLflow's clients do it:
``MLFLOW_TRACKING_TOKEN`` (Bearer), else ``MLFLOW_TRACKING_USERNAME`` and
``MLFLOW_TRACKING_PASSWORD`` (Basic).

Each result becomes one feedback assessment
(``POST /api/3.0/mlflow/traces/tr-<trace id>/assessments``) named after the metric, on
the span it is about (:mod:`ragpulse.exporters.support.targets`), with source type
LLM_JUDGE for judges and CODE otherwise and ``ragpulse.<method>`` as source id; the
value is the score (the label where there is none), the rationale the (redacted)
explanation, a failed evaluation an assessment error. MLflow takes an assessment only
for a trace it has: while it answers that the trace does not exist, the request is
retried (``retry_for_s``), so the app's own export may arrive after ragpulse's
evaluation.

A closed conversation's results (conversation metrics) become assessments on its first
turn's trace, for the trace as a whole (no span), with the conversation id as
``mlflow.trace.session`` in the metadata: where MLflow's own session scorers log theirs.

MLflow keeps every assessment it is sent, so scoring a trace again (a re-delivered
trace, ``ragpulse eval --from`` run twice) would add a second one. The sink therefore
reads the trace's assessments first (``GET /api/3.0/mlflow/traces/tr-<trace id>``) and
updates ragpulse's earlier one of the same name, source id and record (the record's
``record_id`` in the metadata; a conversation's: the trace) in place (``PATCH
.../assessments/<id>``: value, rationale, metadata; keys it no longer has are emptied,
as MLflow merges metadata) instead of creating another. A revision of the record whose
result judges another span than the earlier one (a record first built without its
root span) overrides it instead (a new assessment on that span naming the earlier one
in ``overrides``: MLflow marks the earlier one invalid and shows it as overridden):
each record shows one assessment per metric and method, and a revised conversation's
first trace one per conversation metric and method. A trace's requests go one at a time
in this process, and what one found and wrote stands in for the next one's lookup for a
while (``LOOKUP_TTL_S``; after a failure the trace is looked up again), so a record's
results cost one lookup, not one each. Two replicas writing the same trace at the same moment can
still both create one.
The sink composes its transport (:class:`MlflowApi`) with a delivery
(:mod:`ragpulse.exporters.support.tool_sink`): batching, retries and counting are
:mod:`ragpulse.exporters.support.delivery`'s.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import Field

from ragpulse.errors import ConfigError
from ragpulse.exporters.support.delivery import ApiRequest, DeliveryOptions, Outcome, Reply
from ragpulse.exporters.support.http_api import Endpoint, HttpTransport
from ragpulse.exporters.support.results import annotator_kind, error_label, result_metadata
from ragpulse.exporters.support.tool_sink import Judged, ToolSink
from ragpulse.plugin_context import PluginContext
from ragpulse.record import ConversationRecord, EvalResult, RagRecord
from ragpulse.semconv import ANNOTATOR_LLM
from ragpulse.telemetry import CollectorMetrics

TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
EXPERIMENT_ID_ENV = "MLFLOW_EXPERIMENT_ID"
TOKEN_ENV = "MLFLOW_TRACKING_TOKEN"
USERNAME_ENV = "MLFLOW_TRACKING_USERNAME"
PASSWORD_ENV = "MLFLOW_TRACKING_PASSWORD"
EXPERIMENT_HEADER = "x-mlflow-experiment-id"
"""The header MLflow's OTLP intake reads the experiment from; sent here too, for the
server's auth and routing middlewares."""
TRACE_NOT_FOUND = "RESOURCE_DOES_NOT_EXIST"
TRACES_PATH = "/api/3.0/mlflow/traces"
SESSION_METADATA = "mlflow.trace.session"
"""The metadata key MLflow's session scorers put a session's id under."""
SOURCE_PREFIX = "ragpulse."
"""Every source id the sink writes starts so: ``ragpulse.<method>``."""
RECORD_METADATA = "ragpulse.record_id"
"""The metadata key of the record an assessment is about (its ``record_id``)."""
TRACE_LOCKS = 64
"""Striped locks: one trace's requests go one at a time (a lookup, then its writes)."""
LOOKUP_TTL_S = 30.0
"""How long what one request found on a trace stands in for a new lookup (the results of a
record go out one assessment per request, a costly tier's a few seconds later)."""
LOOKUPS_KEPT = 1024
"""Traces whose last lookup is remembered (the least recent forgotten first)."""


@dataclass(frozen=True)
class Assessment:
    trace_id: str  # MLflow's: tr-<OTel trace id>
    body: dict[str, Any]


def _feedback(result: EvalResult) -> dict[str, Any]:
    if result.error:
        code, _, message = result.error.partition(":")
        return {"error": {"error_code": code.strip(), "error_message": message.strip() or code}}
    return {"value": result.score if result.score is not None else error_label(result)}


def _body(
    result: EvalResult, trace_id: str, where: dict[str, str], more: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One feedback assessment for ``result`` on ``trace_id`` (``where``: its span id, or
    nothing for the trace as a whole); ``more`` joins the metadata."""
    meta = {**result_metadata(result), **(more or {})}
    if result.label and result.score is not None:
        meta["label"] = result.label
    kind = "LLM_JUDGE" if annotator_kind(result.method) == ANNOTATOR_LLM else "CODE"
    body: dict[str, Any] = {
        "assessment_name": result.metric,
        "trace_id": trace_id,
        **where,
        "source": {"source_type": kind, "source_id": f"{SOURCE_PREFIX}{result.method}"},
        "feedback": _feedback(result),
        "metadata": _string_map(meta),
    }
    if result.explanation:
        body["rationale"] = result.explanation
    return body


def _string_map(meta: dict[str, Any]) -> dict[str, str]:
    """MLflow's assessment metadata is a string -> string map."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in meta.items()}


class MlflowSink(ToolSink[Assessment, "MlflowSink.Options"]):
    name = "mlflow"

    class Options(DeliveryOptions):
        tracking_uri: str | None = Field(
            None, description=f"The tracking server's URL; falls back to {TRACKING_URI_ENV}."
        )
        experiment_id: str | None = Field(
            None,
            description="The experiment the app's traces go to (its OTLP export's "
            f"{EXPERIMENT_HEADER}); falls back to {EXPERIMENT_ID_ENV}.",
        )
        batch_size: int = Field(
            1,
            ge=1,
            description="Assessments taken together (MLflow's API writes one per request; "
            "those of one trace in a batch share one lookup of what ragpulse wrote before).",
        )
        concurrency: int = Field(4, ge=1, description="Requests in flight at once.")

    def __init__(
        self,
        options: MlflowSink.Options,
        *,
        metrics: CollectorMetrics | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        api = MlflowApi(mlflow_endpoint(options), options, transport)
        super().__init__(options, api, metrics=metrics)

    @classmethod
    def create(cls, options: MlflowSink.Options, context: PluginContext) -> MlflowSink:
        return cls(options, metrics=context.metrics)

    def items(self, record: RagRecord, judged: Sequence[Judged]) -> list[Assessment]:
        trace_id = f"tr-{record.trace_id}"
        meta = {RECORD_METADATA: record.record_id, "ragpulse.revision": record.revision}
        return [
            Assessment(trace_id, _body(j.result, trace_id, {"span_id": j.target.span_id}, meta))
            for j in judged
        ]

    def conversation_items(
        self, conversation: ConversationRecord, results: Sequence[EvalResult]
    ) -> list[Assessment]:
        """Trace-level assessments on the conversation's first trace, with its id as
        ``mlflow.trace.session`` in the metadata, as MLflow's own session scorers log
        them; a revision, an update or a repeat updates ragpulse's earlier one."""
        trace_id = f"tr-{conversation.first.trace_id}"
        meta = {
            SESSION_METADATA: conversation.conversation_id,
            "conversation_revision": conversation.revision,
            "turns": len(conversation.turns),
        }
        return [Assessment(trace_id, _body(r, trace_id, {}, meta)) for r in results]


def mlflow_endpoint(options: MlflowSink.Options) -> Endpoint:
    """The tracking server's URL and credentials, from the options and MLflow's variables."""
    uri = options.tracking_uri or os.environ.get(TRACKING_URI_ENV)
    if not uri or not uri.startswith(("http://", "https://")):
        raise ConfigError(
            "sinks.mlflow.tracking_uri (or MLFLOW_TRACKING_URI) must be the tracking "
            "server's http(s) URL, e.g. http://127.0.0.1:5000"
        )
    experiment = options.experiment_id or os.environ.get(EXPERIMENT_ID_ENV)
    headers = {EXPERIMENT_HEADER: experiment} if experiment else {}
    auth: httpx.Auth | None = None
    if token := os.environ.get(TOKEN_ENV):
        headers["Authorization"] = f"Bearer {token}"
    elif (user := os.environ.get(USERNAME_ENV)) and (password := os.environ.get(PASSWORD_ENV)):
        auth = httpx.BasicAuth(user, password)
    return Endpoint(uri, headers, auth)


class MlflowApi(HttpTransport[Assessment]):
    """MLflow's assessment API: one request per trace, each assessment created or
    ragpulse's earlier one updated in place (see the module doc)."""

    def __init__(
        self,
        endpoint: Endpoint,
        options: DeliveryOptions,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(endpoint, options, transport)
        self._trace_locks = [threading.Lock() for _ in range(TRACE_LOCKS)]
        self._lookups: OrderedDict[str, tuple[float, dict[tuple[str, str, str], Any]]] = (
            OrderedDict()
        )
        self._lookups_lock = threading.Lock()

    def requests(self, batch: Sequence[Assessment]) -> list[ApiRequest]:
        """One request per trace, carrying its assessments (:meth:`exchange` writes them)."""
        by_trace: dict[str, list[dict[str, Any]]] = {}
        for a in batch:
            by_trace.setdefault(a.trace_id, []).append({"assessment": a.body})
        return [
            ApiRequest(f"{TRACES_PATH}/{trace_id}/assessments", bodies, len(bodies))
            for trace_id, bodies in by_trace.items()
        ]

    def exchange(self, request: ApiRequest) -> httpx.Response:
        """Create each assessment, or update ragpulse's earlier one in place; the first
        answer that is not a success, else the last (a retry redoes the whole request:
        what went through is found and updated, never created twice)."""
        trace_path = request.path.removesuffix("/assessments")
        with self._trace_locks[hash(trace_path) % len(self._trace_locks)]:
            earlier = self._looked_up(trace_path)
            if earlier is None:
                found = self.client.get(trace_path)
                if found.status_code != 200:
                    return found  # 404 RESOURCE_DOES_NOT_EXIST: retried (reply)
                earlier = _earlier_assessments(found)
            try:
                answer = self._write(request, earlier)
            except BaseException:
                self._forget(trace_path)  # what went through is unknown: look again
                raise
            if 200 <= answer.status_code < 300:
                self._remember(trace_path, earlier)
            else:
                self._forget(trace_path)
            return answer

    def _write(
        self,
        request: ApiRequest,
        earlier: dict[tuple[str, str, str], dict[str, Any]],
    ) -> httpx.Response:
        """Each assessment of ``request`` created or updated; ``earlier`` kept up to date."""
        answer = httpx.Response(200)  # a request with nothing to write
        for wrapped in request.body:
            body = wrapped["assessment"]
            key = _key(body)
            found = earlier.get(key)
            if found is None:
                answer = self.client.post(request.path, json=wrapped)
            elif str(found.get("span_id") or "") != str(body.get("span_id") or ""):
                # The record's result moved to another span: it overrides the earlier one.
                overriding = {"assessment": {**body, "overrides": found["assessment_id"]}}
                answer = self.client.post(request.path, json=overriding)
            else:
                path = f"{request.path}/{found['assessment_id']}"
                answer = self.client.patch(path, json=_update(body, found))
            if not 200 <= answer.status_code < 300:
                return answer
            written = _assessment_of(answer)
            if written is not None:
                earlier[key] = written
        return answer

    def _looked_up(self, trace_path: str) -> dict[tuple[str, str, str], dict[str, Any]] | None:
        """What the last request for this trace found and wrote, when recent: this process
        writes a trace's assessments one request at a time, so it is still what MLflow has
        of ragpulse's (called under the trace's lock)."""
        with self._lookups_lock:
            found = self._lookups.get(trace_path)
        if found is None or time.monotonic() - found[0] > LOOKUP_TTL_S:
            return None
        return found[1]

    def _remember(
        self, trace_path: str, earlier: dict[tuple[str, str, str], dict[str, Any]]
    ) -> None:
        with self._lookups_lock:
            self._lookups[trace_path] = (time.monotonic(), earlier)
            self._lookups.move_to_end(trace_path)
            while len(self._lookups) > LOOKUPS_KEPT:
                self._lookups.popitem(last=False)

    def _forget(self, trace_path: str) -> None:
        with self._lookups_lock:
            self._lookups.pop(trace_path, None)

    def reply(self, request: ApiRequest, response: httpx.Response) -> Reply:
        """Also retried: the trace is not in MLflow yet (the app's export may lag)."""
        if response.status_code == 404 and _error_code(response) == TRACE_NOT_FOUND:
            return Reply(Outcome.RETRY, reason="trace not in MLflow yet")
        return super().reply(request, response)


def _key(body: dict[str, Any]) -> tuple[str, str, str]:
    """What makes an assessment ragpulse's earlier one: name, source id, and the record it
    is about (its id in the metadata; without one, the span: a conversation's)."""
    source = as_dict(body.get("source"))
    record = as_dict(body.get("metadata")).get(RECORD_METADATA)
    return (
        str(body.get("assessment_name") or ""),
        str(source.get("source_id") or ""),
        str(record or body.get("span_id") or ""),
    )


def _assessment_of(response: httpx.Response) -> dict[str, Any] | None:
    try:
        found = response.json().get("assessment")
    except (ValueError, AttributeError):
        return None
    return found if isinstance(found, dict) and found.get("assessment_id") else None


def _earlier_assessments(response: httpx.Response) -> dict[tuple[str, str, str], dict[str, Any]]:
    """ragpulse's valid assessments on the trace, by :func:`_key` (the newest of several)."""
    try:
        info = response.json()["trace"]["trace_info"]
    except (ValueError, KeyError, TypeError):
        return {}
    ours: dict[tuple[str, str, str], dict[str, Any]] = {}
    assessments = info.get("assessments") if isinstance(info, dict) else None
    for a in sorted(
        (a for a in assessments or [] if isinstance(a, dict)),
        key=lambda a: str(a.get("last_update_time") or ""),
    ):
        key = _key(a)
        if a.get("valid", True) is not False and key[1].startswith(SOURCE_PREFIX):
            ours[key] = a
    return ours


def _update(body: dict[str, Any], earlier: dict[str, Any]) -> dict[str, Any]:
    """The PATCH that makes ``earlier`` say what ``body`` says."""
    metadata = dict(body.get("metadata") or {})
    old = as_dict(earlier.get("metadata"))
    for gone in set(old) - set(metadata):
        metadata[gone] = ""  # MLflow merges metadata: a key is emptied, not removed
    return {
        "assessment": {
            "assessment_name": body["assessment_name"],
            "feedback": body["feedback"],
            "rationale": body.get("rationale", ""),
            "metadata": metadata,
        },
        "update_mask": "feedback,rationale,metadata",
    }


def _error_code(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    code = body.get("error_code") if isinstance(body, dict) else None
    return code if isinstance(code, str) else None


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
