"""MLflow 3's stored traces, read through its tracking server's REST API.

``POST /api/3.0/mlflow/traces/search`` (what ``mlflow.search_traces`` calls) lists an
experiment's traces by ``trace.timestamp_ms`` (the root span's start), at most 500 per
page, paged by a token; ``GET /api/3.0/mlflow/traces/batchGet`` returns whole traces
with their spans as OTLP protobuf JSON (base64 ids). Those go through the OTLP
receiver's decoder (:mod:`ragpulse.collector.intake.otlp`); the trace's tags stand in for the
resource (MLflow keeps resource attributes such as ``service.name`` as tags).

MLflow's own span shape is mapped here, once, to OpenInference: ``mlflow.spanType``
(RETRIEVER, LLM, CHAT_MODEL, CHAIN, AGENT, TOOL, ...) to ``openinference.span.kind``,
``mlflow.spanInputs`` / ``mlflow.spanOutputs`` to ``input.value`` / ``output.value``,
a retriever's output documents (``page_content``, ``metadata``, ``id``) to
``retrieval.documents``, and a chat model's messages to ``gen_ai.input.messages`` /
``gen_ai.output.messages``. Spans that carry OpenInference or GenAI attributes already
(an app traced over OTLP) keep theirs.

Credentials as MLflow's clients take them: ``stored_traces.api_key`` or
``MLFLOW_TRACKING_TOKEN`` (Bearer), else ``stored_traces.username`` / ``password`` or
``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD`` (Basic). Results go back as
assessments, through the ``mlflow`` sink at the same tracking server and experiment.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

import httpx

from ragpulse import semconv as sc
from ragpulse.backend_client import BackendClient, BackendUrl, Credentials, PageTooLarge
from ragpulse.collector.intake import otlp
from ragpulse.collector.stored.common import (
    Page,
    Reader,
    SourceMetrics,
    TraceRef,
    as_dict,
    as_list,
    chunks,
    halving,
)
from ragpulse.collector.stored.follow import StoredTraceSource
from ragpulse.config import Settings, StoredTracesSettings
from ragpulse.errors import BackendError, ConfigError, DecodeError
from ragpulse.exporters.mlflow import PASSWORD_ENV, TOKEN_ENV, USERNAME_ENV
from ragpulse.record import AttributeValue, Span

log = logging.getLogger(__name__)

SEARCH_PATH = "/api/3.0/mlflow/traces/search"
BATCH_GET_PATH = "/api/3.0/mlflow/traces/batchGet"
EXPERIMENT_PATH = "/api/2.0/mlflow/experiments/get"
MAX_SEARCH_RESULTS = 500  # the server's bound on max_results
TRACE_PREFIX = "tr-"

SPAN_TYPE = "mlflow.spanType"
SPAN_INPUTS = "mlflow.spanInputs"
SPAN_OUTPUTS = "mlflow.spanOutputs"
KINDS = {
    "RETRIEVER": "RETRIEVER",
    "RERANKER": "RERANKER",
    "LLM": "LLM",
    "CHAT_MODEL": "LLM",
    "CHAIN": "CHAIN",
    "WORKFLOW": "CHAIN",
    "AGENT": "AGENT",
    "TOOL": "TOOL",
    "EMBEDDING": "EMBEDDING",
    "GUARDRAIL": "GUARDRAIL",
    "EVALUATOR": "EVALUATOR",
}
"""MLflow span types -> OpenInference span kinds."""


class MlflowReader(Reader):
    tool = "mlflow"

    def __init__(self, client: BackendClient[SourceMetrics]) -> None:
        super().__init__(client)
        self.experiment_id = client.url.target or "0"
        self._experiment_checked = False

    def roots(self, since_ns: int, until_ns: int | None) -> Iterator[list[TraceRef]]:
        yield from self._search(since_ns, until_ns, "DESC")

    def traces(self, trace_ids: Sequence[str]) -> Iterator[Page]:
        for ids in chunks(trace_ids, self.settings.traces_per_request):
            yield from self._batch(list(ids))

    def recent(
        self, since_ns: int, *, wanted: Callable[[str], bool], known: Callable[[Span], bool]
    ) -> Iterator[Page]:
        for refs in self._search(since_ns, None, "ASC"):
            ids = [r.trace_id for r in refs if wanted(r.trace_id)]
            if ids:
                yield from self.traces(ids)

    def _check_experiment(self) -> None:
        """MLflow's search answers an unknown experiment with no traces: say so instead."""
        if self._experiment_checked:
            return
        try:
            self.client.get(EXPERIMENT_PATH, [("experiment_id", self.experiment_id)])
        except BackendError as exc:
            if "HTTP 404" in str(exc) or "RESOURCE_DOES_NOT_EXIST" in str(exc):
                raise BackendError(
                    f"mlflow at {self.url.base_url} has no experiment {self.experiment_id}"
                ) from None
            raise
        self._experiment_checked = True

    def _search(self, since_ns: int, until_ns: int | None, order: str) -> Iterator[list[TraceRef]]:
        self._check_experiment()
        clauses = [f"trace.timestamp_ms >= {since_ns // 1_000_000}"]
        if until_ns is not None:
            clauses.append(f"trace.timestamp_ms < {until_ns // 1_000_000}")
        body: dict[str, Any] = {
            "locations": [
                {
                    "type": "MLFLOW_EXPERIMENT",
                    "mlflow_experiment": {"experiment_id": self.experiment_id},
                }
            ],
            "filter": " AND ".join(clauses),
            "order_by": [f"timestamp_ms {order}"],
        }  # fmt: skip
        token: str | None = None
        limit = min(self.settings.page_spans, MAX_SEARCH_RESULTS)
        while True:

            def fetch(n: int, token: str | None = token) -> tuple[Any, int]:
                page = {**body, "max_results": n, **({"page_token": token} if token else {})}
                return self.client.post(SEARCH_PATH, page)

            answer, _, limit = halving(fetch, limit, self.tool)
            if not isinstance(answer, dict):
                raise BackendError(f"mlflow at {self.url.base_url}: unexpected search answer")
            refs = [ref for t in answer.get("traces") or [] if (ref := _ref(t)) is not None]
            yield refs
            token = answer.get("next_page_token") or None
            if token is None:
                return

    def _batch(self, trace_ids: list[str]) -> Iterator[Page]:
        params = [("trace_ids", TRACE_PREFIX + t) for t in trace_ids]
        try:
            answer, size = self.client.get(BATCH_GET_PATH, params)
        except PageTooLarge as exc:
            if len(trace_ids) == 1:
                raise BackendError(f"{exc}: one trace alone is larger; raise it") from exc
            half = len(trace_ids) // 2  # too large together: fetch each half alone
            yield from self._batch(trace_ids[:half])
            yield from self._batch(trace_ids[half:])
            return
        traces = answer.get("traces") if isinstance(answer, dict) else None
        if not isinstance(traces, list):
            raise BackendError(f"mlflow at {self.url.base_url}: unexpected batchGet answer")
        page = Page([], size)
        for trace in traces:
            spans, rejected = _decode_trace(trace)
            page.spans.extend(spans)
            page.rejected += rejected
        self.count_rejected(page)
        yield page


class MlflowSource(StoredTraceSource):
    """``mlflow``: follows the traces an MLflow experiment stores."""

    name = "mlflow"
    url_shape = "mlflow://HOST:PORT/EXPERIMENT_ID"
    target = "the experiment id"
    reader_class = MlflowReader

    @classmethod
    def credentials(cls, settings: StoredTracesSettings) -> Credentials:
        api_key = settings.api_key
        token = api_key.get_secret_value() if api_key else os.environ.get(TOKEN_ENV)
        if token:
            return Credentials({"Authorization": f"Bearer {token}"})
        user = settings.username or os.environ.get(USERNAME_ENV)
        secret = settings.password
        password = secret.get_secret_value() if secret else os.environ.get(PASSWORD_ENV)
        if user and password:
            return Credentials(auth=httpx.BasicAuth(user, password))
        return Credentials()

    @classmethod
    def check_target(cls, target: str) -> None:
        if not target.isdigit():
            raise ConfigError(
                f"MLflow experiment ids are numbers, not {target!r}: {cls.target} ({cls.url_shape})"
            )

    @classmethod
    def sink_options(cls, url: BackendUrl, settings: Settings) -> dict[str, Any]:
        st = settings.stored_traces
        options: dict[str, Any] = {"tracking_uri": url.base_url, "experiment_id": url.target}
        if st.api_key:
            options["headers"] = {"Authorization": f"Bearer {st.api_key.get_secret_value()}"}
        elif st.username and st.password:
            pair = f"{st.username}:{st.password.get_secret_value()}".encode()
            options["headers"] = {"Authorization": f"Basic {base64.b64encode(pair).decode()}"}
        return options


def _ref(info: Any) -> TraceRef | None:
    """The OTel trace id and start time of a search result (None: not an OTel-shaped id)."""
    if not isinstance(info, dict):
        return None
    trace_id = str(info.get("trace_id") or "")
    hex_id = trace_id.removeprefix(TRACE_PREFIX)
    if len(hex_id) != 32 or not _is_hex(hex_id):
        log.debug("mlflow: trace id %r is not an OpenTelemetry id; skipped", trace_id)
        return None
    started = info.get("request_time")
    try:
        start_ns = int(
            datetime.fromisoformat(str(started).replace("Z", "+00:00")).timestamp() * 1e9
        )
    except ValueError:
        start_ns = 0
    return TraceRef(hex_id, start_ns)


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def _decode_trace(trace: Any) -> tuple[list[Span], int]:
    """One batchGet trace as ragpulse spans (and how many spans were rejected)."""
    if not isinstance(trace, dict):
        return [], 1
    info = as_dict(trace.get("trace_info"))
    tags = as_dict(info.get("tags"))
    resource = [
        {"key": k, "value": {"stringValue": str(v)}}
        for k, v in tags.items()
        if not str(k).startswith("mlflow.")
    ]
    spans = as_list(trace.get("spans"))
    payload = {
        "resourceSpans": [{"resource": {"attributes": resource}, "scopeSpans": [{"spans": spans}]}]
    }
    try:
        decoded = otlp.decode_request(otlp.request_from_json(payload, hex_ids=False))
    except DecodeError as exc:
        log.debug("mlflow: trace %s not decodable: %s", info.get("trace_id"), exc)
        return [], len(spans)
    return [openinference(span) for span in decoded.spans], decoded.rejected


def openinference(span: Span) -> Span:
    """``span`` with MLflow's own attributes also written as OpenInference and GenAI ones
    (where the span does not carry those already)."""
    attrs = span.attributes
    kind = KINDS.get(str(attrs.get(SPAN_TYPE) or "").upper())
    if kind is None and SPAN_INPUTS not in attrs:
        return span
    added: dict[str, AttributeValue] = {}
    if kind and sc.OPENINFERENCE_SPAN_KIND not in attrs:
        added[sc.OPENINFERENCE_SPAN_KIND] = kind
    inputs, outputs = attrs.get(SPAN_INPUTS), attrs.get(SPAN_OUTPUTS)
    if inputs is not None and sc.INPUT_VALUE not in attrs:
        added[sc.INPUT_VALUE] = _text(inputs)
    if outputs is not None and sc.OUTPUT_VALUE not in attrs:
        added[sc.OUTPUT_VALUE] = _text(outputs)
    has_documents = any(k.startswith(sc.RETRIEVAL_DOCUMENTS) for k in attrs)
    if kind == "RETRIEVER" and not has_documents and isinstance(outputs, list):
        added[sc.RETRIEVAL_DOCUMENTS] = [_document(d) for d in outputs]
    if kind == "LLM":
        added.update(_chat(attrs, inputs, outputs))
    if not added:
        return span
    return span.model_copy(update={"attributes": {**attrs, **added}})


def _text(value: AttributeValue) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _document(value: Any) -> dict[str, Any]:
    """An MLflow (LangChain-shaped) document as OpenInference's document fields."""
    if not isinstance(value, dict):
        return {"content": value if isinstance(value, str) else json.dumps(value, default=str)}
    meta = as_dict(value.get("metadata"))
    doc: dict[str, Any] = {"content": value.get("page_content", value.get("content", ""))}
    doc_id = value.get("id") or meta.get("doc_uri") or meta.get("id")
    if doc_id is not None:
        doc["id"] = str(doc_id)
    if isinstance(meta.get("score"), int | float):
        doc["score"] = meta["score"]
    if meta:
        doc["metadata"] = meta
    return doc


def _chat(
    attrs: dict[str, AttributeValue], inputs: AttributeValue, outputs: AttributeValue
) -> dict[str, AttributeValue]:
    """A chat model span's messages, model and usage in GenAI attributes."""
    out: dict[str, AttributeValue] = {}
    messages = inputs.get("messages") if isinstance(inputs, dict) else None
    if isinstance(messages, list) and sc.GEN_AI_INPUT_MESSAGES not in attrs:
        out[sc.GEN_AI_INPUT_MESSAGES] = json.dumps(messages, default=str)
    choices = outputs.get("choices") if isinstance(outputs, dict) else None
    if isinstance(choices, list) and choices and sc.GEN_AI_OUTPUT_MESSAGES not in attrs:
        first = choices[0] if isinstance(choices[0], dict) else {}
        message = first.get("message")
        if isinstance(message, dict):
            out[sc.GEN_AI_OUTPUT_MESSAGES] = json.dumps([message], default=str)
    model = (inputs.get("model") if isinstance(inputs, dict) else None) or (
        outputs.get("model") if isinstance(outputs, dict) else None
    )
    if isinstance(model, str) and sc.GEN_AI_REQUEST_MODEL not in attrs:
        out[sc.GEN_AI_REQUEST_MODEL] = model
    usage = outputs.get("usage") if isinstance(outputs, dict) else None
    if isinstance(usage, dict):
        for key, name in (
            ("prompt_tokens", sc.GEN_AI_USAGE_INPUT_TOKENS),
            ("completion_tokens", sc.GEN_AI_USAGE_OUTPUT_TOKENS),
        ):
            if isinstance(usage.get(key), int) and name not in attrs:
                out[name] = usage[key]
    return out
