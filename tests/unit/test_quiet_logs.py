"""Logs that say each thing once: ``config check`` prints its verdict and nothing else, a
default evaluator that is off is said once per run (with or without a config file),
``serve`` names every address it listens on, and ``make demo`` installs the package
alone and prints only what the demo says.

The commands run as a user runs them: subprocesses of this venv's ``ragpulse`` (``make``
against a venv of stand-in scripts where it would install)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 120  # a hang guard: nothing here asserts on how long a command took


def user_env() -> dict[str, str]:
    dropped = ("RAGPULSE_", "OPENAI_", "MAKE", "MFLAGS", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if not k.startswith(dropped)}


def ragpulse(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragpulse.cli", *argv],
        cwd=cwd, env=user_env(), capture_output=True, text=True, timeout=DEADLINE_S,
    )  # fmt: skip


def test_config_check_prints_only_its_verdict(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("evaluation:\n  evaluators: [faithfulness, answer_relevance]\n")
    done = ragpulse("config", "check", str(good), cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{good}: ok\n", "")
    bad = tmp_path / "bad.yaml"
    bad.write_text("evaluation:\n  evaluators: [faithfulness]\n  batch_sise: 3\n")
    done = ragpulse("config", "check", str(bad), cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "configuration error: 1 problem in the settings:",
        f"  {bad}:3: evaluation.batch_sise: unknown setting (did you mean evaluation.batch_size?)",
    ]


def test_an_evaluator_that_is_off_is_said_once(tmp_path: Path) -> None:
    config = tmp_path / "ragpulse.yaml"
    config.write_text("evaluation:\n  evaluators: [faithfulness, answer_relevance]\n")
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"question": "q?", "contexts": ["c"], "answer": "a"}\n')
    done = ragpulse("eval", str(rows), "-o", "out.jsonl", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    off = [line for line in done.stderr.splitlines() if " off: " in line]
    assert len(off) == 1, done.stderr
    assert "answer_relevance/llm_judge, faithfulness/llm_judge are off" in off[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_logs_every_address_it_listens_on(tmp_path: Path) -> None:
    grpc_port = free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "ragpulse.cli", "serve", "--otlp-http-port", "0",
         "--otlp-grpc-port", str(grpc_port), "--metrics-port", "0"],
        cwd=tmp_path, env=user_env(), stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        assert serve.stderr is not None
        for line in serve.stderr:
            lines.append(line.rstrip())
            if "sinks:" in line:
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert started.wait(DEADLINE_S), "\n".join(lines)
    finally:
        serve.send_signal(signal.SIGINT)
        serve.wait(DEADLINE_S)
        reader.join(DEADLINE_S)
    said = "\n".join(lines)
    assert re.search(r"OTLP/HTTP receiver on http://127\.0\.0\.1:[1-9]\d*/v1/traces", said)
    assert f"OTLP/gRPC receiver on 127.0.0.1:{grpc_port}" in said
    assert re.search(r"Prometheus metrics on http://127\.0\.0\.1:[1-9]\d*/metrics", said)
    assert len([line for line in lines if " off: " in line]) <= 1


# --- make demo ------------------------------------------------------------------------------

needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


def make(*argv: str, venv: Path) -> subprocess.CompletedProcess[str]:
    """``make`` in the checkout, its venv ``venv`` (never the checkout's own)."""
    return subprocess.run(
        ["make", *argv, f"VENV={venv}"],
        cwd=ROOT, env=user_env(), capture_output=True, text=True, timeout=DEADLINE_S,
    )  # fmt: skip


@needs_make
def test_make_demo_installs_the_collector_and_make_test_everything(tmp_path: Path) -> None:
    demo = make("-n", "demo", venv=tmp_path / ".venv").stdout
    installs = [line for line in demo.splitlines() if "pip install" in line]
    assert installs[-1].split("pip install", 1)[1].split("2>&1")[0].split() == [
        "--quiet", "-e", "'.[collector]'",
    ]  # fmt: skip
    assert "torch" not in demo and "dev" not in demo and "train" not in demo
    full = make("-n", "install", venv=tmp_path / ".venv").stdout
    assert "'.[collector,kafka,redis,dev,models,onnx,train]'" in full and "torch==" in full
    assert ".demo-installed" in full  # a full install holds the demo's: not installed again


@needs_make
def test_make_demo_prints_the_demo_and_no_recipe(tmp_path: Path) -> None:
    """A venv of stand-ins: ``python`` records how pip was asked to install, ``ragpulse``
    prints a line as the demo would. make's own echo of its recipes (commands, comments)
    must not show."""
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    calls = tmp_path / "calls.txt"
    for name, body in (
        ("python", f'echo "$@" >> {calls}'),
        ("ragpulse", 'echo "the demo speaks: $*"'),
    ):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    done = make("demo", "DEMO_ARGS=--duration 5", venv=tmp_path / ".venv")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"installing ragpulse into {tmp_path / '.venv'} (once)",
        "the demo speaks: demo --duration 5",
    ]
    assert done.stderr == ""
    assert calls.read_text().splitlines() == ["-m pip install --quiet -e .[collector]"]
    # Installed once: the next run is the demo alone.
    again = make("demo", venv=tmp_path / ".venv")
    assert again.stdout.splitlines() == ["the demo speaks: demo"]
