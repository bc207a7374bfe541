"""Slow and unfinished agent turns through ``ragpulse serve``, with a real Arize Phoenix.

The collector runs with its default settings, except that every assembly time is scaled
by ``SCALE`` (grace, idle, max trace and keep-closed times alike), and the turns' pauses
with it: a turn of "45 s" pauses 45 x SCALE seconds. Its spans are exported as each one
ends, as an app's exporter sends them: one span early, then nothing while the slow step
runs, then the rest. Everything is waited for by what the collector writes (its JSONL
lines, Phoenix's annotations), never by comparing a time with a bound:

- agent turns of 45 s and of 4 minutes each give one whole record;
- a turn whose root span never arrives gives one partial record, with its answer;
- a span that arrives after its trace closed revises the record: a JSONL line with
  ``"revised": true``, and in Phoenix one annotation per metric and method of the record
  (the earlier build's, on a span the revision no longer judges, deleted);
- the issue's case with the decorators: ``@ragpulse.pipeline`` calling
  ``@ragpulse.tool(retrieval=True)``, a pause, then ``@ragpulse.generation``;
- nothing is counted ``late_span`` and no trace is skipped for its shape.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from support.helpers import http_get, stop_process
from support.kafka_env import free_port, wait_until
from support.tracing_backends import PhoenixServer, request

import ragpulse
from ragpulse.config import AssemblySettings

pytestmark = pytest.mark.integration

SCALE = 1 / 20
"""Every assembly time of the defaults, and every pause of the turns, times this."""
PROJECT = "slow-turns"
QUESTION = "When does the ferry leave?"
PASSAGE = "The ferry leaves the north quay at 8 am on weekdays."
ANSWER = "The ferry leaves the north quay at 8 am on weekdays."
WAIT_S = 180.0  # a generous bound on each event: the machine may be busy


def scaled_assembly() -> dict[str, float]:
    defaults = AssemblySettings()
    keys = ("grace_s", "idle_s", "max_trace_s", "keep_closed_s")
    return {key: getattr(defaults, key) * SCALE for key in keys}


@dataclass
class Serve:
    otlp: str
    metrics: str
    results: Path
    log: Path

    def lines(self) -> list[dict[str, Any]]:
        if not self.results.exists():
            return []
        return [json.loads(line) for line in self.results.read_text().splitlines() if line]

    def of(self, trace_id: str) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line["trace_id"] == trace_id]


@pytest.fixture(scope="module")
def serve(
    phoenix_server: PhoenixServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Serve]:
    tmp = tmp_path_factory.mktemp("slow-turns")
    port, metrics_port = free_port(), free_port()
    config = {
        "otlp_http_port": port,
        "otlp_grpc_port": 0,
        "metrics_port": metrics_port,
        "assembly": scaled_assembly(),
        "sinks": {
            "jsonl": {"path": str(tmp / "results.jsonl")},
            "phoenix": {"endpoint": phoenix_server.url, "max_wait_s": 0.2},
        },
    }
    (tmp / "ragpulse.yaml").write_text(yaml.safe_dump(config))
    log = tmp / "ragpulse.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ragpulse.cli", "--log-level", "WARNING", "serve",
             "--config", str(tmp / "ragpulse.yaml")],
            stderr=out,
        )  # fmt: skip
    metrics = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        wait_until(lambda: http_get(metrics), 60, "ragpulse did not start", 0.1, (OSError,))
        yield Serve(f"http://127.0.0.1:{port}", metrics, tmp / "results.jsonl", log)
    finally:
        stop_process(proc)


def provider(serve: Serve, phoenix: PhoenixServer) -> TracerProvider:
    """An app's provider: each span exported as it ends, to ragpulse and to Phoenix."""
    resource = Resource.create(
        {"service.name": "slow-agent", "openinference.project.name": PROJECT}
    )
    tracer_provider = TracerProvider(resource=resource)
    for base in (serve.otlp, phoenix.url):
        exporter = OTLPSpanExporter(f"{base}/v1/traces", timeout=30)
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    return tracer_provider


def _messages(role: str, *parts: dict[str, Any]) -> str:
    return json.dumps([{"role": role, "parts": list(parts)}])


USER = {"type": "text", "content": QUESTION}
CALL = {"type": "tool_call", "id": "c1", "name": "search_docs", "arguments": {"query": "ferry"}}
CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}


@dataclass
class Turn:
    trace_id: str
    spans: dict[str, str]  # role -> span id


def agent_turn(
    tracer: trace.Tracer,
    pause_s: float,
    *,
    root_arrives: bool = True,
    before_answer: Callable[[Turn], None] | None = None,
) -> Turn:
    """``invoke_agent``: a model call asks for a search, the search answers, then the slow
    step (``pause_s``), then the model call that answers and the root. Without
    ``root_arrives`` the root never ends (the app died): its children name a parent that
    never comes. ``before_answer`` runs after the root was exported and before the answer
    is (a span that comes late)."""
    if root_arrives:
        root = tracer.start_span(
            "invoke_agent support", attributes={"gen_ai.operation.name": "invoke_agent"}
        )
    else:  # a root that is never exported: its children name a parent that never comes
        never = SpanContext(
            int.from_bytes(secrets.token_bytes(16), "big"),
            int.from_bytes(secrets.token_bytes(8), "big"),
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        root = NonRecordingSpan(never)
    context = trace.set_span_in_context(root)
    spans: dict[str, str] = {"root": f"{root.get_span_context().span_id:016x}"}
    asked = {**CHAT, "gen_ai.input.messages": _messages("user", USER),
             "gen_ai.output.messages": _messages("assistant", CALL)}  # fmt: skip
    with tracer.start_as_current_span("chat m", context, attributes=asked) as ask:
        spans["ask"] = f"{ask.get_span_context().span_id:016x}"
    result = json.dumps([{"id": "kb-1", "content": PASSAGE}])
    searched = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_docs",
                "gen_ai.tool.call.id": "c1", "gen_ai.tool.call.arguments": '{"query": "ferry"}',
                "gen_ai.tool.call.result": result}  # fmt: skip
    with tracer.start_as_current_span(
        "execute_tool search_docs", context, attributes=searched
    ) as tool:
        spans["tool"] = f"{tool.get_span_context().span_id:016x}"
    time.sleep(pause_s)  # the slow step: nothing is exported meanwhile
    text = {"type": "text", "content": ANSWER}
    answered = {**CHAT, "gen_ai.input.messages": _messages("user", USER),
                "gen_ai.output.messages": _messages("assistant", text)}  # fmt: skip
    answer = tracer.start_span("chat m", context, attributes=answered)
    spans["answer"] = f"{answer.get_span_context().span_id:016x}"
    turn = Turn(f"{root.get_span_context().trace_id:032x}", spans)
    if before_answer is not None:
        ends = time.time_ns()
        root.end(end_time=ends)
        before_answer(turn)
        answer.end(end_time=ends - 1000)  # it ended inside its turn; it is exported late
        return turn
    answer.end()
    if root_arrives:
        root.end()
    return turn


def ragpulse_annotations(phoenix: PhoenixServer, turn: Turn) -> list[dict[str, Any]]:
    """ragpulse's annotations on the turn's spans, as Phoenix shows them now."""
    query = [("span_ids", s) for s in turn.spans.values()] + [("limit", "1000")]
    url = f"{phoenix.url}/v1/projects/{PROJECT}/span_annotations?{urllib.parse.urlencode(query)}"
    try:
        data = request(url)["data"]
    except urllib.error.HTTPError as exc:
        if exc.code == 404:  # the spans are not inserted yet
            return []
        raise
    return [a for a in data if str(a.get("identifier", "")).startswith("ragpulse.")]


def records_of(serve: Serve, trace_id: str, message: str) -> list[dict[str, Any]]:
    """The trace's JSONL lines, once there is one."""
    lines: list[dict[str, Any]] = wait_until(lambda: serve.of(trace_id) or None, WAIT_S, message)
    return lines


def sample(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_slow_and_unfinished_turns_are_never_lost(
    serve: Serve, phoenix_server: PhoenixServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = provider(serve, phoenix_server)
    tracer = app.get_tracer("slow-agent")
    turns: dict[str, Turn] = {}
    failures: list[BaseException] = []

    def run(name: str, make: Callable[[], Turn]) -> threading.Thread:
        def body() -> None:
            try:
                turns[name] = make()
            except BaseException as exc:  # reported by the test below
                failures.append(exc)

        thread = threading.Thread(target=body, name=name)
        thread.start()
        return thread

    def revise_late(turn: Turn) -> None:
        """The earlier build is exported and shown in Phoenix before the late span comes."""
        [first] = records_of(serve, turn.trace_id, "no first record")
        results = len(first["results"])

        def shown() -> list[dict[str, Any]] | None:
            found = ragpulse_annotations(phoenix_server, turn)
            return found if len(found) >= results else None

        wait_until(shown, WAIT_S, "Phoenix did not show the first build's annotations", 0.5)

    # The case, with ragpulse's decorators and their exporter (batched every 0.1 s,
    # so the tool's span goes out before the pause ends).
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    resource = {"service.name": "slow-decorated", "openinference.project.name": PROJECT}
    decorated = TracerProvider(resource=Resource.create(resource))
    ragpulse.configure(endpoint=serve.otlp, tracer_provider=decorated, export_timeout_s=30)

    @ragpulse.tool(retrieval=True)
    def search_handbook(query: str) -> list[dict[str, str]]:
        return [{"id": "hb-7", "content": "Employees get 25 vacation days per year."}]

    @ragpulse.generation(model="test-model")
    def slow_model(question: str) -> str:
        return "Employees get 25 vacation days per year."

    @ragpulse.pipeline(route="/slow")
    def ask_slowly(question: str, pause_s: float) -> str:
        search_handbook(query="vacation days")
        time.sleep(pause_s)
        return slow_model(question)

    def decorated_turn() -> Turn:
        ask_slowly("How many vacation days do I get?", 45 * SCALE)
        return Turn("", {})

    threads = [
        run("45 s", lambda: agent_turn(tracer, 45 * SCALE)),
        run("4 minutes", lambda: agent_turn(tracer, 240 * SCALE)),
        run("no root", lambda: agent_turn(tracer, 0.0, root_arrives=False)),
        run("late span", lambda: agent_turn(tracer, 0.0, before_answer=revise_late)),
        run("decorators", decorated_turn),
    ]
    for thread in threads:
        thread.join(WAIT_S + 60)
    ragpulse.shutdown()
    decorated.shutdown()
    assert not failures, failures

    # Slow turns: one whole record each, never revised.
    for name in ("45 s", "4 minutes"):
        turn = turns[name]
        [line] = records_of(serve, turn.trace_id, f"no record of the turn of {name}")
        assert (line["partial"], line["revision"], line["span_id"]) == (None, 1, turn.spans["root"])
        assert line["answer"] == ANSWER and [d["id"] for d in line["documents"]] == ["kb-1"]

    # The root never came: one partial record, with its answer.
    orphan = turns["no root"]
    [partial] = records_of(serve, orphan.trace_id, "no partial record")
    assert (partial["partial"], partial["answer"], partial["kind"]) == ("idle", ANSWER, "agent")
    assert partial["span_id"] == orphan.spans["ask"]

    # A span after its trace closed: the record revised, Phoenix shows the revision only.
    late = turns["late span"]
    lines = wait_until(
        lambda: lines if len(lines := serve.of(late.trace_id)) >= 2 else None,
        WAIT_S,
        "the late span did not revise the record",
    )
    first, revised = lines
    assert first["answer"] == "" and revised["answer"] == ANSWER
    assert revised["revised"] is True and revised["record_id"] == first["record_id"]
    assert (revised["revision"], revised["generation_span_id"]) == (2, late.spans["answer"])
    wanted = {(r["metric"], r["method"]) for r in revised["results"]}

    def only_the_revision() -> list[dict[str, Any]] | None:
        found = ragpulse_annotations(phoenix_server, late)
        names = [(a["name"], a["identifier"].split(".")[1]) for a in found]
        current = all(a["metadata"].get("revision") == 2 for a in found)
        return found if current and sorted(names) == sorted(wanted) else None

    shown = wait_until(
        only_the_revision, WAIT_S, "Phoenix does not show one annotation per metric", 0.5
    )
    by_name = {a["name"]: a for a in shown}
    assert by_name["faithfulness"]["span_id"] == late.spans["answer"]  # moved from "ask"

    # The decorators' slow turn: one whole record.
    def decorated_record() -> dict[str, Any] | None:
        slow = [line for line in serve.lines() if line.get("route") == "/slow"]
        return slow[0] if slow else None

    record = wait_until(decorated_record, WAIT_S, "no record of the decorated slow turn")
    assert record["partial"] is None and record["revision"] == 1
    assert record["answer"] == "Employees get 25 vacation days per year."
    assert [d["id"] for d in record["documents"]] == ["hb-7"]
    assert not [
        line for line in serve.lines() if line.get("route") == "/slow" and line.get("revised")
    ]

    metrics = http_get(serve.metrics)
    assert sample(metrics, "ragpulse_dropped_total", reason="late_span") == 0
    assert sample(metrics, "ragpulse_traces_skipped_total", reason="no_rag_shape") == 0
    assert sample(metrics, "ragpulse_partial_records_total", reason="idle") == 1
    assert sample(metrics, "ragpulse_record_revisions_total", outcome="exported") == 1
