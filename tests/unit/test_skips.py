"""Under .ci/run a skip that tests/allowed_skips.toml does not list fails the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.skips import ALLOWED, STRICT_ENV, Allowed, allowed_skips, unlisted

TESTS = Path(__file__).resolve().parents[1]


def test_every_allowed_skip_says_why() -> None:
    entries = allowed_skips()
    assert entries
    assert all(len(entry.why) > 20 for entry in entries), ALLOWED


def test_a_skip_is_listed_by_test_and_reason() -> None:
    allowed = allowed_skips()
    docker = ("tests/live/test_deploy_files.py::test_compose_up", "no docker CLI")
    block = "tests/docs/test_readme.py::test_shell_block_runs_as_written"
    marked = (f"{block}[x]", "x.md:3 needs docker (and runs until stopped)")
    taken = (f"{block}[y]", "y.md:9 needs free ports 4318, and [4318] is taken")
    no_phoenix = ("tests/live/test_tracing_backends.py::test_x", "phoenix is not installed")
    assert unlisted([docker, marked, taken, no_phoenix], allowed) == [taken, no_phoenix]


def _run(tmp_path: Path, strict: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["support.skips"]\n')
    (tmp_path / "test_it.py").write_text(
        "import pytest\n\ndef test_skips():\n    pytest.skip('phoenix is not installed')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(TESTS), STRICT_ENV: "1" if strict else "0"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_an_unlisted_skip_fails_a_strict_run_only(tmp_path: Path) -> None:
    relaxed = _run(tmp_path, strict=False)
    assert relaxed.returncode == 0, relaxed.stdout
    strict = _run(tmp_path, strict=True)
    assert strict.returncode == 1, strict.stdout
    assert "phoenix is not installed" in strict.stdout.split("skips not in")[1]


def test_the_entries_are_typed() -> None:
    assert all(isinstance(entry, Allowed) for entry in allowed_skips())
