"""Skips that CI accepts, and only those: a pytest plug-in (tests/conftest.py loads it).

A live test that skips passes quietly, so a broken install (Phoenix failed to install, no
Kafka binary) would turn a red suite green. Under ``.ci/run`` (``STRICT_SKIPS=1``)
every skip must match an entry of ``tests/allowed_skips.toml``, each with the reason it is
acceptable; any other skip fails the run, listed at the end. Elsewhere skips are reported
as usual.
"""

from __future__ import annotations

import fnmatch
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

STRICT_ENV = "STRICT_SKIPS"
ALLOWED = Path(__file__).resolve().parents[1] / "allowed_skips.toml"


@dataclass(frozen=True)
class Allowed:
    test: str  # a glob over the test's node id
    reason: re.Pattern[str]  # searched in pytest's skip message
    why: str  # why this skip is acceptable where it happens


def allowed_skips(path: Path = ALLOWED) -> list[Allowed]:
    entries = tomllib.loads(path.read_text(encoding="utf-8")).get("skip", [])
    return [Allowed(e["test"], re.compile(e["reason"]), e["why"]) for e in entries]


def skip_message(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # (file, line, "Skipped: why")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def unlisted(skipped: list[tuple[str, str]], allowed: list[Allowed]) -> list[tuple[str, str]]:
    return [
        (nodeid, message)
        for nodeid, message in skipped
        if not any(
            fnmatch.fnmatchcase(nodeid, a.test) and a.reason.search(message) for a in allowed
        )
    ]


class StrictSkips:
    def __init__(self) -> None:
        self.skipped: list[tuple[str, str]] = []
        self.allowed = allowed_skips()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skipped.append((report.nodeid, skip_message(report)))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if unlisted(self.skipped, self.allowed) and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        bad = unlisted(self.skipped, self.allowed)
        if not bad:
            return
        terminalreporter.section(f"skips not in {ALLOWED.name} ({STRICT_ENV}=1)", red=True)
        for nodeid, message in bad:
            terminalreporter.line(f"{nodeid}: {message}", red=True)


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(STRICT_ENV) == "1":
        config.pluginmanager.register(StrictSkips(), "ragpulse-strict-skips")
