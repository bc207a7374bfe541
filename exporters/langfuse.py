"""Evaluation results as Langfuse scores on the observations (spans) and traces they judge.

Configured as ``sinks: {langfuse: {host, public_key, secret_key}}`` (each falls back to
``LANGFUSE_HOST``, ``LANGFUSE_PUBLIC_KEY``, ``LANGFUSE_SECRET_KEY``, as Langfuse's SDKs
do); the keys authenticate as HTTP Basic, public key as user name. Langfuse's OTLP
intake keeps OpenTelemetry's ids, so the trace id and span id of the judged span are
the score's ``traceId`` and ``observationId`` (:mod:`ragpulse.exporters.support.targets`).

Each result becomes one score (``POST /api/public/scores``): named after the metric, a
NUMERIC value (the score), or CATEGORICAL (the label) where there is no score, and
``error`` for a failed evaluation; the (redacted) explanation as comment, the method,
direction, error, details and the record's ``record_id`` and ``revision`` as metadata.
Its id is derived from the record's ``record_id``, the metric and the method, so a
retried request, and a revision of the record (rebuilt from spans that came late), update
the score instead of adding one, also when the revision judges another observation
(Langfuse replaces the score's fields, its ``observationId`` included).

A closed conversation's results (conversation metrics) become session scores: ``sessionId``
is the conversation id (what Langfuse groups the app's traces by, ``session.id``), the id
derived from the conversation's identifier, metric and method, so a revised conversation,
a judge's update or a repeated export updates its score (one per metric and method).

Langfuse stores a score whatever its ids name, so ``verify_after_s`` later a sample of
the judged observations is read back (``GET /api/public/v2/observations`` by trace) and
the scores of observations Langfuse does not have are counted as ``no_target``
(:mod:`ragpulse.exporters.support.target_check`).

``batch_scores: true`` (the default) sends a list of scores per request, as the
current API takes them (202, or 207 with the refused ones counted); ``false`` sends one
score per request, for Langfuse servers that take only that. The sink composes its
transport (:class:`LangfuseApi`) with a delivery
(:mod:`ragpulse.exporters.support.tool_sink`): batching, retries and counting are
:mod:`ragpulse.exporters.support.delivery`'s.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from typing import Any

import httpx
from pydantic import Field, SecretStr

from ragpulse.backend_client import BackendClient, Credentials
from ragpulse.errors import BackendRefused, ConfigError
from ragpulse.exporters.support.delivery import ApiRequest, DeliveryOptions, Outcome, Reply
from ragpulse.exporters.support.http_api import Endpoint, HttpTransport
from ragpulse.exporters.support.results import error_label, result_metadata
from ragpulse.exporters.support.target_check import SpansToCheck, TargetCheck, TargetCheckOptions
from ragpulse.exporters.support.tool_sink import Judged, ToolSink
from ragpulse.plugin_context import PluginContext
from ragpulse.record import ConversationRecord, EvalResult, RagRecord
from ragpulse.telemetry import CollectorMetrics

HOST_ENV = "LANGFUSE_HOST"
PUBLIC_KEY_ENV = "LANGFUSE_PUBLIC_KEY"
SECRET_KEY_ENV = "LANGFUSE_SECRET_KEY"
SCORES_PATH = "/api/public/scores"
OBSERVATIONS_PATH = "/api/public/v2/observations"
FIX = (
    "the app's spans reach ragpulse but not Langfuse; send them to Langfuse's OpenTelemetry "
    "intake too (a second exporter to https://LANGFUSE/api/public/otel/v1/traces, or an "
    "OpenTelemetry Collector that sends them to both)"
)
_IDS = uuid.UUID("5c0f3a4e-2b7d-4f39-9d0e-7a1c6b8e4d21")
"""Namespace of the score ids (uuid5): stable per record, metric and method."""


def score_id(record_id: str, result: EvalResult) -> str:
    """A record's score id: stable per record (its ``record_id``, across revisions),
    metric and method."""
    return str(uuid.uuid5(_IDS, f"record:{record_id}:{result.metric}:{result.method}"))


def session_score_id(identifier: str, result: EvalResult) -> str:
    """A conversation's score id: stable per conversation (its identifier), metric, method."""
    return str(uuid.uuid5(_IDS, f"{identifier}:{result.metric}:{result.method}"))


def _value(result: EvalResult) -> tuple[float | str, str]:
    """(value, dataType): the score when there is one, else the label (or ``error``)."""
    if result.score is not None and not result.error:
        return result.score, "NUMERIC"
    return error_label(result) or "not_scored", "CATEGORICAL"


def _score(result: EvalResult, id_: str) -> dict[str, Any]:
    """One score's body, before it names what it is about (an observation, a session)."""
    value, data_type = _value(result)
    meta = result_metadata(result)
    if result.label and data_type == "NUMERIC":
        meta["label"] = result.label
    score: dict[str, Any] = {
        "id": id_,
        "name": result.metric,
        "value": value,
        "dataType": data_type,
        "metadata": meta,
    }
    if comment := result.explanation or result.error:
        score["comment"] = comment
    return score


class LangfuseSink(ToolSink[dict[str, Any], "LangfuseSink.Options"]):
    name = "langfuse"

    class Options(TargetCheckOptions):
        host: str | None = Field(
            None, description=f"Langfuse's base URL; falls back to {HOST_ENV}."
        )
        public_key: str | None = Field(None, description=f"Falls back to {PUBLIC_KEY_ENV}.")
        secret_key: SecretStr | None = Field(None, description=f"Falls back to {SECRET_KEY_ENV}.")
        batch_scores: bool = Field(
            True,
            description="A list of scores per request (the current API); false: one score "
            "per request (Langfuse servers that take only that).",
        )

    def __init__(
        self,
        options: LangfuseSink.Options,
        *,
        metrics: CollectorMetrics | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        endpoint = langfuse_endpoint(options)
        metrics = metrics if metrics is not None else CollectorMetrics()
        credentials = Credentials({**options.headers, **endpoint.headers}, endpoint.auth)
        check = TargetCheck(
            self.name, "langfuse", endpoint.base_url, credentials, options,
            observations_in_langfuse, metrics, fix=FIX,
        )  # fmt: skip
        api = LangfuseApi(endpoint, options, transport, batch_scores=options.batch_scores)
        super().__init__(options, api, metrics=metrics, check=check)

    @classmethod
    def create(cls, options: LangfuseSink.Options, context: PluginContext) -> LangfuseSink:
        return cls(options, metrics=context.metrics)

    def item_span(self, item: dict[str, Any]) -> str | None:
        span_id = item.get("observationId")
        return span_id if isinstance(span_id, str) else None

    def items(self, record: RagRecord, judged: Sequence[Judged]) -> list[dict[str, Any]]:
        out = []
        for j in judged:
            score = _score(j.result, score_id(record.record_id, j.result))
            score["traceId"] = record.trace_id
            score["observationId"] = j.target.span_id
            score["metadata"]["record_id"] = record.record_id
            score["metadata"]["revision"] = record.revision
            out.append(score)
        return out

    def conversation_items(
        self, conversation: ConversationRecord, results: Sequence[EvalResult]
    ) -> list[dict[str, Any]]:
        """Session scores: ``sessionId`` is the conversation id, the score id derived from
        the conversation's identifier, metric and method (a revision, an update or a
        repeat updates the score)."""
        out = []
        for r in results:
            score = _score(r, session_score_id(conversation.identifier, r))
            score["sessionId"] = conversation.conversation_id
            score["metadata"]["conversation_revision"] = conversation.revision
            score["metadata"]["turns"] = len(conversation.turns)
            out.append(score)
        return out


def langfuse_endpoint(options: LangfuseSink.Options) -> Endpoint:
    """Langfuse's URL and keys, from the options and Langfuse's variables."""
    host = options.host or os.environ.get(HOST_ENV)
    public = options.public_key or os.environ.get(PUBLIC_KEY_ENV)
    given = options.secret_key
    secret = given.get_secret_value() if given else os.environ.get(SECRET_KEY_ENV)
    if not host or not public or not secret:
        raise ConfigError(
            "sinks.langfuse needs host, public_key and secret_key (or LANGFUSE_HOST, "
            "LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY)"
        )
    return Endpoint(host, auth=httpx.BasicAuth(public, secret))


class LangfuseApi(HttpTransport[dict[str, Any]]):
    """Langfuse's score API: a list of scores per request, or one (``batch_scores``)."""

    def __init__(
        self,
        endpoint: Endpoint,
        options: DeliveryOptions,
        transport: httpx.BaseTransport | None = None,
        *,
        batch_scores: bool = True,
    ) -> None:
        super().__init__(endpoint, options, transport)
        self.batch_scores = batch_scores

    def requests(self, batch: Sequence[dict[str, Any]]) -> list[ApiRequest]:
        if self.batch_scores:
            return [ApiRequest(SCORES_PATH, list(batch), len(batch))]
        return [ApiRequest(SCORES_PATH, score, 1) for score in batch]

    def reply(self, request: ApiRequest, response: httpx.Response) -> Reply:
        """207: the batch was taken, some scores refused (not to be sent again)."""
        if response.status_code != 207:
            return super().reply(request, response)
        try:
            body = response.json()
            refused = int(body.get("rejected", 0))
            errors = [str(e.get("message", e)) for e in body.get("errors", [])][:3]
        except (ValueError, AttributeError, TypeError):
            refused, errors = request.items, ["unreadable 207 answer"]
        return Reply(Outcome.DELIVERED, min(refused, request.items), "; ".join(errors)[:300])


def observations_in_langfuse(client: BackendClient[Any], judged: SpansToCheck) -> set[str]:
    """The judged observations Langfuse has in the trace (its ids are the spans' ids)."""
    found: set[str] = set()
    cursor: str | None = None
    for _ in range(10):  # bounded: a trace of up to 10 000 observations
        params = [("traceId", judged.trace_id), ("fields", "core"), ("limit", 1000)]
        answer, _ = client.get(OBSERVATIONS_PATH, [*params, ("cursor", cursor)])
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise BackendRefused("langfuse: unexpected answer shape", 200)
        found.update(str(d["id"]).lower() for d in data if isinstance(d, dict) and d.get("id"))
        meta = answer.get("meta")
        cursor = meta.get("cursor") if isinstance(meta, dict) else None
        if not cursor or not data or found >= set(judged.items):
            break
    return found
