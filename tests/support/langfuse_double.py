"""A Langfuse server double that checks every request against Langfuse's published API.

No Langfuse server can run here (it needs ClickHouse, Redis, S3 and Postgres), so this
local HTTP server stands in for ``POST /api/public/scores``. Every request body is
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
"""

from __future__ import annotations

import base64
import json
import threading
from collections import deque
from typing import Any

from langfuse.api import CreateScoreRequest, CreateScoresRequest
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


class LangfuseDouble(LocalServer):
    """``POST /api/public/scores`` with Basic auth; keeps what it accepted."""

    def __init__(self, public_key: str = "pk-lf-test", secret_key: str = "sk-lf-test") -> None:
        super().__init__()
        self.public_key, self.secret_key = public_key, secret_key
        self.scores: list[dict[str, Any]] = []
        self.requests: list[Any] = []  # every body received, valid or not
        self.invalid: list[tuple[Any, list[str]]] = []
        self._scripted: deque[tuple[int, dict[str, str], Any]] = deque()
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
