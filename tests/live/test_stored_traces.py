"""Traces a team already stores, scored where they are: the real Phoenix and MLflow on
127.0.0.1 (the session's servers, tests/support/tracing_backends.py).

An app traced to the tool only (tests/support/backend_app.py without ``--ragpulse``:
ragpulse never sees its spans) answers 20 questions. ``ragpulse eval --from`` reads them
back and scores all 20: the tool then shows ragpulse's faithfulness on each chat span
and its context relevance on each retrieval span. A second run adds nothing (each
evaluation replaced in place). ``ragpulse serve --source <tool>`` then follows the tool:
10 more questions sent later are picked up, the collector is killed (SIGKILL) while
it works on them and started again, and none is missed: every span still shows one
ragpulse evaluation per metric, and the results JSONL holds at most two lines per trace.
A conversation stored so that the tool serves it newest first, or shuffled, is scored
turn after turn in the order it was taken, by ``eval --from`` and by ``serve --source``.
Everything waits on what the tool shows or the files say, never on a clock.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.parse
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import chat_turns
from support.helpers import http_get, stop_process
from support.kafka_env import free_port, wait_until
from support.tracing_backends import MlflowServer, PhoenixServer, backend_bin, request

pytestmark = pytest.mark.integration

SUPPORT = Path(__file__).resolve().parents[1] / "support"
FIRST, LATER = 20, 10
PROJECT = "stored-app"
METRICS = {"faithfulness": "chat", "context_relevance": "retrieval"}
"""Metric -> the span of the app's trace it must be shown on."""


@dataclass
class Tool:
    """One tracing tool as the tests drive it: where the app sends, where ragpulse reads,
    and what the tool shows of ragpulse's evaluations per span."""

    name: str
    otlp: str  # the app's OTLP/HTTP base URL
    headers: dict[str, str]
    source_url: str  # what --from / --source-url take
    server: Any

    def evaluations(self, trace: dict[str, Any]) -> dict[str, list[dict[str, Any]]] | None:
        """span role -> ragpulse's evaluations on it; None while the tool has not shown
        them (Phoenix inserts annotations in the background)."""
        raise NotImplementedError


class Phoenix(Tool):
    def evaluations(self, trace: dict[str, Any]) -> dict[str, list[dict[str, Any]]] | None:
        ids = {trace[role]: role for role in ("root", "chat", "retrieval")}
        query = urllib.parse.urlencode([("span_ids", s) for s in ids] + [("limit", "1000")])
        try:
            answer = request(f"{self.server.url}/v1/projects/{PROJECT}/span_annotations?{query}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # spans not inserted yet
                return None
            raise
        out: dict[str, list[dict[str, Any]]] = {role: [] for role in ids.values()}
        for a in answer["data"]:
            if str(a.get("identifier", "")).startswith("ragpulse."):
                out[ids[a["span_id"]]].append(
                    {"name": a["name"], "score": a["result"]["score"], "when": a["updated_at"]}
                )
        return out


class Mlflow(Tool):
    def evaluations(self, trace: dict[str, Any]) -> dict[str, list[dict[str, Any]]] | None:
        ids = {trace[role]: role for role in ("root", "chat", "retrieval")}
        try:
            info = request(f"{self.server.url}/api/3.0/mlflow/traces/tr-{trace['trace_id']}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        out: dict[str, list[dict[str, Any]]] = {role: [] for role in ids.values()}
        for a in info["trace"]["trace_info"].get("assessments", []):
            if a["source"]["source_id"].startswith("ragpulse.") and a.get("valid", True):
                value = a.get("feedback", {}).get("value")
                out[ids[a["span_id"]]].append(
                    {"name": a["assessment_name"], "score": value, "when": a["last_update_time"]}
                )
        return out


@pytest.fixture(scope="module", params=["phoenix", "mlflow"])
def tool(request: pytest.FixtureRequest) -> Tool:
    if request.param == "phoenix":
        phoenix: PhoenixServer = request.getfixturevalue("phoenix_server")
        url = phoenix.url.replace("http://", "phoenix://") + f"/{PROJECT}"
        return Phoenix("phoenix", phoenix.url, {}, url, phoenix)
    mlflow: MlflowServer = request.getfixturevalue("mlflow_server")
    experiment = mlflow.create_experiment(PROJECT)
    url = mlflow.url.replace("http://", "mlflow://") + f"/{experiment}"
    return Mlflow("mlflow", mlflow.url, {"x-mlflow-experiment-id": experiment}, url, mlflow)


def send(tool: Tool, count: int) -> dict[str, dict[str, Any]]:
    """The app answers ``count`` questions, traced to the tool only."""
    app = subprocess.run(
        [sys.executable, str(SUPPORT / "backend_app.py"), "--backend", tool.otlp,
         "--count", str(count), "--project", PROJECT, "--service", PROJECT,
         *(f"--header={k}={v}" for k, v in tool.headers.items())],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert app.returncode == 0, app.stderr
    traces = {t["trace_id"]: t for t in map(json.loads, app.stdout.splitlines())}
    assert len(traces) == count
    return traces


def ragpulse(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragpulse.cli", "--log-level", "WARNING", *args],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def shown(tool: Tool, traces: dict[str, dict[str, Any]], after: str = "") -> dict[str, Any] | None:
    """trace id -> ragpulse's evaluations per span, once the tool shows both metrics on
    the spans they judge for every trace (updated after ``after``); else None."""
    found = {}
    for trace_id, trace in traces.items():
        evaluations = tool.evaluations(trace)
        if evaluations is None:
            return None
        for metric, role in METRICS.items():
            mine = [e for e in evaluations[role] if e["name"] == metric]
            if not mine or any(e["when"] <= after for e in mine):
                return None
        found[trace_id] = evaluations
    return found


def assert_one_per_metric(found: dict[str, Any]) -> None:
    """Each span shows one ragpulse evaluation per metric, on the span it judges."""
    for evaluations in found.values():
        for role, items in evaluations.items():
            names = Counter(e["name"] for e in items)
            assert all(n == 1 for n in names.values()), f"{role}: {names}"
            for metric, expected in METRICS.items():
                assert (metric in names) == (role == expected), f"{metric} on {role}"


@dataclass
class Backfilled:
    traces: dict[str, dict[str, Any]]
    found: dict[str, Any]
    rows: list[dict[str, Any]]


@pytest.fixture(scope="module")
def backfilled(tool: Tool, tmp_path_factory: pytest.TempPathFactory) -> Backfilled:
    traces = send(tool, FIRST)
    out = tmp_path_factory.mktemp(f"{tool.name}-eval") / "scored.jsonl"
    done = ragpulse("eval", "--from", tool.source_url, "--since", "1h", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert f"{FIRST} traces ({3 * FIRST} spans) read from {tool.name}" in done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    found = wait_until(
        lambda: shown(tool, traces), 120, f"{tool.name} did not show every evaluation", 0.5
    )
    return Backfilled(traces, found, rows)


def test_eval_from_scores_every_stored_trace_on_the_spans_it_judges(
    tool: Tool, backfilled: Backfilled
) -> None:
    assert sorted(r["trace_id"] for r in backfilled.rows) == sorted(backfilled.traces)
    assert_one_per_metric(backfilled.found)
    by_trace = {r["trace_id"]: r for r in backfilled.rows}
    for trace_id, evaluations in backfilled.found.items():
        results = {r["metric"]: r for r in by_trace[trace_id]["results"]}
        for metric, role in METRICS.items():
            [shown_one] = [e for e in evaluations[role] if e["name"] == metric]
            result = results[metric]
            if result["score"] is None and tool.name == "mlflow":  # MLflow shows the label
                assert shown_one["score"] == result["label"]
            else:
                assert shown_one["score"] == pytest.approx(result["score"])


def test_a_second_run_replaces_rather_than_adds(tool: Tool, backfilled: Backfilled) -> None:
    before = max(e["when"] for ev in backfilled.found.values() for es in ev.values() for e in es)
    done = ragpulse("eval", "--from", tool.source_url, "--since", "1h", "--limit", str(FIRST))
    assert done.returncode == 0, done.stderr
    again = wait_until(
        lambda: shown(tool, backfilled.traces, after=before),
        120,
        f"{tool.name} did not show the second run's evaluations",
        0.5,
    )
    assert_one_per_metric(again)
    counts = {t: sum(map(len, ev.values())) for t, ev in again.items()}
    assert counts == {t: sum(map(len, ev.values())) for t, ev in backfilled.found.items()}


def test_dry_run_prints_what_it_would_write_and_writes_nothing(
    tool: Tool, backfilled: Backfilled
) -> None:
    done = ragpulse("eval", "--from", tool.source_url, "--since", "1h", "--limit", "1", "--dry-run")
    assert done.returncode == 0, done.stderr
    printed = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert printed and {p["sink"] for p in printed} == {tool.name}
    assert f"dry run: nothing was written to {tool.name}" in done.stderr


def test_an_unknown_project_or_a_dead_port_is_one_line_naming_the_tool(tool: Tool) -> None:
    wrong = re.sub(
        r"/[^/]+$", "/no-such-project" if tool.name == "phoenix" else "/987654", tool.source_url
    )
    done = ragpulse("eval", "--from", wrong)
    assert done.returncode == 2
    assert f"{tool.name} at {tool.server.url}" in done.stderr and "Traceback" not in done.stderr
    port = free_port()
    dead = re.sub(r":\d+/", f":{port}/", tool.source_url)
    config = tool.server.workdir / "unreachable.yaml"
    config.write_text("stored_traces: {retry_for_s: 0.5, backoff_s: 0.1}\n")
    done = ragpulse("eval", "--from", dead, "--config", str(config))
    assert done.returncode == 2
    assert f"{tool.name} at http://127.0.0.1:{port} did not answer" in done.stderr


# --- follow mode ------------------------------------------------------------------------


def serve(config: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "ragpulse.cli", "--log-level", "INFO", "serve",
             "--config", str(config)],
            stderr=out,
        )  # fmt: skip


def metric(metrics_url: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in http_get(metrics_url).splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, _, value = line.rpartition(" ")
            got = ",".join(sorted(key[len(name) :].strip("{}").split(",")))
            if got == want:
                return float(value)
    return 0.0


def lines_per_trace(path: Path) -> Counter[str]:
    if not path.exists():
        return Counter()
    return Counter(json.loads(line)["trace_id"] for line in path.read_text().splitlines())


def test_follow_mode_picks_up_later_traces_and_survives_sigkill(
    tool: Tool, backfilled: Backfilled, tmp_path: Path
) -> None:
    metrics_port = free_port()
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    results, state = tmp_path / "follow.jsonl", tmp_path / "state.json"
    config = tmp_path / "ragpulse.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "source": tool.name,
                "metrics_port": metrics_port,
                "assembly": {"grace_s": 0.3},
                "stored_traces": {
                    "url": tool.source_url,
                    "poll_s": 0.5,
                    "overlap_s": 600,
                    "state_file": str(state),
                },
                # The URL fills in the rest of the tool's sink.
                "sinks": {tool.name: {"max_wait_s": 0.1}, "jsonl": {"path": str(results)}},
            }
        )
    )
    log = tmp_path / "serve.log"
    proc = serve(config, log)
    try:
        polls = "ragpulse_source_polls_total"
        wait_until(
            lambda: metric(metrics_url, polls, backend=tool.name, outcome="ok"),
            120, "follow mode did not poll", 0.2, (OSError,),
        )  # fmt: skip
        later = send(tool, LATER)
        # Killed while it works on them: some scored, maybe none settled yet.
        wait_until(
            lambda: set(lines_per_trace(results)) & set(later),
            120,
            "nothing later was scored",
            0.05,
        )
        proc.kill()
        proc.wait(30)
        proc = serve(config, log)

        def settled() -> bool:
            data = json.loads(state.read_text()) if state.exists() else {"settled": {}}
            return set(later) <= set(data["settled"])

        wait_until(settled, 180, "the later traces were not all settled after the restart", 0.2)
    finally:
        stop_process(proc)
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and " ERROR " not in text, text[-3000:]
    counted = lines_per_trace(results)
    assert set(later) <= set(counted), "a later trace was missed"
    assert max(counted.values()) <= 2, counted.most_common(3)
    everything = {**backfilled.traces, **later}
    found = wait_until(
        lambda: shown(tool, everything), 120, f"{tool.name} did not show the later ones", 0.5
    )
    assert_one_per_metric(found)


# --- MLflow's own span shape ------------------------------------------------------------


def test_traces_written_by_mlflows_own_tracing_are_read_and_scored(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    """An app traced with ``@mlflow.trace`` (MLflow's span types, inputs and outputs, its
    Document and chat-completion shapes; tests/support/mlflow_native_app.py, run by the
    MLflow venv): each trace becomes a record with its question, documents and answer,
    and the assessments land on MLflow's retriever and chat-model spans."""
    experiment = mlflow_server.create_experiment("native-app")
    app = subprocess.run(
        [str(backend_bin("mlflow", "python")), str(SUPPORT / "mlflow_native_app.py"),
         mlflow_server.url, experiment, "3"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert app.returncode == 0, app.stderr
    traces = {t["trace_id"]: t for t in map(json.loads, app.stdout.splitlines())}
    out = tmp_path / "native.jsonl"
    url = mlflow_server.url.replace("http://", "mlflow://") + f"/{experiment}"
    done = ragpulse("eval", "--from", url, "-o", str(out))
    assert done.returncode == 0, done.stderr
    rows = {r["trace_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(rows) == set(traces)
    tool = Mlflow("mlflow", mlflow_server.url, {}, url, mlflow_server)
    for trace_id, trace in traces.items():
        row = rows[trace_id]
        assert row["question"] and row["answer"] and row["model"] == "extractive-demo"
        assert [d["id"] for d in row["documents"]][:1] and row["documents"][0]["content"]
        assert row["generation_span_id"] == trace["chat"]
        assert row["retrieval_span_ids"] == [trace["retrieval"]]
        assert (row["input_tokens"], row["output_tokens"]) == (40, 12)
    assert_one_per_metric(shown(tool, traces) or {})


def test_a_redelivered_trace_replaces_its_evaluations_in_live_traffic_too(
    tool: Tool, backfilled: Backfilled
) -> None:
    """The tool's sink as ``ragpulse serve`` uses it (no source: live traffic), handed the
    same record twice, by two sinks as a restarted collector would be (a re-delivered
    Kafka batch): the tool keeps one evaluation per metric and span, the second's."""
    from ragpulse.config import Settings
    from ragpulse.plugin_context import PluginContext
    from ragpulse.plugins import sink_class
    from ragpulse.record import EvalResult, ExportItem, RagRecord

    trace_id, trace = next(iter(backfilled.traces.items()))
    record = RagRecord(
        trace_id=trace_id, span_id=trace["root"], generation_span_id=trace["chat"],
        retrieval_span_ids=[trace["retrieval"]], question="q", answer="a",
    )  # fmt: skip
    options: dict[str, Any] = {"max_wait_s": 0}
    if tool.name == "phoenix":
        options["endpoint"] = tool.server.url
    else:
        options.update(tracking_uri=tool.server.url, experiment_id=tool.headers[
            "x-mlflow-experiment-id"])  # fmt: skip
    before = max(e["when"] for ev in backfilled.found.values() for es in ev.values() for e in es)
    for score in (0.25, 0.75):
        context = PluginContext(Settings(sinks={tool.name: options}))
        sink = sink_class(tool.name).from_settings(context.settings, context)
        assert sink is not None
        results = [
            EvalResult(metric="faithfulness", method="lexical", score=score),
            EvalResult(metric="context_relevance", method="lexical", score=score),
        ]
        sink.export(ExportItem(record, results))
        sink.shutdown()
        labels = {"sink": tool.name, "outcome": "delivered"}
        assert context.metrics.registry.get_sample_value("ragpulse_sink_items_total", labels) == 2

    def replaced() -> dict[str, Any] | None:
        found = shown(tool, {trace_id: trace}, after=before)
        if found is None:
            return None
        scores = [e["score"] for es in found[trace_id].values() for e in es if e["name"] in METRICS]
        return found if scores == [0.75, 0.75] else None

    found = wait_until(replaced, 120, f"{tool.name} did not show the second delivery", 0.5)
    assert_one_per_metric(found)


# --- a conversation the tool serves out of order -------------------------------------------


def trace_stored(tool: str, server: Any, where: str, trace_id: str) -> bool:
    """Whether the tool lists the trace yet (Phoenix inserts in the background)."""
    try:
        if tool == "phoenix":
            url = f"{server.url}/v1/projects/{where}/spans/otlpv1?trace_id={trace_id}&limit=5"
            return bool(request(url)["data"])
        request(f"{server.url}/api/3.0/mlflow/traces/tr-{trace_id}")
        return True
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        raise


@pytest.mark.parametrize("order", ["newest first", "shuffled"])
@pytest.mark.parametrize("tool_name", ["phoenix", "mlflow"])
def test_a_stored_conversation_is_joined_in_the_order_it_was_taken(
    tool_name: str, order: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Three turns of one decorated conversation (no history in their spans) stored in the
    tool one trace at a time: in the order taken, so that Phoenix and MLflow list the
    newest first, or turns 2, 3, 1 (Phoenix lists by insertion: 1, 3, 2). ``eval --from``
    and then ``serve --source`` evaluate each turn after the turns taken before it:
    numbered 1, 2, 3, each with those turns (and only those) as its history and their
    passages as its evidence, and a conversation record of the three in order. One trace
    a batch, so that the order checked is the one the source hands the traces over in."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    slug = order.replace(" ", "-")
    session, project = f"stored-chat-{slug}", f"chat-{slug}"
    if tool_name == "phoenix":
        server: Any = request.getfixturevalue("phoenix_server")
        where, headers = project, {}
        source_url = server.url.replace("http://", "phoenix://") + f"/{project}"
    else:
        server = request.getfixturevalue("mlflow_server")
        where = server.create_experiment(f"{project}-{tmp_path.name}")
        headers = {"x-mlflow-experiment-id": where}
        source_url = server.url.replace("http://", "mlflow://") + f"/{where}"
    turns = chat_turns.record_conversation(session, service=project, project=project)
    taken = [chat_turns.trace_id(spans) for spans in turns]
    exporter = OTLPSpanExporter(f"{server.url}/v1/traces", headers=headers)
    try:
        for i in [0, 1, 2] if order == "newest first" else [1, 2, 0]:
            exporter.export(turns[i])
            wait_until(lambda i=i: trace_stored(tool_name, server, where, taken[i]), 60,
                       f"{tool_name} did not store turn {i + 1}", 0.2)  # fmt: skip
    finally:
        exporter.shutdown()

    config = tmp_path / "ragpulse.yaml"
    settings: dict[str, Any] = {
        "evaluation": {"batch_size": 1, "model": {"rate": 0}},
        "conversations": {"idle_s": 1, "tick_s": 0.1},
    }
    config.write_text(yaml.safe_dump(settings))
    scored = tmp_path / "scored.jsonl"
    done = ragpulse("eval", "--from", source_url, "--since", "1h", "-o", str(scored),
                    "--config", str(config))  # fmt: skip
    assert done.returncode == 0, done.stderr
    read = [json.loads(line) for line in scored.read_text().splitlines()]
    chat_turns.check_only_earlier_turns(read, session, taken, in_order=True)

    metrics_port = free_port()
    results = tmp_path / "follow.jsonl"
    settings.update(
        source=tool_name,
        metrics_port=metrics_port,
        assembly={"grace_s": 0.3},
        stored_traces={"url": source_url, "poll_s": 0.5, "overlap_s": 600,
                       "state_file": str(tmp_path / "state.json")},
        sinks={tool_name: {"max_wait_s": 0.1}, "jsonl": {"path": str(results)}},
    )  # fmt: skip
    config.write_text(yaml.safe_dump(settings))
    log = tmp_path / "serve.log"
    proc = serve(config, log)
    try:
        wait_until(
            lambda: chat_turns.conversation_records(read_lines(results), session),
            120, "follow mode did not close the conversation", 0.2,
        )  # fmt: skip
    finally:
        stop_process(proc)
    assert "Traceback" not in log.read_text(errors="replace")
    chat_turns.check_only_earlier_turns(read_lines(results), session, taken, in_order=True)


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
