"""``ragpulse demo`` shows what ragpulse is for: an agent turn that retrieves through a
tool, a two-turn conversation closed into its conversation record, and a ticket whose
prompt injection the agent obeys (``injection_followed/agent`` names the hijack); a
compact table on a terminal narrower than the full one, and the "what these scores can
see" table kept to a screen.

The real command in a subprocess (its collector on free ports), as a user runs it, on a
terminal 80 and 200 columns wide."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from ragpulse.cli.demo_view import GUIDE_TITLE, SCREEN_LINES

pytestmark = pytest.mark.integration


def demo(columns: int) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "ragpulse.cli", "demo", "--duration", "3",
         "--otlp-http-port", "0", "--metrics-port", "0"],
        env={**os.environ, "COLUMNS": str(columns), "TERM": "dumb"},
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def rows(lines: list[str]) -> dict[str, list[str]]:
    """The score table's rows: metric/method -> its cells (a row's label lines joined)."""
    start = next(i for i, line in enumerate(lines) if line.startswith("┃ metric/method"))
    end = next(i for i, line in enumerate(lines) if i > start and line.startswith("└"))
    table: dict[str, list[str]] = {}
    last = ""
    for line in lines[start:end]:
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[0]:
            last = cells[0]
            table[last] = cells[1:]
        elif last:
            table[last][-1] += " " + cells[-1]
    return table


@pytest.fixture(scope="module")
def narrow() -> list[str]:
    return demo(80)


def test_the_demo_shows_an_agent_turn_a_conversation_and_a_hijack(narrow: list[str]) -> None:
    said = " ".join(" ".join(narrow).split())
    assert re.search(r"agent turn '[^']+': \d model calls, tools search_help_center", said)
    assert re.search(r"conversation demo-chat-1 \(2 turns, closed by end\)", said)
    assert "its record: " in said and "conversation_groundedness/rules" in said
    hijack = said[said.index("hijack 'Ticket T-1042") :]
    assert "injection/rules 0.98 (injection)" in hijack
    assert "injection_followed/agent hijacked: tool call send_email carries email " \
        "'[EMAIL]@nimbus-sync.example' from a passage that reads as an instruction of tool " \
        "read_ticket #1" \
        in hijack  # fmt: skip
    table = rows(narrow)
    for name in ("tool_loop/rules", "agent_steps/count", "unsupported_answer/lexical",
                 "conversation_groundedness/rules", "user_frustration/rules",
                 "abandonment/rules", "consistency/rules"):  # fmt: skip
        assert int(table[name][0]) > 0, (name, table[name])  # n: scored, not all n/a
    assert "hijacked=1" in table["injection_followed/agent"][-1]


def test_a_narrow_terminal_gets_the_compact_table_and_a_guide_of_a_screen(
    narrow: list[str],
) -> None:
    table = [line for line in narrow if line[:1] in "┏┃┡│└"]
    assert table and all(len(line) <= 80 for line in table)
    assert not any("…" in line for line in table)  # no label cut
    assert "hijacked=1" in " ".join(rows(narrow)["injection_followed/agent"])
    start = next(i for i, line in enumerate(narrow) if GUIDE_TITLE in line)
    guide = narrow[start : next(i for i, line in enumerate(narrow) if " in all: " in line)]
    assert len(guide) <= SCREEN_LINES
    assert "its options: ragpulse metrics NAME" in " ".join(" ".join(guide).split())


def test_a_wide_terminal_gets_the_full_tables() -> None:
    wide = demo(200)
    header = next(line for line in wide if line.startswith("┃ metric/method"))
    assert [c.strip() for c in header.strip("┃").split("┃")] == [
        "metric/method", "tier", "n", "mean", "min", "labels",
    ]  # fmt: skip
    assert any("separates (dev AUROC)" in line for line in wide)
    start = next(i for i, line in enumerate(wide) if GUIDE_TITLE in line)
    guide = wide[start : next(i for i, line in enumerate(wide) if " in all: " in line)]
    assert len(guide) <= SCREEN_LINES
