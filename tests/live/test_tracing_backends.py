"""Evaluations where teams look, measured in the real tools: Phoenix and MLflow on 127.0.0.1.

A decorated app (tests/support/backend_app.py) sends 20 traces both to ``ragpulse serve`` and to
the tool, and an agent app traced by its framework alone (tests/support/agent_backend_app.py:
Pydantic AI's own instrumentation) one agent turn. ragpulse posts its results through the
tool's own API (the ``phoenix`` or ``mlflow`` sink) and sends its OTLP evaluation signals
(EVALUATOR carrier spans; log events only where the endpoint takes logs) to the same tool.
Then, as the tool shows it:
every faithfulness result is an annotation / assessment on the app's chat span, every
context-relevance result on its retrieval span, each result of ragpulse's there once;
the trace's latency grew by no more than 0.5 s; its Phoenix project and its MLflow
``service.name`` are still the app's; ragpulse logged no export error and counted none.
In the agent turn, faithfulness is on the final ``chat`` span and the injection found in
a search result on that tool's ``execute_tool search_docs`` span.

The tools run from venvs of their own (``make backends``, tests/support/tracing_backends.py);
where pip could not install one, its test skips saying why.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.helpers import http_get, stop_process
from support.kafka_env import free_port, wait_until
from support.tracing_backends import MlflowServer, PhoenixServer, request

from ragpulse import semconv as sc
from ragpulse.config import Settings
from ragpulse.exporters.mlflow import MlflowSink
from ragpulse.exporters.phoenix import PhoenixSink, document_positions, record_key
from ragpulse.exporters.support.targets import evaluated_span
from ragpulse.plugin_context import PluginContext
from ragpulse.record import EvalResult, ExportItem, ExportKind, RagRecord

pytestmark = pytest.mark.integration

COUNT = 20
APP = "rag-app"  # the app's service.name and Phoenix project
MAX_LATENCY_GROWTH_S = 0.5
SUPPORT = Path(__file__).resolve().parents[1] / "support"
LOGS_OFF = re.compile(r"no logs intake \(HTTP (404|405) on /v1/logs\)")


@dataclass
class Run:
    """What the app sent and what ragpulse made of it."""

    traces: dict[str, dict[str, Any]]  # trace id -> root start/end, chat and retrieval ids
    agents: dict[str, dict[str, Any]]  # trace id -> the agent's span, its chats and tools
    results: dict[str, list[dict[str, Any]]]  # trace id -> ragpulse's results
    records: dict[str, dict[str, Any]]  # trace id -> ragpulse's record
    log: str  # ragpulse's log (WARNING and up)


def run(tmp_path: Path, backend: str, sinks: dict[str, Any], headers: dict[str, str]) -> Run:
    """``ragpulse serve`` with ``sinks`` and its OTLP export to ``backend``; the app sends
    COUNT traces to both; returns once the sink delivered every item it had (or fails)."""
    port, metrics_port = free_port(), free_port()
    results_path = tmp_path / "results.jsonl"
    config = {
        "otlp_http_port": port,
        "metrics_port": metrics_port,
        "assembly": {"grace_s": 0.3},
        "sinks": {
            **sinks,
            "jsonl": {"path": str(results_path)},
            "otel": {"endpoint": backend, "headers": headers},
        },
    }
    (tmp_path / "ragpulse.yaml").write_text(yaml.safe_dump(config))
    log_path = tmp_path / "ragpulse.log"
    with open(log_path, "wb") as log:
        serve = subprocess.Popen(
            [sys.executable, "-m", "ragpulse.cli", "--log-level", "WARNING", "serve",
             "--config", str(tmp_path / "ragpulse.yaml")],
            stderr=log,
        )  # fmt: skip
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        wait_until(lambda: http_get(metrics_url), 60, "ragpulse did not start", 0.1, (OSError,))
        app = subprocess.run(
            [sys.executable, str(SUPPORT / "backend_app.py"), "--ragpulse",
             f"http://127.0.0.1:{port}", "--backend", backend, "--count", str(COUNT),
             *(f"--header={k}={v}" for k, v in headers.items())],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert app.returncode == 0, app.stderr
        traces = {t["trace_id"]: t for t in map(json.loads, app.stdout.splitlines())}
        assert len(traces) == COUNT
        agent_app = subprocess.run(
            [sys.executable, str(SUPPORT / "agent_backend_app.py"), "--ragpulse",
             f"http://127.0.0.1:{port}", "--backend", backend,
             *(f"--header={k}={v}" for k, v in headers.items())],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert agent_app.returncode == 0, agent_app.stderr
        agents = {t["trace_id"]: t for t in map(json.loads, agent_app.stdout.splitlines())}
        assert len(agents) == 1

        def scored() -> dict[str, dict[str, Any]] | None:
            rows = [json.loads(line) for line in results_path.read_text().splitlines()]
            done = {r["trace_id"]: r for r in rows}
            return done if set(done) >= set(traces) | set(agents) else None

        rows = wait_until(scored, 120, "ragpulse did not score every trace", 0.2, (OSError,))
        [sink] = sinks
        expected = sum(expected_items(sink, r) for r in rows.values())

        def delivered() -> bool:
            text = http_get(metrics_url)
            return sample(text, "ragpulse_sink_items_total", sink, "delivered") >= expected

        wait_until(delivered, 300, f"the {sink} sink did not deliver {expected} items", 0.2)
        text = http_get(metrics_url)
        for outcome in ("failed", "dropped"):
            assert sample(text, "ragpulse_sink_items_total", sink, outcome) == 0
    finally:
        stop_process(serve)  # flushes the OTLP export too
    log_text = log_path.read_text(errors="replace")
    return Run(
        traces,
        agents,
        {t: r["results"] for t, r in rows.items()},
        {t: r for t, r in rows.items()},
        log_text,
    )


def expected_items(sink: str, row: dict[str, Any]) -> int:
    """Items the sink sends for one record: one per result, plus (Phoenix) one document
    annotation per scored document of each per-document score with certain positions."""
    items = len(row["results"])
    span_id = row["attributes"].get(sc.RAGPULSE_DOCUMENTS_SPAN_ID)
    if sink == "phoenix" and span_id:
        record = RagRecord.model_validate(row)
        for r in row["results"]:
            details = r.get("details", {})
            per_doc = details.get("per_document")
            if r["metric"] == "context_relevance" and isinstance(per_doc, list):
                positions = document_positions(record, details, span_id)
                items += len(per_doc) if positions and len(positions) == len(per_doc) else 0
    return items


def sample(text: str, name: str, sink: str, outcome: str) -> float:
    pattern = rf'^{name}{{outcome="{outcome}",sink="{sink}"}} (\S+)$'
    pattern_b = rf'^{name}{{sink="{sink}",outcome="{outcome}"}} (\S+)$'
    for line in text.splitlines():
        if m := re.match(pattern, line) or re.match(pattern_b, line):
            return float(m.group(1))
    return 0.0


def check_log(log: str) -> None:
    """No export error; the tool's missing logs intake said once, as a warning."""
    errors = [line for line in log.splitlines() if "ERROR" in line or "Traceback" in line]
    assert errors == [], "\n".join(errors)
    assert len(LOGS_OFF.findall(log)) == 1, log


def results_of(run: Run, trace_id: str, metric: str) -> list[dict[str, Any]]:
    return [r for r in run.results[trace_id] if r["metric"] == metric]


def judged(
    run: Run, trace_id: str, shown: list[dict[str, Any]], name: str
) -> Iterator[tuple[dict[str, Any], dict[str, Any], str]]:
    """(ragpulse's result, what the tool shows for it, the span it must be on) for every
    faithfulness and context-relevance result of one trace, once each shown item has
    been matched: the tool shows each of ragpulse's results exactly once."""
    assert len(shown) == len(run.results[trace_id])
    for metric, span in (("faithfulness", "chat"), ("context_relevance", "retrieval")):
        ours = results_of(run, trace_id, metric)
        theirs = [item for item in shown if item[name] == metric]
        assert ours and len(theirs) == len(ours)
        for result, item in zip(ours, theirs, strict=True):
            yield result, item, run.traces[trace_id][span]


# --- an agent turn -------------------------------------------------------------------


def agent_turn_of(run: Run) -> tuple[str, dict[str, Any], list[tuple[dict[str, Any], str]]]:
    """(trace id, the app's span ids, [(ragpulse's result, the span it must be on)]) of the
    run's agent turn, every target resolved on the record as ragpulse wrote it."""
    [(trace_id, turn)] = run.agents.items()
    row = run.records[trace_id]
    assert row["kind"] == "agent" and row["tool_calls"][0]["name"] == "search_docs"
    record = RagRecord.model_validate(row)
    targets = [
        (r, evaluated_span(record, EvalResult.model_validate(r)).span_id) for r in row["results"]
    ]
    return trace_id, turn, targets


def check_agent_turn(
    turn: dict[str, Any],
    targets: list[tuple[dict[str, Any], str]],
    shown: list[dict[str, Any]],
    name: str,
    source: str,
) -> dict[str, dict[str, Any]]:
    """Each of ragpulse's results shown once, on its span; faithfulness on the final model
    call, the injection found in the search result on the search tool's span. Returns
    what the tool shows, by metric."""
    assert len(shown) == len(targets)
    by_key = {(item[name], item[source]): item for item in shown}
    for result, span_id in targets:
        assert by_key[(result["metric"], f"ragpulse.{result['method']}")]["span_id"] == span_id
    by_metric = {item[name]: item for item in shown}
    final_chat, search = turn["chats"][-1], turn["tools"]["search_docs"]
    assert by_metric["faithfulness"]["span_id"] == final_chat != turn["root"]
    assert by_metric["injection"]["span_id"] == search
    return by_metric


# --- Phoenix -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def phoenix_run(
    phoenix_server: PhoenixServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Run]:
    sinks = {"phoenix": {"endpoint": phoenix_server.url, "max_wait_s": 0.2}}
    yield run(tmp_path_factory.mktemp("phoenix-run"), phoenix_server.url, sinks, {})


def phoenix_annotations(server: PhoenixServer, *span_ids: str) -> list[dict[str, Any]]:
    """The annotations of these spans; none while Phoenix has not inserted them yet (it
    answers 404 for spans it does not have)."""
    query = urllib.parse.urlencode([("span_ids", s) for s in span_ids] + [("limit", "1000")])
    try:
        answer = request(f"{server.url}/v1/projects/{APP}/span_annotations?{query}")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise
    return list(answer["data"])


def test_phoenix_shows_each_result_on_the_span_it_judges(
    phoenix_server: PhoenixServer, phoenix_run: Run
) -> None:
    run = phoenix_run
    check_log(run.log)
    expected = sum(len(run.results[t]) for t in run.traces)

    def landed() -> dict[str, list[dict[str, Any]]] | None:
        found = {
            t: phoenix_annotations(phoenix_server, s["root"], s["chat"], s["retrieval"])
            for t, s in run.traces.items()
        }
        return found if sum(map(len, found.values())) >= expected else None

    # sync=false: Phoenix inserts in the background (retrying for spans not there yet).
    found = wait_until(landed, 120, f"Phoenix did not show {expected} annotations", 0.5)
    for trace_id in run.traces:
        for result, annotation, span_id in judged(run, trace_id, found[trace_id], "name"):
            assert annotation["span_id"] == span_id
            key = record_key(RagRecord.model_validate(run.records[trace_id]))
            assert annotation["identifier"] == f"ragpulse.{result['method']}.{key}"
            assert annotation["annotator_kind"] == "CODE"
            assert annotation["result"]["score"] == result["score"]


def test_phoenix_trace_keeps_its_latency_and_project(
    phoenix_server: PhoenixServer, phoenix_run: Run
) -> None:
    run = phoenix_run
    answer = request(f"{phoenix_server.url}/v1/projects/{APP}/traces?limit=1000")
    shown = {t["trace_id"]: t for t in answer["data"] if t["trace_id"] in run.traces}
    assert set(shown) == set(run.traces)  # every trace in the app's project
    growth = []
    for trace_id, trace in run.traces.items():
        before = (trace["end_ns"] - trace["start_ns"]) / 1e9  # as the app recorded it
        t = shown[trace_id]
        after = (_iso(t["end_time"]) - _iso(t["start_time"])).total_seconds()
        growth.append(after - before)
        # Only the app's three spans: no carrier joined the trace.
        spans = request(
            f"{phoenix_server.url}/v1/projects/{APP}/spans?trace_id={trace_id}&limit=100"
        )["data"]
        assert {s["context"]["span_id"] for s in spans} == {
            trace["root"],
            trace["chat"],
            trace["retrieval"],
        }
    print(f"\nPhoenix trace latency growth: max {max(growth) * 1e3:.3f} ms over {COUNT} traces")
    assert max(growth) <= MAX_LATENCY_GROWTH_S


def test_phoenix_per_document_relevance(phoenix_server: PhoenixServer, phoenix_run: Run) -> None:
    """Document annotations on the retrieval span, one per retrieved document."""
    run = phoenix_run
    checked = 0
    for trace_id, trace in run.traces.items():
        record = run.records[trace_id]
        [lexical] = results_of(run, trace_id, "context_relevance")
        per_doc = lexical.get("details", {}).get("per_document")
        if not per_doc:
            continue
        span = request(
            f"{phoenix_server.url}/v1/projects/{APP}/spans?span_id={trace['retrieval']}"
        )["data"][0]
        query = (
            "query($id: ID!) { node(id: $id) { ... on Span "
            "{ documentEvaluations { name score documentPosition } } } }"
        )
        answer = request(
            f"{phoenix_server.url}/graphql", {"query": query, "variables": {"id": span["id"]}}
        )
        evaluations = answer["data"]["node"]["documentEvaluations"]
        assert len(record["documents"]) == len(per_doc)
        assert sorted((e["documentPosition"], e["score"]) for e in evaluations) == list(
            enumerate(per_doc)
        )
        assert {e["name"] for e in evaluations} == {"context_relevance/lexical"}
        checked += 1
    assert checked > 0


def test_phoenix_shows_an_agent_turns_results_on_the_steps_they_judge(
    phoenix_server: PhoenixServer, phoenix_run: Run
) -> None:
    _, turn, targets = agent_turn_of(phoenix_run)
    span_ids = [turn["root"], *turn["chats"], *turn["tools"].values()]

    def landed() -> list[dict[str, Any]] | None:
        found = phoenix_annotations(phoenix_server, *span_ids)
        return found if len(found) >= len(targets) else None

    found = wait_until(landed, 120, f"Phoenix did not show {len(targets)} annotations", 0.5)
    # ragpulse.<method>.<record key>: the method, for the comparison with the results.
    flat = [{**a, "source": a["identifier"].rsplit(".", 1)[0]} for a in found]
    by_metric = check_agent_turn(turn, targets, flat, "name", "source")
    assert by_metric["faithfulness"]["result"]["score"] >= 0.7  # copied from the tool result
    assert by_metric["injection"]["result"]["label"] == "injection"


def chat_trace(backend: str, headers: dict[str, str] | None = None) -> tuple[RagRecord, Any]:
    """One app trace (pipeline -> chat span), recorded but not sent yet: its record (with
    an e-mail address in the question, for redaction to find) and a function that sends
    it to ``backend``."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    resource = Resource.create({"service.name": APP, sc.OPENINFERENCE_PROJECT_NAME: APP})
    provider = TracerProvider(resource=resource)
    recorded = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(recorded))
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("answer") as root, tracer.start_span("chat m") as chat:
        pass

    def send() -> None:
        exporter = OTLPSpanExporter(f"{backend}/v1/traces", headers=headers)
        exporter.export(recorded.get_finished_spans())
        exporter.shutdown()

    record = RagRecord(
        trace_id=format(root.get_span_context().trace_id, "032x"),
        span_id=format(root.get_span_context().span_id, "016x"),
        generation_span_id=format(chat.get_span_context().span_id, "016x"),
        question="please write to jane.doe@example.com",
        answer="a",
    )
    return record, send


JUDGED = [
    EvalResult(metric="faithfulness", method="llm_judge", error="TimeoutError: no answer"),
    EvalResult(
        metric="answer_relevance",
        method="llm_judge",
        score=0.0,
        label="irrelevant",
        explanation="it ignores jane.doe@example.com",
    ),
]


def test_phoenix_failed_evaluations_carry_a_label_and_quotes_are_redacted(
    phoenix_server: PhoenixServer,
) -> None:
    record, send = chat_trace(phoenix_server.url)
    send()
    settings = Settings(sinks={"phoenix": {"endpoint": phoenix_server.url, "max_wait_s": 0}})
    sink = PhoenixSink.from_settings(settings)
    assert sink is not None
    sink.export(ExportItem(record, JUDGED))
    sink.shutdown()

    def landed() -> list[dict[str, Any]] | None:
        assert record.generation_span_id is not None
        data = phoenix_annotations(phoenix_server, record.generation_span_id)
        return data if len(data) == 2 else None

    by_name = {a["name"]: a for a in wait_until(landed, 120, "no annotations", 0.5)}
    failed = by_name["faithfulness"]
    assert failed["result"]["label"] == "error" and failed["result"]["score"] is None
    assert failed["result"]["explanation"] == "TimeoutError: no answer"
    assert failed["annotator_kind"] == "LLM"
    judged = by_name["answer_relevance"]["result"]
    assert judged == {"label": "irrelevant", "score": 0.0, "explanation": "it ignores [EMAIL]"}


def _iso(value: str) -> datetime:
    return datetime.fromisoformat(value)


# --- MLflow --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlflow_run(
    mlflow_server: MlflowServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Run, str]]:
    experiment = mlflow_server.create_experiment(APP)
    sinks = {"mlflow": {"tracking_uri": mlflow_server.url, "experiment_id": experiment}}
    headers = {"x-mlflow-experiment-id": experiment}  # MLflow's OTLP intake needs it
    yield run(tmp_path_factory.mktemp("mlflow-run"), mlflow_server.url, sinks, headers), experiment


def _seconds(duration: str) -> float:
    return float(duration.rstrip("s"))  # protobuf Duration as JSON: "0.002s"


def test_mlflow_shows_each_result_on_the_span_it_judges(
    mlflow_server: MlflowServer, mlflow_run: tuple[Run, str]
) -> None:
    run, experiment = mlflow_run
    check_log(run.log)
    growth = []
    for trace_id, trace in run.traces.items():
        info = request(f"{mlflow_server.url}/api/3.0/mlflow/traces/tr-{trace_id}")["trace"][
            "trace_info"
        ]
        assert info["trace_location"]["mlflow_experiment"]["experiment_id"] == experiment
        assert info["tags"]["service.name"] == APP  # not ragpulse's
        assessments = info.get("assessments", [])
        for result, assessment, span_id in judged(run, trace_id, assessments, "assessment_name"):
            assert assessment["span_id"] == span_id
            assert assessment["source"] == {
                "source_type": "CODE",
                "source_id": f"ragpulse.{result['method']}",
            }
            # The score; where there is none (not applicable), the label.
            value = result["score"] if result["score"] is not None else result["label"]
            assert assessment["feedback"]["value"] == value
        before = (trace["end_ns"] - trace["start_ns"]) / 1e9
        growth.append(_seconds(info["execution_duration"]) - before)
    print(f"\nMLflow trace duration growth: max {max(growth) * 1e3:.3f} ms over {COUNT} traces")
    assert max(growth) <= MAX_LATENCY_GROWTH_S


def test_mlflow_shows_an_agent_turns_results_on_the_steps_they_judge(
    mlflow_server: MlflowServer, mlflow_run: tuple[Run, str]
) -> None:
    run, _ = mlflow_run
    trace_id, turn, targets = agent_turn_of(run)
    info = request(f"{mlflow_server.url}/api/3.0/mlflow/traces/tr-{trace_id}")["trace"][
        "trace_info"
    ]
    assert info["tags"]["service.name"] == APP
    shown = [{**a, "source": a["source"]["source_id"]} for a in info.get("assessments", [])]
    by_metric = check_agent_turn(turn, targets, shown, "assessment_name", "source")
    assert by_metric["faithfulness"]["feedback"]["value"] >= 0.7
    assert by_metric["injection"]["metadata"]["label"] == "injection"


def test_mlflow_failed_evaluations_are_assessment_errors_and_quotes_are_redacted(
    mlflow_server: MlflowServer,
) -> None:
    experiment = mlflow_server.create_experiment("rag-app-judged")
    record, send = chat_trace(mlflow_server.url, {"x-mlflow-experiment-id": experiment})
    config = {"tracking_uri": mlflow_server.url, "backoff_s": 0.1, "max_backoff_s": 0.5}
    context = PluginContext(Settings(sinks={"mlflow": config}))
    sink = MlflowSink.from_settings(context.settings, context)
    assert sink is not None
    sink.export(ExportItem(record, JUDGED))  # before the app's trace reached MLflow: retried

    def retried() -> bool:
        labels = {"sink": "mlflow"}
        return bool(
            context.metrics.registry.get_sample_value("ragpulse_sink_retries_total", labels)
        )

    wait_until(retried, 60, "the sink did not retry", 0.05)
    send()
    sink.shutdown()  # sends what is still waiting for the trace, within the flush timeout
    assert sample_of(context, "delivered") == 2 and not sample_of(context, "failed")
    info = request(f"{mlflow_server.url}/api/3.0/mlflow/traces/tr-{record.trace_id}")
    by_name = {a["assessment_name"]: a for a in info["trace"]["trace_info"]["assessments"]}
    failed = by_name["faithfulness"]
    assert failed["source"] == {"source_type": "LLM_JUDGE", "source_id": "ragpulse.llm_judge"}
    assert failed["feedback"]["error"] == {
        "error_code": "TimeoutError",
        "error_message": "no answer",
    }
    assert failed["span_id"] == record.generation_span_id
    judged = by_name["answer_relevance"]
    assert judged["feedback"]["value"] == 0.0
    assert judged["rationale"] == "it ignores [EMAIL]"
    assert judged["metadata"]["label"] == "irrelevant"


def sample_of(context: PluginContext, outcome: str) -> float:
    labels = {"sink": "mlflow", "outcome": outcome}
    return context.metrics.registry.get_sample_value("ragpulse_sink_items_total", labels) or 0.0


def test_mlflow_a_revision_that_judges_another_span_overrides_the_earlier_assessment(
    mlflow_server: MlflowServer,
) -> None:
    """A record first built without its root (its results on the chat span), revised once
    the root came (the root-level result now on the root span): MLflow keeps one valid
    assessment per metric and method of the record, the earlier one shown as overridden."""
    experiment = mlflow_server.create_experiment("rag-app-revised")
    whole, send = chat_trace(mlflow_server.url, {"x-mlflow-experiment-id": experiment})
    send()
    assert whole.generation_span_id is not None
    partial = whole.model_copy(
        update={
            "span_id": whole.generation_span_id,
            "partial": "idle",
            "record_id": f"{whole.trace_id}/{whole.generation_span_id}",
        }
    )
    revised = whole.model_copy(update={"record_id": partial.record_id, "revision": 2})
    steps = [EvalResult(metric="agent_steps", method="count", score=0.1)]
    config = {"tracking_uri": mlflow_server.url, "max_wait_s": 0}
    context = PluginContext(Settings(sinks={"mlflow": config}))
    sink = MlflowSink.from_settings(context.settings, context)
    assert sink is not None
    sink.start()
    sink.export(ExportItem(partial, steps))
    assert sink.force_flush(60)
    again = [EvalResult(metric="agent_steps", method="count", score=0.2)]
    sink.export(
        ExportItem(revised, again, ExportKind.REVISION, previous=partial, previous_results=steps)
    )
    sink.shutdown()
    assert sample_of(context, "delivered") == 2 and not sample_of(context, "failed")
    info = request(f"{mlflow_server.url}/api/3.0/mlflow/traces/tr-{whole.trace_id}")
    mine = [
        a
        for a in info["trace"]["trace_info"]["assessments"]
        if a["assessment_name"] == "agent_steps"
    ]
    valid = [a for a in mine if a.get("valid", True)]
    assert [(a["span_id"], a["feedback"]["value"]) for a in valid] == [(whole.span_id, 0.2)]
    [earlier] = [a for a in mine if not a.get("valid", True)]
    assert earlier["span_id"] == whole.generation_span_id
    assert valid[0]["overrides"] == earlier["assessment_id"]
    assert valid[0]["metadata"]["ragpulse.record_id"] == partial.record_id
