"""The sliced HTML report renders in a real headless browser (Chromium), without JS errors.

`chromium --headless --dump-dom` loads the page from disk and prints the DOM after its
scripts ran; with `--enable-logging=stderr` the browser's console (uncaught exceptions
included) goes to stderr. The page's script sets ``data-ready`` on <body> as its last act,
so seeing it in the DOM proves the script ran to the end. Skips, saying why, where no
Chromium can be had (`make chromium` installs Debian's package).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from support.slice_rows import run_rows  # the same synthetic rows as test_slices

from ragpulse.offline.slice_report import write_sliced_reports
from ragpulse.offline.slices import sliced_summary

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Generous: a cold start on a loaded 2-core machine; the test never asserts on time.
DEADLINE_S = 120
CONSOLE_ERROR = re.compile(r"CONSOLE.*(Uncaught|Error)", re.IGNORECASE)


def browser() -> str:
    env = os.environ.get("RAGPULSE_CHROMIUM")
    candidates = [env] if env else []
    candidates += [p for b in BROWSERS if (p := shutil.which(b))]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    pytest.skip(
        "no headless Chromium found (tried $RAGPULSE_CHROMIUM and "
        + ", ".join(BROWSERS)
        + "): `make chromium` installs Debian's package"
    )


def dump_dom(page: Path, tmp_path: Path, fragment: str = "") -> tuple[str, list[str]]:
    """The DOM after the page's scripts ran, and the browser console's error lines."""
    cmd = [
        browser(),
        "--headless",
        "--no-sandbox",  # tests may run as root in a container, where the sandbox refuses
        "--disable-gpu",
        "--no-first-run",
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--dump-dom",
        page.resolve().as_uri() + fragment,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE_S)
    assert proc.returncode == 0, f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}"
    errors = [line for line in proc.stderr.splitlines() if CONSOLE_ERROR.search(line)]
    return proc.stdout, errors


class DomTables(HTMLParser):
    """Tables (header cells, body rows with their style) and <body>'s attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict[str, Any]] = []
        self.body: dict[str, str | None] = {}
        self._cell: list[str] | None = None
        self._row: dict[str, Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "body":
            self.body = a
        elif tag == "table":
            self.tables.append({"class": a.get("class"), "header": [], "rows": []})
        elif tag == "tr" and self.tables:
            self._row = {"style": a.get("style") or "", "cells": []}
        elif tag in ("td", "th"):
            self._cell = []

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row["cells"].append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            table = self.tables[-1]
            if not table["header"]:
                table["header"] = self._row["cells"]
            else:
                table["rows"].append(self._row)
            self._row = None


def parse(dom: str) -> DomTables:
    parser = DomTables()
    parser.feed(dom)
    return parser


@pytest.fixture
def report(tmp_path: Path) -> Path:
    baseline = sliced_summary(run_rows(), None, None, [])
    summary = sliced_summary(
        run_rows(gold_removed_refuses=False),
        None,
        baseline,
        ["refusal_rate@question_type=multi-hop,condition=gold_removed=0.1", "mrr=0.05"],
    )
    # Text that must stay text: markup in a question is escaped, not rendered.
    summary["slices"]["all"]["worst"][0]["question"] = "<b>bold?</b> & </script>"
    paths = write_sliced_reports(summary, tmp_path / "run.jsonl", None, html=True)
    return paths["html"]


def test_sliced_html_renders_without_js_errors(report: Path, tmp_path: Path) -> None:
    dom, errors = dump_dom(report, tmp_path)
    assert errors == []
    page = parse(dom)
    # The script ran to its last line and saw every table.
    assert page.body.get("data-ready") == str(len(page.tables))
    headers = [t["header"] for t in page.tables]
    assert ["gate", "status", "checks", "worst check", "note"] in headers
    retrieval = next(t for t in page.tables if "mrr/ids" in t["header"])
    slices = [r["cells"][0] for r in retrieval["rows"]]
    # Retrieval figures only where retrieval ran: never on the gold_removed slices.
    assert "question_type=multi-hop,condition=retrieved" in slices and slices[0] == "all"
    assert not [s for s in slices if "gold_removed" in s]
    behaviour = next(t for t in page.tables if "refusal_rate/rules" in t["header"])
    assert "question_type=multi-hop,condition=gold_removed" in [r["cells"][0] for r in
                                                                 behaviour["rows"]]  # fmt: skip
    # What moved leads: the gates, then the regressions (the refusal rate that fell), then
    # behaviour before the retrieval slices.
    order = [t["header"][0] + ":" + t["header"][1] for t in page.tables]
    assert order.index("gate:status") < order.index("slice:figure")
    moved = page.tables[order.index("slice:figure")]
    # Broad slices first: `all`, then one key, then crossed, each largest move first.
    cells = [r["cells"] for r in moved["rows"]]
    assert cells[0][:2] == ["all", "refusal_rate/rules"] and cells[0][4] == "-0.500 ▼"
    assert ["question_type=multi-hop,condition=gold_removed", "refusal_rate/rules", "1.000",
            "0.000", "-1.000 ▼", "4"] in cells  # fmt: skip
    assert page.tables.index(behaviour) < page.tables.index(retrieval)
    gates = next(t for t in page.tables if t["header"][0] == "gate")
    assert [r["cells"][1] for r in gates["rows"]] == ["FAILED", "ok"]
    assert "Gates: FAILED" in dom
    worst = next(t for t in page.tables if "worst metric" in t["header"])
    assert any("<b>bold?</b> & </script>" in r["cells"][-1] for r in worst["rows"])
    assert "<b>bold?</b>" not in dom.replace("&lt;b&gt;", "")


def test_slice_filter_link_hides_other_slices(report: Path, tmp_path: Path) -> None:
    dom, errors = dump_dom(report, tmp_path, "#filter=multi-hop")
    assert errors == []
    page = parse(dom)
    retrieval = next(t for t in page.tables if "mrr/ids" in t["header"])
    shown = [r["cells"][0] for r in retrieval["rows"] if "none" not in r["style"]]
    hidden = [r["cells"][0] for r in retrieval["rows"] if "none" in r["style"]]
    assert shown and all("multi-hop" in s for s in shown)
    assert "all" in hidden
    # The gates table is not a slice table: never filtered.
    gates = next(t for t in page.tables if t["header"][0] == "gate")
    assert all("none" not in r["style"] for r in gates["rows"])


def test_console_errors_are_detected(tmp_path: Path) -> None:
    """The check above is not vacuous: a page that throws is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>missingFunction();</script></body></html>")
    _, errors = dump_dom(bad, tmp_path)
    assert errors and "missingFunction" in errors[0]
