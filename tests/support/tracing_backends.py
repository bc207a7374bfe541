"""Real tracing tools on 127.0.0.1 for the live tests: Arize Phoenix and an MLflow tracking
server, each run from the venv of its own that ``make backends`` builds from PyPI
(``.backends/<name>``). Where pip could not install one, the tests that need it skip
with pip's last words (``.backends/<name>.unavailable``).

Each server keeps its data in a temporary folder, logs to a file there (shown when it
does not come up), binds 127.0.0.1 only, and is stopped (its whole process group) when
the session ends.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from support.kafka_env import free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = Path(os.environ.get("RAGPULSE_BACKENDS_DIR") or ROOT / ".backends")
START_TIMEOUT_S = 300.0  # Phoenix takes ~8 s and MLflow ~30 s on an idle machine


def backend_bin(name: str, program: str) -> Path:
    """``.backends/<name>/bin/<program>``, or skip saying why it is not there."""
    path = BACKENDS / name / "bin" / program
    if (BACKENDS / name / ".installed").exists() and path.exists():
        return path
    why = BACKENDS / f"{name}.unavailable"
    if why.exists():
        lines = why.read_text(errors="replace").strip().splitlines()
        reason = lines[-1][:300] if lines else "no output"
        pytest.skip(f"{name} could not be installed from PyPI: {reason}")
    pytest.skip(f"{name} is not installed: run `make backends` (make test does)")


def request(
    url: str, body: Any = None, headers: dict[str, str] | None = None, timeout: float = 30
) -> Any:
    """GET (or POST ``body`` as JSON) and decode the JSON answer."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    for key, value in (headers or {}).items():
        req.add_header(key, value)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


class Server:
    """A server process in its own process group, with its log in ``workdir``."""

    name = "server"

    default_port: int | None = None
    """The tool's usual port, which the docs' commands name: taken when it is free."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"{self.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def healthy(self) -> bool:
        raise NotImplementedError

    def start(self) -> None:
        args, env = self.command()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                args,
                cwd=self.workdir,
                env={**os.environ, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its workers go with it at stop()
            )

        def up() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited at start:\n{self.log_tail()}")
            return self.healthy()

        try:
            wait_until(up, START_TIMEOUT_S, f"{self.name} did not start", 0.25, (OSError,))
        except AssertionError:
            self.stop()
            raise AssertionError(f"{self.name} did not start:\n{self.log_tail()}") from None

    def start_where_usual(self) -> None:
        """Start on the tool's usual port when it is free (the docs' commands name it), else
        on any free port; one taken between the check and the start (another test run)
        moves it to a free port too."""
        usual = self.default_port
        if usual is not None and _bindable(usual):
            self._move(usual)
            try:
                self.start()
                return
            except AssertionError:
                pass  # taken meanwhile: anywhere will do
        self._move(free_port())
        self.start()

    def _move(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class PhoenixServer(Server):
    """``phoenix serve``: UI and REST on ``url``, OTLP/HTTP at ``url``/v1/traces."""

    name = "phoenix"
    default_port = 6006

    def command(self) -> tuple[list[str], dict[str, str]]:
        env = {
            "PHOENIX_WORKING_DIR": str(self.workdir),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(free_port()),  # its OTLP/gRPC receiver: not 4317
            "PHOENIX_TELEMETRY_ENABLED": "false",
        }
        return [str(backend_bin("phoenix", "phoenix")), "serve"], env

    def healthy(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/healthz", timeout=5) as resp:
            return bool(resp.status == 200)


class MlflowServer(Server):
    """``mlflow server`` on SQLite: REST on ``url``, OTLP/HTTP at ``url``/v1/traces (with
    the ``x-mlflow-experiment-id`` header)."""

    name = "mlflow"
    default_port = 5000

    def command(self) -> tuple[list[str], dict[str, str]]:
        args = [
            str(backend_bin("mlflow", "mlflow")),
            "server",
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--workers", "1",
            "--backend-store-uri", f"sqlite:///{self.workdir / 'mlflow.db'}",
            "--default-artifact-root", str(self.workdir / "artifacts"),
        ]  # fmt: skip
        # No background job runner (a dozen worker processes the tests do not need).
        return args, {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}

    def healthy(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/health", timeout=5) as resp:
            return bool(resp.status == 200)

    def create_experiment(self, name: str) -> str:
        answer = request(f"{self.url}/api/2.0/mlflow/experiments/create", {"name": name})
        return str(answer["experiment_id"])


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
