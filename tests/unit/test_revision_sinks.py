"""Each sink's handling of a revision: the record rebuilt from spans that came late
replaces the earlier one, one evaluation per metric and method per record, also when the
revision judges other spans (a record first built without its root span).

Phoenix's and MLflow's APIs are stood in for by stateful in-process doubles (the real
servers run in tests/live/test_tracing_backends.py and test_slow_turns.py) that keep
annotations and assessments as the servers do: upserted by their keys, deleted and
overridden as asked. Langfuse's is the schema-checking double of its sink's tests.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from prometheus_client import CollectorRegistry
from support.helpers import new_span_id, new_trace_id
from support.langfuse_double import LangfuseDouble

from ragpulse.config import Settings
from ragpulse.exporters.base import Sink
from ragpulse.exporters.jsonl import JsonlSink
from ragpulse.exporters.langfuse import LangfuseSink
from ragpulse.exporters.memory import InMemorySink
from ragpulse.exporters.mlflow import MlflowSink
from ragpulse.exporters.phoenix import PhoenixSink
from ragpulse.exporters.prometheus import PrometheusSink
from ragpulse.plugin_context import PluginContext
from ragpulse.record import Document, EvalResult, ExportItem, ExportKind, RagRecord

TRACE = new_trace_id()
TOOL, FIRST_CHAT, LAST_CHAT, ROOT = (new_span_id() for _ in range(4))


def builds() -> tuple[RagRecord, RagRecord]:
    """A turn built without its root (rooted at its first span, its answer the only model
    call's), and the revision once the root and the last model call came."""
    partial = RagRecord(
        trace_id=TRACE,
        span_id=FIRST_CHAT,
        kind="agent",
        partial="idle",
        question="When does the ferry leave?",
        answer="At 8.",
        documents=[Document(content="The ferry leaves at 8 am.")],
        generation_span_id=FIRST_CHAT,
        model_calls=1,
    )
    whole = partial.model_copy(
        update={
            "span_id": ROOT,
            "revision": 2,
            "partial": None,
            "answer": "The ferry leaves at 8 am.",
            "generation_span_id": LAST_CHAT,
            "model_calls": 2,
        }
    )
    return partial, whole


def results(faithfulness: float | None) -> list[EvalResult]:
    return [
        EvalResult(metric="faithfulness", method="lexical", score=faithfulness),
        EvalResult(metric="agent_steps", method="rules", score=1.0),
    ]


def exported() -> tuple[ExportItem[RagRecord], ExportItem[RagRecord]]:
    partial, whole = builds()
    first = ExportItem(partial, results(0.4))
    revision = ExportItem(
        whole,
        results(0.9),
        ExportKind.REVISION,
        previous=partial,
        previous_results=first.results,
    )
    return first, revision


def deliver_first_then_revision(sink: Sink[Any]) -> ExportItem[RagRecord]:
    """The first build exported and delivered by ``sink`` (started here), then its revision,
    then the sink shut down; the first build's item."""
    sink.start()
    first, revision = exported()
    sink.export(first)
    assert sink.force_flush(5)
    sink.export(revision)
    sink.shutdown()
    return first


def test_a_revision_takes_the_place_of_its_record_in_memory_and_jsonl() -> None:
    first, revision = exported()
    memory = InMemorySink()
    out = io.StringIO()
    jsonl = JsonlSink(out)
    for item in (first, revision):
        memory.export(item)
        jsonl.export(item)
    [kept] = memory.items
    assert kept.record.revision == 2 and kept.record.span_id == ROOT
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(line["record_id"], line["revision"]) for line in lines] == [
        (first.record.record_id, 1),
        (first.record.record_id, 2),
    ]
    assert lines[0]["partial"] == "idle" and "revised" not in lines[0]
    assert lines[1]["partial"] is None and lines[1]["revised"] is True


def test_prometheus_observes_each_metric_once_per_record_and_counts_revisions_apart() -> None:
    registry = CollectorRegistry()
    sink = PrometheusSink(registry)
    partial, whole = builds()
    # The partial build had no answer worth scoring; the revision's score is observed.
    sink.export(ExportItem(partial, results(None)))
    sink.export(
        ExportItem(whole, results(0.9), ExportKind.REVISION, previous=partial,
                   previous_results=results(None))
    )  # fmt: skip
    third = whole.model_copy(update={"revision": 3})
    sink.export(
        ExportItem(third, results(0.7), ExportKind.REVISION, previous=whole,
                   previous_results=results(0.9))
    )  # fmt: skip
    value = registry.get_sample_value
    score = {"metric": "faithfulness", "method": "lexical", "service": "unknown_service"}
    route = {"route": "none"}
    assert value("ragpulse_eval_score_count", {**score, **route}) == 1
    assert value("ragpulse_eval_score_sum", {**score, **route}) == 0.9
    steps = {**score, "metric": "agent_steps", "method": "rules", **route}
    assert value("ragpulse_eval_score_count", steps) == 1
    assert value("ragpulse_records_revised_total", {"service": "unknown_service", **route}) == 2
    assert value("ragpulse_agent_turns_total", {"service": "unknown_service"}) == 1


class PhoenixStore:
    """Phoenix's annotation API as the sink uses it: span annotations upserted on (name,
    span, identifier), deleted in a project by name and identifier."""

    def __init__(self) -> None:
        self.spans: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.calls: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        url = urlsplit(str(request.url))
        self.calls.append(f"{request.method} {url.path}")
        if request.method == "DELETE":
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            assert query["delete_all"] == "true"
            gone = [k for k in self.spans if (k[0], k[2]) == (query["name"], query["identifier"])]
            for key in gone:
                del self.spans[key]
            return httpx.Response(204)
        for annotation in json.loads(request.content)["data"]:
            if url.path == "/v1/span_annotations":
                key = (annotation["name"], annotation["span_id"], annotation["identifier"])
                self.spans[key] = annotation
        return httpx.Response(200, json={"data": []})


def test_phoenix_deletes_the_earlier_annotation_of_a_result_that_moved_then_files_it() -> None:
    store = PhoenixStore()
    options = PhoenixSink.Options(endpoint="http://phoenix", max_wait_s=0, verify_sample=0)
    sink = PhoenixSink(options, transport=httpx.MockTransport(store))
    deliver_first_then_revision(sink)
    by_name = {name: span for name, span, _ in store.spans}
    assert by_name == {"faithfulness": LAST_CHAT, "agent_steps": ROOT}
    assert len(store.spans) == 2  # one annotation per metric and method of the record
    assert {a["metadata"]["revision"] for a in store.spans.values()} == {2}
    # Each moved result: its record's earlier annotation deleted, then the new one filed.
    deletes = [i for i, c in enumerate(store.calls) if c.startswith("DELETE")]
    assert [store.calls[i] for i in deletes] == ["DELETE /v1/projects/default/span_annotations"] * 2
    assert all(store.calls[i + 1] == "POST /v1/span_annotations" for i in deletes)


class MlflowStore:
    """MLflow's assessment API as the sink uses it: the trace's assessments read, created
    (one naming another in ``overrides`` marks that one invalid) and patched."""

    def __init__(self) -> None:
        self.assessments: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = urlsplit(str(request.url)).path
        if request.method == "GET":
            info = {"assessments": self.assessments}
            return httpx.Response(200, json={"trace": {"trace_info": info}})
        body = json.loads(request.content)["assessment"]
        if request.method == "PATCH":
            found = next(a for a in self.assessments if path.endswith(a["assessment_id"]))
            found.update(body)
            return httpx.Response(200, json={"assessment": found})
        created = {**body, "assessment_id": f"a-{uuid.uuid4().hex[:8]}", "valid": True}
        for earlier in self.assessments:
            if earlier["assessment_id"] == body.get("overrides"):
                earlier["valid"] = False
        self.assessments.append(created)
        return httpx.Response(200, json={"assessment": created})


def test_mlflow_overrides_the_earlier_assessment_of_a_result_that_moved() -> None:
    store = MlflowStore()
    options = MlflowSink.Options(tracking_uri="http://mlflow", max_wait_s=0)
    sink = MlflowSink(options, transport=httpx.MockTransport(store))
    first = deliver_first_then_revision(sink)
    valid = [a for a in store.assessments if a["valid"]]
    assert {a["assessment_name"]: a["span_id"] for a in valid} == {
        "faithfulness": LAST_CHAT,
        "agent_steps": ROOT,
    }
    assert len(valid) == 2
    overridden = [a for a in store.assessments if not a["valid"]]
    assert {a["span_id"] for a in overridden} == {FIRST_CHAT}
    assert all(a["overrides"] for a in valid)
    assert {a["metadata"]["ragpulse.record_id"] for a in valid} == {first.record.record_id}


def test_mlflow_updates_in_place_a_revised_result_on_the_same_span() -> None:
    store = MlflowStore()
    options = MlflowSink.Options(tracking_uri="http://mlflow", max_wait_s=0)
    sink = MlflowSink(options, transport=httpx.MockTransport(store))
    sink.start()
    partial, whole = builds()
    same_span = whole.model_copy(update={"span_id": partial.span_id})
    steps = [EvalResult(metric="agent_steps", method="rules", score=1.0)]
    sink.export(ExportItem(partial, steps))
    assert sink.force_flush(5)
    revised = [EvalResult(metric="agent_steps", method="rules", score=0.5)]
    sink.export(
        ExportItem(
            same_span, revised, ExportKind.REVISION, previous=partial, previous_results=steps
        )
    )
    sink.shutdown()
    [only] = store.assessments
    assert only["valid"] and only["feedback"] == {"value": 0.5}


@pytest.fixture
def langfuse() -> Iterator[LangfuseDouble]:
    with LangfuseDouble(secret_key="sk-lf-test") as server:
        yield server


def test_langfuse_scores_are_keyed_by_the_record_so_a_revision_updates_them(
    langfuse: LangfuseDouble,
) -> None:
    settings = Settings(
        sinks={
            "langfuse": {
                "host": langfuse.url, "public_key": "pk-lf-test", "secret_key": "sk-lf-test",
                "max_wait_s": 0.01,
            }
        }
    )  # fmt: skip
    sink = LangfuseSink.from_settings(settings, PluginContext(settings))
    assert isinstance(sink, LangfuseSink)
    deliver_first_then_revision(sink)
    assert langfuse.invalid == []
    stored: dict[str, dict[str, Any]] = {}
    for score in langfuse.scores:  # Langfuse upserts by id: the last one stands
        stored[score["id"]] = score
    assert {s["name"]: s["observationId"] for s in stored.values()} == {
        "faithfulness": LAST_CHAT,
        "agent_steps": ROOT,
    }
    assert {s["metadata"]["revision"] for s in stored.values()} == {2}
