"""An interrupted harness or replay run keeps the rows it scored, and says so.

The real command in a subprocess; the user's functions answer some questions at once
and block forever on the others, so the run cannot end by itself. The test waits for
an event (the answerable rows on disk), never for a time, then sends the signal.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

DEADLINE_S = 300  # a hang guard only: nothing here is timed

FUNCTIONS = """
import threading

from ragpulse.cli.demo_app import generate_for

NEVER = threading.Event()
FAST = {fast!r}


def generate(question, documents):
    if question not in FAST:
        NEVER.wait()  # a call that never returns (a hung model server)
    return generate_for(question, documents)


def pipeline(question):
    if question not in FAST:
        NEVER.wait()
    return {{"answer": "It opens at nine.", "documents": ["The museum opens at nine."]}}
"""

ROWS = [
    {"question_id": f"q{i}", "question": f"When does museum {i} open?",
     "reference_answers": ["at nine"], "reference_contexts": ["The museum opens at nine."],
     "contexts": ["The museum opens at nine."], "answer": "At nine."}
    for i in range(6)
]  # fmt: skip
FAST = [row["question"] for row in ROWS[:3]]


def setup(tmp_path: Path) -> Path:
    (tmp_path / "user_fns.py").write_text(FUNCTIONS.format(fast=FAST), encoding="utf-8")
    source = tmp_path / "set.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    return source


def rows_in(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def interrupt_when(
    cmd: list[str], cwd: Path, out: Path, rows: int, sig: signal.Signals
) -> tuple[int, str]:
    """Run ``cmd``; once ``out`` holds ``rows`` whole lines, send ``sig``."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not (out.exists() and _whole(out) and len(rows_in(out)) >= rows):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the rows never appeared"
            time.sleep(0.1)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, stderr  # where the one line goes, as with plain `eval`


def _whole(path: Path) -> bool:
    text = path.read_text(encoding="utf-8")
    return text.endswith("\n") or not text


SIGNALS = pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])


@SIGNALS
def test_an_interrupted_harness_run_keeps_the_rows_it_scored(
    tmp_path: Path, sig: signal.Signals
) -> None:
    source = setup(tmp_path)
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "ragpulse.cli", "eval", str(source), "-o", str(out),
           "--generator", "user_fns:generate", "--conditions", "retrieved,gold",
           "--batch-size", "1"]  # fmt: skip
    code, said = interrupt_when(cmd, tmp_path, out, rows=len(FAST) * 2, sig=sig)
    assert code == 128 + sig, said
    assert "Traceback" not in said and "destroyed but it is pending" not in said
    kept = rows_in(out)  # every line whole, each a scored row of an answered question
    assert {(r["question_id"], r["condition"]) for r in kept} == {
        (f"q{i}", c) for i in range(3) for c in ("retrieved", "gold")}  # fmt: skip
    assert all(r["results"] and "not_scored" not in r for r in kept)
    last = said.strip().splitlines()[-1]
    assert last == (f"interrupted ({sig.name}): 6 of 12 cases written to {out}; no report")
    assert not out.with_name("out.summary.json").exists()


@SIGNALS
def test_an_interrupted_replay_keeps_the_rows_it_scored(
    tmp_path: Path, sig: signal.Signals
) -> None:
    source = setup(tmp_path)
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "ragpulse.cli", "eval", str(source), "-o", str(out),
           "--replay", "user_fns:pipeline", "--batch-size", "1"]  # fmt: skip
    code, said = interrupt_when(cmd, tmp_path, out, rows=len(FAST), sig=sig)
    assert code == 128 + sig, said
    assert "Traceback" not in said
    kept = rows_in(out)
    assert sorted(r["question"] for r in kept) == sorted(FAST)
    assert all(r["after"]["results"] and "not_scored" not in r for r in kept)
    last = said.strip().splitlines()[-1]
    assert last == f"interrupted ({sig.name}): 3 of 6 rows written to {out}; no report"
