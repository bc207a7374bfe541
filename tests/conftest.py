from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka_env import kafka_broker, moto_s3, rotel_agent, s3_kafka_broker  # noqa: F401 (fixtures)
from llm_server import LlamaServer, unavailable

from ragpulse.telemetry import CollectorMetrics

# The OTLP/gRPC receiver defaults to port 4317: every `ragpulse serve` and Collector a
# test starts would bind it, so two at once (or two test runs) would collide. Off unless
# a test asks for it (flags and settings arguments beat the environment).
os.environ.setdefault("RAGPULSE_OTLP_GRPC_PORT", "0")

# $RAGPULSE_DEV_DATA (a directory) first, else the shared checkout's dev split.
DEV_DATA = Path(
    os.environ.get("RAGPULSE_DEV_DATA")
    or Path(__file__).resolve().parents[2] / "shared" / "data" / "dev"
)


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
    """One real llama.cpp server (SmolLM2-135M) for the whole session: see tests/llm_server.py."""
    reason = unavailable()
    if reason:
        pytest.skip(f"no real LLM server: {reason}")
    with LlamaServer() as server:
        yield server
