"""docs/how-to/backends.md works as written: the app's spans reach both ragpulse and the
tracing tool, and the tool shows ragpulse's evaluation on the app's span.

Each app block of the section "Send the app's spans to the tool too" runs as written,
with ``rag.py`` beside it, in a process of its own; only the addresses change, to where
this session's servers listen (``ragpulse serve`` on a free port, the session's real
Phoenix and MLflow from tests/conftest.py, an experiment of its own). Then, in the real
tool: the app's spans are there, ragpulse's faithfulness result is on the app's chat
span, and (Phoenix) the sink's read-back found every judged span (no ``no_target``).

``otel_app.py`` sets up the provider only; the test's app code after it writes its spans
through that provider with ragpulse's decorators (the spans an OpenInference
instrumentation writes are read the same way; tests/live/test_instrumentations.py).
No Langfuse server can run here (ClickHouse, Redis, S3, Postgres): ``langfuse_app.py``
runs against a local OTLP double that records what it receives, to check the path and
the Basic auth Langfuse's OTLP intake takes, and nothing more. The Collector fan-out
config is checked for shape only (no Collector binary is installed here).
"""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.helpers import LocalServer, Reply, http_get, stop_process
from support.kafka_env import free_port, wait_until
from support.readme_blocks import Block, parse
from support.tracing_backends import MlflowServer, PhoenixServer, request

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "how-to" / "backends.md"
PROJECT = "rag-app"  # the blocks' service.name and Phoenix project
RAGPULSE = "http://127.0.0.1:4318"
PHOENIX = "http://127.0.0.1:6006"
MLFLOW = "http://127.0.0.1:5000"


def blocks() -> dict[str, Block]:
    return {b.title: b for b in parse(PAGE.read_text(), str(PAGE)) if b.title}


@dataclass
class Serve:
    url: str
    metrics_url: str
    results: Path
    proc: subprocess.Popen[bytes]

    def rows(self) -> list[dict[str, Any]]:
        if not self.results.exists():
            return []
        return [json.loads(line) for line in self.results.read_text().splitlines()]

    def sample(self, name: str, sink: str, outcome: str) -> float:
        prefix = f'{name}{{outcome="{outcome}",sink="{sink}"}} '
        for line in http_get(self.metrics_url).splitlines():
            if line.startswith(prefix):
                return float(line.split()[-1])
        return 0.0


@contextlib.contextmanager
def serving(workdir: Path, sinks: dict[str, Any]) -> Iterator[Serve]:
    """``ragpulse serve`` with ``sinks`` and a JSONL file of its results."""
    workdir.mkdir()
    port, metrics_port = free_port(), free_port()
    results = workdir / "results.jsonl"
    config = {
        "otlp_http_port": port,
        "metrics_port": metrics_port,
        "assembly": {"grace_s": 0.3},
        "sinks": {**sinks, "jsonl": {"path": str(results)}},
    }
    (workdir / "ragpulse.yaml").write_text(yaml.safe_dump(config))
    with open(workdir / "ragpulse.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ragpulse.cli", "--log-level", "WARNING", "serve",
             "--config", str(workdir / "ragpulse.yaml")],
            stderr=log,
        )  # fmt: skip
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        try:
            wait_until(lambda: http_get(metrics_url), 60, "ragpulse did not start", 0.1, (OSError,))
            yield Serve(f"http://127.0.0.1:{port}", metrics_url, results, proc)
        finally:
            stop_process(proc)


def run_app(tmp_path: Path, title: str, replace: dict[str, str], env: dict[str, str]) -> None:
    """The page's ``title`` block, with ``rag.py`` beside it, as written but for ``replace``."""
    page = blocks()
    (tmp_path / "rag.py").write_text(page["rag.py"].body)
    text = page[title].body
    for old, new in replace.items():
        assert old in text, f"{title} no longer says {old!r}"
        text = text.replace(old, new)
    (tmp_path / title).write_text(text)
    done = subprocess.run(
        [sys.executable, title], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", **env}, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def scored(serve: Serve) -> dict[str, Any]:
    """ragpulse's one record of the app's trace, once evaluated."""

    def row() -> dict[str, Any] | None:
        rows = serve.rows()
        return rows[0] if rows else None

    return wait_until(row, 120, "ragpulse did not score the app's trace", 0.2, (OSError,))


def phoenix_spans(server: PhoenixServer, trace_id: str) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"trace_id": trace_id})
    try:
        answer = request(f"{server.url}/v1/projects/{PROJECT}/spans/otlpv1?{query}")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:  # the project is made with its first span
            return []
        raise
    return list(answer["data"])


def phoenix_checked(server: PhoenixServer, serve: Serve, trace_id: str, chat_id: str) -> None:
    def spans() -> list[dict[str, Any]] | None:
        found = phoenix_spans(server, trace_id)
        return found if len(found) == 3 else None

    names = {s["name"] for s in wait_until(spans, 60, "Phoenix has not the app's spans", 0.2)}
    assert names == {"answer", "retrieval help-center", "chat gpt-4o-mini"}

    def annotations() -> list[dict[str, Any]] | None:
        query = urllib.parse.urlencode({"span_ids": chat_id})
        data = request(f"{server.url}/v1/projects/{PROJECT}/span_annotations?{query}")["data"]
        return data if any(a["name"] == "faithfulness" for a in data) else None

    found = wait_until(annotations, 120, "no faithfulness annotation on the chat span", 0.5)
    assert {a["identifier"].rsplit(".", 1)[0] for a in found} >= {"ragpulse.lexical"}

    def read_back() -> bool:
        return serve.sample("ragpulse_sink_checks_total", "phoenix", "ok") >= 1

    wait_until(read_back, 60, "the phoenix sink did not read its spans back", 0.2, (OSError,))
    assert serve.sample("ragpulse_sink_items_total", "phoenix", "no_target") == 0


@pytest.mark.parametrize("title", ["phoenix_app.py", "otel_app.py"])
def test_phoenix_shows_the_app_and_ragpulses_evaluation_of_it(
    phoenix_server: PhoenixServer, tmp_path: Path, title: str
) -> None:
    server = phoenix_server
    sinks = {"phoenix": {"endpoint": server.url, "max_wait_s": 0.2, "verify_after_s": 1}}
    with serving(tmp_path / "serve", sinks) as ragpulse:
        check_phoenix(server, ragpulse, tmp_path, title)


def check_phoenix(server: PhoenixServer, ragpulse: Serve, tmp_path: Path, title: str) -> None:
    replace = {RAGPULSE: ragpulse.url, PHOENIX: server.url}
    if title == "otel_app.py":  # the test's app: spans through the block's provider
        tail = '\nfrom rag import answer\n\nanswer("Can I get a refund?")\nprovider.shutdown()\n'
        body = blocks()[title].body
        replace[body.splitlines()[-1]] = body.splitlines()[-1] + tail
    run_app(tmp_path, title, replace, {})
    record = scored(ragpulse)
    phoenix_checked(server, ragpulse, record["trace_id"], record["generation_span_id"])


def test_mlflow_shows_the_app_and_ragpulses_evaluation_of_it(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    experiment = mlflow_server.create_experiment(f"howto-{free_port()}")
    sinks = {"mlflow": {"tracking_uri": mlflow_server.url, "experiment_id": experiment}}
    with serving(tmp_path / "serve", sinks) as ragpulse:
        replace = {
            RAGPULSE: ragpulse.url,
            MLFLOW: mlflow_server.url,
            '"x-mlflow-experiment-id": "1"': f'"x-mlflow-experiment-id": "{experiment}"',
        }
        run_app(tmp_path, "mlflow_app.py", replace, {})
        record = scored(ragpulse)
        chat_id = record["generation_span_id"]

        def assessed() -> list[dict[str, Any]] | None:
            try:
                info = request(f"{mlflow_server.url}/api/3.0/mlflow/traces/tr-{record['trace_id']}")
            except urllib.error.HTTPError:
                return None
            found = info["trace"]["trace_info"].get("assessments", [])
            on_chat = [a for a in found if a.get("span_id") == chat_id]
            return on_chat if any(a["assessment_name"] == "faithfulness" for a in on_chat) else None

        found = wait_until(assessed, 120, "no faithfulness assessment on the chat span", 0.5)
        assert {a["source"]["source_id"] for a in found} >= {"ragpulse.lexical"}
        assert ragpulse.sample("ragpulse_sink_items_total", "mlflow", "failed") == 0


class OtlpDouble(LocalServer):
    """Records each OTLP POST's path and Authorization header (Langfuse's intake stands
    in here: no Langfuse server can run on this machine)."""

    def __init__(self) -> None:
        super().__init__()
        self.posts: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def respond(self, path: str, headers: Any, body: bytes) -> Reply:
        with self.lock:
            self.posts.append((path, headers.get("Authorization", "")))
        return 200, {"Content-Type": "application/x-protobuf"}, b""


def test_the_langfuse_block_sends_the_apps_spans_to_langfuses_otlp_intake(
    tmp_path: Path,
) -> None:
    with OtlpDouble() as langfuse:
        env = {
            "LANGFUSE_HOST": langfuse.url,
            "LANGFUSE_PUBLIC_KEY": "pk-lf-1",
            "LANGFUSE_SECRET_KEY": "sk-lf-2",
        }
        # ragpulse's own endpoint: a port where nothing listens (its guard warns once).
        replace = {RAGPULSE: f"http://127.0.0.1:{free_port()}"}
        run_app(tmp_path, "langfuse_app.py", replace, env)
        auth = "Basic " + base64.b64encode(b"pk-lf-1:sk-lf-2").decode()
        assert langfuse.posts == [("/api/public/otel/v1/traces", auth)]


def test_the_collector_fan_out_sends_every_span_to_ragpulse_and_the_tool() -> None:
    """Shape only: no Collector binary can be installed here."""
    path = ROOT / "deploy" / "otelcol" / "fanout.yaml"
    config = yaml.safe_load(path.read_text())
    assert yaml.safe_load(blocks()["deploy/otelcol/fanout.yaml"].body) == config
    for name, pipeline in config["service"]["pipelines"].items():
        assert set(pipeline["receivers"]) <= set(config["receivers"]), name
        assert set(pipeline.get("processors", [])) <= set(config["processors"]), name
        assert set(pipeline["exporters"]) <= set(config["exporters"]), name
    [traces] = config["service"]["pipelines"].values()
    assert traces["exporters"][0] == "otlphttp/ragpulse"
    assert len(traces["exporters"]) == 2  # ragpulse and one tool
    endpoints = {k: v["endpoint"] for k, v in config["exporters"].items()}
    assert endpoints == {
        "otlphttp/ragpulse": "http://ragpulse:4318",  # ragpulse serve's OTLP/HTTP port
        "otlphttp/phoenix": "http://phoenix:6006",
        "otlphttp/mlflow": "http://mlflow:5000",
        "otlphttp/langfuse": "https://cloud.langfuse.com/api/public/otel",
    }
    mlflow_headers = config["exporters"]["otlphttp/mlflow"]["headers"]
    assert "x-mlflow-experiment-id" in mlflow_headers
    assert config["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
