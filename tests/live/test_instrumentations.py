"""Acceptance: real third-party instrumentations -> real OTLP exporters -> `ragpulse serve`.

Each case runs tests/support/instrumentations/capture.py in its own process (instrumentors
patch libraries globally), with the SDK's OTLP exporters (HTTP or gRPC, spans and log
records) pointed at one shared `ragpulse serve`. Every question must become one
evaluated record with its question, documents (with ids where the instrumentation
records them) and answer; the JSONL sink is where we read them.

The LLMs are fakes (LangChain's fake chat model, a LlamaIndex CustomLLM, a local
OpenAI-compatible double for openai-v2): no model can run here and nothing beyond
127.0.0.1 is reachable.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.helpers import start_serve, stop_process
from support.kafka_env import free_port, wait_until

pytestmark = pytest.mark.integration

CAPTURE = Path(__file__).resolve().parents[1] / "support" / "instrumentations" / "capture.py"
QUESTIONS = {
    "How much does the Nimbus Pro plan cost per month?": (["kb-1", "kb-3"], "costs 6 dollars"),
    "How many notes does offline mode keep on the device?": (["kb-2", "kb-1"], "500 most"),
}
CHEAP_METRICS = {"faithfulness", "context_relevance", "answer_relevance", "injection", "refusal"}


@dataclass(frozen=True)
class Expect:
    ids: bool  # the instrumentation records document ids
    model: str | None
    tokens: bool
    response_id: bool


EXPECT = {
    "openinference_llama_index": Expect(True, "fake-rag-model", False, False),
    "openinference_langchain": Expect(True, "fake-rag-model", True, False),
    "openllmetry_langchain": Expect(False, None, True, False),
    "openlit_langchain": Expect(True, "FakeChatModel", True, False),
    "genai_openai_events": Expect(True, "fake-rag-model", True, True),
    "genai_openai_latest": Expect(True, "fake-rag-model", True, True),
}


@dataclass(frozen=True)
class Serve:
    http: str
    grpc: str
    results: Path


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """One `ragpulse serve` for every case: each case writes under its own service name."""
    results = tmp_path_factory.mktemp("instrumentations") / "results.jsonl"
    http, grpc = free_port(), free_port()
    # The model tier off: this is about reading the traces; the cheap tier scores them.
    env = {"RAGPULSE_ASSEMBLY__GRACE_S": "0.5", "RAGPULSE_EVALUATION__MODEL__RATE": "0"}
    proc, _ = start_serve(
        "--otlp-http-port", str(http), "--otlp-grpc-port", str(grpc),
        "--results-jsonl", str(results), env=env,
    )  # fmt: skip
    yield Serve(f"http://127.0.0.1:{http}", f"127.0.0.1:{grpc}", results)
    stop_process(proc)


def _lines(path: Path, service: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("service") == service]


def _run(name: str, transport: str, serve: Serve) -> list[dict[str, Any]]:
    service = f"{name}-{transport}"
    target = ["--otlp-http", serve.http] if transport == "http" else ["--otlp-grpc", serve.grpc]
    subprocess.run(
        [sys.executable, str(CAPTURE), name, *target, "--service", service],
        check=True, timeout=300, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    wait_until(
        lambda: len(_lines(serve.results, service)) >= len(QUESTIONS),
        120,
        f"{service}: serve did not write {len(QUESTIONS)} evaluated records within 120s",
    )
    return _lines(serve.results, service)


def _check(name: str, rows: list[dict[str, Any]]) -> None:
    expect = EXPECT[name]
    assert sorted(r["question"] for r in rows) == sorted(QUESTIONS), rows
    for row in rows:
        ids, answer = QUESTIONS[row["question"]]
        assert answer in row["answer"], row
        assert len(row["documents"]) == 2
        assert [d["id"] for d in row["documents"]] == (ids if expect.ids else [None, None])
        assert row["model"] == expect.model
        assert (row["input_tokens"] is not None) == expect.tokens
        assert (row["response_id"] or "").startswith("chatcmpl-") == expect.response_id
        scored = {r["metric"] for r in row["results"] if r["score"] is not None}
        assert scored >= CHEAP_METRICS, row["results"]
        faithfulness = [r["score"] for r in row["results"] if r["metric"] == "faithfulness"]
        assert faithfulness and max(faithfulness) > 0.5  # the answers quote the documents


CASES = [
    ("openinference_llama_index", "http"),
    ("openinference_llama_index", "grpc"),
    ("openinference_langchain", "http"),
    ("openinference_langchain", "grpc"),
    ("openllmetry_langchain", "http"),
    ("genai_openai_events", "http"),  # content in log records: /v1/logs
    ("genai_openai_events", "grpc"),  # ... and the gRPC LogsService
    ("genai_openai_latest", "http"),
]


@pytest.mark.parametrize(("name", "transport"), CASES)
def test_instrumentation_over_otlp(name: str, transport: str, serve: Serve) -> None:
    _check(name, _run(name, transport, serve))


@pytest.mark.skipif(
    importlib.util.find_spec("openlit") is None,
    reason="openlit pins openai<3 and ragpulse runs openai 3: not a dev dependency; "
    "its captured trace is tested in test_extract.py",
)
def test_openlit_over_otlp(serve: Serve) -> None:
    _check("openlit_langchain", _run("openlit_langchain", "http", serve))
