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
evaluation. Batching, retries and counting: :mod:`ragpulse.exporters.support.delivery`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import Field

from ragpulse.errors import ConfigError
from ragpulse.exporters.support.delivery import (
    ApiRequest,
    DeliveryOptions,
    Endpoint,
    HttpSink,
    Judged,
    Outcome,
    Reply,
)
from ragpulse.exporters.support.results import annotator_kind, error_label, result_metadata
from ragpulse.record import EvalResult, RagRecord
from ragpulse.semconv import ANNOTATOR_LLM

TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
EXPERIMENT_ID_ENV = "MLFLOW_EXPERIMENT_ID"
TOKEN_ENV = "MLFLOW_TRACKING_TOKEN"
USERNAME_ENV = "MLFLOW_TRACKING_USERNAME"
PASSWORD_ENV = "MLFLOW_TRACKING_PASSWORD"
EXPERIMENT_HEADER = "x-mlflow-experiment-id"
"""The header MLflow's OTLP intake reads the experiment from; sent here too, for the
server's auth and routing middlewares."""
TRACE_NOT_FOUND = "RESOURCE_DOES_NOT_EXIST"


@dataclass(frozen=True)
class Assessment:
    trace_id: str  # MLflow's: tr-<OTel trace id>
    body: dict[str, Any]


def _feedback(result: EvalResult) -> dict[str, Any]:
    if result.error:
        code, _, message = result.error.partition(":")
        return {"error": {"error_code": code.strip(), "error_message": message.strip() or code}}
    return {"value": result.score if result.score is not None else error_label(result)}


def _string_map(meta: dict[str, Any]) -> dict[str, str]:
    """MLflow's assessment metadata is a string -> string map."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in meta.items()}


class MlflowSink(HttpSink[Assessment]):
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
        batch_size: int = Field(1, ge=1, description="One assessment per request (MLflow's API).")
        concurrency: int = Field(4, ge=1, description="Requests in flight at once.")

    def endpoint(self, options: DeliveryOptions) -> Endpoint:
        assert isinstance(options, self.Options)
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

    def items(self, record: RagRecord, judged: Sequence[Judged]) -> list[Assessment]:
        trace_id = f"tr-{record.trace_id}"
        out = []
        for j in judged:
            r = j.result
            meta = result_metadata(r)
            if r.label and r.score is not None:
                meta["label"] = r.label
            kind = "LLM_JUDGE" if annotator_kind(r.method) == ANNOTATOR_LLM else "CODE"
            body: dict[str, Any] = {
                "assessment_name": r.metric,
                "trace_id": trace_id,
                "span_id": j.target.span_id,
                "source": {"source_type": kind, "source_id": f"ragpulse.{r.method}"},
                "feedback": _feedback(r),
                "metadata": _string_map(meta),
            }
            if r.explanation:
                body["rationale"] = r.explanation
            out.append(Assessment(trace_id, body))
        return out

    def requests(self, batch: list[Assessment]) -> list[ApiRequest]:
        return [
            ApiRequest(
                f"/api/3.0/mlflow/traces/{a.trace_id}/assessments", {"assessment": a.body}, 1
            )
            for a in batch
        ]

    def reply(self, request: ApiRequest, response: httpx.Response) -> Reply:
        """Also retried: the trace is not in MLflow yet (the app's export may lag)."""
        if response.status_code == 404 and _error_code(response) == TRACE_NOT_FOUND:
            return Reply(Outcome.RETRY, reason="trace not in MLflow yet")
        return super().reply(request, response)


def _error_code(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    code = body.get("error_code") if isinstance(body, dict) else None
    return code if isinstance(code, str) else None
