"""A Langfuse server double that checks every request against Langfuse's published API.

No Langfuse server can run here (it needs ClickHouse, Redis, S3 and Postgres), so this
local HTTP server stands in for ``POST /api/public/scores`` and, for ragpulse's Langfuse
source, ``GET /api/public/v2/observations``. Every request body is
validated against the models the Langfuse Python SDK generates from Langfuse's API
definition (``langfuse.api.CreateScoresRequest`` for a batch, ``CreateScoreRequest``
for one score; installed from PyPI with the dev extra), and more strictly than those
models do by themselves: no key outside the schema, and the rules its field docs give
(a NUMERIC or BOOLEAN value is a number, a CATEGORICAL or TEXT value a string, an
observation score names its trace). A valid request is answered as Langfuse answers
(202 for a batch, 200 with the id for one score); an invalid one with 400 and why,
and kept in :attr:`LangfuseDouble.invalid` so that tests can assert there were none.
Tests can script answers (:meth:`LangfuseDouble.answer_next`) to see retries, partial
success and refusals.

The observations endpoint serves what :meth:`LangfuseDouble.add_spans` stored: real
OpenTelemetry spans turned into observations as Langfuse's OpenTelemetry intake keeps
them (OpenInference kinds and GenAI operations as observation types, ``input.value`` /
``output.value`` as input and output, model and token usage, the other attributes under
``metadata.attributes`` and the resource's under ``metadata.resourceAttributes``; that
layout is the intake's as far as its documentation and SDKs show, not checked against a
running server). Its query parameters are the generated client's (an unknown one, a
``limit`` past 1000, a bad cursor are 400s), field groups and metadata truncation (200
characters unless ``expandMetadata`` names the key) behave as documented, pages go
newest first (Langfuse's documentation names no order: a test may set ``order``, the
key observations are sorted by instead, to serve them in any order it wants), and every
answer is checked against ``ObservationsV2Response`` before it is sent.
:meth:`LangfuseDouble.answer_next_get` scripts a GET's answer (429, 503).
"""

from __future__ import annotations

import base64
import json
import threading
from collections import deque
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

from langfuse.api import CreateScoreRequest, CreateScoresRequest, ObservationsV2Response
from langfuse.api.core.pydantic_utilities import parse_obj_as
from langfuse.api.core.serialization import convert_and_respect_annotation_metadata
from pydantic import ValidationError

from support.helpers import LocalServer, Reply

SCORES_PATH = "/api/public/scores"
WIRE_KEYS = frozenset(
    convert_and_respect_annotation_metadata(
        object_=dict.fromkeys(CreateScoreRequest.model_fields),
        annotation=CreateScoreRequest,
        direction="write",
    )
)
"""The request's keys as the API spells them (traceId, observationId, dataType, ...)."""
NUMBER_TYPES = frozenset({"NUMERIC", "BOOLEAN"})
STRING_TYPES = frozenset({"CATEGORICAL", "TEXT", "CORRECTION"})


def check_score(score: Any) -> list[str]:
    """Why ``score`` (one JSON object) breaks the schema; empty when it does not."""
    if not isinstance(score, dict):
        return [f"a score must be an object, got {type(score).__name__}"]
    problems = [f"unknown key {k!r}" for k in score if k not in WIRE_KEYS]
    try:
        parsed = parse_obj_as(CreateScoreRequest, score)
    except ValidationError as exc:
        return [*problems, str(exc)]
    value, data_type = parsed.value, parsed.data_type
    if data_type in NUMBER_TYPES and not isinstance(score.get("value"), int | float):
        problems.append(f"{data_type} value must be a number")
    if data_type in STRING_TYPES and not isinstance(value, str):
        problems.append(f"{data_type} value must be a string")
    if data_type == "BOOLEAN" and value not in (0, 1):
        problems.append("BOOLEAN value must be 0 or 1")
    if parsed.observation_id and not parsed.trace_id:
        problems.append("an observation score needs its traceId")
    return problems


OBSERVATIONS_PATH = "/api/public/v2/observations"
OBSERVATION_PARAMS = frozenset(
    {
        "fields", "expandMetadata", "limit", "cursor", "parseIoAsJson", "name", "userId",
        "sessionId", "type", "traceId", "level", "parentObservationId", "isRootObservation",
        "environment", "fromStartTime", "toStartTime", "version", "filter",
    }
)  # fmt: skip
"""The query parameters ``RawObservationsClient.get_many`` sends."""
FIELD_GROUPS = {
    "core": ("id", "traceId", "startTime", "endTime", "projectId", "parentObservationId", "type"),
    "basic": (
        "name", "level", "statusMessage", "version", "environment", "bookmarked", "public",
        "userId", "sessionId", "isRootObservation",
    ),
    "time": ("completionStartTime", "createdAt", "updatedAt"),
    "io": ("input", "output"),
    "metadata": ("metadata",),
    "model": ("model", "internalModelId", "modelParameters"),
    "usage": ("usageDetails", "costDetails", "totalCost", "usagePricingTierName"),
    "prompt": ("promptId", "promptName", "promptVersion"),
    "metrics": ("latency", "timeToFirstToken"),
    "trace_context": ("tags", "release", "traceName"),
}  # fmt: skip
"""The documented field groups of the v2 observations endpoint."""
METADATA_CUT = 200
TYPES = {"LLM": "GENERATION", "RETRIEVER": "RETRIEVER", "CHAIN": "CHAIN", "AGENT": "AGENT",
         "TOOL": "TOOL", "EMBEDDING": "EMBEDDING"}  # fmt: skip
GENERATION_OPS = frozenset({"chat", "text_completion", "generate_content"})


def _iso(ns: int) -> str:
    return (
        datetime.fromtimestamp(ns / 1e9, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def observation(span: Any, project_id: str = "project-1") -> dict[str, Any]:
    """An OpenTelemetry SDK span (``ReadableSpan``) as Langfuse's intake stores it."""
    attrs = dict(span.attributes or {})
    kind = attrs.get("openinference.span.kind")
    op = attrs.get("gen_ai.operation.name")
    kind_type = TYPES.get(kind) if isinstance(kind, str) else None
    obs_type = kind_type or ("GENERATION" if op in GENERATION_OPS else "SPAN")
    parent = span.parent.span_id if span.parent is not None else None
    tokens = {"input": "gen_ai.usage.input_tokens", "output": "gen_ai.usage.output_tokens"}
    usage = {key: attrs[name] for key, name in tokens.items() if isinstance(attrs.get(name), int)}
    model = attrs.get("gen_ai.request.model") or attrs.get("llm.model_name")
    error = span.status is not None and span.status.status_code.name == "ERROR"
    return {
        "id": format(span.context.span_id, "016x"),
        "traceId": format(span.context.trace_id, "032x"),
        "startTime": _iso(span.start_time),
        "endTime": _iso(span.end_time),
        "projectId": project_id,
        "parentObservationId": format(parent, "016x") if parent is not None else None,
        "type": obs_type,
        "name": span.name,
        "level": "ERROR" if error else "DEFAULT",
        "statusMessage": span.status.description if error else None,
        "environment": "default",
        "isRootObservation": parent is None,
        "input": attrs.pop("input.value", None),
        "output": attrs.pop("output.value", None),
        "metadata": {
            "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items()},
            "resourceAttributes": dict(span.resource.attributes),
            "scope": {
                "name": span.instrumentation_scope.name if span.instrumentation_scope else ""
            },
        },
        "model": model if isinstance(model, str) else None,
        "usageDetails": usage or None,
    }


class LangfuseDouble(LocalServer):
    """``POST /api/public/scores`` with Basic auth; keeps what it accepted."""

    def __init__(self, public_key: str = "pk-lf-test", secret_key: str = "sk-lf-test") -> None:
        super().__init__()
        self.public_key, self.secret_key = public_key, secret_key
        self.scores: list[dict[str, Any]] = []
        self.requests: list[Any] = []  # every body received, valid or not
        self.invalid: list[tuple[Any, list[str]]] = []
        self._scripted: deque[tuple[int, dict[str, str], Any]] = deque()
        self._scripted_gets: deque[tuple[int, dict[str, str], Any]] = deque()
        self.observations: list[dict[str, Any]] = []
        self.gets: list[dict[str, list[str]]] = []  # every GET's query, answered or not
        self.order: Callable[[dict[str, Any]], Any] | None = None  # else newest first
        self._lock = threading.Lock()
        self.received = threading.Condition(self._lock)

    def respond(self, path: str, headers: Any, body: bytes) -> Reply:
        status, reply_headers, reply = self._handle(path, headers.get("Authorization", ""), body)
        reply_headers = {**reply_headers, "Content-Type": "application/json"}
        return status, reply_headers, json.dumps(reply).encode()

    def answer_next(
        self, status: int, body: Any = None, headers: dict[str, str] | None = None
    ) -> None:
        """Answer the next valid request with this instead of accepting it."""
        with self._lock:
            self._scripted.append((status, headers or {}, body if body is not None else {}))

    def answer_next_get(
        self, status: int, body: Any = None, headers: dict[str, str] | None = None
    ) -> None:
        """Answer the next authorised GET with this instead of serving it."""
        with self._lock:
            self._scripted_gets.append((status, headers or {}, body if body is not None else {}))

    def add_spans(self, spans: Sequence[Any]) -> list[dict[str, Any]]:
        """Store OpenTelemetry SDK spans as observations (each checked against the API)."""
        added = [observation(span) for span in spans]
        for obs in added:
            parse_obj_as(ObservationsV2Response, {"data": [obs], "meta": {}})
        with self._lock:
            self.observations.extend(added)
        return added

    def respond_get(self, path: str, headers: Any) -> Reply:
        status, reply_headers, reply = self._get(path, headers.get("Authorization", ""))
        reply_headers = {**reply_headers, "Content-Type": "application/json"}
        return status, reply_headers, json.dumps(reply).encode()

    def _get(self, path: str, auth: str) -> tuple[int, dict[str, str], Any]:
        parts = urlsplit(path)
        query = parse_qs(parts.query, keep_blank_values=True)
        expected = base64.b64encode(f"{self.public_key}:{self.secret_key}".encode()).decode()
        with self._lock:
            self.gets.append(query)
            if parts.path != OBSERVATIONS_PATH:
                return 404, {}, {"message": "not found"}
            if auth != f"Basic {expected}":
                return 401, {}, {"message": "Invalid credentials"}
            if self._scripted_gets:
                return self._scripted_gets.popleft()
            observations = list(self.observations)
        problems = [f"unknown query parameter {k!r}" for k in query if k not in OBSERVATION_PARAMS]
        one = {k: v[-1] for k, v in query.items()}
        try:
            limit = int(one.get("limit", "50"))
            offset = json.loads(base64.b64decode(one["cursor"]))["offset"] if "cursor" in one else 0
        except (ValueError, KeyError, TypeError):
            return 400, {}, {"message": "invalid limit or cursor"}
        if not 1 <= limit <= 1000:
            problems.append("limit must be between 1 and 1000")
        if one.get("parseIoAsJson") == "true":
            problems.append("parseIoAsJson is deprecated")
        groups = one.get("fields", "core,basic").split(",")
        problems += [f"unknown field group {g!r}" for g in groups if g not in FIELD_GROUPS]
        if problems:
            return 400, {}, {"message": "; ".join(problems)}
        chosen = [o for o in observations if _matches(o, one)]
        if self.order is not None:
            chosen.sort(key=self.order)
        else:
            chosen.sort(key=lambda o: (o["startTime"], o["id"]), reverse=True)
        page = chosen[offset : offset + limit]
        expand = set(filter(None, one.get("expandMetadata", "").split(",")))
        data = [_shown(o, ["core", *groups], expand) for o in page]
        more = offset + limit < len(chosen)
        cursor = base64.b64encode(json.dumps({"offset": offset + limit}).encode()).decode()
        body = {"data": data, "meta": {"cursor": cursor} if more else {}}
        parse_obj_as(ObservationsV2Response, body)  # the double answers as the API says
        return 200, {}, body

    def wait_for(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The accepted scores once there are ``count`` of them (or the timeout passed)."""
        with self.received:
            self.received.wait_for(lambda: len(self.scores) >= count, timeout)
            return list(self.scores)

    def _handle(self, path: str, auth: str, raw: bytes) -> tuple[int, dict[str, str], Any]:
        expected = base64.b64encode(f"{self.public_key}:{self.secret_key}".encode()).decode()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        with self.received:
            self.requests.append(body)
            if path.split("?")[0] != SCORES_PATH:
                return 404, {}, {"message": "not found"}
            if auth != f"Basic {expected}":
                return 401, {}, {"message": "Invalid credentials"}
            batch = isinstance(body, list)
            problems = [p for s in (body if batch else [body]) for p in check_score(s)]
            if batch:
                try:
                    parse_obj_as(CreateScoresRequest, body)
                except ValidationError as exc:
                    problems.append(str(exc))
            if problems:
                self.invalid.append((body, problems))
                return 400, {}, {"message": "; ".join(problems)}
            if self._scripted:
                status, headers, reply = self._scripted.popleft()
                if status == 207:  # partial success: the first ``rejected`` refused
                    self.scores.extend(body[int(reply.get("rejected", 0)) :])
                    self.received.notify_all()
                return status, headers, reply
            self.scores.extend(body if batch else [body])
            self.received.notify_all()
        if batch:
            return 202, {}, {"message": "Accepted"}
        return 200, {}, {"id": body.get("id") or "generated"}


def _matches(obs: dict[str, Any], query: dict[str, str]) -> bool:
    if "traceId" in query and obs["traceId"] != query["traceId"]:
        return False
    if "fromStartTime" in query and _when(obs["startTime"]) < _when(query["fromStartTime"]):
        return False
    if "toStartTime" in query and _when(obs["startTime"]) >= _when(query["toStartTime"]):
        return False
    root = query.get("isRootObservation")
    return root is None or obs["isRootObservation"] == (root == "true")


def _when(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _shown(obs: dict[str, Any], groups: list[str], expand: set[str]) -> dict[str, Any]:
    """The observation with only the field groups asked for, its metadata values cut at
    200 characters unless ``expandMetadata`` named them."""
    keys = {key for group in groups for key in FIELD_GROUPS[group]}
    shown = {k: v for k, v in obs.items() if k in keys and v is not None}
    if isinstance(shown.get("metadata"), dict):
        meta = {}
        for key, value in shown["metadata"].items():
            text = value if isinstance(value, str) else json.dumps(value)
            meta[key] = value if key in expand or len(text) <= METADATA_CUT else text[:METADATA_CUT]
        shown["metadata"] = meta
    return shown
