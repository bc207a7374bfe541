"""``pip install ragpulse`` into a fresh venv is the SDK an app needs, and only that: the
OpenTelemetry SDK and OTLP/HTTP exporter, none of the collector's dependencies. A tiny app
using the decorators and ``ragpulse.configure`` runs there and its turn reaches a real
``ragpulse serve`` (this checkout's venv); every part whose extra is missing there says
the one line that installs it.

The wheel is built from this checkout; its dependencies come from the package index (the
test skips, saying pip's last words, when pip cannot reach one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.helpers import start_serve, stop_process
from support.kafka_env import free_port, wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
COLLECTOR_ONLY = {
    "pydantic", "pydantic-settings", "pyyaml", "rich", "prometheus-client", "aiohttp", "httpx",
    "grpcio", "openai", "hyperscan", "kafka-python", "numpy", "redis", "torch",
}  # fmt: skip
"""Distributions that only the collector (or another extra) needs."""

APP = textwrap.dedent(
    """
    import json, sys
    import ragpulse

    ragpulse.configure(service_name="tiny-app", endpoint=sys.argv[1])

    @ragpulse.retrieval(data_source="kb")
    def retrieve(question):
        return [{"id": "kb-1", "content": "The Pro plan includes 100 GB of storage."}]

    @ragpulse.generation(model="tiny-model")
    def generate(question, documents):
        return "The Pro plan includes 100 GB of storage."

    @ragpulse.pipeline(route="/ask")
    def answer(question):
        return generate(question, retrieve(question))

    answer("How much storage does the Pro plan include?")
    ragpulse.shutdown()
    print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
    """
)


def sh(*argv: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture(scope="module")
def sdk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv holding ``pip install ragpulse`` (no extra); its bin folder."""
    where = tmp_path_factory.mktemp("sdk")
    built = sh(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
               "--no-build-isolation", ROOT, "-w", where / "wheel")  # fmt: skip
    assert built.returncode == 0, built.stderr
    [wheel] = (where / "wheel").glob("ragpulse-*.whl")
    venv = where / "venv"
    assert sh(sys.executable, "-m", "venv", venv).returncode == 0
    installed = sh(venv / "bin" / "python", "-m", "pip", "install", "--quiet",
                   "--timeout", "30", wheel)  # fmt: skip
    if installed.returncode != 0:
        pytest.skip(f"pip could not install the SDK: {installed.stderr.strip()[-300:]}")
    yield venv / "bin"


def test_the_sdk_installs_the_opentelemetry_sdk_and_exporter_only(sdk: Path) -> None:
    listed = sh(sdk / "python", "-m", "pip", "list", "--format", "json")
    names = {d["name"].lower() for d in json.loads(listed.stdout)}
    assert {"ragpulse", "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"} <= names
    assert names & COLLECTOR_ONLY == set()


def test_a_tiny_app_runs_on_the_sdk_alone_and_its_turn_is_scored(sdk: Path, tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    otlp = free_port()
    serve, _ = start_serve("--otlp-http-port", str(otlp), "--results-jsonl", str(results),
                           env={"RAGPULSE_ASSEMBLY__GRACE_S": "0.2"})  # fmt: skip
    try:
        app = tmp_path / "app.py"
        app.write_text(APP)
        ran = sh(sdk / "python", app, f"http://127.0.0.1:{otlp}", timeout=120)
        assert ran.returncode == 0, ran.stderr
        imported = set(json.loads(ran.stdout.splitlines()[-1]))
        assert imported.isdisjoint({"pydantic", "yaml", "rich", "aiohttp", "httpx", "grpc",
                                    "openai", "hyperscan", "kafka", "numpy"})  # fmt: skip

        def scored() -> dict[str, object] | None:
            lines = results.read_text().splitlines() if results.exists() else []
            return json.loads(lines[0]) if lines else None

        row = wait_until(scored, 60, "serve did not score the tiny app's turn")
    finally:
        stop_process(serve)
    assert row["service"] == "tiny-app" and row["route"] == "/ask"
    assert row["question"] == "How much storage does the Pro plan include?"
    assert [d["id"] for d in row["documents"]] == ["kb-1"]  # type: ignore[index]


def test_each_part_whose_extra_is_missing_says_the_line_that_installs_it(sdk: Path) -> None:
    for argv in (["serve"], ["eval", "rows.jsonl", "-o", "out.jsonl"], []):
        done = sh(sdk / "ragpulse", *argv, timeout=60)
        assert done.returncode == 2, done
        assert done.stderr.strip().endswith("pip install 'ragpulse[collector]'"), done.stderr
        assert done.stderr.startswith(f"ragpulse {argv[0]}" if argv else "ragpulse needs")
    kafka = sh(sdk / "python", "-c",
               "import ragpulse; ragpulse.configure(exporter='kafka')", timeout=60)  # fmt: skip
    assert kafka.returncode == 1
    assert "exporter='kafka' needs the kafka extra (not installed: kafka): " \
        "pip install 'ragpulse[kafka]'" in kafka.stderr  # fmt: skip
    document = sh(sdk / "python", "-c", "import ragpulse; ragpulse.Document", timeout=60)
    assert "ragpulse.Document needs the collector extra (not installed: pydantic): " \
        "pip install 'ragpulse[collector]'" in document.stderr  # fmt: skip
