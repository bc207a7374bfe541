from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from support.kafka_env import kafka_broker, moto_s3, rotel_agent, s3_kafka_broker  # noqa: F401 (fixtures)
from support.llm_server import LlamaServer, unavailable
from support.tracing_backends import MlflowServer, PhoenixServer, Server

from ragpulse.disk_cache import CACHE_ENV, cache_root
from ragpulse.telemetry import CollectorMetrics

S = TypeVar("S", bound=Server)

# Under .ci/run, a skip not listed in tests/allowed_skips.toml fails the run.
pytest_plugins = ["support.skips"]

# The OTLP/gRPC receiver defaults to port 4317: every `ragpulse serve` and Collector a
# test starts would bind it, so two at once (or two test runs) would collide. Off unless
# a test asks for it (flags and settings arguments beat the environment).
os.environ.setdefault("RAGPULSE_OTLP_GRPC_PORT", "0")

# $RAGPULSE_DEV_DATA (a directory) first, else the shared checkout's dev split.
DEV_DATA = Path(
    os.environ.get("RAGPULSE_DEV_DATA")
    or Path(__file__).resolve().parents[2] / "shared" / "data" / "dev"
)


@pytest.fixture(autouse=True)
def _own_cache_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test its own $RAGPULSE_CACHE_DIR (subprocesses inherit it), so that the judge's
    disk cache (``ragpulse eval``'s default) never answers a test from another test's run or
    from the developer's ~/.cache. The derived tables and ONNX exports are pure functions of
    the code, expensive to rebuild: those folders are links to the usual ones."""
    shared = cache_root()
    own = tmp_path_factory.mktemp("cache")
    for name in ("tables", "onnx"):
        (shared / name).mkdir(parents=True, exist_ok=True, mode=0o700)
        (own / name).symlink_to(shared / name, target_is_directory=True)
    monkeypatch.setenv(CACHE_ENV, str(own))


@pytest.fixture
def metrics() -> CollectorMetrics:
    return CollectorMetrics()  # fresh registry per test


@pytest.fixture
def dev_data() -> Iterator[Path]:
    if not DEV_DATA.is_dir():
        pytest.skip(f"dev data not found at {DEV_DATA}")
    yield DEV_DATA


@pytest.fixture(scope="session")
def llm_server() -> Iterator[LlamaServer]:
    """One real llama.cpp server (SmolLM2-135M) for the session: tests/support/llm_server.py."""
    reason = unavailable()
    if reason:
        pytest.skip(f"no real LLM server: {reason}")
    with LlamaServer() as server:
        yield server


def _running(server: S) -> Iterator[S]:
    server.start_where_usual()  # the docs' commands name the usual port
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def phoenix_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    """One real Arize Phoenix for the session (tests/support/tracing_backends.py)."""
    yield from _running(PhoenixServer(tmp_path_factory.mktemp("phoenix")))


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """One real MLflow tracking server for the session (tests/support/tracing_backends.py)."""
    yield from _running(MlflowServer(tmp_path_factory.mktemp("mlflow")))
