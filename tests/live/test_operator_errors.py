"""Errors an operator can act on: one line naming the port and the flag that moves it,
one warning naming an unreachable judge's URL (its client's retries at DEBUG only), and
a quiet ``pip install``. Real processes, sockets and pip; nothing is mocked."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 300  # a bound on a hung child, never an assertion on speed


def _env() -> dict[str, str]:
    """This environment without RAGPULSE_* settings, so the developer's own cannot interfere
    (the test's own RAGPULSE_CACHE_DIR stays: ragpulse eval keeps judge verdicts there)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().startswith("RAGPULSE_") or k == "RAGPULSE_CACHE_DIR"
    }
    env["PYTHONUNBUFFERED"] = "1"
    # The gRPC receiver's default port (4317) may be held by another process on a shared
    # machine; no test here is about it (flags, which win, name it where one is).
    env["RAGPULSE_OTLP_GRPC_PORT"] = "0"
    return env


def _ragpulse(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragpulse.cli", *args],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=DEADLINE_S,
        cwd=ROOT,
    )


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 that another process-like listener holds for the test."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens there once the socket closes


@pytest.mark.parametrize(
    ("command", "flag", "purpose", "env_var"),
    [
        (["serve", "--otlp-http-port", "0", "--metrics-port"], "--metrics-port",
         "Prometheus /metrics", "RAGPULSE_METRICS_PORT"),
        (["serve", "--metrics-port", "0", "--otlp-http-port"], "--otlp-http-port",
         "OTLP/HTTP receiver", "RAGPULSE_OTLP_HTTP_PORT"),
        (["rekey", "--metrics-port"], "--metrics-port", "Prometheus /metrics",
         "RAGPULSE_METRICS_PORT"),
    ],
)  # fmt: skip
def test_port_in_use_is_one_line_naming_port_and_flag(
    taken_port: int, command: list[str], flag: str, purpose: str, env_var: str
) -> None:
    proc = _ragpulse(*command, str(taken_port))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert "Traceback" not in output
    [line] = [line for line in output.splitlines() if str(taken_port) in line]
    assert f"port {taken_port} ({purpose}) is in use on 127.0.0.1" in line
    assert flag in line and env_var in line


def test_unreachable_judge_is_one_warning_naming_the_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    rows = tmp_path / "rows.jsonl"
    row = {"question": "What does Pro cost?", "contexts": ["Pro costs 6 dollars."],
           "answer": "Pro costs 6 dollars."}  # fmt: skip
    rows.write_text("\n".join(json.dumps(row) for _ in range(3)) + "\n")
    out = tmp_path / "out.jsonl"
    proc = _ragpulse(
        "eval", str(rows), "-o", str(out), "--metrics", "faithfulness/llm_judge",
        "--judge-base-url", url, "--judge-model", "some-model",
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output
    assert "Retrying request" not in output, "the client's retries belong at DEBUG"
    warnings = [line for line in output.splitlines() if "cannot be used" in line]
    assert len(warnings) == 1, output
    assert "WARNING" in warnings[0] and url in warnings[0]
    results = [r for line in out.read_text().splitlines() for r in json.loads(line)["results"]]
    assert len(results) == 3
    assert all(url in (r["error"] or "") for r in results), results


def test_pip_install_is_quiet_and_ships_the_data(tmp_path: Path) -> None:
    """What ``pip install .`` builds from a clean copy of the sources: no setuptools
    warnings (pip shows the build backend's), and the probe weights, the demo corpus and
    py.typed in the installed tree."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("ragpulse", "collector", "evaluators", "exporters"):
        shutil.copytree(ROOT / name, src / name, symlinks=True, ignore=skip)
    target = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
         "--no-compile", "--target", str(target), str(src)],
        capture_output=True, text=True, timeout=DEADLINE_S, env=_env(),
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    noise = re.compile(r"BuildBackendWarning|SetuptoolsDeprecationWarning|would be ignored|"
                       r"absent from the `packages`|^\s*!!\s*$", re.M)  # fmt: skip
    assert not noise.search(output), output
    installed = target / "ragpulse"
    weights = sorted(p.name for p in (installed / "evaluators/models/weights").iterdir())
    assert {"injection_probe.npz", "faithfulness_probe.npz"} <= set(weights)
    assert (installed / "demo_data/corpus.json").is_file()
    assert (installed / "py.typed").is_file()
    assert (installed / "collector/service.py").is_file()
