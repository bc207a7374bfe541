"""Conversations end to end: real instrumentations, a real ``ragpulse serve``, and the
conversation records in the real Phoenix and MLflow.

The first test plays one two-turn conversation in each of three ways at once: Pydantic AI
with a ``conversation_id`` (its spans' ``gen_ai.conversation.id``) and LangGraph with a
session id in the run's metadata (``session.id`` through the OpenInference
instrumentation), each in an app process of its own with a scripted model
(tests/support/agent_apps.py), and ragpulse's decorators (``conversation_id=``) in this
process. The second sends a decorated conversation to ragpulse and to both tools, closes
it, resumes it with a third turn (revision 2), then exports the revised record once more
(the at-least-once repeat after a Kafka consumer's SIGKILL), and reads what each tool shows.

Every wait is on a condition (a line in the results file, an app's "turn sent", what the
tool answers), never a sleep; conversations close after 1 s idle.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from support import chat_turns
from support.agent_apps import CONVERSATION
from support.helpers import start_serve, stop_process
from support.kafka_env import free_port, wait_until
from support.tracing_backends import MlflowServer, PhoenixServer, request

import ragpulse
from ragpulse.config import Settings
from ragpulse.exporters.mlflow import MlflowSink
from ragpulse.exporters.phoenix import PhoenixSink
from ragpulse.plugin_context import PluginContext
from ragpulse.record import ConversationRecord, EvalResult, ExportItem, TurnSummary

pytestmark = pytest.mark.integration

SUPPORT = Path(__file__).resolve().parents[1] / "support"
APP = "chat-app"  # the decorated app's service.name and Phoenix project
CONVERSATION_ENV = {
    "RAGPULSE_ASSEMBLY__GRACE_S": "0.2",
    "RAGPULSE_EVALUATION__MODEL__RATE": "0",
    "RAGPULSE_CONVERSATIONS__IDLE_S": "1",
    "RAGPULSE_CONVERSATIONS__TICK_S": "0.1",
}

PASSAGE = {
    "id": "lh-1",
    "content": "The Harbour lighthouse was built in 1857. It is 40 metres tall and two "
    "keepers live there.",
}
QUESTIONS = (
    "When was the Harbour lighthouse built?",
    "And how tall is it?",
    "How many keepers live there?",
)


@ragpulse.retrieval(data_source="kb")
def lighthouse_docs(query: str) -> list[dict[str, str]]:
    return [dict(PASSAGE)] if "built" in query else []  # follow-ups retrieve nothing


@ragpulse.generation(model="test-model")
def lighthouse_answer(prompt: str) -> str:
    if "built" in prompt:
        return "It was built in 1857."
    return "It is 40 metres tall." if "tall" in prompt else "Two keepers live there."


@ragpulse.pipeline(route="/chat", conversation_id="session")
def chat(question: str, session: str) -> str:
    lighthouse_docs(question)
    return lighthouse_answer(question)


def read_lines(path: Path) -> list[dict[str, Any]]:
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines()]


def turn_lines(path: Path, conversation_id: str) -> list[dict[str, Any]]:
    return [
        x
        for x in read_lines(path)
        if "conversation" not in x and x.get("conversation_id") == conversation_id
    ]


def conversation_lines(path: Path, conversation_id: str) -> list[dict[str, Any]]:
    return [
        x
        for x in read_lines(path)
        if x.get("conversation", {}).get("conversation_id") == conversation_id
    ]


def start_app(name: str, otlp: str, conversation_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SUPPORT / "agent_apps.py"), name, "--otlp-http", otlp,
         "--conversation", conversation_id],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def check_two_turns(path: Path, conversation_id: str, follow_up_faithful: bool = True) -> None:
    """Two turn records of ``conversation_id`` numbered 1 and 2, the follow-up carrying the
    first turn in its history and (where asked) scored faithful, and a conversation record
    of the two."""
    first, second = sorted(turn_lines(path, conversation_id), key=lambda x: x["turn"])
    assert (first["turn"], second["turn"]) == (1, 2), conversation_id
    assert first["history"] == [], conversation_id
    said = [(m["role"], m["turn"]) for m in second["history"] if m["role"] == "user"]
    assert said and said[0] == ("user", 1), second["history"]
    assert any(first["question"] in str(m["content"]) for m in second["history"]), conversation_id
    if follow_up_faithful:
        [faithfulness] = [r for r in second["results"] if r["metric"] == "faithfulness"]
        assert faithfulness["score"] >= 0.7, (conversation_id, faithfulness)
    [line] = conversation_lines(path, conversation_id)
    record = line["conversation"]
    assert record["revision"] == 1 and record["closed_by"] == "idle"
    assert [(t["turn"], t["trace_id"]) for t in record["turns"]] == [
        (1, first["trace_id"]), (2, second["trace_id"]),
    ]  # fmt: skip
    assert {r["metric"] for r in line["results"]} >= {"conversation_groundedness",
                                                      "user_frustration"}  # fmt: skip


def test_two_turns_of_one_conversation_through_three_instrumentations(tmp_path: Path) -> None:
    """Pydantic AI (``conversation_id``), LangGraph (a session id in the run's metadata) and
    ragpulse's decorators, one ``serve``: each gives two turn records of one conversation,
    numbered 1 and 2, the follow-up carrying the first turn as its history and scored
    faithful on the first turn's passage, then a conversation record once it went idle."""
    otlp_port = free_port()
    otlp = f"http://127.0.0.1:{otlp_port}"
    results = tmp_path / "results.jsonl"
    proc, _ = start_serve("--otlp-http-port", str(otlp_port), "--results-jsonl", str(results),
                          env=CONVERSATION_ENV)  # fmt: skip
    apps = {"pa-chat-1": "pydantic_ai", "lg-chat-1": "langgraph"}
    running = {cid: start_app(name, otlp, cid) for cid, name in apps.items()}
    provider = TracerProvider(resource=Resource.create({"service.name": APP}))
    ragpulse.configure(endpoint=otlp, tracer_provider=provider, export_timeout_s=5)
    every = [*apps, "deco-chat-1"]
    try:
        chat(QUESTIONS[0], "deco-chat-1")
        provider.force_flush()
        for cid, app in running.items():
            assert app.stdout is not None
            said = app.stdout.readline()  # the app waits for us after its first turn
            assert said.startswith("turn 1 sent"), (cid, said, app.stderr and app.stderr.read())
        # A user reads the answer before asking again: every first turn is in first.
        wait_until(lambda: all(turn_lines(results, c) for c in every), 60,
                   "serve did not write every first turn")  # fmt: skip
        for app in running.values():
            assert app.stdin is not None
            app.stdin.write("\n")
            app.stdin.flush()
        chat(QUESTIONS[1], "deco-chat-1")
        provider.force_flush()
        for cid, app in running.items():
            _, err = app.communicate(timeout=120)
            assert app.returncode == 0, (cid, err)
        wait_until(lambda: all(conversation_lines(results, c) for c in every), 60,
                   "serve did not write every conversation record after it went idle")  # fmt: skip
    finally:
        ragpulse.shutdown()
        provider.shutdown()
        for app in running.values():
            if app.poll() is None:
                app.kill()
                app.wait()
        stop_process(proc)
    for cid in every:
        check_two_turns(results, cid)
    agent_follow_ups = [x for cid in apps for x in turn_lines(results, cid) if x["turn"] == 2]
    assert {x["question"] for x in agent_follow_ups} == {CONVERSATION[1].question}


def test_a_turn_whose_spans_come_before_an_earlier_turns_never_becomes_its_history(
    tmp_path: Path,
) -> None:
    """Live OTLP, a conversation's turns sent out of order: turn 2's spans first (scored
    before turn 1 exists: numbered 1, no history), then turn 1's (no history: turn 2 started
    later), then turn 3's (both earlier turns as its history, their passages as evidence).
    Turn 2's record is not scored again; the conversation record, made once it went idle,
    lists the three in the order they started, numbered 1, 2, 3."""
    otlp_port = free_port()
    results = tmp_path / "results.jsonl"
    proc, _ = start_serve("--otlp-http-port", str(otlp_port), "--results-jsonl", str(results),
                          env=CONVERSATION_ENV)  # fmt: skip
    session = "ooo-chat-1"
    turns = chat_turns.record_conversation(session, service=APP)
    taken = [chat_turns.trace_id(spans) for spans in turns]
    exporter = OTLPSpanExporter(f"http://127.0.0.1:{otlp_port}/v1/traces")
    try:
        for sent, i in enumerate([1, 0, 2], 1):
            exporter.export(turns[i])
            wait_until(lambda sent=sent: len(chat_turns.turn_lines(read_lines(results), session))
                       == sent, 60, f"serve did not write turn {i + 1}")  # fmt: skip
        # Idle between two turns on a slow machine, it closes and is revised: the last
        # record holds the three.
        wait_until(lambda: any(len(c["turns"]) == 3 for c in chat_turns.conversation_records(
            read_lines(results), session)), 60, "serve did not close the conversation")  # fmt: skip
    finally:
        exporter.shutdown()
        stop_process(proc)
    lines = read_lines(results)
    chat_turns.check_only_earlier_turns(lines, session, taken, in_order=False)
    by_trace = {x["trace_id"]: x for x in chat_turns.turn_lines(lines, session)}
    first, second, third = (by_trace[t] for t in taken)
    assert (second["turn"], second["history"]) == (1, [])  # nothing earlier had come
    assert (first["turn"], first["history"]) == (1, [])  # turn 2 started later: not joined
    assert third["turn"] == 3
    assert [(m["turn"], m["content"]) for m in third["history"] if m["role"] == "user"] == [
        (1, chat_turns.TURNS[0][0]), (2, chat_turns.TURNS[1][0]),
    ]  # fmt: skip
    assert len(chat_turns.turn_lines(lines, session)) == 3  # none scored twice


# --- Phoenix and MLflow ------------------------------------------------------------------


def phoenix_session_annotations(server: PhoenixServer, session_id: str) -> list[dict[str, Any]]:
    """ragpulse's annotations of one session (none while Phoenix has not got the session)."""
    query = urllib.parse.urlencode({"session_ids": session_id, "limit": 1000})
    try:
        answer = request(f"{server.url}/v1/projects/{APP}/session_annotations?{query}")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise
    return [a for a in answer["data"] if a["identifier"].startswith("ragpulse.")]


def mlflow_conversation_assessments(server: MlflowServer, trace_id: str) -> list[dict[str, Any]]:
    """ragpulse's trace-level assessments (a conversation's) of one trace."""
    try:
        info = request(f"{server.url}/api/3.0/mlflow/traces/tr-{trace_id}")["trace"]["trace_info"]
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise
    return [
        a
        for a in info.get("assessments", [])
        if a["source"]["source_id"].startswith("ragpulse.")
        and not a.get("span_id")
        and a.get("valid", True) is not False
    ]


def shown_revision(shown: list[dict[str, Any]], results: list[dict[str, Any]]) -> int | None:
    """The revision every one of ``results`` is shown at, once each is shown exactly once
    (one per metric and method); None before that."""

    def key(a: dict[str, Any]) -> tuple[str, str]:
        if "identifier" in a:  # Phoenix
            return a["name"], a["identifier"]
        return a["assessment_name"], a["source"]["source_id"]

    expected = {(r["metric"], f"ragpulse.{r['method']}") for r in results}
    if sorted(map(key, shown)) != sorted(expected):
        return None
    revisions = {int(a["metadata"]["conversation_revision"]) for a in shown}
    return revisions.pop() if len(revisions) == 1 else None


def test_a_revised_and_repeated_conversation_shows_once_per_metric_in_phoenix_and_mlflow(
    tmp_path: Path, phoenix_server: PhoenixServer, mlflow_server: MlflowServer
) -> None:
    """A decorated conversation (its spans to ragpulse and to both tools) closes after two
    turns: one session annotation per conversation metric in Phoenix, one assessment per
    metric on its first trace in MLflow. A third turn revises it (revision 2): the same
    annotations and assessments now say revision 2, none added. The revised record
    exported once more (the at-least-once repeat) still leaves one of each."""
    experiment = mlflow_server.create_experiment("conversations")
    port, metrics_port = free_port(), free_port()
    results = tmp_path / "results.jsonl"
    sinks = {
        "phoenix": {"endpoint": phoenix_server.url, "max_wait_s": 0.1},
        "mlflow": {"tracking_uri": mlflow_server.url, "experiment_id": experiment,
                   "max_wait_s": 0.1},
        "jsonl": {"path": str(results)},
    }  # fmt: skip
    config = {"otlp_http_port": port, "metrics_port": metrics_port, "sinks": sinks}
    (tmp_path / "ragpulse.yaml").write_text(yaml.safe_dump(config))
    serve, _ = start_serve("--config", str(tmp_path / "ragpulse.yaml"), env=CONVERSATION_ENV)
    resource = Resource.create({"service.name": APP, "openinference.project.name": APP})
    provider = TracerProvider(resource=resource)
    for url, headers in ((phoenix_server.url, {}),
                         (mlflow_server.url, {"x-mlflow-experiment-id": experiment})):  # fmt: skip
        provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(f"{url}/v1/traces", headers=headers))
        )
    ragpulse.configure(endpoint=f"http://127.0.0.1:{port}", tracer_provider=provider,
                       export_timeout_s=5)  # fmt: skip
    cid = "deco-chat-2"

    def ask(i: int, lines: Callable[[], list[dict[str, Any]]]) -> Any:
        chat(QUESTIONS[i], cid)
        provider.force_flush()
        return wait_until(lines, 60, f"serve did not write what turn {i + 1} leads to")

    try:
        ask(0, lambda: turn_lines(results, cid))
        ask(1, lambda: conversation_lines(results, cid))
        first_trace = conversation_lines(results, cid)[0]["conversation"]["turns"][0]["trace_id"]

        def shown(revision: int) -> Callable[[], bool]:
            def check() -> bool:
                [line] = [x for x in conversation_lines(results, cid)
                          if x["conversation"]["revision"] == revision]  # fmt: skip
                phoenix = phoenix_session_annotations(phoenix_server, cid)
                mlflow = mlflow_conversation_assessments(mlflow_server, first_trace)
                return (shown_revision(phoenix, line["results"]) == revision
                        and shown_revision(mlflow, line["results"]) == revision)  # fmt: skip

            return check

        wait_until(shown(1), 120, "the tools never showed the conversation's first record")
        ask(2, lambda: [x for x in conversation_lines(results, cid)
                        if x["conversation"]["revision"] == 2])  # fmt: skip
        wait_until(shown(2), 120, "the tools never showed the revised record")
    finally:
        ragpulse.shutdown()
        provider.shutdown()
        stop_process(serve)

    [revised] = [x for x in conversation_lines(results, cid) if x["conversation"]["revision"] == 2]
    record = ConversationRecord.model_validate(revised["conversation"])
    assert [t.turn for t in record.turns] == [1, 2, 3] and record.first.trace_id == first_trace
    before = {a["id"]: a["updated_at"] for a in phoenix_session_annotations(phoenix_server, cid)}
    repeat(record, [EvalResult.model_validate(r) for r in revised["results"]],
           phoenix_server, mlflow_server, experiment)  # fmt: skip

    def repeated() -> list[dict[str, Any]] | None:
        now = phoenix_session_annotations(phoenix_server, cid)
        return now if all(before.get(a["id"]) != a["updated_at"] for a in now) else None

    phoenix = wait_until(repeated, 60, "Phoenix never applied the repeated export")
    assert shown_revision(phoenix, revised["results"]) == 2
    assert {a["id"] for a in phoenix} == set(before)  # upserted, none added
    assert {a["session_id"] for a in phoenix} == {cid}
    mlflow = mlflow_conversation_assessments(mlflow_server, first_trace)
    assert shown_revision(mlflow, revised["results"]) == 2
    for a in mlflow:
        assert a["metadata"]["mlflow.trace.session"] == cid


def repeat(
    record: ConversationRecord,
    results: list[EvalResult],
    phoenix: PhoenixServer,
    mlflow: MlflowServer,
    experiment: str,
) -> None:
    """The revised record exported again, as a collector that re-read it after a crash
    would: each sink as ``serve`` builds it, until everything is delivered."""
    settings = Settings(
        sinks={
            "phoenix": {"endpoint": phoenix.url, "max_wait_s": 0},
            "mlflow": {"tracking_uri": mlflow.url, "experiment_id": experiment, "max_wait_s": 0},
        }
    )
    for cls in (PhoenixSink, MlflowSink):
        context = PluginContext(settings)
        sink = cls.from_settings(settings, context)
        assert sink is not None
        sink.export_conversation(ExportItem(record, results))
        sink.shutdown()
        delivered = context.metrics.registry.get_sample_value(
            "ragpulse_sink_items_total", {"sink": cls.name, "outcome": "delivered"}
        )
        assert delivered == len(results), cls.name


def test_phoenix_lists_a_pydantic_ai_conversation_by_its_gen_ai_conversation_id(
    phoenix_server: PhoenixServer,
) -> None:
    """Pydantic AI's spans carry ``gen_ai.conversation.id`` and no ``session.id``: the
    Phoenix that ``make backends`` installs (15.10 and later convert the GenAI conventions
    at ingestion) lists the conversation as a session of its two traces, and shows the
    session annotations ragpulse files under it (what docs/how-to/conversations.md says)."""
    cid = "pa-phoenix-1"
    app = start_app("pydantic_ai", phoenix_server.url, cid)  # straight to Phoenix
    try:
        assert app.stdout is not None and app.stdin is not None
        said = app.stdout.readline()
        assert said.startswith("turn 1 sent"), (said, app.stderr and app.stderr.read())
        app.stdin.write("\n")
        app.stdin.flush()
        _, err = app.communicate(timeout=120)
        assert app.returncode == 0, err
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()

    def session() -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = request(f"{phoenix_server.url}/v1/sessions/{cid}")["data"]
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        return found if len(found["traces"]) == 2 else None

    listed = wait_until(session, 60, "Phoenix never listed the Pydantic AI conversation")
    assert listed["session_id"] == cid
    settings = Settings(sinks={"phoenix": {"endpoint": phoenix_server.url, "max_wait_s": 0}})
    context = PluginContext(settings)
    sink = PhoenixSink.from_settings(settings, context)
    assert sink is not None
    turns = [TurnSummary(turn=i + 1, trace_id=t["trace_id"], span_id="0" * 16)
             for i, t in enumerate(listed["traces"])]  # fmt: skip
    result = EvalResult(metric="user_frustration", method="rules", score=0.0,
                        label="not_frustrated")  # fmt: skip
    sink.export_conversation(
        ExportItem(ConversationRecord(conversation_id=cid, turns=turns), [result])
    )
    sink.shutdown()
    query = urllib.parse.urlencode({"session_ids": cid, "limit": 100})

    def annotations() -> list[dict[str, Any]] | None:
        answer = request(f"{phoenix_server.url}/v1/projects/default/session_annotations?{query}")
        mine = [a for a in answer["data"] if a["identifier"] == "ragpulse.rules"]
        return mine or None

    [shown] = wait_until(annotations, 60, "Phoenix never showed the session annotation")
    assert shown["session_id"] == cid and shown["name"] == "user_frustration"
