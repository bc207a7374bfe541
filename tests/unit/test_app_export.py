"""The app's span export when no collector listens: one connection attempt per batch and
none repeated, one warning line per process, and offline runs (``ragpulse eval
--generator`` / ``--replay``) that import the app with export off unless asked.

Real sockets throughout: a port where nothing listens, and a small HTTP server on
127.0.0.1 that answers as a collector would. Nothing here compares elapsed time: the
tests count connection attempts and read the log lines."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

import ragpulse
from ragpulse.errors import ConfigError
from ragpulse.sdk import export_guard
from ragpulse.sdk import provider as _provider
from ragpulse.sdk.export_guard import CONNECT_TIMEOUT_S, BoundedSession, GuardedExporter, Once

ENV_VARS = ("RAGPULSE_EXPORTER", "RAGPULSE_ENDPOINT", "RAGPULSE_EXPORT_TIMEOUT")
OTEL_LOGGERS = ("opentelemetry", "ragpulse.sdk.kafka_exporter")


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(export_guard, "WARN_ONCE", Once())  # a process of its own
    yield
    ragpulse.shutdown()


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens: every connection is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Collector(ThreadingHTTPServer):
    """Answers each POST with the next status of ``statuses`` (then 200); counts them."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                server = self.server
                assert isinstance(server, Collector)
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.requests += 1
                status = server.statuses.pop(0) if server.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector([])
    yield server
    server.shutdown()
    server.server_close()


def guard() -> GuardedExporter:
    installed = _provider._installed
    assert installed is not None and installed.guards
    return installed.guards[0]


def warnings_and_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


@ragpulse.pipeline
def answer(question: str) -> str:
    return "an answer"


def test_no_collector_one_attempt_per_batch_and_one_warning(
    closed_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    endpoint = f"http://127.0.0.1:{closed_port}"
    ragpulse.configure("svc", endpoint, tracer_provider=TracerProvider())
    exporter = guard()
    session = exporter.session
    assert session is not None
    # The settings: a short connect timeout, the export timeout as configured, and no
    # retries before the collector has answered once.
    assert session.connect_timeout_s == CONNECT_TIMEOUT_S <= 2.0
    assert _provider._installed is not None
    assert _provider._installed.config.export_timeout_s == 10.0
    assert exporter.retries_allowed is False
    with caplog.at_level(logging.DEBUG):
        assert [answer("q") for _ in range(5)] == ["an answer"] * 5
        ragpulse.shutdown()  # the exit's flush: the batch is tried once
    assert session.attempts == 1 and session.answered is False
    assert exporter.dropped == 5
    said = warnings_and_errors(caplog)
    assert len(said) == 1, [r.getMessage() for r in said]
    line = said[0].getMessage()
    assert said[0].name == "ragpulse.instrument"
    assert f"{endpoint}/v1/traces (connection refused)" in line
    assert "RAGPULSE_EXPORTER=none" in line
    assert not [r for r in caplog.records if r.name.startswith(OTEL_LOGGERS)]


def test_one_warning_per_process_across_configurations(
    closed_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    for _ in range(3):
        ragpulse.configure(
            "svc", f"http://127.0.0.1:{closed_port}", tracer_provider=TracerProvider()
        )
        answer("q")
        ragpulse.shutdown()
    said = warnings_and_errors(caplog)
    assert len(said) == 1 and "connection refused" in said[0].getMessage()


def test_retries_only_while_the_collector_answers_and_never_at_exit(
    collector: Collector, caplog: pytest.LogCaptureFixture
) -> None:
    ragpulse.configure("svc", collector.url, tracer_provider=TracerProvider())
    exporter = guard()
    assert _provider._installed is not None and _provider._installed.processor is not None
    flush = _provider._installed.processor.force_flush
    answer("q")
    assert flush() and collector.requests == 1  # answered: retries allowed from now on
    assert exporter.retries_allowed is True
    collector.statuses = [503]  # "retry later": the exporter backs off and tries again
    answer("q")
    flush()
    assert collector.requests == 3 and exporter.dropped == 0
    collector.statuses = [503, 503]
    exporter.closing()  # as at exit: one attempt, the batch given up on a 503
    answer("q")
    ragpulse.shutdown()
    assert collector.requests == 4 and exporter.dropped == 1
    said = warnings_and_errors(caplog)
    assert len(said) == 1 and "HTTP 503" in said[0].getMessage()


def test_a_503_before_any_answer_is_not_retried(collector: Collector) -> None:
    collector.statuses = [503, 503]
    ragpulse.configure("svc", collector.url, tracer_provider=TracerProvider())
    answer("q")
    ragpulse.shutdown()
    assert collector.requests == 1


def test_the_connect_timeout_is_the_short_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """What reaches requests: (connect, read) = (CONNECT_TIMEOUT_S, the export's time left).
    requests' own Session.request is replaced to see its arguments: no server can tell."""
    import requests

    seen: list[Any] = []

    def record(self: requests.Session, method: str, url: str, **kwargs: Any) -> Any:
        seen.append(kwargs.get("timeout"))
        raise requests.ConnectionError("Connection refused")

    monkeypatch.setattr(requests.Session, "request", record)
    session = BoundedSession()
    session.begin(retries=False)
    with pytest.raises(requests.ConnectionError):
        session.request("POST", "http://127.0.0.1:1/v1/traces", timeout=9.5)
    with pytest.raises(export_guard.ExportAbandoned):  # the retry is refused at once
        session.request("POST", "http://127.0.0.1:1/v1/traces", timeout=9.0)
    assert seen == [(CONNECT_TIMEOUT_S, 9.5)]
    assert session.problem == "connection refused"


def test_the_apps_own_exporter_logs_as_before(caplog: pytest.LogCaptureFixture) -> None:
    """Only what a guarded export logs is held back: the same logger, used by an app's own
    OTLP exporter outside ragpulse's export, still reaches the log."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    GuardedExporter(InMemorySpanExporter(), "nowhere")  # installs the hold-back filter
    logging.getLogger(export_guard.EXPORTER_LOGGERS[0]).warning("the app's exporter speaks")
    assert "the app's exporter speaks" in caplog.text


# --- Offline runs import the app with export off ------------------------------------------

APP = """
import ragpulse

CONFIG = ragpulse.configure(service_name="myapp")


@ragpulse.retrieval(data_source="kb")
def search(query):
    return [{"id": "kb-1", "content": "Bake the lasagne at 180 degrees."}]


@ragpulse.generation(model="m")
def llm(question, docs):
    return f"exporter {CONFIG.exporter}"
"""


def run_harness(
    tmp_path: Path, port: int, *extra: str, **env: str
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "myapp.py").write_text(APP)
    (tmp_path / "testset.jsonl").write_text(
        json.dumps({"question": "What temperature for lasagne?", "reference_contexts": ["x"]})
        + "\n"
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
    environ.update(RAGPULSE_ENDPOINT=f"http://127.0.0.1:{port}", **env)
    command = [sys.executable, "-m", "ragpulse.cli", "eval", "testset.jsonl", "-o", "out.jsonl",
               "--retriever", "myapp:search", "--generator", "myapp:llm",
               "--conditions", "retrieved,gold", *extra]  # fmt: skip
    return subprocess.run(
        command, cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=300
    )


def answers(tmp_path: Path) -> set[str]:
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    return {row["answer"] for row in rows}


def test_the_harness_imports_the_app_with_export_off(tmp_path: Path, closed_port: int) -> None:
    done = run_harness(tmp_path, closed_port)
    assert done.returncode == 0, done.stderr
    assert answers(tmp_path) == {"exporter none"}
    assert "could not be sent" not in done.stderr
    assert "opentelemetry" not in done.stderr and "Transient error" not in done.stderr


def test_export_on_when_asked_one_line_when_nothing_listens(
    tmp_path: Path, closed_port: int
) -> None:
    done = run_harness(tmp_path, closed_port, "--export")
    assert done.returncode == 0, done.stderr
    assert answers(tmp_path) == {"exporter otlp"}
    said = [line for line in done.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert len(said) == 1, done.stderr
    assert f"127.0.0.1:{closed_port}/v1/traces (connection refused)" in said[0]
    # The app's own RAGPULSE_EXPORTER is its choice too.
    done = run_harness(tmp_path, closed_port, RAGPULSE_EXPORTER="console")
    assert done.returncode == 0, done.stderr
    assert answers(tmp_path) == {"exporter console"}


# --- also_to: the app's spans to its tracing tool too ---------------------------------


def test_also_to_sends_the_same_spans_to_the_tracing_tool(collector: Collector) -> None:
    """ragpulse's exporter and an ``also_to`` URL (the tool) both get every span; the
    tool's requests carry none of ragpulse's headers."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    to_ragpulse = InMemorySpanExporter()
    ragpulse.configure(
        "app",
        exporter=to_ragpulse,
        tracer_provider=TracerProvider(),
        also_to=[collector.url],
    )

    @ragpulse.pipeline
    def answer(question: str) -> str:
        return "a"

    answer("q")
    ragpulse.shutdown()  # flushes the tool's batch
    assert [s.name for s in to_ragpulse.get_finished_spans()] == ["answer"]
    assert collector.requests == 1


def test_also_to_takes_exporters_for_tools_that_need_headers() -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    to_ragpulse, to_tool = InMemorySpanExporter(), InMemorySpanExporter()
    ragpulse.configure(exporter=to_ragpulse, tracer_provider=TracerProvider(), also_to=[to_tool])

    @ragpulse.retrieval
    def search(question: str) -> list[str]:
        return ["d"]

    search("q")
    ragpulse.shutdown()
    assert [s.name for s in to_tool.get_finished_spans()] == ["retrieval"]
    assert to_tool.get_finished_spans()[0].context == to_ragpulse.get_finished_spans()[0].context


@pytest.mark.parametrize("bad", ["http://127.0.0.1:6006", [3], ["ftp://host"]])
def test_also_to_refuses_what_it_cannot_send_to(bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"also_to|endpoint"):
        ragpulse.configure(exporter="none", also_to=bad)
